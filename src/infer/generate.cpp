#include "tessera/infer/generate.h"

#include <algorithm>

#include "tessera/core/error.h"
#include "tessera/core/generator.h"

namespace tessera::infer {

GenerationResult generate(ModelRunner& runner, std::span<const int32_t> prompt,
                          const GenerationParams& params, const GenerateOptions& options) {
  params.sampling.validate();
  params.stopping.validate();
  TESSERA_CHECK(params.json_grammar == nullptr, ValueError,
                "[generate] expected no json_grammar: structured output runs in the Engine");
  const int64_t P = static_cast<int64_t>(prompt.size());
  TESSERA_CHECK(P >= 1 && P < runner.max_seq_len(), ValueError,
                "[generate] expected a prompt of 1 to ", runner.max_seq_len() - 1,
                " tokens (the model's context less one), got ", P);
  // Unseeded: a seed from the default generator, so manual_seed makes runs repeatable.
  // (Not value_or: its argument would draw from the default generator even when seeded.)
  const uint64_t seed = params.sampling.seed
                            ? *params.sampling.seed
                            : static_cast<uint64_t>(philox(default_generator().seed(),
                                                           default_generator().reserve(1))[0]);
  // At most the context's room: a huge max_tokens must neither overflow nor reserve memory.
  const int64_t max_new = std::min(params.stopping.max_tokens, runner.max_seq_len() - P);
  const int64_t capacity = P + max_new;

  StaticKVCache cache(runner.kv_spec(), capacity, runner.device());
  StepBatch batch;
  batch.clear();
  batch.add_sequence(prompt, 0, cache.table(), cache.block_size(), /*want_logits=*/true);
  Sampler sampler(runner.vocab_size());
  TextStream text(options.tokenizer, &params.stopping, prompt.back());
  std::vector<float> logits(runner.vocab_size());
  GenerationResult result;
  result.tokens.reserve(static_cast<size_t>(max_new));

  // Greedy without penalties or biases, and nobody watching the logits: the runner returns just the
  // argmax (on a device, the logits never leave it). On a device, unpenalized sampling is drawn
  // there.
  // min_tokens masks the stop tokens on the host.
  const bool host = options.on_logits || params.stopping.min_tokens > 0;
  const bool greedy = params.sampling.raw_argmax() && !host;
  const bool drawn_by_runner =
      !runner.device().is_cpu() && !params.sampling.edits_logits() && !host;

  for (int64_t pos = P;; ++pos) {
    int32_t token;
    if (greedy) {
      token = runner.greedy_tokens(batch, cache)[0];
    } else if (drawn_by_runner) {
      const RowSampling draw = RowSampling::of(params.sampling, seed, result.tokens.size());
      token = runner.sample_tokens(batch, cache, std::span(&draw, 1))[0];
    } else {
      std::span<const float> out = runner.forward(batch, cache);
      if (options.on_logits) options.on_logits(out);
      std::copy(out.begin(), out.end(), logits.begin());
      params.stopping.mask_early_stops(logits, static_cast<int64_t>(result.tokens.size()));
      token = sampler.sample(logits, params.sampling, seed, result.tokens.size(), prompt,
                             result.tokens);
    }
    result.tokens.push_back(token);
    // A stop token's own text is left out, as in the Engine.
    const bool stop_token = params.stopping.is_stop_token(token);
    const std::string delta = stop_token ? std::string() : text.push(token);
    if (options.on_token && !options.on_token(token, delta)) {
      result.finish_reason = FinishReason::Abort;
    } else if (stop_token || text.stopped()) {
      result.finish_reason = FinishReason::Stop;
    } else if (static_cast<int64_t>(result.tokens.size()) >= params.stopping.max_tokens ||
               pos + 1 >= runner.max_seq_len()) {
      // The context is full: sequences end at max_seq_len tokens, as in the Engine.
      result.finish_reason = FinishReason::Length;
    }
    if (result.finish_reason != FinishReason::None) break;
    batch.clear();
    batch.add_sequence(std::span<const int32_t>(&result.tokens.back(), 1), pos, cache.table(),
                       cache.block_size(), true);
  }
  const std::string rest = text.flush();
  if (!rest.empty() && options.on_token && result.finish_reason != FinishReason::Abort)
    options.on_token(-1, rest);
  result.text = text.text();
  return result;
}

}  // namespace tessera::infer
