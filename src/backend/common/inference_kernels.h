#pragma once
// Kernel keys of the inference runner's fused step (infer::ModelRunner): linear layers on
// weights packed once, row normalisation, rotary embedding and the MLP activation, over rows of
// float32 in buffers the runner owns, so a decode step allocates nothing. The runner calls them
// with its cache's device. Every row is computed independently of the others, with the same
// arithmetic whatever the number of rows or threads, so a sequence's logits are bit-identical
// whether it runs alone or batched.
#include <cstdint>
#include <vector>

#include "tessera/core/dispatcher.h"
#include "tessera/core/tensor.h"

namespace tessera {

// Linear layers' weights [O_i, K] stacked along O (q|k|v, gate|up) in the layout the backend's
// GEMM reads, with their biases; made once by pack_linear_kernel.
struct PackedLinearWeights {
  // Backend-defined layout (CPU: column panels [ceil(O / 16), K, 16]) of the weight dtype:
  // float32, bfloat16 (rounded to nearest even), or int8 (per output, symmetric: W[o, k] =
  // scale[o] * packed[o, k], |packed| <= 127).
  Tensor packed;
  Tensor bias;   // float32, zeros where a layer has none (CPU: padded to whole panels)
  Tensor scale;  // int8 only: float32 per output, laid out as bias
  int64_t in = 0, out = 0;
};

// biases: empty (none) or one per weight, undefined meaning zeros. Float32 weights on the
// kernel's device, stored as dtype (float32, bfloat16 or int8); TypeError otherwise.
TESSERA_DECLARE_KERNEL(pack_linear_kernel,
                       PackedLinearWeights(const std::vector<Tensor>& weights,
                                           const std::vector<Tensor>& biases, DType dtype));

// y[n, o] = sum_k x[n, k] W[o, k] + b[o] for n < rows (y[n, o] += that with accumulate): one
// FMA chain over k from 0, then + b (int8: scale[o] times the chain over the packed values, plus
// b, in one FMA), then + the old y. Rows of x and y are ldx and ldy apart.
struct LinearRowsArgs {
  const float* x = nullptr;
  int64_t ldx = 0;
  float* y = nullptr;
  int64_t ldy = 0;
  int64_t rows = 0;
  bool accumulate = false;
};
TESSERA_DECLARE_KERNEL(packed_linear_kernel,
                       void(const PackedLinearWeights& weights, const LinearRowsArgs& args));

// y[r] = (x[r] - mean) / sqrt(var + eps) * weight + bias (LayerNorm, biased variance), or
// x[r] / sqrt(mean(x[r]^2) + eps) * weight (RMSNorm). Rows of x are ldx apart, of y cols.
struct NormRowsArgs {
  const float* x = nullptr;
  int64_t ldx = 0;
  float* y = nullptr;
  int64_t rows = 0, cols = 0;
  const float* weight = nullptr;
  const float* bias = nullptr;  // null: none
  float eps = 1e-5f;
  bool rms = false;
};
TESSERA_DECLARE_KERNEL(norm_rows_kernel, void(const NormRowsArgs& args));

// Rotates, in place, the first `heads` heads of each row (q heads then k heads of a fused QKV
// row): pairs (x[i], x[i + D/2]) by the angles of the row's position. With q_norm, each head is
// first RMS-normed over its D values (Qwen3's query and key norms): the first q_heads with
// q_norm's weights, the rest with k_norm's.
struct RopeRowsArgs {
  float* x = nullptr;
  int64_t ld = 0, rows = 0;
  const int32_t* positions = nullptr;  // [rows]
  int64_t heads = 0, head_dim = 0;
  const float* cos = nullptr;  // [max positions, head_dim / 2]
  const float* sin = nullptr;
  const float* q_norm = nullptr;  // [head_dim], or null: no norms
  const float* k_norm = nullptr;
  int64_t q_heads = 0;
  float norm_eps = 1e-6f;
};
TESSERA_DECLARE_KERNEL(rope_rows_kernel, void(const RopeRowsArgs& args));

// The MLP's activation in place on rows ld apart: silu(gate) * up written over gate for
// SwiGLU (row = gate | up, hidden each), else GPT-2's tanh GELU over the hidden values.
struct MlpActivationArgs {
  float* x = nullptr;
  int64_t ld = 0, rows = 0, hidden = 0;
  bool swiglu = false;
};
TESSERA_DECLARE_KERNEL(mlp_activation_kernel, void(const MlpActivationArgs& args));

}  // namespace tessera
