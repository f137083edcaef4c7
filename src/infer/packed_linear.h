#pragma once
// The model runner's GEMM: y[n, :] (+)= x[n, :] W^T + b for a weight W [O, K] repacked once as
// column panels [ceil(O / 16), K, 16], so a micro-kernel keeps a tile of rows x 16..128 columns
// in registers and streams W once per tile of rows.
//
// Batch invariance: every output element is one FMA chain over k = 0..K-1 starting from 0, then
// + b (then + the old y when accumulating), whatever the tile shape, the number of rows or the
// thread count. So a sequence's logits are bit-identical whether it runs alone or batched (the
// tiny shapes of decode also avoid oneDNN's per-call primitive setup, which costs more than
// the multiply itself below a few MFLOP).
#include <cstdint>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::infer::detail {

class PackedLinear {
 public:
  PackedLinear() = default;
  // Packs the weights [O_i, K] stacked along O (e.g. q, k and v projections into one), with
  // their biases (empty: none; otherwise one per weight, undefined meaning zeros). Float32.
  PackedLinear(const std::vector<Tensor>& weights, const std::vector<Tensor>& biases = {});

  // y[n, o] = sum_k x[n, k] W[o, k] + b[o] for n < rows, o < out_features(); with accumulate,
  // y[n, o] += that. Rows of x and y are ldx and ldy floats apart.
  void forward(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t rows,
               bool accumulate = false) const;

  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }

 private:
  int64_t in_ = 0, out_ = 0, panels_ = 0;
  Tensor packed_;            // [panels, K, 16] float32, 64-byte aligned, zero-padded columns
  std::vector<float> bias_;  // [panels * 16], zeros when absent
};

}  // namespace tessera::infer::detail
