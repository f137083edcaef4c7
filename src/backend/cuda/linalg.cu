// GEMM through cuBLASLt: float32 (full precision unless TF32 is allowed), bfloat16 and float16
// with float accumulation, float64; integers compute exactly in float64 and convert back.
//
// cuBLASLt is column-major. A row-major [R, C] matrix with row stride ld is, read column-major,
// its transpose [C, R] with the same ld, so out = a @ b is computed as out^T = b^T a^T: the
// first cuBLASLt operand is b, the second a, and the contiguous row-major out is the
// column-major out^T with ld N. Transposed operands (unit row stride) become op T instead of a
// copy. Heuristic results are cached per problem, since asking costs more than a small GEMM.
//
// cuBLASLt's tensor-core kernels move 16 bytes at a time along a matrix's contiguous dim: when
// that dim's extent is not a multiple of 16 bytes, only align-1 kernels remain, several times
// slower (GPT-2's 50257-wide logits: 8.2 ms for the bf16 lm_head GEMM at 8 x 1024 tokens on an
// H100). A large GEMM therefore runs on zero-padded copies, as PyTorch Inductor's pad_mm does:
// the padded rows and columns of the result are dropped, zeros padded along k add nothing.
#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>

#include "backend/common/linalg_kernels.h"
#include "backend/cuda/context.h"
#include "backend/cuda/cuda_check.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/reduce.h"
#include "tessera/runtime/cuda.h"

namespace tessera::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;
constexpr int64_t kAlignBytes = 16;

int alignment_of(const void* ptr) {
  const auto addr = reinterpret_cast<uintptr_t>(ptr);
  return static_cast<int>(std::min<uintptr_t>(256, addr & (~addr + 1)));
}

// One operand as cuBLASLt sees it: a column-major matrix of rows x cols with leading dim ld,
// used transposed or not, batch stride in elements.
struct Operand {
  int64_t rows = 0, cols = 0, ld = 0, batch_stride = 0;
  bool transpose = false;
  int alignment = 0;
};

// t is [B, R, C] (row-major semantics); returns the column-major view of t^T ([C, R]) with the
// op that turns it into t^T, or nullopt when neither dim has unit stride.
std::optional<Operand> transposed_view(const Tensor& t, bool broadcast_batch) {
  const int64_t R = t.size(1), C = t.size(2), rs = t.stride(1), cs = t.stride(2);
  Operand o;
  o.batch_stride = broadcast_batch ? 0 : t.stride(0);
  if ((cs == 1 || C == 1) && (R == 1 || rs >= C)) {  // row-major: column-major [C, R], op N
    o.rows = C;
    o.cols = R;
    o.ld = std::max<int64_t>(R == 1 ? C : rs, std::max<int64_t>(C, 1));
  } else if ((rs == 1 || R == 1) && (C == 1 || cs >= R)) {  // column-major [R, C], op T
    o.rows = R;
    o.cols = C;
    o.ld = std::max<int64_t>(C == 1 ? R : cs, std::max<int64_t>(R, 1));
    o.transpose = true;
  } else {
    return std::nullopt;
  }
  o.alignment = alignment_of(t.data_ptr());
  return o;
}

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case kFloat32: return CUDA_R_32F;
    case kFloat64: return CUDA_R_64F;
    case kBFloat16: return CUDA_R_16BF;
    case kFloat16: return CUDA_R_16F;
    default: throw NotImplementedError(detail::str("[gemm] no cuBLASLt type for ", t));
  }
}

std::atomic<bool> g_allow_tf32{false};
std::atomic<int64_t> g_padded_gemms{0}, g_fused_row_sums{0}, g_fused_gelus{0};

// What the GEMM's epilogue does with the vector whose pointer is set per call.
enum class Epilogue {
  kNone,
  kBias,         // adds it to every row of out
  kRowSumsA,     // writes the row sums of a into it (cuBLASLt's BGRADB: its second operand is a)
  kBiasGelu,     // adds it, then applies the tanh GELU
  kBiasGeluAux,  // the same, also writing the GELU's input to the auxiliary matrix
};

// The epilogues whose callers fall back when cuBLASLt has no algorithm for them.
bool optional_epilogue(Epilogue e) { return e != Epilogue::kNone && e != Epilogue::kBias; }

