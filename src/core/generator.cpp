#include "tessera/core/generator.h"

namespace tessera {

void Generator::manual_seed(uint64_t seed) {
  std::lock_guard lock(mutex_);
  seed_ = seed;
  offset_ = 0;
}

void Generator::set_offset(uint64_t offset) {
  std::lock_guard lock(mutex_);
  offset_ = offset;
}

uint64_t Generator::reserve(uint64_t n_blocks) {
  std::lock_guard lock(mutex_);
  uint64_t first = offset_;
  offset_ += n_blocks;
  return first;
}

void Generator::set_state(const std::array<uint64_t, 2>& s) {
  std::lock_guard lock(mutex_);
  seed_ = s[0];
  offset_ = s[1];
}

Generator& default_generator() {
  static Generator gen;
  return gen;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace tessera
