// GEMM: oneDNN matmul for float32 and bfloat16, OpenBLAS dgemm for float64; other dtypes
// compute in float32 (float16) or float64 (integers) and convert back.
#include <cblas.h>

#include <dnnl.hpp>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "backend/common/elementwise_kernels.h"
#include "backend/common/linalg_kernels.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/elementwise.h"
#include "tessera/runtime/profiler.h"

namespace tessera::cpu {
namespace {

dnnl::engine& engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

dnnl::memory::data_type dnnl_type(DType t) {
  switch (t) {
    case kFloat32: return dnnl::memory::data_type::f32;
    case kBFloat16: return dnnl::memory::data_type::bf16;
    case kFloat16: return dnnl::memory::data_type::f16;
    default: return dnnl::memory::data_type::undef;
  }
}

// Strides oneDNN accepts for a size-1 dim are arbitrary; give it a conventional value.
dnnl::memory::desc desc3(const Tensor& t) {
  dnnl::memory::dims dims(t.sizes().begin(), t.sizes().end());
  dnnl::memory::dims strides(t.strides().begin(), t.strides().end());
  if (dims[0] == 1) strides[0] = dims[1] * dims[2];
  return dnnl::memory::desc(dims, dnnl_type(t.dtype()), strides);
}

// True when the last two dims form a row-major or column-major matrix a GEMM reads in place.
bool gemm_layout(const Tensor& t) {
  const int64_t rows = t.sizes()[1], cols = t.sizes()[2], rs = t.strides()[1], cs = t.strides()[2];
  bool row_major = (cs == 1 || cols == 1) && (rows == 1 || rs >= cols);
  bool col_major = (rs == 1 || rows == 1) && (cols == 1 || cs >= rows);
  return row_major || col_major;
}

// out = a @ b (+ bias [N] on every row) by one oneDNN matmul on these operand descriptions.
void run_matmul(const Tensor& out, const Tensor& a, const dnnl::memory& weights,
                const Tensor* bias, const dnnl::memory::desc& a_md,
                const dnnl::memory::desc& c_md) {
  const dnnl::memory::desc w_md = weights.get_desc();
  dnnl::memory::desc bias_md;
  if (bias) {
    dnnl::memory::dims dims(c_md.dims().size(), 1);
    dims.back() = out.size(2);
    bias_md = dnnl::memory::desc(dims, dnnl_type(bias->dtype()),
                                 dims.size() == 2 ? dnnl::memory::format_tag::ab
                                                  : dnnl::memory::format_tag::abc);
  }
  dnnl::matmul::primitive_desc pd(bias ? dnnl::matmul::desc(a_md, w_md, bias_md, c_md)
                                       : dnnl::matmul::desc(a_md, w_md, c_md),
                                  engine());
  dnnl::matmul prim(pd);
  dnnl::stream stream(engine());
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, dnnl::memory(a_md, engine(), a.data_ptr())},
      {DNNL_ARG_WEIGHTS, weights},
      {DNNL_ARG_DST, dnnl::memory(c_md, engine(), out.data_ptr())}};
  if (bias) args.emplace(DNNL_ARG_BIAS, dnnl::memory(bias_md, engine(), bias->data_ptr()));
  prim.execute(stream, args);
  stream.wait();
}

// A weight read again unchanged (its storage marked frozen by linear) in a bf16 GEMM is reordered
// once into the VNNI-blocked layout of oneDNN's bf16 kernels and kept with its storage until its
// version changes. Plain weights are copied into that layout inside every call, which dominates
// small-batch GEMMs (a 1-row lm_head: 3.7 ms plain, 0.5 ms packed, on avx512_bf16).
// One entry per view and layout: a forward reads W transposed, a backward through it W.
struct PackedWeights {
  struct Entry {
    uint32_t version;
    int64_t offset;
    dnnl::memory::desc plain, layout;  // the view that was packed, and its packed layout
    Tensor bytes;  // the packed copy, from Tessera's allocator so memory stats count it
  };
  std::mutex mutex;
  std::vector<Entry> entries;
};