cublasLtEpilogue_t lt_epilogue(Epilogue e) {
  switch (e) {
    case Epilogue::kBias: return CUBLASLT_EPILOGUE_BIAS;
    case Epilogue::kRowSumsA: return CUBLASLT_EPILOGUE_BGRADB;
    case Epilogue::kBiasGelu: return CUBLASLT_EPILOGUE_GELU_BIAS;
    case Epilogue::kBiasGeluAux: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    default: return CUBLASLT_EPILOGUE_DEFAULT;
  }
}

struct Problem {
  int device;
  DType dtype;
  int64_t batch, m, n, k;
  Operand a, b;  // cuBLASLt's first (our b) and second (our a) operands
  int c_alignment;
  bool tf32;
  Epilogue epilogue;
  auto tie() const {
    return std::tie(device, dtype, batch, m, n, k, a.rows, a.cols, a.ld, a.batch_stride,
                    a.transpose, a.alignment, b.rows, b.cols, b.ld, b.batch_stride, b.transpose,
                    b.alignment, c_alignment, tf32, epilogue);
  }
  bool operator<(const Problem& o) const { return tie() < o.tie(); }
};

// The descriptors and chosen algorithm of one problem, created once.
struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool found = false;  // false only for an optional epilogue cuBLASLt has no algorithm for
};

cublasLtMatrixLayout_t make_layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld,
                                   int64_t batch, int64_t batch_stride) {
  cublasLtMatrixLayout_t layout;
  TESSERA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, type, rows, cols, ld));
  if (batch > 1) {
    int32_t count = static_cast<int32_t>(batch);
    TESSERA_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
        layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    TESSERA_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
        layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &batch_stride, sizeof(batch_stride)));
  }
  return layout;
}

Plan make_plan(const Problem& p) {
  const cudaDataType_t type = cuda_type(p.dtype);
  const cublasComputeType_t compute = p.dtype == kFloat64 ? CUBLAS_COMPUTE_64F
                                      : (p.dtype == kFloat32 && p.tf32) ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                        : CUBLAS_COMPUTE_32F;
  const cudaDataType_t scale = p.dtype == kFloat64 ? CUDA_R_64F : CUDA_R_32F;
  Plan plan;
  TESSERA_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.op, compute, scale));
  cublasOperation_t ta = p.a.transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t tb = p.b.transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
  TESSERA_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  TESSERA_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  // Column-major out^T has N rows: a bias runs down them, one per feature. Its M columns are
  // the rows of a, the second operand's op: BGRADB sums that operand over k, one sum per column.
  if (p.epilogue != Epilogue::kNone) {
    const cublasLtEpilogue_t epilogue = lt_epilogue(p.epilogue);
    TESSERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                        &epilogue, sizeof(epilogue)));
  }
  if (p.epilogue == Epilogue::kBiasGeluAux) {  // the auxiliary matrix is laid out as out
    const int64_t aux_ld = p.n;
    TESSERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
        plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)));
  }
  plan.a = make_layout(type, p.a.rows, p.a.cols, p.a.ld, p.batch, p.a.batch_stride);
  plan.b = make_layout(type, p.b.rows, p.b.cols, p.b.ld, p.batch, p.b.batch_stride);
  plan.c = make_layout(type, p.n, p.m, p.n, p.batch, p.m * p.n);

  cublasLtMatmulPreference_t pref;
  TESSERA_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t workspace = kWorkspaceBytes;
  TESSERA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace)));
  const uint32_t align_a = p.a.alignment, align_b = p.b.alignment, align_c = p.c_alignment;
  TESSERA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof(align_a)));
  TESSERA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof(align_b)));
  TESSERA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof(align_c)));
  TESSERA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c, sizeof(align_c)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      cublaslt_handle(), plan.op, plan.a, plan.b, plan.c, plan.c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (optional_epilogue(p.epilogue) && (status != CUBLAS_STATUS_SUCCESS || found == 0))
    return plan;
  TESSERA_CUBLAS_CHECK(status);
  TESSERA_CHECK(found > 0, NotImplementedError, "[gemm] cuBLASLt has no algorithm for ", p.dtype,
                " [", p.batch, ", ", p.m, ", ", p.k, "] @ [", p.k, ", ", p.n, "]");
  plan.algo = result.algo;
  plan.found = true;
  return plan;
}

