// The JSON helpers of openai_json.h.
#include <algorithm>

#include "serve/openai_json.h"
#include "tessera/core/json_parse.h"

namespace tessera::serve::detail {

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

const char* type_name(const Json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  return "an object";
}

ApiError bad(const std::string& param, const std::string& message) {
  return ApiError(400, message, param);
}

std::vector<int32_t> token_ids(const Json& arr, const char* param, int64_t vocab) {
  std::vector<int32_t> ids;
  for (const Json& v : arr) {
    if (!v.is_number_integer())
      throw bad(param,
                std::string("'") + param + "' token ids must be integers, got " + type_name(v));
    const int64_t id = v.get<int64_t>();
    if (id < 0 || id >= vocab)
      throw bad(param, tessera::detail::str("'", param, "' token ids must be in [0, ", vocab,
                                            "), got ", id));
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

bool all_integers(const Json& arr) {
  return std::all_of(arr.begin(), arr.end(), [](const Json& v) { return v.is_number_integer(); });
}

std::vector<int32_t> encode(const tokenizers::Tokenizer& tok, const std::string& text,
                            const char* param, bool add_bos) {
  return invalid_as_400(
      param, "the tokenizer cannot encode the text: ", [&] { return tok.encode(text, add_bos); });
}

Json parse_object(std::string_view body, const std::set<std::string>& known) {
  Json j = parse_json(body);
  if (j.is_discarded())
    throw ApiError(400, "could not parse the request body as JSON (nested at most " +
                            std::to_string(kMaxJsonDepth) + " deep)");
  if (!j.is_object())
    throw ApiError(400, std::string("expected a JSON object, got ") + type_name(j));
  for (const auto& [key, value] : j.items())
    if (!known.count(key)) throw bad(key, "Unrecognized request argument supplied: " + key);
  return j;
}

std::string served_model(const Fields& f, const ModelLimits& limits) {
  const Json* m = f.get("model");
  if (m && !m->is_string())
    throw bad("model", std::string("'model' must be a string, got ") + type_name(*m));
  const std::vector<std::string>& names = limits.served_names;
  if (!m) return names.empty() ? "" : names.front();
  const std::string name = m->get<std::string>();
  if (!names.empty() && std::find(names.begin(), names.end(), name) == names.end() &&
      !limits.lora_ids.contains(name))
    throw ApiError(404, "The model '" + name + "' does not exist", "model", "invalid_request_error",
                   "model_not_found");
  return name;
}

}  // namespace tessera::serve::detail
