#pragma once
// JSON helpers shared by the OpenAI API sources (request parsing, responses, embeddings); not
// public API.
#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/serve/openai.h"

namespace tessera::serve::detail {

using Json = nlohmann::json;

// Text may hold partial UTF-8 (byte tokens): invalid bytes become U+FFFD instead of throwing.
std::string dump(const Json& j);
// v's JSON type as error messages name it: "a string", "an integer", ...
const char* type_name(const Json& v);
// A 400 naming param.
ApiError bad(const std::string& param, const std::string& message);
// f(), with a ValueError the library raised on the request's input (text a tokenizer cannot
// spell, a schema a grammar refuses, messages a chat template rejects) as a 400 naming param,
// its message after context.
template <class F>
auto invalid_as_400(const char* param, std::string_view context, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const ValueError& e) {
    throw bad(param, std::string(context) + e.what());
  }
}

// Typed, range-checked field access; absent or null fields give the default.
class Fields {
 public:
  explicit Fields(const Json& j) : j_(j) {}
  const Json* get(const char* key) const {
    auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  double number(const char* key, double lo, double hi, double def) const {
    const Json* v = get(key);
    if (!v) return def;
    if (!v->is_number())
      throw bad(key, std::string("'") + key + "' must be a number, got " + type_name(*v));
    const double x = v->get<double>();
    if (!(x >= lo && x <= hi))
      throw bad(key, tessera::detail::str("'", key, "' must be in [", lo, ", ", hi, "], got ", x));
    return x;
  }
  std::optional<int64_t> integer(const char* key, int64_t lo, int64_t hi) const {
    const Json* v = get(key);
    if (!v) return std::nullopt;
    if (!v->is_number_integer())
      throw bad(key, std::string("'") + key + "' must be an integer, got " + type_name(*v));
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      throw bad(key, std::string("'") + key + "' is out of range");
    const int64_t x = v->get<int64_t>();
    if (x < lo || x > hi)
      throw bad(key, tessera::detail::str("'", key, "' must be in [", lo, ", ", hi, "], got ", x));
    return x;
  }
  bool boolean(const char* key, bool def) const {
    const Json* v = get(key);
    if (!v) return def;
    if (!v->is_boolean())
      throw bad(key, std::string("'") + key + "' must be a boolean, got " + type_name(*v));
    return v->get<bool>();
  }

 private:
  const Json& j_;
};

// What a stream has not sent yet of text that only grows (a split's content or reasoning), and
// marks it sent.
inline std::string unsent(const std::string& text, size_t& sent) {
  std::string rest = text.substr(std::min(sent, text.size()));
  sent = std::max(sent, text.size());
  return rest;
}

// The token ids of a JSON array, each an integer in [0, vocab); a 400 naming param otherwise.
std::vector<int32_t> token_ids(const Json& arr, const char* param, int64_t vocab);
bool all_integers(const Json& arr);
// text's tokens, with BOS when the tokenizer has one (or add_bos says); a 400 naming param when
// the tokenizer cannot spell it (a character vocabulary without the character).
std::vector<int32_t> encode(const tokenizers::Tokenizer& tok, const std::string& text,
                            const char* param, bool add_bos);
inline std::vector<int32_t> encode(const tokenizers::Tokenizer& tok, const std::string& text,
                                   const char* param = "prompt") {
  return encode(tok, text, param, tok.bos_id().has_value());
}
// The request body as a JSON object whose keys are all in known.
Json parse_object(std::string_view body, const std::set<std::string>& known);
// The served name "model" asks for: 404 model_not_found for any other, the first when absent.
std::string served_model(const Fields& f, const ModelLimits& limits);

}  // namespace tessera::serve::detail
