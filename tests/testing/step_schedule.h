#pragma once
// A runner test's schedule: three sequences of random tokens through a paged cache, the first
// two prefilling alone, then the third prefilling beside their decode steps, then all decoding;
// every sequence samples each step. Caches of the same block count and size can share its block
// tables, so one schedule drives a runner and its oracle over caches of their own.
#include <array>
#include <cstdint>
#include <vector>

#include "infer/device_runner.h"
#include "tessera/infer/kv_cache.h"
#include "tessera/infer/model_runner.h"
#include "tessera/tessera.h"

namespace tessera::testing {

class MixedSchedule {
 public:
  static constexpr int64_t kMaxTokens = 64;  // per sequence

  MixedSchedule(int64_t vocab, infer::PagedKVCache& cache, uint64_t seed = 5) : cache_(cache) {
    manual_seed(seed);
    ids_ = randint(0, vocab, {3, kMaxTokens});
  }

  // Fills batch with the next step's tokens, reserving their blocks in the cache.
  void next(infer::StepBatch& batch) {
    batch.clear();
    for (int64_t s = 0; s < 3; ++s) {
      if (s == 2 && step_ < 2) continue;  // the third arrives later
      const int64_t n = done_[s] == 0 ? kPrompt[s] : 1;
      TESSERA_CHECK(done_[s] + n <= kMaxTokens && cache_.reserve(tables_[s], done_[s] + n),
                    RuntimeError, "[MixedSchedule] expected room for step ", step_);
      std::vector<int32_t> tokens;
      for (int64_t p = done_[s]; p < done_[s] + n; ++p)
        tokens.push_back(static_cast<int32_t>(ids_.data_ptr<int64_t>()[s * kMaxTokens + p]));
      batch.add_sequence(tokens, done_[s], tables_[s], cache_.block_size(), true);
      done_[s] += n;
    }
    ++step_;
  }

 private:
  static constexpr int64_t kPrompt[3] = {23, 7, 40};
  infer::PagedKVCache& cache_;
  Tensor ids_;  // [3, kMaxTokens] int64
  std::array<infer::BlockTable, 3> tables_;
  std::array<int64_t, 3> done_{};  // positions cached so far
  int step_ = 0;
};

// The CPU runner of a model beside its device runner's code run on the CPU, each with a cache
// of its own, driven by one MixedSchedule (over the CPU runner's cache).
struct RunnerPair {
  explicit RunnerPair(const models::CausalLM& model)
      : cpu(model),
        device(model.inference_layout(), kCPU),
        cpu_cache(cpu.kv_spec(), 24, 16),
        device_cache(cpu.kv_spec(), 24, 16),
        schedule(cpu.vocab_size(), cpu_cache) {}
  infer::ModelRunner cpu;
  infer::detail::DeviceRunner device;
  infer::PagedKVCache cpu_cache, device_cache;
  MixedSchedule schedule;
  infer::StepBatch batch;
};

}  // namespace tessera::testing
