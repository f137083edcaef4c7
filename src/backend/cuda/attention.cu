// CUDA flash attention forward (FlashAttention-2 schedule) on tensor cores, bfloat16 or float16
// with float accumulation; the contract is in backend/common/nn_kernels.h.
//
// A block of 4 warps takes 128 query rows of one (batch, head), 32 rows (two 16-row mma tiles)
// per warp so every K/V fragment read from shared memory feeds two mmas. It walks the keys in
// tiles of 64 (32 for D > 64, which keeps the float O accumulators in registers), double-buffered
// with cp.async: S = Q K^T (ldmatrix from the padded tiles), the online softmax in float with
// exp2 (the scale folded into log2 e, one FFMA and one MUFU per score), then O += P V with P
// taken straight from the S accumulators. Causal blocks stop at their diagonal and mask only the
// tiles that cross it; tails beyond Tq / Tk are zero-filled on load and masked. Blocks are
// ordered heaviest query tile first so the causal triangle's long rows do not run last.
#include <cmath>
#include <cstdint>

#include "backend/common/nn_kernels.h"
#include "backend/cuda/attention.cuh"
#include "backend/cuda/context.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/mma.cuh"

namespace tessera::cuda {
namespace {

using namespace mma;

template <int D>
struct FwdTile {
  static constexpr int kWarps = 4;
  static constexpr int kMT = 2;                  // 16-row mma tiles per warp
  static constexpr int kBM = kWarps * 16 * kMT;  // query rows per block
  static constexpr int kBN = D > 64 ? 32 : 64;   // keys per tile (32 keeps D 128 unspilled)
  static constexpr bool kQInRegs = D <= 64;      // Q fragments kept in registers (else reread)
  static constexpr int kStride = D + 8;          // padded row of a shared tile, in elements
  static constexpr int kThreads = kWarps * 32;
  static constexpr size_t kSmem = size_t{kBM + 4 * kBN} * kStride * sizeof(uint16_t);
};

template <bool BF16, int D>
__global__ void __launch_bounds__(FwdTile<D>::kThreads)
    flash_fwd_kernel(AttentionProblem p, uint16_t* __restrict__ out, float* __restrict__ lse) {
  using Tile = FwdTile<D>;
  constexpr int BM = Tile::kBM, BN = Tile::kBN, MT = Tile::kMT, S = Tile::kStride;
  constexpr int kThreads = Tile::kThreads;
  constexpr int KS = D / 16;  // k steps of Q K^T
  constexpr int NS = BN / 8;  // 8-key column tiles of S
  constexpr int NO = D / 8;   // 8-dim column tiles of O
  extern __shared__ __align__(16) uint16_t smem[];
  uint16_t* sQ = smem;
  uint16_t* sK = sQ + BM * S;  // [2][BN][S]
  uint16_t* sV = sK + 2 * BN * S;

  const int BH = p.B * p.Hq;
  const int mt = gridDim.x / BH - 1 - blockIdx.x / BH;
  const int bh = blockIdx.x % BH, b = bh / p.Hq, h = bh % p.Hq, hk = h / p.G;
  const int m0 = mt * BM;
  const uint16_t* q = p.q + b * p.qs.b + h * p.qs.h;
  const uint16_t* k = p.k + b * p.ks.b + hk * p.ks.h;
  const uint16_t* v = p.v + b * p.vs.b + hk * p.vs.h;
  const int n_end = p.causal ? min(p.Tk, m0 + BM) : p.Tk;
  const int n_tiles = (n_end + BN - 1) / BN;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int wrow = warp * 16 * MT;  // the warp's first row in the block
  // ldmatrix row/column of this lane: A from a [m][k] tile, B from [n][k], B from [k][n] (trans).
  const int a_row = lane & 15, a_col = (lane >> 4) * 8;
  const int b_row = (lane & 7) + ((lane >> 4) << 3), b_col = ((lane >> 3) & 1) * 8;
  const int bt_row = (lane & 7) + (((lane >> 3) & 1) << 3), bt_col = (lane >> 4) * 8;

  load_tile<BM, D, kThreads>(sQ, q, p.qs.t, m0, p.Tq);
  if (n_tiles > 0) {
    load_tile<BN, D, kThreads>(sK, k, p.ks.t, 0, p.Tk);
    load_tile<BN, D, kThreads>(sV, v, p.vs.t, 0, p.Tk);
  }
  cp_async_commit();

  float o[MT][NO][4] = {};
  float row_max[MT][2], row_sum[MT][2];  // [tile][row g or g + 8], max scaled to log2 units
#pragma unroll
  for (int mi = 0; mi < MT; ++mi)
#pragma unroll
    for (int r = 0; r < 2; ++r) row_max[mi][r] = -INFINITY, row_sum[mi][r] = 0.f;
  uint32_t qf[Tile::kQInRegs ? MT : 1][Tile::kQInRegs ? KS : 1][4];

  for (int j = 0; j < n_tiles; ++j) {
    const int buf = j & 1;
    if (j + 1 < n_tiles) {
      load_tile<BN, D, kThreads>(sK + (buf ^ 1) * BN * S, k, p.ks.t, (j + 1) * BN, p.Tk);
      load_tile<BN, D, kThreads>(sV + (buf ^ 1) * BN * S, v, p.vs.t, (j + 1) * BN, p.Tk);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const uint16_t* kt = sK + buf * BN * S;
    const uint16_t* vt = sV + buf * BN * S;
    if constexpr (Tile::kQInRegs) {
      if (j == 0) {
#pragma unroll
        for (int mi = 0; mi < MT; ++mi)
#pragma unroll
          for (int ks = 0; ks < KS; ++ks)
            ldsm_x4(qf[mi][ks], smem_addr(sQ + (wrow + mi * 16 + a_row) * S + ks * 16 + a_col));
      }
    }

    // S = Q K^T for the warp's 32 rows and the tile's 64 keys.
    float s[MT][NS][4] = {};
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
      uint32_t a[MT][4];
#pragma unroll
      for (int mi = 0; mi < MT; ++mi) {
        if constexpr (Tile::kQInRegs) {
#pragma unroll
          for (int e = 0; e < 4; ++e) a[mi][e] = qf[mi][ks][e];
        } else {
          ldsm_x4(a[mi], smem_addr(sQ + (wrow + mi * 16 + a_row) * S + ks * 16 + a_col));
        }
      }
#pragma unroll
      for (int np = 0; np < NS / 2; ++np) {
        uint32_t bb[4];
        ldsm_x4(bb, smem_addr(kt + (np * 16 + b_row) * S + ks * 16 + b_col));
#pragma unroll
        for (int mi = 0; mi < MT; ++mi) {
          mma16816<BF16>(s[mi][2 * np], a[mi], bb[0], bb[1]);
          mma16816<BF16>(s[mi][2 * np + 1], a[mi], bb[2], bb[3]);
        }
      }
    }

    // Mask keys past Tk and, on tiles crossing the diagonal, above it.
    const int n0 = j * BN;
    if (n0 + BN > p.Tk || (p.causal && n0 + BN - 1 > m0 + wrow)) {
#pragma unroll
      for (int mi = 0; mi < MT; ++mi)
#pragma unroll
        for (int nt = 0; nt < NS; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = n0 + nt * 8 + 2 * t + (e & 1);
            const int row = m0 + wrow + mi * 16 + g + (e >> 1) * 8;
            if (key >= p.Tk || (p.causal && key > row)) s[mi][nt][e] = -INFINITY;
          }
    }

    // Online softmax on raw scores (scale > 0 keeps the max), p = 2^(s scale log2 e - max) in
    // one FFMA; a row's 4 lanes (one quad) share its max, sums stay per lane until the end.
#pragma unroll
    for (int mi = 0; mi < MT; ++mi)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < NS; ++nt)
          mx = fmaxf(mx, fmaxf(s[mi][nt][2 * r], s[mi][nt][2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        mx = fmaxf(row_max[mi][r], mx * p.scale_log2);
        // A row masked so far has max -inf: subtract 0 instead, so exp2 gives 0 rather than nan.
        const float mu = mx == -INFINITY ? 0.f : mx;
        const float alpha = fast_exp2(row_max[mi][r] - mu);
        row_max[mi][r] = mx;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < NS; ++nt) {
          s[mi][nt][2 * r] = fast_exp2(fmaf(s[mi][nt][2 * r], p.scale_log2, -mu));
          s[mi][nt][2 * r + 1] = fast_exp2(fmaf(s[mi][nt][2 * r + 1], p.scale_log2, -mu));
          sum += s[mi][nt][2 * r] + s[mi][nt][2 * r + 1];
        }
        row_sum[mi][r] = row_sum[mi][r] * alpha + sum;
#pragma unroll
        for (int dt = 0; dt < NO; ++dt) {
          o[mi][dt][2 * r] *= alpha;
          o[mi][dt][2 * r + 1] *= alpha;
        }
      }

      // O += P V: two adjacent S column tiles are the A fragment of one 16-key step.
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      uint32_t a[MT][4];
#pragma unroll
      for (int mi = 0; mi < MT; ++mi) {
        a[mi][0] = pack2<BF16>(s[mi][2 * kk][0], s[mi][2 * kk][1]);
        a[mi][1] = pack2<BF16>(s[mi][2 * kk][2], s[mi][2 * kk][3]);
        a[mi][2] = pack2<BF16>(s[mi][2 * kk + 1][0], s[mi][2 * kk + 1][1]);
        a[mi][3] = pack2<BF16>(s[mi][2 * kk + 1][2], s[mi][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t bb[4];
        ldsm_x4_trans(bb, smem_addr(vt + (kk * 16 + bt_row) * S + dp * 16 + bt_col));
#pragma unroll
        for (int mi = 0; mi < MT; ++mi) {
          mma16816<BF16>(o[mi][2 * dp], a[mi], bb[0], bb[1]);
          mma16816<BF16>(o[mi][2 * dp + 1], a[mi], bb[2], bb[3]);
        }
      }
    }
    __syncthreads();  // the next iteration's copy overwrites this buffer
  }

  // Epilogue: O / l staged through the warp's own rows of sQ (no other warp reads them) so the
  // global stores are 16-byte rows; lse = (max + log2 l) ln 2.
  cp_async_wait<0>();
  __syncthreads();
  const int64_t row_base = int64_t{bh} * p.Tq;
#pragma unroll
  for (int mi = 0; mi < MT; ++mi)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float l = row_sum[mi][r];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const float inv = l > 0.f ? 1.f / l : 0.f;
      const int lr = wrow + mi * 16 + g + r * 8;
#pragma unroll
      for (int dt = 0; dt < NO; ++dt)
        *reinterpret_cast<uint32_t*>(sQ + lr * S + dt * 8 + 2 * t) =
            pack2<BF16>(o[mi][dt][2 * r] * inv, o[mi][dt][2 * r + 1] * inv);
      if (t == 0 && m0 + lr < p.Tq)
        lse[row_base + m0 + lr] = l > 0.f ? (row_max[mi][r] + log2f(l)) * kLn2 : -INFINITY;
    }
  __syncwarp();
  constexpr int kChunks = D / 8;
#pragma unroll
  for (int c = lane; c < 16 * MT * kChunks; c += 32) {
    const int r = c / kChunks, col = (c % kChunks) * 8;
    const int row = m0 + wrow + r;
    if (row < p.Tq)
      *reinterpret_cast<uint4*>(out + (row_base + row) * D + col) =
          *reinterpret_cast<const uint4*>(sQ + (wrow + r) * S + col);
  }
}

void flash_attention(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                     const Tensor& v, double scale, bool is_causal) {
  if (out.numel() == 0) return;
  const AttentionProblem p = attention_problem(q, k, v, scale, is_causal);
  with_attention_config(q, "flash_attention", [&]<bool BF16, int D>() {
    using Tile = FwdTile<D>;
    auto* kernel = &flash_fwd_kernel<BF16, D>;
    // Over 48 KiB of shared memory needs an opt-in (per device, so set on every launch).
    TESSERA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(Tile::kSmem)));
    const int64_t m_tiles = (p.Tq + Tile::kBM - 1) / Tile::kBM;
    const int64_t blocks = m_tiles * p.B * p.Hq;
    kernel<<<static_cast<unsigned>(blocks), Tile::kThreads, Tile::kSmem, current_stream()>>>(
        p, static_cast<uint16_t*>(out.data_ptr()), lse.data_ptr<float>());
    TESSERA_CUDA_CHECK_LAUNCH();
  });
}

TESSERA_REGISTER_KERNEL(flash_attention_kernel, DeviceType::CUDA, &flash_attention);

}  // namespace
}  // namespace tessera::cuda
