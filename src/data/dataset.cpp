#include "tessera/data/dataset.h"

#include "tessera/core/error.h"

namespace tessera::data {

void check_index(int64_t index, int64_t size, const char* op) {
  TESSERA_CHECK(index >= 0 && index < size, IndexError, "[", op, "] expected an index in [0, ",
                size, "), got ", index);
}

TensorDataset::TensorDataset(std::vector<Tensor> tensors) : tensors_(std::move(tensors)) {
  TESSERA_CHECK(!tensors_.empty(), ValueError,
                "[TensorDataset] expected at least one tensor, got none");
  for (size_t i = 0; i < tensors_.size(); ++i) {
    TESSERA_CHECK(tensors_[i].defined() && tensors_[i].dim() >= 1, ValueError,
                  "[TensorDataset] expected defined tensors with at least 1 dim, got ",
                  tensors_[i].defined() ? tensors_[i].shape_str() : "an undefined tensor",
                  " at position ", i);
    TESSERA_CHECK(tensors_[i].size(0) == tensors_[0].size(0), ValueError,
                  "[TensorDataset] expected tensors of equal length, got ", tensors_[0].size(0),
                  " at position 0 and ", tensors_[i].size(0), " at position ", i);
  }
}

int64_t TensorDataset::size() const { return tensors_[0].size(0); }

Example TensorDataset::get(int64_t index) const {
  check_index(index, size(), "TensorDataset.get");
  Example ex;
  ex.reserve(tensors_.size());
  for (const Tensor& t : tensors_) ex.push_back(t.select(0, index));
  return ex;
}

}  // namespace tessera::data
