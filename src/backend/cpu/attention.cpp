// Flash attention on the CPU for float32 (the contract is nn_kernels.h's). Query rows go in
// blocks of kBlock: a block's scores against the keys it sees are one small GEMM into a
// per-thread [kBlock, Tk] buffer, softmaxed in place, and multiplied into the output by another,
// so no [Tq, Tk] matrix is ever stored. The backward recomputes each block's probabilities from
// the forward's logsumexp (FlashAttention-2). Work is split over (batch, KV head): the query heads
// sharing a KV head accumulate dk and dv in one thread, without atomics. The GEMMs are OpenBLAS's,
// which runs single-threaded inside the parallel region.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/common/nn_kernels.h"

namespace tessera::cpu {
namespace {

using detail::vexp;
using detail::vmax;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int64_t kBlock = 64;  // query rows per block

// A [B, H, T, D] operand with a contiguous last dim: matrix (b, h) starts at at(b, h) with
// leading dimension ld.
struct Heads {
  explicit Heads(const Tensor& t)
      : data(static_cast<float*>(t.data_ptr())),
        sb(t.stride(0)),
        sh(t.stride(1)),
        ld(static_cast<int>(t.stride(2))) {}
  float* at(int64_t b, int64_t h, int64_t t = 0) const { return data + b * sb + h * sh + t * ld; }
  float* data;
  int64_t sb, sh;
  int ld;
};

// C [m, n] (ldc) = alpha A B^T(op) + beta C, row-major.
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a, lda, b, ldb,
              beta, c, ldc);
}

// The keys the block's rows [i0, i0 + rows) see: all, or j <= i when causal (top-left aligned).
int64_t block_keys(int64_t i0, int64_t rows, int64_t Tk, bool causal) {
  return causal ? std::min(i0 + rows, Tk) : Tk;
}

// Scores s [rows, n] (ld n) = scale q k^T of one block, with causal's j > i set to -inf.
void block_scores(float* s, const float* q, int ldq, const float* k, int ldk, int64_t rows,
                  int64_t n, int64_t D, float scale, int64_t i0, bool causal) {
  gemm(false, true, rows, n, D, scale, q, ldq, k, ldk, 0.0f, s, static_cast<int>(n));
  if (!causal) return;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = i0 + r + 1; j < n; ++j) s[r * n + j] = kNegInf;
}

void flash_attention(const Tensor& out, const Tensor& lse, const Tensor& q_, const Tensor& k_,
                     const Tensor& v_, double scale_d, bool is_causal) {
  const Heads q(q_), k(k_), v(v_), o(out);
  const int64_t B = q_.size(0), Hq = q_.size(1), Tq = q_.size(2), D = q_.size(3);
  const int64_t Tk = k_.size(2), G = Hq / k_.size(1);
  const int64_t blocks = (Tq + kBlock - 1) / kBlock;
  const float scale = static_cast<float>(scale_d);
  float* lse_data = static_cast<float*>(lse.data_ptr());
#pragma omp parallel
  {
    std::vector<float> s(kBlock * std::max<int64_t>(Tk, 1));
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < B * Hq * blocks; ++task) {
      const int64_t bh = task / blocks, i0 = task % blocks * kBlock;
      const int64_t b = bh / Hq, h = bh % Hq, hk = h / G;
      const int64_t rows = std::min(kBlock, Tq - i0), n = block_keys(i0, rows, Tk, is_causal);
      float* ob = o.at(b, h, i0);
      block_scores(s.data(), q.at(b, h, i0), q.ld, k.at(b, hk), k.ld, rows, n, D, scale, i0,
                   is_causal);
      for (int64_t r = 0; r < rows; ++r) {
        float* sr = s.data() + r * n;
        float m = kNegInf;
        for (int64_t j = 0; j < n; ++j) m = vmax(m, sr[j]);
        if (m == kNegInf) {  // no visible key (or every score -inf): out 0, lse -inf
          std::fill(sr, sr + n, 0.0f);
          lse_data[bh * Tq + i0 + r] = kNegInf;
          continue;
        }
        float l = 0.0f;
#pragma omp simd reduction(+ : l)
        for (int64_t j = 0; j < n; ++j) {
          sr[j] = vexp(sr[j] - m);
          l += sr[j];
        }
        const float inv = 1.0f / l;
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) sr[j] *= inv;
        lse_data[bh * Tq + i0 + r] = m + std::log(l);
      }
      gemm(false, false, rows, D, n, 1.0f, s.data(), static_cast<int>(n), v.at(b, hk), v.ld, 0.0f,
           ob, o.ld);
    }
  }
}

