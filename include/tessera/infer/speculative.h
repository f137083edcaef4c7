#pragma once
// Speculative decoding by prompt lookup (vLLM's "ngram" method, llama.cpp's lookup decoding):
// a decoding sequence whose last n tokens (n from prompt_lookup_max down to prompt_lookup_min)
// occurred earlier in its prompt or output proposes the tokens that followed them then as drafts.
// The engine runs the sequence's last token and its drafts in one forward and samples each of
// their rows in turn, exactly as it would have one token per step (same seeded draw, penalties,
// grammar, logprobs); a draft is accepted while it equals the token sampled before it, and the
// first sample that differs ends the step. The output is therefore token for token what the
// engine writes without speculation, in fewer steps when the text repeats itself (code edits,
// quotations, extraction, summaries): a decode step streams the weights once for 1 + k tokens.
// Drafts are not free (each is a token of compute, and most of a small model's step), so by
// default the engine runs only those worth their time (DraftPolicy).
//
//   infer::EngineConfig config;
//   config.speculative = {.num_speculative_tokens = 4};
#include <cstdint>
#include <deque>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace tessera::infer {

struct SpeculativeConfig {
  int64_t num_speculative_tokens = 0;  // drafts per sequence and step, at most; 0: off
  int64_t prompt_lookup_min = 2;       // the shortest suffix looked up
  int64_t prompt_lookup_max = 4;       // the longest, tried first
  // Run only the drafts whose chance of acceptance pays for their time (DraftPolicy); false runs
  // every draft proposed, as vLLM does.
  bool adaptive = true;
  // Tokens of finished requests' outputs kept to look drafts up in when a request's own text
  // has no match (requests to one server repeat each other: JSON keys, tool calls, templates;
  // vLLM's suffix decoding does this). 0: each request looks in its own text only.
  int64_t history_tokens = 1 << 16;
  bool enabled() const { return num_speculative_tokens > 0; }
  // ValueError "[SpeculativeConfig] expected ..." naming the field out of range.
  void validate() const;
  // From vLLM's --speculative-config / speculative_config JSON: {"method": "ngram",
  // "num_speculative_tokens": k, "prompt_lookup_max": n, "prompt_lookup_min": m}, and Tessera's
  // "adaptive": false to run every draft and "history_tokens": n (0: off) to size the
  // cross-request history (NgramHistory). One lookup bound alone moves the other's default to
  // meet it (min 6 alone: max 6). ValueError naming op for another method (draft models, EAGLE,
  // MTP are not built), unknown keys or values out of range.
  static SpeculativeConfig from_json(const nlohmann::json& j, const char* op);
  // The same from JSON text (a command-line flag's value; empty: off); ValueError for text that
  // is not JSON.
  static SpeculativeConfig parse(std::string_view json_text, const char* op);
};

// Which drafts are worth running, learned as the engine runs. Decode steps (no prefill) are
// timed against the sequences and the drafts they run, and a plane t = fixed + per_sequence x
// sequences + per_draft x drafts is fitted by least squares weighted towards recent steps. Each
// sequence keeps the share of its first drafts that were accepted (its acceptance), and the
// engine, per depth, the share of drafts accepted after their predecessor was (a copy that held
// so far tends to go on holding). A sequence's first draft is accepted with chance about its
// acceptance, each next one with that times its depth's share; a draft costs per_draft, and pays
// when its chance beats what the same time buys in a step: per_draft x tokens emitted per step /
// step time (the threshold). Until drafts per step have varied enough to tell per_draft, every
// draft runs; a sequence whose drafts are not worth it looks none up (the lookup has its cost
// too) but for one draft every kProbeEvery steps, to learn its acceptance again.
class DraftPolicy {
 public:
  // One decode step: the sequences and the drafts it ran, the tokens it brought, its wall time.
  void observe_step(double sequences, double drafts, double tokens_emitted, double seconds);
  // The chance of acceptance a draft needs to be worth running, in [0, 1].
  double threshold() const;
  // How many of `proposed` drafts to run for a sequence with this acceptance: those whose
  // chance (acceptance, times each depth's share after the first) beats threshold.
  int64_t worth_running(double acceptance, double threshold, int64_t proposed) const;
  // A sequence's acceptance after a step that reached `reached` drafts and accepted `accepted`
  // (moved by its first draft; the others count for their depths), which also moves the
  // typical acceptance.
  double after_step(double acceptance, int64_t reached, int64_t accepted);
  // What a new request's acceptance starts from: that of the recent first drafts of all requests
  // (requests to one server tend to be alike), kPriorAcceptance before any.
  double typical_acceptance() const { return typical_; }
  static constexpr double kPriorAcceptance = 0.5;
  // A sequence that drafted nothing this many steps in a row, its drafts not being worth it,
  // runs one anyway: its acceptance is only learned from drafts run, and may have risen since.
  static constexpr int64_t kProbeEvery = 16;

 private:
  // Exponentially weighted sums over decode steps of 1, sequences, drafts, seconds, tokens
  // emitted and the products the fit needs.
  enum Sum {
    kWeight,
    kSeqs,
    kDrafts,
    kSeconds,
    kEmitted,
    kSeqsSeqs,
    kSeqsDrafts,
    kDraftsDrafts,
    kSeqsSeconds,
    kDraftsSeconds,
    kSums
  };
  double sums_[kSums] = {};
  double typical_ = kPriorAcceptance;
  // Per depth d >= 1 (the last one standing for deeper ones): the share of drafts at d accepted.
  // Optimistic at first: a depth is only measured where drafts reach it.
  static constexpr int64_t kDepths = 8;
  double follow_[kDepths] = {1, 1, 1, 1, 1, 1, 1, 1};
};

// Recent outputs of finished requests, for drafts across requests: up to a number of tokens
// (the oldest outputs dropped first), each position findable by the n tokens ending there
// (n = prompt_lookup_min), the most recent occurrence kept.
class NgramHistory {
 public:
  NgramHistory(int64_t capacity_tokens, int64_t n);
  // Keeps output (ignored when shorter than n + 1 tokens or longer than the capacity).
  void add(std::span<const int32_t> output);
  // Replaces draft with up to max_drafts tokens that followed the most recent occurrence of the
  // last n tokens of tokens in a kept output, and returns how many of the last tokens agree
  // with the output there (at least n, at most kLongestMatch); empty and 0 when none.
  int64_t propose(std::span<const int32_t> tokens, int64_t max_drafts,
                  std::vector<int32_t>& draft) const;
  static constexpr int64_t kLongestMatch = 64;
  int64_t num_tokens() const { return num_tokens_; }

 private:
  struct Where {
    int64_t output;  // its number among all outputs added
    int64_t end;     // the position after the n tokens
  };
  uint64_t hash(std::span<const int32_t> ngram) const;
  int64_t capacity_, n_;
  std::deque<std::vector<int32_t>> outputs_;  // outputs first_ .. first_ + size - 1
  int64_t first_ = 0, num_tokens_ = 0;
  std::unordered_map<uint64_t, Where> index_;
};

// Replaces draft with max_drafts tokens that followed the most recent earlier occurrence of the
// longest suffix of tokens (n in [prompt_lookup_min, prompt_lookup_max], fewer than
// tokens.size()) that occurs earlier, continued past the end of tokens as the same copy (so a
// loop of period p proposes its next turns, not just p tokens), and returns that suffix's
// length; empty and 0 when none occurs.
int64_t propose_ngram_drafts(std::span<const int32_t> tokens, const SpeculativeConfig& config,
                             int64_t max_drafts, std::vector<int32_t>& draft);

}  // namespace tessera::infer