const Plan& plan_for(const Problem& p) {
  static std::mutex mutex;
  static std::map<Problem, Plan> plans;
  std::lock_guard lock(mutex);
  auto it = plans.find(p);
  if (it == plans.end()) it = plans.emplace(p, make_plan(p)).first;
  return it->second;
}

void* workspace() {
  static void* ptrs[16] = {};
  static std::mutex mutex;
  std::lock_guard lock(mutex);
  void*& w = ptrs[current_device()];
  if (!w) TESSERA_CUDA_CHECK(cudaMalloc(&w, kWorkspaceBytes));
  return w;
}

// out = a @ b with the epilogue's vector (bias added, or a's row sums written) and auxiliary
// matrix (the GELU's input); false, with nothing enqueued, when cuBLASLt has no algorithm for
// an optional epilogue.
bool lt_matmul(const Tensor& out, const Tensor& a, const Tensor& b, const Operand& va,
               const Operand& vb, const Tensor& vector, Epilogue epilogue,
               const Tensor& aux = Tensor()) {
  void* dst = out.data_ptr();
  Problem p{current_device(), out.dtype(), out.size(0), out.size(1), out.size(2), a.size(2), vb, va,
            alignment_of(dst), g_allow_tf32.load(std::memory_order_relaxed), epilogue};
  const Plan& plan = plan_for(p);
  if (!plan.found) return false;
  // A plan's descriptor is shared, so setting its vector pointer and enqueueing are one step.
  static std::mutex bias_mutex;
  std::unique_lock<std::mutex> bias_lock;
  if (epilogue != Epilogue::kNone) {
    bias_lock = std::unique_lock(bias_mutex);
    const void* bias_ptr = vector.data_ptr();
    TESSERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
        plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof(bias_ptr)));
    if (epilogue == Epilogue::kBiasGeluAux) {
      void* aux_ptr = aux.data_ptr();
      TESSERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
          plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux_ptr, sizeof(aux_ptr)));
    }
  }
  const double one64 = 1, zero64 = 0;
  const float one32 = 1, zero32 = 0;
  const bool f64 = out.dtype() == kFloat64;
  const void* alpha = f64 ? static_cast<const void*>(&one64) : &one32;
  const void* beta = f64 ? static_cast<const void*>(&zero64) : &zero32;
  TESSERA_CUBLAS_CHECK(cublasLtMatmul(cublaslt_handle(), plan.op, alpha, b.data_ptr(), plan.a,
                                      a.data_ptr(), plan.b, beta, dst, plan.c, dst, plan.c,
                                      &plan.algo, workspace(), kWorkspaceBytes, current_stream()));
  return true;
}

int64_t round_up_to_16_bytes(int64_t n, size_t es) {
  const auto per = static_cast<int64_t>(kAlignBytes / es);
  return (n + per - 1) / per * per;
}

// dst = src for [B, R, C] tensors whose rows are contiguous and evenly spaced: one pitched
// cudaMemcpy2D, several times faster than the strided copy kernel on the 0.8 GB of GPT-2's
// padded logits. Other layouts take copy_.
void copy_rows(const Tensor& dst, const Tensor& src) {
  const int64_t B = src.size(0), R = src.size(1), C = src.size(2);
  auto pitched = [&](const Tensor& t) {
    return t.stride(2) == 1 && t.stride(1) >= C && (B == 1 || t.stride(0) == R * t.stride(1));
  };
  if (!pitched(dst) || !pitched(src)) {
    Tensor d = dst;
    d.copy_(src);
    return;
  }
  const size_t es = src.element_size();
  TESSERA_CUDA_CHECK(cudaMemcpy2DAsync(dst.data_ptr(), dst.stride(1) * es, src.data_ptr(),
                                       src.stride(1) * es, C * es, B * R,
                                       cudaMemcpyDeviceToDevice, current_stream()));
}

// t [B, R, C] copied to [B, rows, cols] with zeros in its new rows and columns, in t's memory
// order (a transposed t stays transposed, so the copy reads and writes along its rows).
Tensor zero_padded(const Tensor& t, int64_t rows, int64_t cols) {
  if (t.size(1) > 1 && t.stride(1) == 1 && t.stride(2) != 1)
    return zero_padded(t.transpose(1, 2), cols, rows).transpose(1, 2);
  const int64_t R = t.size(1), C = t.size(2);
  if (R == rows && C == cols) return t;
  Tensor buf = empty({t.size(0), rows, cols}, TensorOptions(t.dtype()).with_device(t.device()));
  copy_rows(buf.narrow(1, 0, R).narrow(2, 0, C), t);
  if (cols > C) {
    Tensor strip = buf.narrow(2, C, cols - C);
    zero_(strip);
  }
  if (rows > R) {
    Tensor strip = buf.narrow(1, R, rows - R);
    zero_(strip);
  }
  return buf;
}

