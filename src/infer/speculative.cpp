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
  TESSERA_CHECK(history_tokens >= 0, ValueError,
                "[SpeculativeConfig] expected history_tokens >= 0, got ", history_tokens);
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
    } else if (key == "history_tokens") {  // Tessera's, as vLLM's suffix decoding
      c.history_tokens = integer("history_tokens");
    } else if (key == "adaptive") {  // Tessera's: vLLM runs every draft
      TESSERA_CHECK(value.is_boolean(), ValueError, "[", op,
                    "] expected adaptive to be a boolean, got ", value.dump());
      c.adaptive = value.get<bool>();
    } else {
      TESSERA_CHECK(false, ValueError, "[", op, "] unknown speculative config key '", key,
                    "' (expected method, num_speculative_tokens, prompt_lookup_min, "
                    "prompt_lookup_max, adaptive, history_tokens)");
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
  if (json_text.empty()) return {};  // an option left unset: off
  const nlohmann::json j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  TESSERA_CHECK(!j.is_discarded(), ValueError, "[", op,
                "] expected the speculative config to be JSON, e.g. {\"method\": \"ngram\", "
                "\"num_speculative_tokens\": 4}, got '",
                json_text, "'");
  return from_json(j, op);
}

void DraftPolicy::observe_step(double sequences, double drafts, double tokens_emitted,
                               double seconds) {
  constexpr double kDecay = 0.97;  // about the last 30 decode steps
  const double x[kSums] = {1.0,
                           sequences,
                           drafts,
                           seconds,
                           tokens_emitted,
                           sequences * sequences,
                           sequences * drafts,
                           drafts * drafts,
                           sequences * seconds,
                           drafts * seconds};
  for (int i = 0; i < kSums; ++i) sums_[i] = kDecay * sums_[i] + x[i];
}

double DraftPolicy::threshold() const {
  const double w = sums_[kWeight];
  if (w == 0) return 0.0;
  const auto mean = [&](int i) { return sums_[i] / w; };
  const double ms = mean(kSeqs), md = mean(kDrafts), mt = mean(kSeconds);
  const double v_dd = mean(kDraftsDrafts) - md * md, v_ss = mean(kSeqsSeqs) - ms * ms;
  const double v_sd = mean(kSeqsDrafts) - ms * md;
  const double v_dt = mean(kDraftsSeconds) - md * mt, v_st = mean(kSeqsSeconds) - ms * mt;
  // Drafts per step must have spread by half a token at least for a slope to mean anything.
  if (v_dd < 0.25) return 0.0;
  // seconds = fixed + per_sequence x sequences + per_draft x drafts: a sequence brings costs a
  // draft does not (its sampling, its attention's reads of the cache), so the two are told apart
  // where the batch's size varied on its own; with it steady, drafts alone explain the spread.
  const double det = v_ss * v_dd - v_sd * v_sd;
  const double per_draft =
      v_ss >= 0.25 && det > 0.01 * v_ss * v_dd ? (v_ss * v_dt - v_sd * v_st) / det : v_dt / v_dd;
  if (per_draft <= 0) return 0.0;
  return std::min(1.0, per_draft * mean(kEmitted) / mt);
}

int64_t DraftPolicy::worth_running(double acceptance, double threshold, int64_t proposed) const {
  int64_t j = 0;
  for (double chance = acceptance; j < proposed && chance > threshold; ++j)
    chance *= follow_[std::min(j + 1, kDepths - 1)];
  return j;
}

double DraftPolicy::after_step(double acceptance, int64_t reached, int64_t accepted) {
  // A sequence's first draft tells its acceptance; a draft i > 0 is reached only when draft
  // i - 1 was accepted, and tells how often drafts at its depth follow.
  constexpr double kRate = 0.1, kTypicalRate = 0.02, kFollowRate = 0.05;
  for (int64_t i = 0; i < reached; ++i) {
    const double x = i < accepted ? 1.0 : 0.0;
    if (i == 0) {
      acceptance += kRate * (x - acceptance);
      typical_ += kTypicalRate * (x - typical_);
    } else {
      double& follow = follow_[std::min(i, kDepths - 1)];
      follow += kFollowRate * (x - follow);
    }
  }
  return acceptance;
}

NgramHistory::NgramHistory(int64_t capacity_tokens, int64_t n) : capacity_(capacity_tokens), n_(n) {
  TESSERA_CHECK(capacity_tokens >= 0 && n >= 1, ValueError,
                "[NgramHistory] expected capacity_tokens >= 0 and n >= 1, got ", capacity_tokens,
                " and ", n);
}

uint64_t NgramHistory::hash(std::span<const int32_t> ngram) const {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over the ids
  for (int32_t t : ngram) h = (h ^ static_cast<uint32_t>(t)) * 0x100000001b3ull;
  return h;
}

void NgramHistory::add(std::span<const int32_t> output) {
  const int64_t L = static_cast<int64_t>(output.size());
  if (L <= n_ || L > capacity_) return;
  while (num_tokens_ + L > capacity_) {  // the oldest go; their index entries go stale
    num_tokens_ -= static_cast<int64_t>(outputs_.front().size());
    outputs_.pop_front();
    ++first_;
  }
  const int64_t number = first_ + static_cast<int64_t>(outputs_.size());
  outputs_.emplace_back(output.begin(), output.end());
  num_tokens_ += L;
  for (int64_t end = n_; end < L; ++end)  // an occurrence with a token after it
    index_[hash(output.subspan(end - n_, n_))] = {number, end};
  if (index_.size() > static_cast<size_t>(2 * capacity_))  // drop the stale entries
    std::erase_if(index_, [&](const auto& e) { return e.second.output < first_; });
}

int64_t NgramHistory::propose(std::span<const int32_t> tokens, int64_t max_drafts,
                              std::vector<int32_t>& draft) const {
  draft.clear();
  const int64_t L = static_cast<int64_t>(tokens.size());
  if (max_drafts <= 0 || L < n_) return 0;
  const std::span<const int32_t> suffix = tokens.subspan(L - n_);
  const auto it = index_.find(hash(suffix));
  if (it == index_.end() || it->second.output < first_) return 0;
  const std::vector<int32_t>& out = outputs_[static_cast<size_t>(it->second.output - first_)];
  const int64_t end = it->second.end;
  if (!std::equal(suffix.begin(), suffix.end(), out.begin() + (end - n_))) return 0;  // collision
  const int64_t last = std::min(static_cast<int64_t>(out.size()), end + max_drafts);
  draft.assign(out.begin() + end, out.begin() + last);
  int64_t match = n_;
  while (match < kLongestMatch && match < L && match < end &&
         tokens[L - 1 - match] == out[end - 1 - match])
    ++match;
  return match;
}

int64_t propose_ngram_drafts(std::span<const int32_t> tokens, const SpeculativeConfig& config,
                             int64_t max_drafts, std::vector<int32_t>& draft) {
  draft.clear();
  const int64_t L = static_cast<int64_t>(tokens.size());
  if (max_drafts <= 0 || L < 2) return 0;
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
  if (best_len < config.prompt_lookup_min) return 0;
  // The text from the occurrence on, as if it went on repeating itself: past the end of tokens
  // the copy continues from its own start (a recent occurrence is a period of a loop).
  const int64_t first = best_end + 1;
  for (int64_t i = 0; i < max_drafts; ++i)
    draft.push_back(first + i < L ? tokens[first + i] : draft[first + i - L]);
  return best_len;
}

}  // namespace tessera::infer
