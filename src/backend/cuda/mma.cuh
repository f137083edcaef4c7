#pragma once
// Warp-level tensor-core building blocks (sm_80+ PTX) for kernels that tile through shared
// memory: 16-byte cp.async copies, ldmatrix and the m16n8k16 mma with float accumulators, for
// bfloat16 or float16 operands. Fragment layouts (g = lane / 4, t = lane % 4):
//   A 16x16 (4 regs): a0 (g, 2t..2t+1), a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..)
//   B 16x8  (2 regs): b0 (k 2t..2t+1, n g), b1 (k 2t+8.., n g)
//   C 16x8  (4 floats): c0, c1 (g, 2t..2t+1), c2, c3 (g+8, 2t..2t+1)
// so the C fragments of two adjacent 8-column tiles are, once packed, the A fragment of one
// 16-deep k step: attention feeds its probabilities to the next mma without shared memory.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace tessera::cuda::mma {

__device__ inline uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Copies 16 bytes global -> shared, or writes 16 zero bytes when !valid (src is not read).
__device__ inline void cp_async16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most N committed groups are still in flight.
template <int N>
__device__ inline void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Four 8x8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i, register i holds
// it (row lane / 4, columns 2 (lane % 4)..+1; with trans, the transposed matrix).
__device__ inline void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ inline void ldsm_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// c += a b for one 16x8x16 step; BF16 picks bfloat16 operands, else float16.
template <bool BF16>
__device__ inline void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (BF16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Two floats rounded to the 16-bit type and packed, lo in the low half (the lower column).
template <bool BF16>
__device__ inline uint32_t pack2(float lo, float hi) {
  uint32_t r;
  if constexpr (BF16) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    r = *reinterpret_cast<uint32_t*>(&h);
  } else {
    __half2 h = __floats2half2_rn(lo, hi);
    r = *reinterpret_cast<uint32_t*>(&h);
  }
  return r;
}

template <bool BF16>
__device__ inline float2 unpack2(uint32_t v) {
  if constexpr (BF16) {
    return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&v));
  } else {
    return __half22float2(*reinterpret_cast<__half2*>(&v));
  }
}

// Copies rows [row0, row0 + ROWS) of a [T, D] slab (row stride ld elements, 16-byte aligned)
// into a shared tile of row stride D + 8 (the 16-byte pad puts ldmatrix's 8 rows in distinct
// banks); rows >= T are zero-filled, so tails add nothing to the products.
template <int ROWS, int D, int THREADS>
__device__ inline void load_tile(uint16_t* tile, const uint16_t* src, int64_t ld, int row0, int T) {
  constexpr int kChunks = D / 8, kTotal = ROWS * kChunks;
#pragma unroll
  for (int i = 0; i < (kTotal + THREADS - 1) / THREADS; ++i) {
    const int c = i * THREADS + threadIdx.x;
    if (kTotal % THREADS != 0 && c >= kTotal) break;
    const int r = c / kChunks, col = (c % kChunks) * 8;
    const bool valid = row0 + r < T;
    const uint16_t* p = valid ? src + (row0 + r) * ld + col : src;
    cp_async16(smem_addr(tile + r * (D + 8) + col), p, valid);
  }
}

}  // namespace tessera::cuda::mma
