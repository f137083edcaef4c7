// POST /v1/embeddings: parsing the request and the response body (floats or base64).
#include <algorithm>
#include <set>

#include "serve/openai_json.h"
#include "tessera/core/error.h"
#include "tessera/serve/openai.h"

namespace tessera::serve {

using namespace detail;

namespace {

// RFC 4648 base64 with padding (OpenAI's encoding_format "base64").
std::string base64(const std::string& bytes) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);  // bytes in this group
    uint32_t v = 0;
    for (size_t k = 0; k < 3; ++k) v = v << 8 | (k < n ? static_cast<uint8_t>(bytes[i + k]) : 0u);
    for (size_t k = 0; k < 4; ++k) out += k <= n ? kAlphabet[(v >> (18 - 6 * k)) & 63] : '=';
  }
  return out;
}

}  // namespace

EmbeddingRequest parse_embedding_request(std::string_view body,
                                         const tokenizers::Tokenizer& tokenizer,
                                         const ModelLimits& limits) {
  static const std::set<std::string> known{"model", "input", "encoding_format", "user",
                                           "dimensions"};
  const Json j = parse_object(body, known);
  const Fields f(j);
  EmbeddingRequest r;
  r.model = served_model(f, limits);
  if (limits.lora_ids.contains(r.model))
    throw bad("model", "embeddings are of the base model; '" + r.model + "' is a LoRA adapter");
  if (f.get("dimensions"))
    throw bad("dimensions", "'dimensions' is not supported: embeddings have the model's width");
  if (const Json* e = f.get("encoding_format")) {
    if (*e != "float" && *e != "base64")
      throw bad("encoding_format", "'encoding_format' must be \"float\" or \"base64\"");
    r.base64 = *e == "base64";
  }
  const Json* input = f.get("input");
  if (!input) throw bad("input", "'input' is required");
  if (input->is_string()) {
    r.inputs.push_back(encode(tokenizer, input->get<std::string>(), "input"));
  } else if (input->is_array() && !input->empty() && all_integers(*input)) {
    r.inputs.push_back(token_ids(*input, "input", limits.vocab_size));
  } else if (input->is_array() && !input->empty()) {
    for (const Json& item : *input) {
      if (item.is_string())
        r.inputs.push_back(encode(tokenizer, item.get<std::string>(), "input"));
      else if (item.is_array() && all_integers(item))
        r.inputs.push_back(token_ids(item, "input", limits.vocab_size));
      else
        throw bad("input", "'input' items must be strings or arrays of token ids");
    }
  } else {
    throw bad("input", "'input' must be a string, an array of strings, or token id arrays");
  }
  for (const std::vector<int32_t>& ids : r.inputs) {
    if (ids.empty()) throw bad("input", "an 'input' is empty (and the tokenizer has no BOS token)");
    if (static_cast<int64_t>(ids.size()) > limits.max_model_len)
      throw bad("input", tessera::detail::str(
                             "This model's maximum context length is ", limits.max_model_len,
                             " tokens. However, an input has ", ids.size(), " tokens."));
  }
  return r;
}

std::string embeddings_json(const EmbeddingRequest& r,
                            const std::vector<std::vector<float>>& embeddings) {
  Json data = Json::array();
  int64_t tokens = 0;
  for (size_t i = 0; i < embeddings.size(); ++i) {
    const std::vector<float>& e = embeddings[i];
    Json vec = r.base64 ? Json(base64(std::string(reinterpret_cast<const char*>(e.data()),
                                                  e.size() * sizeof(float))))
                        : Json(e);
    data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", vec}});
    tokens += static_cast<int64_t>(r.inputs.at(i).size());
  }
  return dump(Json{{"object", "list"},
                   {"data", data},
                   {"model", r.model},
                   {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}});
}

}  // namespace tessera::serve
