#include "tessera/infer/engine.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "tessera/core/error.h"
#include "tessera/core/generator.h"

namespace tessera::infer {

// A request: its sequence (what the scheduler sees) and its text stream.
struct Engine::Request {
  Sequence seq;
  TextStream text;
  int64_t logprobs;                  // GenerationParams::logprobs
  int64_t prompt_logprobs;           // GenerationParams::prompt_logprobs
  std::vector<TokenLogprob> prompt;  // of positions 1, 2, ... so far
  std::optional<JsonMatcher> json;   // where its text is in its grammar
  // Speculative decoding: the share of its first drafts accepted (starting from the engine's
  // typical one), and steps in a row without drafts.
  double draft_acceptance = DraftPolicy::kPriorAcceptance;
  int64_t steps_without_drafts = 0;
  Request(Sequence s, const tokenizers::Tokenizer* tokenizer, const GenerationParams& params)
      : seq(std::move(s)),
        text(tokenizer, &seq.stopping, seq.tokens.back()),
        logprobs(params.logprobs),
        prompt_logprobs(params.prompt_logprobs) {
    if (params.json_grammar) json.emplace(params.json_grammar);
  }
};

Engine::Engine(const models::CausalLM& model, const EngineConfig& config,
               std::shared_ptr<const tokenizers::Tokenizer> tokenizer)
    : config_(config),
      runner_(model, config.weight_dtype),
      tokenizer_(std::move(tokenizer)),
      sampler_(runner_.vocab_size()) {
  config_.speculative.validate();
  TESSERA_CHECK(config_.max_model_len >= 0 && config_.max_model_len <= runner_.max_seq_len(),
                ValueError, "[Engine] expected max_model_len in [0, ", runner_.max_seq_len(),
                "] (the model's context; 0: all of it), got ", config_.max_model_len);
  if (config_.max_model_len == 0) config_.max_model_len = runner_.max_seq_len();
  if (config_.speculative.enabled() && config_.speculative.history_tokens > 0)
    history_ = std::make_unique<NgramHistory>(config_.speculative.history_tokens,
                                              config_.speculative.prompt_lookup_min);
  const KVCacheSpec spec = runner_.kv_spec(config_.kv_cache_dtype);
  const int64_t block_size = std::max<int64_t>(config_.block_size, 1);  // the cache checks it
  const int64_t memory = config_.kv_cache_memory_bytes;
  TESSERA_CHECK(memory >= 0 && (memory == 0 || config_.num_blocks == 0), ValueError,
                "[Engine] expected kv_cache_memory_bytes >= 0 and not with num_blocks, got ",
                memory, " bytes and ", config_.num_blocks, " blocks");
  if (memory > 0) {
    const int64_t block_bytes = block_size * spec.bytes_per_token();
    config_.num_blocks = memory / block_bytes;
    TESSERA_CHECK(config_.num_blocks >= 1, ValueError,
                  "[Engine] expected kv_cache_memory_bytes to hold at least one block of ",
                  block_bytes, " bytes, got ", memory);
  } else if (config_.num_blocks == 0) {
    const int64_t per_seq = (config_.max_model_len + block_size - 1) / block_size;
    config_.num_blocks = config_.max_num_seqs * per_seq;
  }
  cache_ = std::make_unique<PagedKVCache>(spec, config_.num_blocks, config_.block_size,
                                          runner_.device());
  scheduler_ = std::make_unique<Scheduler>(
      SchedulerConfig{config_.max_num_seqs, config_.max_num_batched_tokens,
                      config_.enable_prefix_caching},
      *cache_);
  logits_.resize(runner_.vocab_size());
}

Engine::~Engine() = default;

DType inference_dtype_from_name(std::string_view name, const char* op, const char* what) {
  if (name == "auto" || name == "float32") return kFloat32;
  TESSERA_CHECK(name == "bfloat16", ValueError, "[", op, "] expected ", what,
                " of auto, float32 or bfloat16, got '", name, "'");
  return kBFloat16;
}

DType weight_dtype_from_names(std::string_view dtype, std::string_view quantization,
                              const char* op) {
  const DType d = inference_dtype_from_name(dtype, op, "a dtype");
  if (quantization.empty() || quantization == "none") return d;
  TESSERA_CHECK(quantization == "int8", ValueError, "[", op,
                "] expected a quantization of none or int8, got '", quantization, "'");
  TESSERA_CHECK(d == kFloat32, ValueError, "[", op,
                "] expected dtype auto or float32 with int8 quantization (the weights are int8, "
                "the arithmetic float32), got '",
                dtype, "'");
  return kInt8;
}

int64_t Engine::add_request(std::vector<int32_t> prompt, const GenerationParams& params) {
  params.sampling.validate();
  params.stopping.validate();
  for (const auto& [name, k] : {std::pair{"logprobs", params.logprobs},
                                std::pair{"prompt_logprobs", params.prompt_logprobs}})
    TESSERA_CHECK(k >= -1 && k <= runner_.vocab_size(), ValueError,
                  "[Engine.add_request] expected ", name, " in [-1, ", runner_.vocab_size(),
                  "], got ", k);
  const int64_t P = static_cast<int64_t>(prompt.size());
  // The longest sequence: the model's context, and what the whole cache can hold.
  const int64_t capacity =
      std::min(config_.max_model_len, cache_->num_blocks() * cache_->block_size());
  TESSERA_CHECK(P >= 1 && P < capacity, ValueError,
                "[Engine.add_request] expected a prompt of 1 to ", capacity - 1,
                " tokens (the context less one), got ", P);
  TESSERA_CHECK(params.stopping.stop.empty() || tokenizer_ != nullptr, ValueError,
                "[Engine.add_request] expected an engine with a tokenizer for stop strings");
  for (int32_t t : prompt)
    TESSERA_CHECK(t >= 0 && t < runner_.vocab_size(), ValueError,
                  "[Engine.add_request] expected token ids in [0, ", runner_.vocab_size(),
                  "), got ", t);
  TESSERA_CHECK(params.lora_id >= 0 && params.lora_id <= runner_.num_loras(), ValueError,
                "[Engine.add_request] expected a lora_id in [0, ", runner_.num_loras(),
                "] (0: the base model; ids from add_lora), got ", params.lora_id);
  for (const auto& [t, bias] : params.sampling.logit_bias)
    TESSERA_CHECK(t < runner_.vocab_size(), ValueError,
                  "[Engine.add_request] expected logit_bias token ids in [0, ",
                  runner_.vocab_size(), "), got ", t);
  if (params.json_grammar && !masker_) {
    TESSERA_CHECK(tokenizer_ != nullptr, ValueError,
                  "[Engine.add_request] expected an engine with a tokenizer for a JSON grammar");
    TESSERA_CHECK(tokenizer_->vocab_size() <= runner_.vocab_size(), ValueError,
                  "[Engine.add_request] expected a tokenizer of at most the model's ",
                  runner_.vocab_size(), " tokens for a JSON grammar, got ",
                  tokenizer_->vocab_size());
    // BOS and EOS never stand for text; whether a stop token may come is the request's.
    std::vector<int32_t> special;
    for (auto id : {tokenizer_->bos_id(), tokenizer_->eos_id()})
      if (id) special.push_back(*id);
    masker_ = std::make_unique<TokenMasker>(*tokenizer_, special);
  }
  if (params.json_grammar) {  // some token must start the value (more than whitespace)
    masker_->allowed_tokens(JsonMatcher(params.json_grammar), allowed_);
    bool starts = false;
    for (size_t t = 0; t < allowed_.size() && !starts; ++t)
      starts =
          allowed_[t] && masker_->bytes(static_cast<int32_t>(t)).find_first_not_of(" \t\n\r") !=
                             std::string_view::npos;
    TESSERA_CHECK(starts, ValueError,
                  "[Engine.add_request] expected a tokenizer with tokens that start the "
                  "constrained output (JSON, regex or grammar); none of ",
                  tokenizer_->name(), "'s does");
  }
  Sequence s;
  s.id = next_id_++;
  s.arrival = s.id;
  s.prompt_len = P;
  s.tokens = std::move(prompt);
  s.tokens.reserve(P + std::min(params.stopping.max_tokens, capacity - P));
  s.sampling = params.sampling;
  s.stopping = params.stopping;
  s.stopping.max_tokens = std::min(s.stopping.max_tokens, capacity - P);
  s.computes_whole_prompt = params.prompt_logprobs >= 0;
  s.lora_id = params.lora_id;
  if (params.sampling.seed) {
    s.seed = *params.sampling.seed;
  } else {
    const auto r = philox(config_.seed, static_cast<uint64_t>(s.id));
    s.seed = (static_cast<uint64_t>(r[0]) << 32) | r[1];
  }
  auto req = std::make_unique<Request>(std::move(s), tokenizer_.get(), params);
  req->draft_acceptance = draft_policy_.typical_acceptance();
  scheduler_->add(&req->seq);
  const int64_t id = req->seq.id;
  requests_.emplace(id, std::move(req));
  return id;
}

std::vector<float> Engine::embed(std::span<const int32_t> prompt) {
  const int64_t P = static_cast<int64_t>(prompt.size());
  TESSERA_CHECK(P >= 1 && P <= config_.max_model_len, ValueError,
                "[Engine.embed] expected a prompt of 1 to ", config_.max_model_len, " tokens, got ",
                P);
  StaticKVCache cache(runner_.kv_spec(config_.kv_cache_dtype), P, runner_.device());
  StepBatch batch;
  batch.add_sequence(prompt, 0, cache.table(), cache.block_size(), /*want_logits=*/false);
  const std::span<const float> h = runner_.hidden_states(batch, cache);
  const int64_t C = runner_.hidden_size();
  std::vector<double> sum(C, 0.0);
  for (int64_t t = 0; t < P; ++t)
    for (int64_t c = 0; c < C; ++c) sum[c] += h[t * C + c];
  std::vector<float> mean(C);
  for (int64_t c = 0; c < C; ++c) mean[c] = static_cast<float>(sum[c] / P);
  return mean;
}

void Engine::abort_request(int64_t id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  scheduler_->remove(&it->second->seq);
  requests_.erase(it);
}

void Engine::finish(Request& r, FinishReason reason, RequestOutput& out) {
  out.finish_reason = reason;
  out.text += r.text.flush();
  if (history_ && reason != FinishReason::Abort)
    history_->add(std::span(r.seq.tokens).subspan(r.seq.prompt_len));
  scheduler_->remove(&r.seq);
  requests_.erase(r.seq.id);  // r is gone after this
}

namespace {

// An output of seq with its counts so far and nothing new yet.
RequestOutput output_of(const Sequence& seq) {
  RequestOutput out;
  out.request_id = seq.id;
  out.prompt_tokens = seq.prompt_len;
  out.completion_tokens = seq.num_output();
  out.cached_tokens = std::max<int64_t>(seq.num_cached_tokens, 0);
  return out;
}

}  // namespace

bool Engine::constrain_to_grammar(Request& r) {
  masker_->allowed_tokens(*r.json, allowed_);
  allowed_.resize(logits_.size(), 0);  // model rows beyond the tokenizer's vocabulary
  const bool complete = r.json->accepting();
  for (int32_t t : r.seq.stopping.stop_token_ids)
    if (t >= 0 && static_cast<size_t>(t) < allowed_.size())
      allowed_[static_cast<size_t>(t)] = complete;
  if (std::find(allowed_.begin(), allowed_.end(), 1) == allowed_.end()) {
    const std::string& text = r.text.text();
    TESSERA_CHECK(complete, ValueError,
                  "[Engine] structured output: no token of the vocabulary continues the "
                  "constrained text after '",
                  text.substr(text.size() - std::min<size_t>(text.size(), 40)), "'");
    return false;
  }
  for (size_t t = 0; t < logits_.size(); ++t)
    if (!allowed_[t]) logits_[t] = -std::numeric_limits<float>::infinity();
  return true;
}

void Engine::sample_row(Request& r, int64_t row, std::span<const int32_t> runner_tokens,
                        std::span<const float> logits, RequestOutput& out) {
  Sequence& seq = r.seq;
  const int64_t V = runner_.vocab_size();
  int32_t token;
  if (!runner_tokens.empty()) {
    token = runner_tokens[row];
  } else {
    const std::span<const float> raw = logits.subspan(row * V, V);
    std::copy(raw.begin(), raw.end(), logits_.begin());  // the sampler edits its copy
    seq.stopping.mask_early_stops(logits_, seq.num_output());
    if (r.json && !constrain_to_grammar(r)) {  // a complete value that only its end may follow
      out.finish_reason = FinishReason::Stop;
      return;
    }
    const std::span<const int32_t> all(seq.tokens);
    token =
        sampler_.sample(logits_, seq.sampling, seq.seed, static_cast<uint64_t>(seq.num_output()),
                        all.first(seq.prompt_len), all.subspan(seq.prompt_len));
  }
  seq.tokens.push_back(token);
  // A stop token ends the text without adding its own (OpenAI's and vLLM's completions leave
  // out GPT-2's "<|endoftext|>"); its id stays in the token ids.
  const bool stop_token = seq.stopping.is_stop_token(token);
  if (r.json && !stop_token)
    TESSERA_CHECK(r.json->advance(masker_->bytes(token)), RuntimeError,
                  "[Engine] structured output: token ", token, " left the JSON grammar");
  out.new_tokens.push_back(token);
  out.completion_tokens = seq.num_output();
  if (seq.num_output() == 1) out.prompt_logprobs = std::move(r.prompt);
  if (!stop_token) out.text += r.text.push(token);
  if (r.logprobs >= 0)  // never in a step the runner draws, so the logits are there
    out.logprobs.push_back(token_logprobs(logits.subspan(row * V, V), token, r.logprobs));
  if (stop_token || r.text.stopped() || (r.json && r.json->terminated()))
    out.finish_reason = FinishReason::Stop;
  else if (seq.num_output() >= seq.stopping.max_tokens || seq.num_tokens() >= config_.max_model_len)
    out.finish_reason = FinishReason::Length;
}

RequestOutput Engine::sample_tokens(Request& r, const StepRows& rows,
                                    std::span<const int32_t> runner_tokens,
                                    std::span<const float> logits) {
  Sequence& seq = r.seq;
  RequestOutput out = output_of(seq);
  int64_t accepted = 0;
  bool rejected = false;
  for (int64_t j = 0;; ++j) {
    sample_row(r, rows.sample + j, runner_tokens, logits, out);
    if (out.finished() || j == rows.num_drafts) break;
    if (seq.tokens.back() != seq.draft[j]) {
      rejected = true;
      break;
    }
    // Draft j is the token sampled: its keys and values, computed this step, stand, and the
    // next row's logits followed it.
    ++seq.num_computed;
    ++accepted;
  }
  if (rows.num_drafts > 0) {
    spec_accepted_tokens_ += accepted;
    r.draft_acceptance =
        draft_policy_.after_step(r.draft_acceptance, accepted + rejected, accepted);
  }
  cache_computed_blocks(seq);
  if (out.finished()) finish(r, out.finish_reason, out);
  return out;
}

void Engine::propose_drafts() {
  const SpeculativeConfig& spec = config_.speculative;
  if (!spec.enabled()) return;
  const double threshold = spec.adaptive ? draft_policy_.threshold() : 0.0;
  for (auto& [id, r] : requests_) {
    Sequence& seq = r->seq;
    seq.draft.clear();
    if (seq.num_output() == 0 || seq.num_computed + 1 != seq.num_tokens())
      continue;  // not decoding
    // Drafts past the last token the request may write, or past the context, would be wasted.
    const int64_t max_drafts =
        std::min({spec.num_speculative_tokens, seq.stopping.max_tokens - seq.num_output() - 1,
                  config_.max_model_len - seq.num_tokens()});
    if (max_drafts <= 0) continue;
    int64_t wanted = spec.adaptive
                         ? draft_policy_.worth_running(r->draft_acceptance, threshold, max_drafts)
                         : max_drafts;
    if (wanted == 0) {
      if (++r->steps_without_drafts < DraftPolicy::kProbeEvery) continue;
      wanted = 1;  // a probe
    }
    const int64_t own_match = propose_ngram_drafts(seq.tokens, spec, wanted, seq.draft);
    // Another request's output matching more of the recent text is the better guess (a request
    // repeating an earlier one has loops of its own too).
    if (history_ && history_->propose(seq.tokens, wanted, history_draft_) > own_match)
      std::swap(seq.draft, history_draft_);
    if (r->json)  // a draft the grammar would mask is rejected for sure: spare its compute
      seq.draft.resize(masker_->grammatical_prefix(*r->json, seq.draft));
    if (!seq.draft.empty()) r->steps_without_drafts = 0;
  }
}

void Engine::cache_computed_blocks(Sequence& seq) {
  if (config_.enable_prefix_caching)
    cache_->cache_full_blocks(seq.blocks, seq.tokens, seq.num_computed, seq.block_hashes,
                              prefix_root(seq.lora_id));
}

void Engine::build_batch(const SchedulerOutput& plan) {
  const int64_t bs = cache_->block_size();
  batch_.clear();
  rows_.clear();
  int64_t num_rows = 0;
  for (const ScheduledSequence& s : plan.scheduled) {
    const Sequence& seq = *s.seq;
    const int64_t d = s.num_draft_tokens;
    const int64_t start = seq.num_computed, end = start + s.num_new_tokens - d;
    std::span<const int32_t> run = std::span(seq.tokens).subspan(start, end - start);
    if (d > 0) {  // the decoding token, then its drafts
      run_tokens_.assign(run.begin(), run.end());
      run_tokens_.insert(run_tokens_.end(), seq.draft.begin(), seq.draft.begin() + d);
      run = run_tokens_;
      ++spec_num_drafts_;
      spec_draft_tokens_ += d;
    }
    batch_.add_sequence(run, start, seq.blocks, bs, /*want_logits=*/false, seq.lora_id);
    const int64_t first_row = batch_.num_tokens() - s.num_new_tokens;
    StepRows rows{.request = requests_.at(seq.id).get(), .num_drafts = d};
    // Prompt logprobs: the rows of positions whose next token is a prompt token, on the
    // prompt's first pass (a resumed sequence with output has reported them).
    if (rows.request->prompt_logprobs >= 0 && seq.num_output() == 0) {
      rows.prompt_first = num_rows;
      for (int64_t p = start; p < std::min(end, seq.prompt_len - 1); ++p, ++rows.num_prompt)
        batch_.logit_rows.push_back(static_cast<int32_t>(first_row + p - start));
      num_rows += rows.num_prompt;
    }
    if (end == seq.num_tokens()) {  // the prompt is done: it samples its next token
      rows.sample = num_rows;
      num_rows += 1 + d;  // and one more per draft
      for (int64_t j = d; j >= 0; --j)
        batch_.logit_rows.push_back(static_cast<int32_t>(batch_.num_tokens() - 1 - j));
    }
    rows_.push_back(rows);
  }
}

void Engine::collect_prompt_logprobs(Request& r, int64_t first_position, const StepRows& rows,
                                     std::span<const float> logits) {
  const int64_t V = runner_.vocab_size();
  for (int64_t j = 0; j < rows.num_prompt; ++j) {
    const int64_t p = first_position + j;  // its logits give token p + 1's logprob
    // A prefill preempted and run again from 0 does not report a position twice.
    if (static_cast<int64_t>(r.prompt.size()) != p) continue;
    r.prompt.push_back(token_logprobs(logits.subspan((rows.prompt_first + j) * V, V),
                                      r.seq.tokens[p + 1], r.prompt_logprobs));
  }
}

const std::vector<RequestOutput>& Engine::step() {
  outputs_.clear();
  ++num_steps_;
  propose_drafts();
  const SchedulerOutput& plan = scheduler_->schedule();
  for (Sequence* seq : plan.dropped) {
    Request& r = *requests_.at(seq->id);
    RequestOutput out = output_of(*seq);
    finish(r, FinishReason::Length, out);
    outputs_.push_back(std::move(out));
  }
  if (plan.scheduled.empty()) return outputs_;

  build_batch(plan);
  // Whether every row that samples takes the argmax of its raw logits: then the runner returns
  // just the ids. On a device, rows without penalties or logprobs draw there too (the logits
  // never leave it); the rest, and prompt logprobs, need the logits on the host.
  bool greedy = true, drawn_by_runner = !runner_.device().is_cpu();
  draws_.clear();
  for (size_t i = 0; i < plan.scheduled.size(); ++i) {
    const Sequence& seq = *plan.scheduled[i].seq;
    if (rows_[i].num_prompt > 0) greedy = drawn_by_runner = false;
    if (rows_[i].sample < 0) continue;
    // Logprobs, grammars and min_tokens' masks need the logits on the host.
    const bool host = rows_[i].request->logprobs >= 0 || rows_[i].request->json.has_value() ||
                      seq.num_output() < seq.stopping.min_tokens;
    greedy = greedy && seq.sampling.raw_argmax() && !host;
    drawn_by_runner = drawn_by_runner && !seq.sampling.edits_logits() && !host;
    if (drawn_by_runner)  // never on the CPU: no draws computed there
      for (int64_t j = 0; j <= rows_[i].num_drafts; ++j)  // a draft's row draws as its step would
        draws_.push_back(
            RowSampling::of(seq.sampling, seq.seed, static_cast<uint64_t>(seq.num_output() + j)));
  }
  // A decode step (no prefill) is timed for the draft policy, sampling included.
  bool timed = config_.speculative.enabled() && config_.speculative.adaptive;
  int64_t drafts = 0;
  for (size_t i = 0; timed && i < plan.scheduled.size(); ++i) {
    timed = rows_[i].sample >= 0 && plan.scheduled[i].num_new_tokens == 1 + rows_[i].num_drafts;
    drafts += rows_[i].num_drafts;
  }
  const auto started =
      timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
  std::span<const int32_t> runner_tokens;
  std::span<const float> logits;
  if (greedy)
    runner_tokens = runner_.greedy_tokens(batch_, *cache_);
  else if (drawn_by_runner)
    runner_tokens = runner_.sample_tokens(batch_, *cache_, draws_);
  else
    logits = runner_.forward(batch_, *cache_);

  for (size_t i = 0; i < plan.scheduled.size(); ++i) {
    const ScheduledSequence& s = plan.scheduled[i];
    Sequence& seq = *s.seq;
    Request& r = *rows_[i].request;
    if (rows_[i].num_prompt > 0) collect_prompt_logprobs(r, seq.num_computed, rows_[i], logits);
    seq.num_computed += s.num_new_tokens - s.num_draft_tokens;  // drafts count once accepted
    if (rows_[i].sample < 0) {  // a chunked prefill goes on next step
      cache_computed_blocks(seq);
      continue;
    }
    try {
      outputs_.push_back(sample_tokens(r, rows_[i], runner_tokens, logits));
    } catch (const std::exception& e) {
      // Only this request fails (its sampler or tokenizer threw); the others go on.
      RequestOutput out = output_of(seq);
      out.error = e.what();
      finish(r, FinishReason::Abort, out);
      outputs_.push_back(std::move(out));
    }
  }
  if (timed) {
    int64_t emitted = 0;
    for (const RequestOutput& out : outputs_)
      emitted += static_cast<int64_t>(out.new_tokens.size());
    draft_policy_.observe_step(
        static_cast<double>(rows_.size()), static_cast<double>(drafts),
        static_cast<double>(emitted),
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  }
  return outputs_;
}

EngineStats Engine::stats() const {
  EngineStats s;
  s.num_waiting = scheduler_->num_waiting();
  s.num_running = scheduler_->num_running();
  s.blocks_used = cache_->blocks().num_used();
  s.blocks_total = cache_->num_blocks();
  s.num_preemptions = scheduler_->num_preemptions();
  s.num_steps = num_steps_;
  s.prefix_cache_queries = scheduler_->prefix_query_tokens();
  s.prefix_cache_hits = scheduler_->prefix_hit_tokens();
  s.spec_num_drafts = spec_num_drafts_;
  s.spec_draft_tokens = spec_draft_tokens_;
  s.spec_accepted_tokens = spec_accepted_tokens_;
  return s;
}

}  // namespace tessera::infer