dnnl::memory::desc desc2(const Tensor& t) {
  return dnnl::memory::desc({t.size(1), t.size(2)}, dnnl_type(t.dtype()),
                            {t.strides()[1], t.strides()[2]});
}

// b's copy in `layout`, packed on first use.
dnnl::memory packed_weights(const Tensor& b, const dnnl::memory::desc& layout) {
  const dnnl::memory::desc plain = desc2(b);
  auto cache = b.impl()->storage()->derived_layout<PackedWeights>();
  std::lock_guard<std::mutex> lock(cache->mutex);
  const uint32_t version = b.impl()->storage()->generation();  // every write, tracked or not
  std::erase_if(cache->entries, [&](const auto& e) { return e.version != version; });
  for (const auto& e : cache->entries)
    if (e.offset == b.storage_offset() && e.plain == plain && e.layout == layout)
      return dnnl::memory(layout, engine(), e.bytes.data_ptr());
  profiler::RecordFunction record("gemm_weight_pack");
  Tensor bytes = empty({static_cast<int64_t>(layout.get_size())}, kUInt8);
  dnnl::memory src(plain, engine(), b.data_ptr()), dst(layout, engine(), bytes.data_ptr());
  dnnl::stream stream(engine());
  dnnl::reorder(src, dst).execute(stream, src, dst);
  stream.wait();
  cache->entries.push_back({version, b.storage_offset(), plain, layout, bytes});
  return dst;
}

