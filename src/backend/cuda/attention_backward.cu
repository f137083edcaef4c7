// CUDA flash attention backward (FlashAttention-2) on tensor cores; the contract is in
// backend/common/nn_kernels.h, the forward in attention.cu.
//
// Three kernels: delta = rowsum(dout out) per query row; the main pass; dq = scale dq_acc cast
// to the input dtype. The main pass gives a block of 8 warps 128 keys of one (batch, KV head),
// 16 keys per warp, so the warp's dK and dV rows stay in float registers for the whole pass.
// The block loops over the G query heads sharing that KV head and their query tiles (32 rows
// for D 128, 64 otherwise), double-buffering Q, dO, lse and delta with cp.async. Per tile, in
// the transposed (key-major) orientation so every product's A operand is already in registers:
//   S^T = K Q^T, P^T = exp2(S^T scale log2 e - lse log2 e), dV += P^T dO,
//   dP^T = V dO^T, dS^T = P^T (dP^T - delta), dK += dS^T Q,
// then dS^T goes through shared memory and dQ += dS K is added to a float buffer with atomics
// (other key blocks add to the same rows). Causal blocks skip query tiles that end before their
// first key; dK and dV need no atomics because one block owns each key row.
#include <cmath>
#include <cstdint>

#include "backend/common/nn_kernels.h"
#include "backend/cuda/attention.cuh"
#include "backend/cuda/context.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/mma.cuh"
#include "tessera/ops/creation.h"

