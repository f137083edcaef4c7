#pragma once
// DataLoader: batches of a Dataset in a Sampler's order, collated by stacking, prepared ahead on
// one background thread with a bounded queue. Errors raised while loading a batch reach the
// consumer in next() as the original exception. The position (epoch, next batch) can be saved
// and restored for checkpoints: a restored loader yields exactly the batches that were left.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "tessera/data/dataset.h"
#include "tessera/data/sampler.h"

namespace tessera::data {

using CollateFn = std::function<Batch(const std::vector<Example>&)>;

// Stacks field i of every example into field i of the batch (equal field counts and shapes).
Batch collate_stack(const std::vector<Example>& examples);

struct DataLoaderOptions {
  int64_t batch_size = 1;
  // Visit a fresh random permutation each epoch (RandomSampler with `seed`); ignored with an
  // explicit sampler, which must then be false.
  bool shuffle = false;
  uint64_t seed = 0;
  // Drop the last batch of an epoch when it is smaller than batch_size.
  bool drop_last = false;
  // Batches prepared ahead by the background thread; 0 loads on the calling thread.
  int64_t prefetch = 2;
  CollateFn collate = collate_stack;
};

// Where a DataLoader stands: the batch `batch` of epoch `epoch` is the next one it yields.
struct DataLoaderState {
  int64_t epoch = 0;
  int64_t batch = 0;
};

class DataLoader {
 public:
  // Without a sampler: SequentialSampler, or RandomSampler(seed) when options.shuffle.
  DataLoader(std::shared_ptr<Dataset> dataset, DataLoaderOptions options = {},
             std::shared_ptr<Sampler> sampler = nullptr);
  // Stops and joins the prefetch thread.
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Batches per epoch.
  int64_t num_batches() const;
  // The next batch of the current epoch, or nullopt when it is exhausted; the call after a
  // nullopt starts the next epoch. Rethrows an exception raised while loading the batch (the
  // same batch is retried by the following call).
  std::optional<Batch> next();
  // Restarts at the first batch of `epoch`.
  void set_epoch(int64_t epoch);
  DataLoaderState state() const { return {epoch_, next_batch_}; }
  void load_state(const DataLoaderState& state);

  // Range-for over the rest of the current epoch: `for (Batch& b : loader)`.
  class Iterator {
   public:
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    Iterator() = default;
    Batch& operator*() { return *current_; }
    Batch* operator->() { return &*current_; }
    Iterator& operator++() {
      current_ = loader_->next();
      return *this;
    }
    void operator++(int) { ++*this; }
    bool operator==(const Iterator& other) const { return !current_ && !other.current_; }

   private:
    friend class DataLoader;
    Iterator(DataLoader* loader, std::optional<Batch> current)
        : loader_(loader), current_(std::move(current)) {}
    DataLoader* loader_ = nullptr;
    std::optional<Batch> current_;
  };
  Iterator begin() { return Iterator(this, next()); }
  Iterator end() { return Iterator(); }

 private:
  struct Item {
    Batch batch;
    std::exception_ptr error;
  };
  void start_epoch();
  void stop_worker();
  void worker_loop(int64_t first_batch);
  Batch load_batch(int64_t batch) const;

  std::shared_ptr<Dataset> dataset_;
  DataLoaderOptions options_;
  std::shared_ptr<Sampler> sampler_;
  int64_t epoch_ = 0;
  int64_t next_batch_ = 0;
  bool epoch_started_ = false;
  std::vector<int64_t> order_;  // the sampler's indices for the current epoch

  std::thread worker_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Item> queue_;  // at most options_.prefetch items
  bool stop_ = false;
};

}  // namespace tessera::data
