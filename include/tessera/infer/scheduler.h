#pragma once
// Continuous batching: every engine step the scheduler decides which sequences run and how many
// of their tokens, within a token budget and the KV cache's free blocks.
//
//  1. Running sequences, oldest first, each get their next tokens (1 when decoding, the rest of
//     the prompt when a prefill was chunked). A sequence that needs a new block and finds none
//     preempts the newest running sequence: its blocks are freed and it goes back to the waiting
//     queue, to be recomputed (prompt + output so far prefilled again) when blocks allow.
//  2. Then, if no one was preempted this step, waiting sequences are admitted in arrival order
//     while the batch has room, the budget has tokens and the cache has blocks for their prompt
//     (plus one spare block per running sequence, so admissions do not cause instant
//     preemptions). Long prompts are prefilled in chunks of the remaining budget. A sequence
//     whose first full blocks are in the prefix cache takes them and starts computing after
//     them (always computing its last token, whose logits it samples from).
//  3. Then decoding sequences with speculative drafts (Sequence::draft) take as many of them as
//     the remaining budget and their blocks allow, growing into a new block only while a spare
//     one per running sequence stays free: speculation never preempts or delays anyone.
// A lone sequence that has outgrown the whole cache is finished instead (finish reason Length).
#include <cstdint>
#include <deque>
#include <vector>

#include "tessera/infer/kv_cache.h"
#include "tessera/infer/sampler.h"
#include "tessera/infer/stopping.h"

namespace tessera::infer {

struct Sequence {
  int64_t id = 0;
  int64_t arrival = 0;          // admission order: preemption takes the newest
  std::vector<int32_t> tokens;  // prompt then output
  int64_t prompt_len = 0;
  int64_t num_computed = 0;  // tokens whose keys and values are in the cache
  BlockTable blocks;
  std::vector<uint64_t> block_hashes;  // chain hashes of its cached full blocks, in order
  int64_t num_cached_tokens = -1;      // found in the prefix cache at its first admission
  bool computes_whole_prompt = false;  // takes nothing from the prefix cache (prompt logprobs)
  int32_t lora_id = 0;  // the LoRA adapter it runs through (ModelRunner::add_lora), 0: none
  SamplingParams sampling;
  StoppingCriteria stopping;
  uint64_t seed = 0;
  int64_t num_preemptions = 0;
  // Tokens proposed to follow tokens (speculative decoding), set by the engine before each step.
  std::vector<int32_t> draft;

  int64_t num_tokens() const { return static_cast<int64_t>(tokens.size()); }
  int64_t num_output() const { return num_tokens() - prompt_len; }
};

struct SchedulerConfig {
  int64_t max_num_seqs = 32;              // sequences running at once
  int64_t max_num_batched_tokens = 2048;  // tokens per step (>= max_num_seqs)
  // Look admissions up in the prefix cache (the Engine sets it when it registers the blocks it
  // computes; without that nothing is found).
  bool enable_prefix_caching = false;
  void validate() const;
};

struct ScheduledSequence {
  Sequence* seq;
  // Runs tokens [num_computed, num_computed + num_new_tokens) of tokens followed by draft; the
  // last num_draft_tokens of them are draft's first (only ever after a decoding token).
  int64_t num_new_tokens;
  int64_t num_draft_tokens = 0;
};

struct SchedulerOutput {
  std::vector<ScheduledSequence> scheduled;
  std::vector<Sequence*> preempted;  // this step, now waiting again
  std::vector<Sequence*> dropped;    // could never fit the cache: finish them (Length)
  int64_t num_tokens = 0;
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, PagedKVCache& cache);
  // Queues a new sequence (not owned; it must outlive its time in the scheduler).
  void add(Sequence* seq);
  // Removes seq from the queues and frees its blocks (finished or aborted).
  void remove(Sequence* seq);
  // The sequences to run this step; valid until the next call.
  const SchedulerOutput& schedule();

  int64_t num_waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  int64_t num_preemptions() const { return num_preemptions_; }
  // Tokens of admitted sequences looked up in the prefix cache, and those found there.
  int64_t prefix_query_tokens() const { return prefix_query_tokens_; }
  int64_t prefix_hit_tokens() const { return prefix_hit_tokens_; }
  bool has_work() const { return !waiting_.empty() || !running_.empty(); }

 private:
  void preempt(Sequence* seq);
  void insert_waiting(Sequence* seq);
  // Frees seq's blocks and forgets what it had computed.
  void release(Sequence* seq);
  // Makes the cached blocks of hit seq's first blocks, computed (seq holds no blocks).
  void take_cached_prefix(Sequence* seq, const PrefixMatch& hit);
  // Step 3: adds drafts to the decoding sequences scheduled, within budget.
  void schedule_drafts(int64_t budget);

  SchedulerConfig config_;
  PagedKVCache& cache_;
  std::deque<Sequence*> waiting_;   // by arrival
  std::vector<Sequence*> running_;  // by arrival
  SchedulerOutput out_;
  int64_t num_preemptions_ = 0;
  int64_t prefix_query_tokens_ = 0, prefix_hit_tokens_ = 0;
};

}  // namespace tessera::infer