namespace tessera::cuda {
namespace {

using namespace mma;

template <int D>
struct BwdTile {
  static constexpr int kWarps = 8;
  static constexpr int kBN = 16 * kWarps;       // keys per block, 16 per warp
  static constexpr int kBM = D > 96 ? 32 : 64;  // query rows per step (32 keeps D 128 in regs)
  static constexpr int kStride = D + 8;         // padded row of a shared tile, in elements
  static constexpr int kDsStride = kBM + 8;
  static constexpr int kThreads = kWarps * 32;
  // K, V, two buffers of Q and dO, dS^T; then two buffers of lse and delta (floats).
  static constexpr size_t kHalfs = size_t{2 * kBN + 4 * kBM} * kStride + size_t{kBN} * kDsStride;
  static constexpr size_t kSmem = kHalfs * sizeof(uint16_t) + 4 * kBM * sizeof(float);
};

struct BwdArgs {
  const uint16_t* dout;
  BhtStrides dos;
  const float* lse;    // [B, Hq, Tq]
  const float* delta;  // [B, Hq, Tq]
  float* dq_acc;       // [B, Hq, Tq, D], zeroed
  uint16_t* dk;        // [B, Hkv, Tk, D]
  uint16_t* dv;
  float scale;
};

template <bool BF16, int D>
__global__ void __launch_bounds__(BwdTile<D>::kThreads, 1)
    flash_bwd_kernel(AttentionProblem p, BwdArgs a) {
  using Tile = BwdTile<D>;
  constexpr int BM = Tile::kBM, BN = Tile::kBN, S = Tile::kStride, DS = Tile::kDsStride;
  constexpr int kThreads = Tile::kThreads, kWarps = Tile::kWarps;
  constexpr int KS = D / 16;  // k steps over the head dim
  constexpr int NQ = BM / 8;  // 8-query column tiles of S^T
  constexpr int NO = D / 8;   // 8-dim column tiles of dK, dV
  // dQ += dS K splits the [BM, D] tile over the warps: RG groups of 16 rows, CP column parts.
  constexpr int RG = BM / 16, CP = kWarps / RG, DW = D / CP;
  static_assert(DW % 16 == 0, "each warp's dQ columns must be whole 16-column pairs");
  extern __shared__ __align__(16) uint16_t smem[];
  uint16_t* sK = smem;
  uint16_t* sV = sK + BN * S;
  uint16_t* sQ = sV + BN * S;                             // [2][BM][S]
  uint16_t* sdO = sQ + 2 * BM * S;                        // [2][BM][S]
  uint16_t* sdS = sdO + 2 * BM * S;                       // [BN][DS], dS^T
  float* sLse = reinterpret_cast<float*>(sdS + BN * DS);  // [2][BM], lse log2 e
  float* sDelta = sLse + 2 * BM;                          // [2][BM]

  const int Hkv = p.Hq / p.G, BH = p.B * Hkv;
  const int n0 = (blockIdx.x / BH) * BN;  // the first blocks hold the first keys: heaviest causal
  const int bh = blockIdx.x % BH, b = bh / Hkv, hk = bh % Hkv;
  const uint16_t* k = p.k + b * p.ks.b + hk * p.ks.h;
  const uint16_t* v = p.v + b * p.vs.b + hk * p.vs.h;
  const int m_tiles = (p.Tq + BM - 1) / BM;
  const int m_first = p.causal ? min(n0 / BM, m_tiles) : 0;  // earlier queries see none of these
  const int per_head = m_tiles - m_first, steps = p.G * per_head;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int a_row = lane & 15, a_col = (lane >> 4) * 8;
  const int b_row = (lane & 7) + ((lane >> 4) << 3), b_col = ((lane >> 3) & 1) * 8;
  const int bt_row = (lane & 7) + (((lane >> 3) & 1) << 3), bt_col = (lane >> 4) * 8;

  // Step i: query head hk G + i / per_head, query tile m_first + i % per_head.
  auto prefetch = [&](int i, int buf) {
    const int h = hk * p.G + i / per_head, m0 = (m_first + i % per_head) * BM;
    load_tile<BM, D, kThreads>(sQ + buf * BM * S, p.q + b * p.qs.b + h * p.qs.h, p.qs.t, m0, p.Tq);
    load_tile<BM, D, kThreads>(sdO + buf * BM * S, a.dout + b * a.dos.b + h * a.dos.h, a.dos.t, m0,
                               p.Tq);
    if (tid < BM) {
      // Rows past Tq (and a row that saw no key) get lse +inf: p = 0 there.
      const int64_t row = (int64_t{b} * p.Hq + h) * p.Tq + m0 + tid;
      const float l = m0 + tid < p.Tq ? a.lse[row] : -INFINITY;
      sLse[buf * BM + tid] = l == -INFINITY ? INFINITY : l * kLog2e;
      sDelta[buf * BM + tid] = m0 + tid < p.Tq ? a.delta[row] : 0.f;
    }
  };

  load_tile<BN, D, kThreads>(sK, k, p.ks.t, n0, p.Tk);
  load_tile<BN, D, kThreads>(sV, v, p.vs.t, n0, p.Tk);
  if (steps > 0) prefetch(0, 0);
  cp_async_commit();

  float dk[NO][4] = {}, dv[NO][4] = {};
  const int wkey = warp * 16;  // the warp's first key in the block
  for (int i = 0; i < steps; ++i) {
    const int buf = i & 1;
    if (i + 1 < steps) prefetch(i + 1, buf ^ 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const int h = hk * p.G + i / per_head, m0 = (m_first + i % per_head) * BM;
    const uint16_t* qt = sQ + buf * BM * S;
    const uint16_t* dot = sdO + buf * BM * S;
    const float* lse = sLse + buf * BM;
    const float* delta = sDelta + buf * BM;

    // S^T = K Q^T and dP^T = V dO^T: [16 keys, BM queries] each.
    float st[NQ][4] = {}, dpt[NQ][4] = {};
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
      uint32_t ka[4], va[4];
      ldsm_x4(ka, smem_addr(sK + (wkey + a_row) * S + ks * 16 + a_col));
      ldsm_x4(va, smem_addr(sV + (wkey + a_row) * S + ks * 16 + a_col));
#pragma unroll
      for (int qp = 0; qp < NQ / 2; ++qp) {
        uint32_t bb[4];
        ldsm_x4(bb, smem_addr(qt + (qp * 16 + b_row) * S + ks * 16 + b_col));
        mma16816<BF16>(st[2 * qp], ka, bb[0], bb[1]);
        mma16816<BF16>(st[2 * qp + 1], ka, bb[2], bb[3]);
        ldsm_x4(bb, smem_addr(dot + (qp * 16 + b_row) * S + ks * 16 + b_col));
        mma16816<BF16>(dpt[2 * qp], va, bb[0], bb[1]);
        mma16816<BF16>(dpt[2 * qp + 1], va, bb[2], bb[3]);
      }
    }

    // P^T and dS^T in place; keys past Tk and, near the diagonal, after the query get p = 0.
    const bool mask = n0 + BN > p.Tk || (p.causal && m0 < n0 + BN - 1);
#pragma unroll
    for (int nt = 0; nt < NQ; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int ql = nt * 8 + 2 * t + (e & 1);
        float pr = fast_exp2(fmaf(st[nt][e], p.scale_log2, -lse[ql]));
        if (mask) {
          const int key = n0 + wkey + g + (e >> 1) * 8;
          if (key >= p.Tk || (p.causal && key > m0 + ql)) pr = 0.f;
        }
        st[nt][e] = pr;
        dpt[nt][e] = pr * (dpt[nt][e] - delta[ql]);
      }

      // dV += P^T dO and dK += dS^T Q: A from the accumulators, B = dO, Q ([query][d], trans).
#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk) {
      const uint32_t pa[4] = {pack2<BF16>(st[2 * kk][0], st[2 * kk][1]),
                              pack2<BF16>(st[2 * kk][2], st[2 * kk][3]),
                              pack2<BF16>(st[2 * kk + 1][0], st[2 * kk + 1][1]),
                              pack2<BF16>(st[2 * kk + 1][2], st[2 * kk + 1][3])};
      const uint32_t da[4] = {pack2<BF16>(dpt[2 * kk][0], dpt[2 * kk][1]),
                              pack2<BF16>(dpt[2 * kk][2], dpt[2 * kk][3]),
                              pack2<BF16>(dpt[2 * kk + 1][0], dpt[2 * kk + 1][1]),
                              pack2<BF16>(dpt[2 * kk + 1][2], dpt[2 * kk + 1][3])};
      // dS^T rows for dQ, as the same rounded values dK uses.
      const int col = kk * 16 + 2 * t;
      *reinterpret_cast<uint32_t*>(sdS + (wkey + g) * DS + col) = da[0];
      *reinterpret_cast<uint32_t*>(sdS + (wkey + g + 8) * DS + col) = da[1];
      *reinterpret_cast<uint32_t*>(sdS + (wkey + g) * DS + col + 8) = da[2];
      *reinterpret_cast<uint32_t*>(sdS + (wkey + g + 8) * DS + col + 8) = da[3];
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t bb[4];
        ldsm_x4_trans(bb, smem_addr(dot + (kk * 16 + bt_row) * S + dp * 16 + bt_col));
        mma16816<BF16>(dv[2 * dp], pa, bb[0], bb[1]);
        mma16816<BF16>(dv[2 * dp + 1], pa, bb[2], bb[3]);
        ldsm_x4_trans(bb, smem_addr(qt + (kk * 16 + bt_row) * S + dp * 16 + bt_col));
        mma16816<BF16>(dk[2 * dp], da, bb[0], bb[1]);
        mma16816<BF16>(dk[2 * dp + 1], da, bb[2], bb[3]);
      }
    }
    __syncthreads();  // every warp's dS^T rows are in

