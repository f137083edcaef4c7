#include "tessera/data/dataloader.h"

#include <algorithm>

#include "tessera/core/error.h"
#include "tessera/ops/shape.h"

namespace tessera::data {

Batch collate_stack(const std::vector<Example>& examples) {
  TESSERA_CHECK(!examples.empty(), ValueError,
                "[collate_stack] expected at least one example, got none");
  const size_t fields = examples[0].size();
  for (size_t i = 0; i < examples.size(); ++i) {
    TESSERA_CHECK(examples[i].size() == fields, ValueError, "[collate_stack] expected examples ",
                  "with ", fields, " tensors, got ", examples[i].size(), " at position ", i);
  }
  Batch batch;
  batch.reserve(fields);
  TensorList column(examples.size());
  for (size_t f = 0; f < fields; ++f) {
    for (size_t i = 0; i < examples.size(); ++i) column[i] = examples[i][f];
    batch.push_back(stack(column, 0));
  }
  return batch;
}

DataLoader::DataLoader(std::shared_ptr<Dataset> dataset, DataLoaderOptions options,
                       std::shared_ptr<Sampler> sampler)
    : dataset_(std::move(dataset)), options_(std::move(options)), sampler_(std::move(sampler)) {
  TESSERA_CHECK(dataset_ != nullptr, ValueError, "[DataLoader] expected a dataset, got null");
  TESSERA_CHECK(options_.batch_size >= 1, ValueError, "[DataLoader] expected batch_size >= 1, got ",
                options_.batch_size);
  TESSERA_CHECK(options_.prefetch >= 0, ValueError, "[DataLoader] expected prefetch >= 0, got ",
                options_.prefetch);
  TESSERA_CHECK(options_.collate != nullptr, ValueError,
                "[DataLoader] expected a collate function, got an empty one");
  TESSERA_CHECK(!(sampler_ && options_.shuffle), ValueError,
                "[DataLoader] expected shuffle=false with an explicit sampler (the sampler ",
                "decides the order), got shuffle=true");
  if (!sampler_) {
    if (options_.shuffle) {
      sampler_ = std::make_shared<RandomSampler>(dataset_->size(), options_.seed);
    } else {
      sampler_ = std::make_shared<SequentialSampler>(dataset_->size());
    }
  }
}

DataLoader::~DataLoader() { stop_worker(); }

int64_t DataLoader::num_batches() const {
  const int64_t n = sampler_->size(), b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

void DataLoader::set_epoch(int64_t epoch) { load_state({epoch, 0}); }

void DataLoader::load_state(const DataLoaderState& state) {
  TESSERA_CHECK(state.epoch >= 0 && state.batch >= 0 && state.batch <= num_batches(), ValueError,
                "[DataLoader.load_state] expected epoch >= 0 and batch in [0, ", num_batches(),
                "], got epoch ", state.epoch, " and batch ", state.batch);
  stop_worker();
  epoch_ = state.epoch;
  next_batch_ = state.batch;
  epoch_started_ = false;
}

void DataLoader::start_epoch() {
  sampler_->set_epoch(epoch_);
  dataset_->set_epoch(epoch_);
  order_ = sampler_->indices();
  epoch_started_ = true;
  if (options_.prefetch > 0 && next_batch_ < num_batches()) {
    stop_ = false;
    worker_ = std::thread([this, first = next_batch_] { worker_loop(first); });
  }
}

void DataLoader::stop_worker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  queue_.clear();
  stop_ = false;
}

Batch DataLoader::load_batch(int64_t batch) const {
  const int64_t begin = batch * options_.batch_size;
  const int64_t end = std::min<int64_t>(begin + options_.batch_size, order_.size());
  std::vector<Example> examples;
  examples.reserve(end - begin);
  for (int64_t i = begin; i < end; ++i) examples.push_back(dataset_->get(order_[i]));
  return options_.collate(examples);
}

void DataLoader::worker_loop(int64_t first_batch) {
  const int64_t n = num_batches();
  for (int64_t b = first_batch; b < n; ++b) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock,
               [&] { return stop_ || static_cast<int64_t>(queue_.size()) < options_.prefetch; });
      if (stop_) return;
    }
    Item item;
    try {
      item.batch = load_batch(b);
    } catch (...) {
      item.error = std::current_exception();
    }
    const bool failed = item.error != nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stop_) return;
      queue_.push_back(std::move(item));
    }
    cv_.notify_all();
    if (failed) return;  // the consumer rethrows and restarts from this batch
  }
}

std::optional<Batch> DataLoader::next() {
  if (!epoch_started_) start_epoch();
  if (next_batch_ >= num_batches()) {
    stop_worker();
    epoch_started_ = false;
    ++epoch_;
    next_batch_ = 0;
    return std::nullopt;
  }
  if (options_.prefetch == 0) {
    Batch batch = load_batch(next_batch_);
    ++next_batch_;
    return batch;
  }
  Item item;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return !queue_.empty(); });
    item = std::move(queue_.front());
    queue_.pop_front();
  }
  cv_.notify_all();
  if (item.error) {
    stop_worker();
    epoch_started_ = false;
    std::rethrow_exception(item.error);
  }
  ++next_batch_;
  return std::move(item.batch);
}

}  // namespace tessera::data
