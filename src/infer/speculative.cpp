#include "tessera/infer/speculative.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>

#include "tessera/core/error.h"

namespace tessera::infer {

void SpeculativeConfig::validate() const {
  TESSERA_CHECK(num_speculative_tokens >= 0, ValueError,
                "[SpeculativeConfig] expected num_speculative_tokens >= 0, got ",
                num_speculative_tokens);
  TESSERA_CHECK(prompt_lookup_min >= 1 && prompt_lookup_max >= prompt_lookup_min, ValueError,
                "[SpeculativeConfig] expected 1 <= prompt_lookup_min <= prompt_lookup_max, got ",
                prompt_lookup_min, " and ", prompt_lookup_max);
}

SpeculativeConfig SpeculativeConfig::from_json(const nlohmann::json& j, const char* op) {
  TESSERA_CHECK(j.is_object(), ValueError, "[", op,
                "] expected the speculative config to be a JSON object, got ", j.dump());
  SpeculativeConfig c;
  const auto integer = [&](const char* key) {
    const nlohmann::json& v = j.at(key);
    TESSERA_CHECK(v.is_number_integer(), ValueError, "[", op, "] expected ", key,
                  " to be an integer, got ", v.dump());
    return v.get<int64_t>();
  };
  bool has_min = false, has_max = false;
  for (const auto& [key, value] : j.items()) {
    if (key == "method") {
      TESSERA_CHECK(value == "ngram", ValueError, "[", op,
                    "] expected speculative method \"ngram\" (prompt lookup; no draft model, "
                    "EAGLE or MTP heads are built), got ",
                    value.dump());
    } else if (key == "num_speculative_tokens") {
      c.num_speculative_tokens = integer("num_speculative_tokens");
    } else if (key == "prompt_lookup_min") {
      c.prompt_lookup_min = integer("prompt_lookup_min");
      has_min = true;
    } else if (key == "prompt_lookup_max") {
      c.prompt_lookup_max = integer("prompt_lookup_max");
      has_max = true;
    } else {
      TESSERA_CHECK(false, ValueError, "[", op, "] unknown speculative config key '", key,
                    "' (expected method, num_speculative_tokens, prompt_lookup_min, "
                    "prompt_lookup_max)");
    }
  }
  TESSERA_CHECK(j.contains("method") && j.contains("num_speculative_tokens"), ValueError, "[", op,
                "] expected the speculative config to set method and num_speculative_tokens, got ",
                j.dump());
  TESSERA_CHECK(c.num_speculative_tokens >= 1, ValueError, "[", op,
                "] expected num_speculative_tokens >= 1, got ", c.num_speculative_tokens);
  if (has_min && !has_max) c.prompt_lookup_max = std::max(c.prompt_lookup_max, c.prompt_lookup_min);
  if (has_max && !has_min) c.prompt_lookup_min = std::min(c.prompt_lookup_min, c.prompt_lookup_max);
  c.validate();
  return c;
}

SpeculativeConfig SpeculativeConfig::parse(std::string_view json_text, const char* op) {
  const nlohmann::json j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  TESSERA_CHECK(!j.is_discarded(), ValueError, "[", op,
                "] expected the speculative config to be JSON, e.g. {\"method\": \"ngram\", "
                "\"num_speculative_tokens\": 4}, got '",
                json_text, "'");
  return from_json(j, op);
}

void propose_ngram_drafts(std::span<const int32_t> tokens, const SpeculativeConfig& config,
                          int64_t max_drafts, std::vector<int32_t>& draft) {
  draft.clear();
  const int64_t L = static_cast<int64_t>(tokens.size());
  if (max_drafts <= 0 || L < 2) return;
  // One backward scan: each earlier position holding the last token ends an occurrence of the
  // suffix as long as their tokens agree going back; the first to reach the longest length wins.
  int64_t best_len = 0, best_end = -1;
  for (int64_t end = L - 2; end >= 0; --end) {
    if (tokens[end] != tokens[L - 1]) continue;
    int64_t n = 1;
    while (n < config.prompt_lookup_max && end - n >= 0 && tokens[end - n] == tokens[L - 1 - n])
      ++n;
    if (n > best_len) {
      best_len = n;
      best_end = end;
      if (n == config.prompt_lookup_max) break;
    }
  }
  if (best_len < config.prompt_lookup_min) return;
  const int64_t first = best_end + 1, last = std::min(L, first + max_drafts);
  draft.assign(tokens.begin() + first, tokens.begin() + last);
}

}  // namespace tessera::infer