void gemm_with_bias(const Tensor& out, const Tensor& a_in, const Tensor& b_in,
                    const Tensor& bias);

// out = a @ b (+ bias) through zero-padded copies when a matrix's contiguous dim is misaligned
// and the GEMM is large enough to pay for the copies: an H100 moves an element in and out in
// the time of ~500 bf16 tensor-core multiply-adds, and the align-1 kernels are ~6x slower, so
// 16-bit GEMMs pad at 128 multiply-adds per element copied (a lm_head at 8192 tokens has ~700;
// a 70-token prefill's 64 or the T = 1001 attention scores' 113 keep the align-1 kernel), wider
// types at 64. Returns false where the GEMM runs as it is.
bool padded_gemm(const Tensor& out, const Tensor& a, const Tensor& b, const Operand& va,
                 const Operand& vb, const Tensor& bias) {
  const int64_t B = out.size(0), M = out.size(1), N = out.size(2), K = a.size(2);
  const size_t es = out.element_size();
  auto padded = [&](int64_t n, bool contiguous_dim) {
    return contiguous_dim ? round_up_to_16_bytes(n, es) : n;
  };
  const int64_t M2 = padded(M, va.transpose && M > 1);
  const int64_t K2 = padded(K, !va.transpose || vb.transpose), N2 = padded(N, true);
  if (M2 == M && N2 == N && K2 == K) return false;
  const int64_t Bb = b.size(0);
  const int64_t copied = (M2 != M || K2 != K ? B * M * K : 0) +
                         (K2 != K || N2 != N ? Bb * K * N : 0) +
                         (M2 != M || N2 != N ? B * M * N : 0);
  const int64_t macs = B * M * N * K;
  const int64_t macs_per_copy = es == 2 ? 128 : 64;
  if (macs < (int64_t{1} << 24) || macs < macs_per_copy * copied) return false;
  Tensor c = M2 == M && N2 == N
                 ? out
                 : empty({B, M2, N2}, TensorOptions(out.dtype()).with_device(out.device()));
  Tensor bias2 = bias.defined() ? zero_padded(bias.reshape({1, 1, N}), 1, N2).reshape({N2}) : bias;
  gemm_with_bias(c, zero_padded(a, M2, K2), zero_padded(b, K2, N2), bias2);
  g_padded_gemms.fetch_add(1, std::memory_order_relaxed);
  if (!c.is_same(out)) copy_rows(out, c.narrow(1, 0, M).narrow(2, 0, N));
  return true;
}

// out = a @ b (+ bias along each row when defined).
void gemm_with_bias(const Tensor& out, const Tensor& a_in, const Tensor& b_in,
                    const Tensor& bias) {
  autograd::NoGradGuard no_grad;
  if (out.numel() == 0) return;
  if (a_in.size(2) == 0) {
    Tensor o = out;
    if (bias.defined()) o.copy_(bias.expand(out.sizes()));
    else fill_(o, 0);
    return;
  }
  const DType dt = out.dtype();
  if (!is_floating(dt)) {  // integers: exact in float64 up to 2^53
    TESSERA_ASSERT(!bias.defined());
    Tensor tmp = empty(out.sizes(), TensorOptions(kFloat64).with_device(out.device()));
    gemm_with_bias(tmp, cast(a_in, kFloat64), cast(b_in, kFloat64), Tensor());
    Tensor o = out;
    copy_(o, tmp);
    return;
  }
  const bool broadcast_b = b_in.size(0) == 1 && out.size(0) > 1;
  auto va = transposed_view(a_in, false);
  Tensor a = va ? a_in : contiguous(a_in);
  if (!va) va = transposed_view(a, false);
  auto vb = transposed_view(b_in, broadcast_b);
  Tensor b = vb ? b_in : contiguous(b_in);
  if (!vb) vb = transposed_view(b, broadcast_b);
  if (!padded_gemm(out, a, b, *va, *vb, bias))
    lt_matmul(out, a, b, *va, *vb, bias, bias.defined() ? Epilogue::kBias : Epilogue::kNone);
}

