#pragma once
// Counter-based random numbers (Philox4x32-10). Element i of a draw depends only on (seed,
// offset, i), so results are identical whatever the thread count.
#include <array>
#include <cstdint>
#include <mutex>

#include "tessera/core/philox.h"

namespace tessera {

class Generator {
 public:
  explicit Generator(uint64_t seed = 67280421310721ull) : seed_(seed) {}
  void manual_seed(uint64_t seed);
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_offset(uint64_t offset);
  // Reserves n counter blocks (4 x uint32 each) and returns the first block's offset.
  uint64_t reserve(uint64_t n_blocks);

  // The state as (seed, offset), for checkpoints.
  std::array<uint64_t, 2> get_state() const { return {seed_, offset_}; }
  void set_state(const std::array<uint64_t, 2>& s);

 private:
  mutable std::mutex mutex_;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

Generator& default_generator();
// Seeds the default generator (torch.manual_seed).
void manual_seed(uint64_t seed);

}  // namespace tessera