// FlashAttention-2's backward by query block: p = exp(s - lse), dv += p^T dout,
// dp = dout v^T, ds = p (dp - delta) with delta = rowsum(dout out), dq = scale ds k,
// dk += scale ds^T q.
void flash_attention_backward(const Tensor& dq_, const Tensor& dk_, const Tensor& dv_,
                              const Tensor& dout_, const Tensor& q_, const Tensor& k_,
                              const Tensor& v_, const Tensor& out_, const Tensor& lse,
                              double scale_d, bool is_causal) {
  const Heads q(q_), k(k_), v(v_), o(out_), go(dout_), dq(dq_), dk(dk_), dv(dv_);
  const int64_t B = q_.size(0), Hq = q_.size(1), Tq = q_.size(2), D = q_.size(3);
  const int64_t Hkv = k_.size(1), Tk = k_.size(2), G = Hq / Hkv;
  const float scale = static_cast<float>(scale_d);
  const float* lse_data = static_cast<const float*>(lse.data_ptr());
#pragma omp parallel
  {
    std::vector<float> p(kBlock * std::max<int64_t>(Tk, 1)), dp(p.size());
#pragma omp for schedule(dynamic, 1)
    for (int64_t bk = 0; bk < B * Hkv; ++bk) {
      const int64_t b = bk / Hkv, hk = bk % Hkv;
      for (int64_t j = 0; j < Tk; ++j) {
        std::fill(dk.at(b, hk, j), dk.at(b, hk, j) + D, 0.0f);
        std::fill(dv.at(b, hk, j), dv.at(b, hk, j) + D, 0.0f);
      }
      for (int64_t h = hk * G; h < (hk + 1) * G; ++h) {
        for (int64_t i0 = 0; i0 < Tq; i0 += kBlock) {
          const int64_t rows = std::min(kBlock, Tq - i0), n = block_keys(i0, rows, Tk, is_causal);
          const float* qb = q.at(b, h, i0);
          const float* gob = go.at(b, h, i0);
          const float* lb = lse_data + (b * Hq + h) * Tq + i0;
          block_scores(p.data(), qb, q.ld, k.at(b, hk), k.ld, rows, n, D, scale, i0, is_causal);
          gemm(false, true, rows, n, D, 1.0f, gob, go.ld, v.at(b, hk), v.ld, 0.0f, dp.data(),
               static_cast<int>(n));
          for (int64_t r = 0; r < rows; ++r) {
            float* pr = p.data() + r * n;
            float* dpr = dp.data() + r * n;
            if (lb[r] == kNegInf) {  // a row that saw no key passes no gradient
              std::fill(pr, pr + n, 0.0f);
              std::fill(dpr, dpr + n, 0.0f);
              continue;
            }
            const float* gr = gob + r * go.ld;
            const float* orow = o.at(b, h, i0 + r);
            float delta = 0.0f;
#pragma omp simd reduction(+ : delta)
            for (int64_t d = 0; d < D; ++d) delta += gr[d] * orow[d];
#pragma omp simd
            for (int64_t j = 0; j < n; ++j) {
              pr[j] = vexp(pr[j] - lb[r]);
              dpr[j] = pr[j] * (dpr[j] - delta);  // ds
            }
          }
          const int ldn = static_cast<int>(n);
          gemm(true, false, n, D, rows, 1.0f, p.data(), ldn, gob, go.ld, 1.0f, dv.at(b, hk), dv.ld);
          gemm(false, false, rows, D, n, scale, dp.data(), ldn, k.at(b, hk), k.ld, 0.0f,
               dq.at(b, h, i0), dq.ld);
          gemm(true, false, n, D, rows, scale, dp.data(), ldn, qb, q.ld, 1.0f, dk.at(b, hk), dk.ld);
        }
      }
    }
  }
}

// Only float32: the CPU runs 16-bit attention through the composite (in float32 anyway).
void flash_attention_float(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                           const Tensor& v, double scale, bool is_causal) {
  TESSERA_ASSERT(q.dtype() == kFloat32, "the CPU flash kernel takes float32, got ", q.dtype());
  flash_attention(out, lse, q, k, v, scale, is_causal);
}

void flash_attention_backward_float(const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                    const Tensor& dout, const Tensor& q, const Tensor& k,
                                    const Tensor& v, const Tensor& out, const Tensor& lse,
                                    double scale, bool is_causal) {
  TESSERA_ASSERT(q.dtype() == kFloat32, "the CPU flash kernel takes float32, got ", q.dtype());
  flash_attention_backward(dq, dk, dv, dout, q, k, v, out, lse, scale, is_causal);
}

TESSERA_REGISTER_KERNEL(flash_attention_kernel, DeviceType::CPU, &flash_attention_float);
TESSERA_REGISTER_KERNEL(flash_attention_backward_kernel, DeviceType::CPU,
                        &flash_attention_backward_float);

}  // namespace
}  // namespace tessera::cpu
