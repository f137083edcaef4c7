#pragma once
// Map-style datasets: a size and random access to examples, each a tuple of tensors (like the
// tuples a PyTorch Dataset returns). get() may run on a DataLoader's prefetch thread, so it must
// be safe to call concurrently with other const members.
#include <cstdint>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::data {

using Example = std::vector<Tensor>;
// A collated batch: field i stacks field i of every example along a new leading dim.
using Batch = std::vector<Tensor>;

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  // Example i, 0 <= i < size().
  virtual Example get(int64_t index) const = 0;
  // Called by DataLoader before each epoch starts (while no get() runs); datasets that draw
  // random content per epoch use it. The default ignores it.
  virtual void set_epoch(int64_t epoch) {}
};

// Rows of equally long tensors: example i is {t[i] for each tensor t}.
class TensorDataset : public Dataset {
 public:
  explicit TensorDataset(std::vector<Tensor> tensors);
  int64_t size() const override;
  Example get(int64_t index) const override;

 private:
  std::vector<Tensor> tensors_;
};

// IndexError "[op] expected an index in [0, size), got index" unless 0 <= index < size.
void check_index(int64_t index, int64_t size, const char* op);

}  // namespace tessera::data
