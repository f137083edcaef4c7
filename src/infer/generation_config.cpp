#include "tessera/infer/generation_config.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tessera/core/error.h"

namespace tessera::infer {

namespace {

using Json = nlohmann::json;

// j[key] as a number in [lo, hi]; nullopt when absent or null.
std::optional<double> number(const Json& j, const char* key, double lo, double hi,
                             const std::string& file) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  TESSERA_CHECK(it->is_number() && it->get<double>() >= lo && it->get<double>() <= hi, ValueError,
                "[generation_config] expected ", key, " in [", lo, ", ", hi, "] in ", file,
                ", got ", it->dump());
  return it->get<double>();
}

std::optional<int64_t> integer(const Json& j, const char* key, int64_t lo,
                               const std::string& file) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  TESSERA_CHECK(it->is_number_integer() && it->get<int64_t>() >= lo, ValueError,
                "[generation_config] expected ", key, " to be an integer >= ", lo, " in ", file,
                ", got ", it->dump());
  return it->get<int64_t>();
}

}  // namespace

std::string GenerationConfig::describe_sampling() const {
  std::ostringstream out;
  const auto add = [&](const char* name, const auto& v) {
    if (!v) return;
    if (out.tellp() > 0) out << ", ";
    out << name << "=" << *v;
  };
  add("temperature", temperature);
  add("top_p", top_p);
  add("top_k", top_k);
  add("min_p", min_p);
  add("repetition_penalty", repetition_penalty);
  add("max_new_tokens", max_new_tokens);
  return out.str();
}

GenerationConfig read_generation_config(const std::filesystem::path& folder) {
  const std::filesystem::path path = folder / "generation_config.json";
  GenerationConfig c;
  std::ifstream in(path);
  if (!in) return c;
  const std::string file = path.string();
  const Json j = Json::parse(in, nullptr, /*allow_exceptions=*/false);
  TESSERA_CHECK(j.is_object(), ValueError, "[generation_config] expected a JSON object in ", file);
  if (const auto eos = j.find("eos_token_id"); eos != j.end() && !eos->is_null()) {
    const Json ids = eos->is_array() ? *eos : Json::array({*eos});
    for (const Json& id : ids) {
      TESSERA_CHECK(
          id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() <= INT32_MAX,
          ValueError, "[generation_config] expected eos_token_id to be token ids in ", file,
          ", got ", eos->dump());
      c.eos_token_ids.push_back(id.get<int32_t>());
    }
  }
  c.temperature = number(j, "temperature", 0.0, 100.0, file);
  c.top_p = number(j, "top_p", 0.0, 1.0, file);
  TESSERA_CHECK(!c.top_p || *c.top_p > 0.0, ValueError,
                "[generation_config] expected top_p in (0, 1] in ", file, ", got 0");
  c.min_p = number(j, "min_p", 0.0, 1.0, file);
  c.repetition_penalty = number(j, "repetition_penalty", 1e-6, 100.0, file);
  c.top_k = integer(j, "top_k", 0, file);
  c.max_new_tokens = integer(j, "max_new_tokens", 1, file);
  return c;
}

}  // namespace tessera::infer