    // dQ[rows rg, cols cp] += dS K over the block's keys: A = dS from dS^T (trans), B = K (trans).
    const int rg = warp % RG, cp = warp / RG;
    float dq[DW / 8][4] = {};
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      uint32_t da[4];
      ldsm_x4_trans(da, smem_addr(sdS + (kk * 16 + (lane & 7) + (lane >> 4) * 8) * DS + rg * 16 +
                                  ((lane >> 3) & 1) * 8));
#pragma unroll
      for (int dp = 0; dp < DW / 16; ++dp) {
        uint32_t bb[4];
        ldsm_x4_trans(bb, smem_addr(sK + (kk * 16 + bt_row) * S + cp * DW + dp * 16 + bt_col));
        mma16816<BF16>(dq[2 * dp], da, bb[0], bb[1]);
        mma16816<BF16>(dq[2 * dp + 1], da, bb[2], bb[3]);
      }
    }
    const int64_t qrow0 = (int64_t{b} * p.Hq + h) * p.Tq;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = m0 + rg * 16 + g + r * 8;
      if (row >= p.Tq) continue;
      float* dst = a.dq_acc + (qrow0 + row) * D + cp * DW + 2 * t;
#pragma unroll
      for (int dt = 0; dt < DW / 8; ++dt)
        atomicAdd(reinterpret_cast<float2*>(dst + dt * 8),
                  make_float2(dq[dt][2 * r], dq[dt][2 * r + 1]));
    }
    // No barrier here: the next step's copy targets the other buffers, and the barrier after
    // its wait orders these reads of sdS before the next writes.
  }
  cp_async_wait<0>();

  // dK = scale dS^T Q, dV as accumulated; one block owns these key rows.
  const int64_t krow0 = (int64_t{b} * Hkv + hk) * p.Tk;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = n0 + wkey + g + r * 8;
    if (key >= p.Tk) continue;
#pragma unroll
    for (int dt = 0; dt < NO; ++dt) {
      const int64_t off = (krow0 + key) * D + dt * 8 + 2 * t;
      *reinterpret_cast<uint32_t*>(a.dk + off) =
          pack2<BF16>(dk[dt][2 * r] * a.scale, dk[dt][2 * r + 1] * a.scale);
      *reinterpret_cast<uint32_t*>(a.dv + off) = pack2<BF16>(dv[dt][2 * r], dv[dt][2 * r + 1]);
    }
  }
}