void gemm(const Tensor& out, const Tensor& a, const Tensor& b) {
  gemm_with_bias(out, a, b, Tensor());
}

// out = a @ b and a_sums = a's row sums, in one cuBLASLt call where it has an algorithm for the
// shapes as they are (16-bit or float32, no padding needed: the bias gradients of GPT-2's
// linears, 0.8 ms of column sums per step on an H100 otherwise); else a GEMM and a sum.
// Whether out = a @ b (one batch) can take an optional epilogue as it is: 16-bit or float32,
// both operands strided as cuBLASLt reads them, every dim a multiple of 16 bytes (no padding).
bool epilogue_fits(const Tensor& out, const Tensor& a, const std::optional<Operand>& va,
                   const std::optional<Operand>& vb) {
  const DType dt = out.dtype();
  const size_t es = out.element_size();
  auto aligned = [&](int64_t n) { return round_up_to_16_bytes(n, es) == n; };
  return out.numel() > 0 && a.size(2) > 0 &&
         (dt == kBFloat16 || dt == kFloat16 || dt == kFloat32) && va && vb &&
         aligned(out.size(1)) && aligned(out.size(2)) && aligned(a.size(2));
}

void gemm_row_sums(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& a_sums) {
  autograd::NoGradGuard no_grad;
  const auto va = transposed_view(a, false), vb = transposed_view(b, false);
  if (epilogue_fits(out, a, va, vb) &&
      lt_matmul(out, a, b, *va, *vb, a_sums, Epilogue::kRowSumsA)) {
    g_fused_row_sums.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  gemm_with_bias(out, a, b, Tensor());
  Tensor sums = a_sums;
  sums.copy_(sum(a.select(0, 0), {1}));
}

// out = gelu_tanh(a @ b + bias) and pre = a @ b + bias (when defined) in one cuBLASLt call
// (GELU_AUX_BIAS, or GELU_BIAS without pre) where it has an algorithm for the shapes as they are
// (GPT-2's MLP: the GELU pass over [8192, 3072] was 43 us of a 66 us GEMM on an H100); else
// the bias GEMM and a GELU pass.
void gemm_bias_gelu(const Tensor& out, const Tensor& pre, const Tensor& a, const Tensor& b,
                    const Tensor& bias) {
  autograd::NoGradGuard no_grad;
  const auto va = transposed_view(a, false), vb = transposed_view(b, false);
  const bool as_is = epilogue_fits(out, a, va, vb) &&
                     (!pre.defined() || out.size(2) % 8 == 0);  // cuBLASLt's aux ld rule
  const Epilogue epilogue = pre.defined() ? Epilogue::kBiasGeluAux : Epilogue::kBiasGelu;
  if (as_is && lt_matmul(out, a, b, *va, *vb, bias, epilogue, pre)) {
    g_fused_gelus.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  gemm_bias_then_gelu(out, pre, a, b, bias, [](const Tensor& p, const Tensor& x, const Tensor& w,
                                                 const Tensor& add) {
    if (p.dtype() != kFloat64) return gemm_with_bias(p, x, w, add);
    gemm_with_bias(p, x, w, Tensor());  // no bias epilogue in float64
    Tensor(p).add_(add);
  });
}

TESSERA_REGISTER_KERNEL(gemm_kernel, DeviceType::CUDA, &gemm);
TESSERA_REGISTER_KERNEL(gemm_bias_gelu_kernel, DeviceType::CUDA, &gemm_bias_gelu);
TESSERA_REGISTER_KERNEL(gemm_bias_kernel, DeviceType::CUDA, &gemm_with_bias);
TESSERA_REGISTER_KERNEL(gemm_row_sums_kernel, DeviceType::CUDA, &gemm_row_sums);

}  // namespace

void set_allow_tf32(bool allow) { g_allow_tf32.store(allow, std::memory_order_relaxed); }
bool allow_tf32() { return g_allow_tf32.load(std::memory_order_relaxed); }
GemmStats gemm_stats() {
  return {g_padded_gemms.load(std::memory_order_relaxed),
          g_fused_row_sums.load(std::memory_order_relaxed),
          g_fused_gelus.load(std::memory_order_relaxed)};
}

}  // namespace tessera::cuda
