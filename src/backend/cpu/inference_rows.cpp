// The inference runner's row kernels on CPU (norm_rows_kernel, rope_rows_kernel,
// mlp_activation_kernel): float32 rows in place or into the runner's buffers, one row at a
// time, across threads only when a step is large enough to pay for a team.
#include <cmath>

#include "backend/common/inference_kernels.h"
#include "backend/common/vec_math.h"
#include "backend/cpu/parallel_for.h"

namespace tessera::cpu {
namespace {

constexpr int64_t kParallelElems = 1 << 15;  // row ops below this many elements run serially

// 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), as GPT-2 (torch's approximate="tanh").
inline float gelu_tanh(float x) {
  const float k = 0.7978845608028654f;
  return 0.5f * x * (1.0f + tessera::detail::vtanh(k * (x + 0.044715f * x * x * x)));
}

inline float silu(float x) { return x / (1.0f + tessera::detail::vexp(-x)); }

void norm_rows(const NormRowsArgs& a) {
  const int64_t C = a.cols;
  const float* w = a.weight;
  const float* b = a.bias;
  const float eps = a.eps;
  parallel_for(a.rows, a.rows * C > kParallelElems, [&](int64_t r) {
    const float* xr = a.x + r * a.ldx;
    float* yr = a.y + r * C;
    if (a.rms) {  // x / sqrt(mean(x^2) + eps) * w
      float ss = 0.0f;
      for (int64_t i = 0; i < C; ++i) ss += xr[i] * xr[i];
      const float rstd = 1.0f / std::sqrt(ss / static_cast<float>(C) + eps);
      for (int64_t i = 0; i < C; ++i) yr[i] = xr[i] * rstd * w[i];
    } else {  // (x - mean) / sqrt(var + eps) * w + b, biased variance
      float s = 0.0f;
      for (int64_t i = 0; i < C; ++i) s += xr[i];
      const float mean = s / static_cast<float>(C);
      float v = 0.0f;
      for (int64_t i = 0; i < C; ++i) v += (xr[i] - mean) * (xr[i] - mean);
      const float rstd = 1.0f / std::sqrt(v / static_cast<float>(C) + eps);
      for (int64_t i = 0; i < C; ++i) yr[i] = (xr[i] - mean) * rstd * w[i] + (b ? b[i] : 0.0f);
    }
  });
}

void rope_rows(const RopeRowsArgs& a) {
  const int64_t D = a.head_dim, half = D / 2;
  parallel_for(a.rows, a.rows * a.ld > kParallelElems, [&](int64_t n) {
    const float* cos = a.cos + a.positions[n] * half;
    const float* sin = a.sin + a.positions[n] * half;
    for (int64_t h = 0; h < a.heads; ++h) {
      float* x0 = a.x + n * a.ld + h * D;
      float* x1 = x0 + half;
      if (a.q_norm) {
        const float* w = h < a.q_heads ? a.q_norm : a.k_norm;
        float ss = 0.0f;
        for (int64_t i = 0; i < D; ++i) ss += x0[i] * x0[i];
        const float rstd = 1.0f / std::sqrt(ss / static_cast<float>(D) + a.norm_eps);
        for (int64_t i = 0; i < D; ++i) x0[i] = x0[i] * rstd * w[i];
      }
      for (int64_t i = 0; i < half; ++i) {
        const float xa = x0[i], xb = x1[i];
        x0[i] = xa * cos[i] - xb * sin[i];
        x1[i] = xb * cos[i] + xa * sin[i];
      }
    }
  });
}

void mlp_activation(const MlpActivationArgs& a) {
  const int64_t H = a.hidden;
  parallel_for(a.rows, a.rows * H > kParallelElems, [&](int64_t n) {
    float* f = a.x + n * a.ld;
    if (a.swiglu) {  // silu(gate) * up, written over gate
      for (int64_t i = 0; i < H; ++i) f[i] = silu(f[i]) * f[H + i];
    } else {
      for (int64_t i = 0; i < H; ++i) f[i] = gelu_tanh(f[i]);
    }
  });
}

TESSERA_REGISTER_KERNEL(norm_rows_kernel, DeviceType::CPU, &norm_rows);
TESSERA_REGISTER_KERNEL(rope_rows_kernel, DeviceType::CPU, &rope_rows);
TESSERA_REGISTER_KERNEL(mlp_activation_kernel, DeviceType::CPU, &mlp_activation);

}  // namespace
}  // namespace tessera::cpu