// Whether oneDNN has a bf16 matmul on blocked weights here (avx512_bf16 and later), asked once:
// elsewhere every packed attempt would cost a failed primitive creation and its exception.
bool has_blocked_bf16_matmul() {
  static const bool supported = [] {
    using tag = dnnl::memory::format_tag;
    const auto bf16 = dnnl::memory::data_type::bf16;
    try {
      dnnl::matmul::primitive_desc(
          dnnl::matmul::desc(dnnl::memory::desc({16, 64}, bf16, tag::ab),
                             dnnl::memory::desc({64, 64}, bf16, tag::BA16a64b2a),
                             dnnl::memory::desc({16, 64}, bf16, tag::ab)),
          engine());
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return supported;
}

// The bf16 GEMM of one matrix by a frozen weight, on the weight's packed copy; false where this
// CPU has no blocked bf16 kernel (then the plain path runs).
bool packed_weight_matmul(const Tensor& out, const Tensor& a, const Tensor& b,
                          const Tensor* bias) {
  if (out.dtype() != kBFloat16 || a.size(0) != 1 || b.size(0) != 1 ||
      !b.impl()->storage()->is_frozen_weight() || !has_blocked_bf16_matmul())
    return false;
  const int64_t K = b.size(1), N = b.size(2);
  using tag = dnnl::memory::format_tag;  // N blocked by 64 (32, 16 for narrow weights), K by pairs
  const tag blocked = N >= 64 ? tag::BA16a64b2a : N >= 32 ? tag::BA16a32b2a : tag::BA16a16b2a;
  try {
    const dnnl::memory::desc layout({K, N}, dnnl::memory::data_type::bf16, blocked);
    run_matmul(out, a, packed_weights(b, layout), bias, desc2(a), desc2(out));
    return true;
  } catch (const dnnl::error&) {
    return false;
  }
}

// out = a @ b (+ bias [N] on every row when given, in the GEMM's epilogue).
bool onednn_matmul(const Tensor& out, const Tensor& a, const Tensor& b,
                   const Tensor* bias = nullptr) {
  if (packed_weight_matmul(out, a, b, bias)) return true;
  try {
    const dnnl::memory::desc b_md = desc3(b);
    run_matmul(out, a, dnnl::memory(b_md, engine(), b.data_ptr()), bias, desc3(a), desc3(out));
    return true;
  } catch (const dnnl::error&) {
    return false;  // layout or dtype this oneDNN build has no implementation for
  }
}

void blas_dgemm(const Tensor& out, const Tensor& a, const Tensor& b) {
  const int64_t B = out.size(0), M = out.size(1), N = out.size(2), K = a.size(2);
  auto layout = [](const Tensor& t, CBLAS_TRANSPOSE& trans, int64_t& ld) {
    // Row-major view of the last two dims: unit column stride = no transpose.
    const int64_t rows = t.sizes()[1], cols = t.sizes()[2];
    if ((t.strides()[2] == 1 || cols == 1) && (rows == 1 || t.strides()[1] >= cols)) {
      trans = CblasNoTrans;
      ld = std::max<int64_t>(rows == 1 ? cols : t.strides()[1], 1);
    } else {
      trans = CblasTrans;
      ld = std::max<int64_t>(cols == 1 ? rows : t.strides()[2], 1);
    }
  };
  CBLAS_TRANSPOSE ta, tb;
  int64_t lda, ldb;
  layout(a, ta, lda);
  layout(b, tb, ldb);
  const double* ap = a.data_ptr<double>();
  const double* bp = b.data_ptr<double>();
  double* cp = out.data_ptr<double>();
  for (int64_t i = 0; i < B; ++i) {
    const double* bi = bp + (b.size(0) == 1 ? 0 : i * b.strides()[0]);
    cblas_dgemm(CblasRowMajor, ta, tb, M, N, K, 1.0, ap + i * a.strides()[0], lda, bi, ldb, 0.0,
                cp + i * M * N, N);
  }
}

void gemm(const Tensor& out, const Tensor& a_in, const Tensor& b_in) {
  autograd::NoGradGuard no_grad;
  if (out.numel() == 0) return;
  if (a_in.size(2) == 0) {
    Tensor o = out;
    fill_(o, 0);
    return;
  }
  Tensor a = gemm_layout(a_in) ? a_in : contiguous(a_in);
  Tensor b = gemm_layout(b_in) ? b_in : contiguous(b_in);
  const DType dt = out.dtype();
  if ((dt == kFloat32 || dt == kBFloat16 || dt == kFloat16) && onednn_matmul(out, a, b)) return;
  if (dt == kFloat32 && onednn_matmul(out, contiguous(a), contiguous(b))) return;
  if (dt == kFloat64) return blas_dgemm(out, a, b);
  // Fallbacks: float16 (no native path here) via float32, integers exactly via float64.
  DType compute = is_floating(dt) ? kFloat32 : kFloat64;
  Tensor tmp = empty(out.sizes(), compute);
  gemm(tmp, cast(a, compute), cast(b, compute));
  Tensor o = out;
  copy_(o, tmp);
}

// linear's GEMM with its bias in oneDNN's epilogue (one pass over the output instead of two).
void gemm_bias(const Tensor& out, const Tensor& a_in, const Tensor& b_in, const Tensor& bias) {
  autograd::NoGradGuard no_grad;
  if (out.numel() == 0) return;
  Tensor a = gemm_layout(a_in) ? a_in : contiguous(a_in);
  Tensor b = gemm_layout(b_in) ? b_in : contiguous(b_in);
  if (a.size(2) > 0 && onednn_matmul(out, a, b, &bias)) return;
  gemm(out, a, b);  // no oneDNN implementation for this layout or dtype: GEMM, then the add
  Tensor o = out;
  o.add_(bias);
}

// linear_gelu's kernel as its two passes (oneDNN's GELU post-op would not give the backward
// its input): one kernel on every backend keeps linear_gelu's autograd the same everywhere.
void gemm_bias_gelu(const Tensor& out, const Tensor& pre, const Tensor& a, const Tensor& b,
                    const Tensor& bias) {
  autograd::NoGradGuard no_grad;
  gemm_bias_then_gelu(out, pre, a, b, bias, gemm_bias);
}

TESSERA_REGISTER_KERNEL(gemm_kernel, DeviceType::CPU, &gemm);
TESSERA_REGISTER_KERNEL(gemm_bias_kernel, DeviceType::CPU, &gemm_bias);
TESSERA_REGISTER_KERNEL(gemm_bias_gelu_kernel, DeviceType::CPU, &gemm_bias_gelu);

}  // namespace
}  // namespace tessera::cpu
