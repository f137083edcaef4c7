#include "tessera/data/sampler.h"

#include <numeric>

#include "tessera/core/error.h"
#include "tessera/core/generator.h"
#include "tessera/ops/creation.h"

namespace tessera::data {

std::vector<int64_t> random_permutation(int64_t n, uint64_t seed) {
  Generator gen(seed);
  const Tensor perm = randperm(n, &gen);
  const int64_t* p = perm.data_ptr<int64_t>();
  return std::vector<int64_t>(p, p + n);
}

SequentialSampler::SequentialSampler(int64_t n) : n_(n) {
  TESSERA_CHECK(n >= 0, ValueError, "[SequentialSampler] expected n >= 0, got ", n);
}

std::vector<int64_t> SequentialSampler::indices() const {
  std::vector<int64_t> idx(n_);
  std::iota(idx.begin(), idx.end(), 0);
  return idx;
}

RandomSampler::RandomSampler(int64_t n, uint64_t seed) : n_(n), seed_(seed) {
  TESSERA_CHECK(n >= 0, ValueError, "[RandomSampler] expected n >= 0, got ", n);
}

std::vector<int64_t> RandomSampler::indices() const {
  return random_permutation(n_, seed_ + static_cast<uint64_t>(epoch_));
}

DistributedSampler::DistributedSampler(int64_t n, int64_t rank, int64_t world, bool shuffle,
                                       uint64_t seed, bool drop_last)
    : n_(n), rank_(rank), world_(world), shuffle_(shuffle), seed_(seed), drop_last_(drop_last) {
  TESSERA_CHECK(n >= 0, ValueError, "[DistributedSampler] expected n >= 0, got ", n);
  TESSERA_CHECK(world >= 1, ValueError, "[DistributedSampler] expected world >= 1, got ", world);
  TESSERA_CHECK(rank >= 0 && rank < world, ValueError, "[DistributedSampler] expected rank in [0, ",
                world, "), got ", rank);
  // torch: ceil((n - world) / world) when dropping an uneven tail, else ceil(n / world).
  num_samples_ = (drop_last && n % world != 0) ? n / world : (n + world - 1) / world;
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> all;
  if (shuffle_) {
    all = random_permutation(n_, seed_ + static_cast<uint64_t>(epoch_));
  } else {
    all.resize(n_);
    std::iota(all.begin(), all.end(), 0);
  }
  const int64_t total = num_samples_ * world_;
  // Pad by cycling through the indices from the start (torch repeats the list when the padding
  // exceeds it), or cut the tail.
  for (int64_t i = n_; i < total; ++i) all.push_back(all[(i - n_) % n_]);
  all.resize(total);
  std::vector<int64_t> mine;
  mine.reserve(num_samples_);
  for (int64_t i = rank_; i < total; i += world_) mine.push_back(all[i]);
  return mine;
}

BatchShardSampler::BatchShardSampler(std::shared_ptr<Sampler> base, int64_t batch_size,
                                     int64_t rank, int64_t world)
    : base_(std::move(base)), batch_size_(batch_size), rank_(rank), world_(world) {
  TESSERA_CHECK(base_ != nullptr, ValueError,
                "[BatchShardSampler] expected a base sampler, got null");
  TESSERA_CHECK(batch_size_ >= 1, ValueError, "[BatchShardSampler] expected batch_size >= 1, got ",
                batch_size_);
  TESSERA_CHECK(world_ >= 1 && rank_ >= 0 && rank_ < world_, ValueError,
                "[BatchShardSampler] expected 0 <= rank < world, got rank ", rank_, " of ", world_);
}

int64_t BatchShardSampler::size() const {
  return base_->size() / (batch_size_ * world_) * batch_size_;
}

std::vector<int64_t> BatchShardSampler::indices() const {
  base_->set_epoch(epoch_);
  const std::vector<int64_t> all = base_->indices();
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(size()));
  const int64_t rounds = size() / batch_size_;
  for (int64_t k = 0; k < rounds; ++k) {
    const int64_t begin = (k * world_ + rank_) * batch_size_;
    mine.insert(mine.end(), all.begin() + begin, all.begin() + begin + batch_size_);
  }
  return mine;
}

}  // namespace tessera::data
