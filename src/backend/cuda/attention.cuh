#pragma once
// What the flash attention forward (attention.cu) and backward (attention_backward.cu) share:
// the problem description passed to the kernels and the dtype / head-dim dispatch.
#include <cstdint>
#include <string_view>
#include <utility>

#include "tessera/core/error.h"
#include "tessera/core/tensor.h"

namespace tessera::cuda {

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

// 2^x in one MUFU instruction (exp2f adds range handling the kernels do not need); -inf gives 0.
__device__ inline float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Element strides of a [B, H, T, D] operand whose last dim is contiguous.
struct BhtStrides {
  int64_t b, h, t;
};

inline BhtStrides bht_strides(const Tensor& x) { return {x.stride(0), x.stride(1), x.stride(2)}; }

// q [B, Hq, Tq, D], k and v [B, Hkv, Tk, D] as 16-bit words; query head h reads KV head h / G.
struct AttentionProblem {
  const uint16_t* q;
  const uint16_t* k;
  const uint16_t* v;
  BhtStrides qs, ks, vs;
  int B, Hq, G, Tq, Tk;
  float scale_log2;  // scale * log2(e) > 0: the kernels exponentiate with exp2
  bool causal;
};

inline AttentionProblem attention_problem(const Tensor& q, const Tensor& k, const Tensor& v,
                                          double scale, bool causal) {
  return {static_cast<const uint16_t*>(q.data_ptr()),
          static_cast<const uint16_t*>(k.data_ptr()),
          static_cast<const uint16_t*>(v.data_ptr()),
          bht_strides(q),
          bht_strides(k),
          bht_strides(v),
          static_cast<int>(q.size(0)),
          static_cast<int>(q.size(1)),
          static_cast<int>(q.size(1) / k.size(1)),
          static_cast<int>(q.size(2)),
          static_cast<int>(k.size(2)),
          static_cast<float>(scale * 1.4426950408889634),
          causal};
}

// Calls f.template operator()<BF16, D>() for q's dtype (bfloat16 or float16) and head dim.
template <class F>
void with_attention_config(const Tensor& q, std::string_view op, F&& f) {
  const bool bf16 = q.dtype() == kBFloat16;
  TESSERA_CHECK(bf16 || q.dtype() == kFloat16, TypeError, "[", op,
                "] expected bfloat16 or float16, got ", q.dtype());
  auto with_dim = [&]<bool BF16>() {
    switch (q.size(3)) {
      case 32:
        return f.template operator()<BF16, 32>();
      case 64:
        return f.template operator()<BF16, 64>();
      case 96:
        return f.template operator()<BF16, 96>();
      case 128:
        return f.template operator()<BF16, 128>();
    }
    throw NotImplementedError(
        detail::str("[", op, "] expected head dim 32, 64, 96 or 128, got ", q.size(3)));
  };
  if (bf16) return with_dim.template operator()<true>();
  return with_dim.template operator()<false>();
}

}  // namespace tessera::cuda
