#pragma once
// Samplers decide the order in which a DataLoader visits dataset indices. An epoch's order
// depends only on (seed, epoch), so a run resumed from a checkpoint sees the same batches.
#include <cstdint>
#include <memory>
#include <vector>

namespace tessera::data {

class Sampler {
 public:
  virtual ~Sampler() = default;
  // The indices of the current epoch, in visiting order.
  virtual std::vector<int64_t> indices() const = 0;
  // How many indices one epoch yields.
  virtual int64_t size() const = 0;
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }

 protected:
  int64_t epoch_ = 0;
};

// 0, 1, ..., n-1.
class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t n);
  std::vector<int64_t> indices() const override;
  int64_t size() const override { return n_; }

 private:
  int64_t n_;
};

// A permutation of 0..n-1 drawn from a generator seeded with seed + epoch (as torch's
// DistributedSampler seeds its shuffle), so each epoch has a fresh, reproducible order.
class RandomSampler : public Sampler {
 public:
  explicit RandomSampler(int64_t n, uint64_t seed = 0);
  std::vector<int64_t> indices() const override;
  int64_t size() const override { return n_; }

 private:
  int64_t n_;
  uint64_t seed_;
};

// Rank `rank`'s share of n indices among `world` ranks, partitioned like
// torch.utils.data.DistributedSampler: optionally shuffle (seed + epoch), then either pad by
// repeating indices from the start (drop_last=false) or drop the tail (drop_last=true) so every
// rank gets the same count, and take every world-th index starting at rank.
class DistributedSampler : public Sampler {
 public:
  DistributedSampler(int64_t n, int64_t rank, int64_t world, bool shuffle = true, uint64_t seed = 0,
                     bool drop_last = false);
  std::vector<int64_t> indices() const override;
  int64_t size() const override { return num_samples_; }

 private:
  int64_t n_, rank_, world_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  int64_t num_samples_;
};

// Rank `rank`'s share of another sampler's order in whole batches: batches rank, rank + world,
// rank + 2 world, ... of each base epoch (a tail of fewer than `world` batches is dropped). With
// accumulation A on each rank, a data-parallel step of `world` ranks then covers exactly the
// micro-batches one process covers with accumulation A * world, in the same order.
class BatchShardSampler : public Sampler {
 public:
  BatchShardSampler(std::shared_ptr<Sampler> base, int64_t batch_size, int64_t rank, int64_t world);
  std::vector<int64_t> indices() const override;
  int64_t size() const override;

 private:
  std::shared_ptr<Sampler> base_;
  int64_t batch_size_, rank_, world_;
};

// A permutation of 0..n-1 from a tessera::Generator seeded with seed.
std::vector<int64_t> random_permutation(int64_t n, uint64_t seed);

}  // namespace tessera::data
