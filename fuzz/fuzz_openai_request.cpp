// OpenAI request bodies for /v1/completions and /v1/chat/completions. Input: one selector byte
// (bit 0: chat endpoint, bit 1: the llama2.c tokenizer with BOS/EOS instead of GPT-2's byte
// BPE), then the body. Every rejection must be an ApiError or a typed error (both become a 400);
// an accepted request must fit the model's context, and the bodies built from it must be JSON.
#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "tessera/core/error.h"
#include "tessera/serve/openai.h"

namespace {

using namespace tessera;
using Json = nlohmann::json;

void expect_json(const std::string& text, std::string_view input) {
  if (Json::parse(text, nullptr, /*allow_exceptions=*/false).is_discarded())
    fuzz::fail("the server would send a body that is not JSON: " + text, input);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view input = fuzz::bytes(data, size);
  const auto endpoint =
      data[0] & 1 ? serve::Endpoint::ChatCompletions : serve::Endpoint::Completions;
  const tokenizers::Tokenizer& tok =
      data[0] & 2 ? static_cast<const tokenizers::Tokenizer&>(fuzz::synthetic_llama2c())
                  : fuzz::synthetic_gpt2();
  const serve::ModelLimits limits{/*max_model_len=*/64, tok.vocab_size()};
  try {
    const serve::CompletionRequest r = serve::parse_request(endpoint, input.substr(1), tok, limits);
    const int64_t P = static_cast<int64_t>(r.prompt.size());
    const int64_t max_tokens = r.params.stopping.max_tokens;
    if (P == 0 || max_tokens < 1 || P + max_tokens > limits.max_model_len)
      fuzz::fail("parse_request accepted a request that does not fit the context", input);
    serve::CompletionState s;
    s.id = "cmpl-fuzz";
    s.model = "fuzz";
    serve::Choice c;
    c.text = tok.decode(r.prompt);  // any bytes, invalid UTF-8 included
    c.token_ids = r.prompt;
    s.choices.assign(static_cast<size_t>(r.n), c);
    s.prompt_tokens = P;
    expect_json(serve::response_json(endpoint, s), input);
    const std::string event = serve::stream_event(endpoint, s, 0, /*first=*/true);
    expect_json(event.substr(6), input);  // after "data: "
  } catch (const serve::ApiError& e) {
    fuzz::rejected(e);
    if (e.status < 400 || e.status > 499) fuzz::fail("an ApiError outside 4xx", input);
    expect_json(serve::error_json(e), input);
  } catch (const Error& e) {
    fuzz::rejected(e);
  }
  return 0;
}
