#pragma once
// Next-token prediction examples from a token sequence: example i is (x, y), two int64 tensors
// of seq_len tokens, where y is x shifted by one (a window of seq_len + 1 tokens).
//
// Sequential: consecutive non-overlapping windows (start i * seq_len; the last token of one
// window is the first of the next, as in llm.c's loader), for evaluation or ordered training.
// Random: window i starts at a position drawn from (seed, epoch, i), like nanoGPT's get_batch;
// the draws change each epoch (DataLoader calls set_epoch) and are reproducible.
//
// The position for checkpoints is the DataLoader's state() (epoch, next batch): the dataset
// holds no cursor. Random windows follow the epoch last passed to set_epoch, so loaders that
// share one Random dataset must be at the same epoch (give each its own dataset otherwise).
#include <atomic>
#include <cstdint>

#include "tessera/data/dataset.h"
#include "tessera/data/token_buffer.h"

namespace tessera::data {

enum class WindowSampling { Sequential, Random };

struct LanguageModelOptions {
  int64_t seq_len = 1024;
  WindowSampling sampling = WindowSampling::Sequential;
  uint64_t seed = 0;
  // Random sampling: examples per epoch; 0 means as many as the sequential windows.
  int64_t num_windows = 0;
};

class LanguageModelDataset : public Dataset {
 public:
  LanguageModelDataset(TokenBuffer tokens, LanguageModelOptions options);
  int64_t size() const override { return size_; }
  // {x, y}, each int64 of shape (seq_len,).
  Example get(int64_t index) const override;
  void set_epoch(int64_t epoch) override { epoch_.store(epoch, std::memory_order_relaxed); }
  // First token of window `index` in the current epoch.
  int64_t window_start(int64_t index) const;
  const TokenBuffer& tokens() const { return tokens_; }
  const LanguageModelOptions& options() const { return options_; }

 private:
  TokenBuffer tokens_;
  LanguageModelOptions options_;
  int64_t size_ = 0;
  std::atomic<int64_t> epoch_{0};
};

}  // namespace tessera::data
