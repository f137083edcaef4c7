#include "tessera/llm/sampling_params.h"

#include "tessera/core/error.h"
#include "tessera/llm/model_files.h"

namespace tessera::llm {

void SamplingParams::validate() const {
  TESSERA_CHECK(n >= 1, ValueError, "[SamplingParams] expected n >= 1, got ", n);
  TESSERA_CHECK(top_k >= -1, ValueError,
                "[SamplingParams] expected top_k >= -1 (-1 or 0: every token), got ", top_k);
  TESSERA_CHECK(max_tokens >= 1, ValueError, "[SamplingParams] expected max_tokens >= 1, got ",
                max_tokens);
  TESSERA_CHECK(!logprobs || *logprobs >= 0, ValueError,
                "[SamplingParams] expected logprobs None or >= 0, got ", logprobs.value_or(0));
  TESSERA_CHECK(!prompt_logprobs || *prompt_logprobs >= 0, ValueError,
                "[SamplingParams] expected prompt_logprobs None or >= 0, got ",
                prompt_logprobs.value_or(0));
  for (int32_t id : stop_token_ids)
    TESSERA_CHECK(id >= 0, ValueError,
                  "[SamplingParams] expected stop_token_ids to be token ids >= 0, got ", id);
  const infer::GenerationParams p = generation_params(nullptr);
  p.sampling.validate();
  p.stopping.validate();
}

infer::GenerationParams SamplingParams::generation_params(const tokenizers::Tokenizer* tokenizer,
                                                          int64_t index) const {
  infer::GenerationParams p;
  infer::SamplingParams& s = p.sampling;
  s.temperature = temperature;
  s.top_p = top_p;
  s.top_k = top_k < 0 ? 0 : top_k;
  s.min_p = min_p;
  s.repetition_penalty = repetition_penalty;
  s.presence_penalty = presence_penalty;
  s.frequency_penalty = frequency_penalty;
  s.logit_bias = logit_bias;
  p.json_grammar = json_grammar;
  if (seed) s.seed = static_cast<uint64_t>(*seed) + static_cast<uint64_t>(index);
  p.logprobs = logprobs.value_or(0);
  p.prompt_logprobs = prompt_logprobs && index == 0 ? *prompt_logprobs : -1;
  p.stopping.max_tokens = max_tokens;
  p.stopping.min_tokens = min_tokens;
  p.stopping.stop = stop;
  p.stopping.include_stop_str_in_output = include_stop_str_in_output;
  p.stopping.stop_token_ids = stop_token_ids;
  if (tokenizer && !ignore_eos)
    for (int32_t id : text_end_ids(*tokenizer)) p.stopping.stop_token_ids.push_back(id);
  return p;
}

}  // namespace tessera::llm
