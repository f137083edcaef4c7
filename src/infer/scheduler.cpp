#include "tessera/infer/scheduler.h"

#include <algorithm>
#include <unordered_set>

#include "tessera/core/error.h"

namespace tessera::infer {

void SchedulerConfig::validate() const {
  TESSERA_CHECK(max_num_seqs >= 1, ValueError, "[SchedulerConfig] expected max_num_seqs >= 1, got ",
                max_num_seqs);
  TESSERA_CHECK(max_num_batched_tokens >= max_num_seqs, ValueError,
                "[SchedulerConfig] expected max_num_batched_tokens >= max_num_seqs (", max_num_seqs,
                "), got ", max_num_batched_tokens);
}

Scheduler::Scheduler(const SchedulerConfig& config, PagedKVCache& cache)
    : config_(config), cache_(cache) {
  config_.validate();
}

void Scheduler::insert_waiting(Sequence* seq) {
  auto at = std::find_if(waiting_.begin(), waiting_.end(),
                         [&](const Sequence* s) { return s->arrival > seq->arrival; });
  waiting_.insert(at, seq);
}

void Scheduler::add(Sequence* seq) {
  seq->num_computed = 0;
  seq->block_hashes.clear();
  insert_waiting(seq);
}

void Scheduler::release(Sequence* seq) {
  cache_.release(seq->blocks);
  seq->block_hashes.clear();
  seq->num_computed = 0;
}

void Scheduler::take_cached_prefix(Sequence* seq, const PrefixMatch& hit) {
  cache_.take_prefix(seq->blocks, hit);
  seq->block_hashes = hit.hashes;
  seq->num_computed = static_cast<int64_t>(hit.blocks.size()) * cache_.block_size();
  if (seq->num_cached_tokens < 0) seq->num_cached_tokens = seq->num_computed;
  if (config_.enable_prefix_caching) {
    prefix_query_tokens_ += seq->num_tokens();
    prefix_hit_tokens_ += seq->num_computed;
  }
}

void Scheduler::remove(Sequence* seq) {
  std::erase(running_, seq);
  std::erase(waiting_, seq);
  release(seq);
}

void Scheduler::preempt(Sequence* seq) {
  // Recompute: drop the cached keys; the whole sequence is prefilled again on resumption (from
  // the prefix cache, as far as its blocks were not handed out meanwhile).
  std::erase(running_, seq);
  release(seq);
  ++seq->num_preemptions;
  ++num_preemptions_;
  insert_waiting(seq);
  out_.preempted.push_back(seq);
}

const SchedulerOutput& Scheduler::schedule() {
  out_.scheduled.clear();
  out_.preempted.clear();
  out_.dropped.clear();
  out_.num_tokens = 0;
  int64_t budget = config_.max_num_batched_tokens;
  const int64_t bs = cache_.block_size();

  // 1. Running sequences, oldest first; victims come from the back (the newest).
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence* seq = running_[i];
    const int64_t n = std::min(seq->num_tokens() - seq->num_computed, budget);
    bool self_preempted = false;
    while (!cache_.reserve(seq->blocks, seq->num_computed + n)) {
      Sequence* victim = running_.back();
      if (victim == seq) {
        self_preempted = true;
        break;
      }
      preempt(victim);
    }
    if (self_preempted) {
      if (running_.size() == 1) {  // alone and still out of blocks: it can never fit
        std::erase(running_, seq);
        release(seq);
        out_.dropped.push_back(seq);
      } else {
        preempt(seq);
      }
      break;  // seq was the newest: nothing after it
    }
    out_.scheduled.push_back({seq, n});
    budget -= n;
    ++i;
  }

  // 2. Admissions, in arrival order, unless this step had to preempt. A sequence whose next
  // uncached block is one that a sequence admitted this step computes waits a step, to take it
  // from the cache then (the n choices of a prompt, requests sharing a new system prompt).
  std::unordered_set<uint64_t> computed_this_step;
  while (out_.preempted.empty() && !waiting_.empty() && budget > 0 &&
         num_running() < config_.max_num_seqs) {
    Sequence* seq = waiting_.front();
    const int64_t total = cache_.blocks_for(seq->num_tokens());
    if (total > cache_.num_blocks()) {  // more than the whole cache
      waiting_.pop_front();
      out_.dropped.push_back(seq);
      continue;
    }
    // Full blocks already cached, short of the last token: it runs again for its logits.
    const PrefixMatch hit = config_.enable_prefix_caching && !seq->computes_whole_prompt
                                ? cache_.match_prefix(seq->tokens, (seq->num_tokens() - 1) / bs,
                                                      prefix_root(seq->lora_id))
                                : PrefixMatch{};
    if (hit.next_hash != 0 && computed_this_step.contains(hit.next_hash)) break;
    const int64_t cached = static_cast<int64_t>(hit.blocks.size());
    // Blocks for the whole prompt (even when chunked) and a spare one per running sequence; a
    // hit on a free cached block takes it from the free pool too.
    if (total - cached + hit.num_free + num_running() > cache_.blocks().num_free()) break;
    take_cached_prefix(seq, hit);
    const int64_t n = std::min(seq->num_tokens() - seq->num_computed, budget);
    cache_.reserve(seq->blocks, seq->num_computed + n);
    if (hit.next_hash != 0 && seq->num_computed + n >= (cached + 1) * bs)
      computed_this_step.insert(hit.next_hash);
    waiting_.pop_front();
    // Kept in arrival order, so a resumed sequence is not the next victim.
    running_.insert(std::find_if(running_.begin(), running_.end(),
                                 [&](const Sequence* s) { return s->arrival > seq->arrival; }),
                    seq);
    out_.scheduled.push_back({seq, n});
    budget -= n;
  }
  schedule_drafts(budget);
  for (const auto& s : out_.scheduled) out_.num_tokens += s.num_new_tokens;
  return out_;
}

void Scheduler::schedule_drafts(int64_t budget) {
  const int64_t bs = cache_.block_size();
  for (ScheduledSequence& s : out_.scheduled) {
    Sequence& seq = *s.seq;
    if (budget <= 0) break;
    if (seq.draft.empty() || s.num_new_tokens != 1 || seq.num_computed + 1 != seq.num_tokens())
      continue;  // not decoding (a prefill, or resumed after preemption)
    const int64_t end = seq.num_computed + 1;  // the decoding token's slot is reserved
    int64_t d = std::min(static_cast<int64_t>(seq.draft.size()), budget);
    const int64_t held = static_cast<int64_t>(seq.blocks.size()) * bs - end;
    const int64_t new_blocks = cache_.blocks_for(end + d) - static_cast<int64_t>(seq.blocks.size());
    if (new_blocks > 0 && cache_.blocks().num_free() - new_blocks < num_running()) d = held;
    if (d <= 0 || !cache_.reserve(seq.blocks, end + d)) continue;
    s.num_new_tokens += d;
    s.num_draft_tokens = d;
    budget -= d;
  }
}

}  // namespace tessera::infer