// delta[row] = sum_d dout[row, d] out[row, d], a warp per row of out [rows, D] (contiguous).
template <bool BF16, int D>
__global__ void flash_bwd_delta_kernel(float* __restrict__ delta, const uint16_t* __restrict__ dout,
                                       BhtStrides dos, const uint16_t* __restrict__ out, int H,
                                       int T, int64_t rows) {
  const int lane = threadIdx.x % 32;
  for (int64_t row = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32; row < rows;
       row += int64_t{gridDim.x} * blockDim.x / 32) {
    const int64_t bh = row / T, tq = row % T;
    const uint16_t* d = dout + (bh / H) * dos.b + (bh % H) * dos.h + tq * dos.t;
    const uint16_t* o = out + row * D;
    float acc = 0.f;
    for (int c = lane * 2; c < D; c += 64) {
      const float2 x = unpack2<BF16>(*reinterpret_cast<const uint32_t*>(d + c));
      const float2 y = unpack2<BF16>(*reinterpret_cast<const uint32_t*>(o + c));
      acc += x.x * y.x + x.y * y.y;
    }
    for (int off = 16; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0) delta[row] = acc;
  }
}

// dq = scale dq_acc, rounded to the input dtype, two elements per thread.
template <bool BF16>
__global__ void flash_bwd_dq_kernel(uint16_t* __restrict__ dq, const float* __restrict__ acc,
                                    float scale, int64_t pairs) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < pairs;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float2 x = reinterpret_cast<const float2*>(acc)[i];
    reinterpret_cast<uint32_t*>(dq)[i] = pack2<BF16>(x.x * scale, x.y * scale);
  }
}

void flash_attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv,
                              const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& out, const Tensor& lse, double scale, bool is_causal) {
  const AttentionProblem p = attention_problem(q, k, v, scale, is_causal);
  cudaStream_t stream = current_stream();
  if (p.Tk == 0 || p.Tq == 0) {
    // No key or no query: every gradient is 0.
    for (const Tensor* g : {&dq, &dk, &dv})
      if (g->numel() > 0)
        TESSERA_CUDA_CHECK(cudaMemsetAsync(g->data_ptr(), 0, g->numel() * 2, stream));
    return;
  }
  const TensorOptions f32 = TensorOptions(kFloat32).with_device(q.device());
  const int64_t rows = int64_t{p.B} * p.Hq * p.Tq;
  Tensor delta = empty({rows}, f32);
  Tensor dq_acc = empty({rows * q.size(3)}, f32);
  TESSERA_CUDA_CHECK(cudaMemsetAsync(dq_acc.data_ptr(), 0, dq_acc.numel() * 4, stream));
  with_attention_config(q, "flash_attention_backward", [&]<bool BF16, int D>() {
    using Tile = BwdTile<D>;
    const auto* o = static_cast<const uint16_t*>(out.data_ptr());
    flash_bwd_delta_kernel<BF16, D><<<grid_size(rows * 32), kBlockSize, 0, stream>>>(
        delta.data_ptr<float>(), static_cast<const uint16_t*>(dout.data_ptr()), bht_strides(dout),
        o, p.Hq, p.Tq, rows);
    TESSERA_CUDA_CHECK_LAUNCH();

    const BwdArgs args{static_cast<const uint16_t*>(dout.data_ptr()),
                       bht_strides(dout),
                       lse.data_ptr<float>(),
                       delta.data_ptr<float>(),
                       dq_acc.data_ptr<float>(),
                       static_cast<uint16_t*>(dk.data_ptr()),
                       static_cast<uint16_t*>(dv.data_ptr()),
                       static_cast<float>(scale)};
    auto* kernel = &flash_bwd_kernel<BF16, D>;
    // Over 48 KiB of shared memory needs an opt-in (per device, so set on every launch).
    TESSERA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(Tile::kSmem)));
    const int64_t n_tiles = (p.Tk + Tile::kBN - 1) / Tile::kBN;
    const int64_t blocks = n_tiles * p.B * (p.Hq / p.G);
    kernel<<<static_cast<unsigned>(blocks), Tile::kThreads, Tile::kSmem, stream>>>(p, args);
    TESSERA_CUDA_CHECK_LAUNCH();

    const int64_t pairs = rows * D / 2;
    flash_bwd_dq_kernel<BF16><<<grid_size(pairs), kBlockSize, 0, stream>>>(
        static_cast<uint16_t*>(dq.data_ptr()), dq_acc.data_ptr<float>(), static_cast<float>(scale),
        pairs);
    TESSERA_CUDA_CHECK_LAUNCH();
  });
}

TESSERA_REGISTER_KERNEL(flash_attention_backward_kernel, DeviceType::CUDA,
                        &flash_attention_backward);

}  // namespace
}  // namespace tessera::cuda
