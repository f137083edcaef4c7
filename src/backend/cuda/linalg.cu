// GEMM through cuBLASLt: float32 (full precision unless TF32 is allowed), bfloat16 and float16
// with float accumulation, float64; integers compute exactly in float64 and convert back.
//
// cuBLASLt is column-major. A row-major [R, C] matrix with row stride ld is, read column-major,
// its transpose [C, R] with the same ld, so out = a @ b is computed as out^T = b^T a^T: the
// first cuBLASLt operand is b, the second a, and the contiguous row-major out is the
// column-major out^T with ld N. Transposed operands (unit row stride) become op T instead of a
// copy. Heuristic results are cached per problem, since asking costs more than a small GEMM.
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

namespace tessera::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

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
  const auto addr = reinterpret_cast<uintptr_t>(t.data_ptr());
  o.alignment = static_cast<int>(std::min<uintptr_t>(256, addr & (~addr + 1)));
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

struct Problem {
  int device;
  DType dtype;
  int64_t batch, m, n, k;
  Operand a, b;  // cuBLASLt's first (our b) and second (our a) operands
  bool tf32;
  bool bias;  // a bias epilogue (its pointer is set per call)
  auto tie() const {
    return std::tie(device, dtype, batch, m, n, k, a.rows, a.cols, a.ld, a.batch_stride,
                    a.transpose, a.alignment, b.rows, b.cols, b.ld, b.batch_stride, b.transpose,
                    b.alignment, tf32, bias);
  }
  bool operator<(const Problem& o) const { return tie() < o.tie(); }
};

// The descriptors and chosen algorithm of one problem, created once.
struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
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
  if (p.bias) {  // column-major out^T has N rows: the bias runs down them, one per feature
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    TESSERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                        &epilogue, sizeof(epilogue)));
  }
  plan.a = make_layout(type, p.a.rows, p.a.cols, p.a.ld, p.batch, p.a.batch_stride);
  plan.b = make_layout(type, p.b.rows, p.b.cols, p.b.ld, p.batch, p.b.batch_stride);
  plan.c = make_layout(type, p.n, p.m, p.n, p.batch, p.m * p.n);

  cublasLtMatmulPreference_t pref;
  TESSERA_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t workspace = kWorkspaceBytes;
  TESSERA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace)));
  const uint32_t align_a = p.a.alignment, align_b = p.b.alignment, align_c = 256;
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
  TESSERA_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(cublaslt_handle(), plan.op, plan.a, plan.b,
                                                      plan.c, plan.c, pref, 1, &result, &found));
  cublasLtMatmulPreferenceDestroy(pref);
  TESSERA_CHECK(found > 0, NotImplementedError, "[gemm] cuBLASLt has no algorithm for ", p.dtype,
                " [", p.batch, ", ", p.m, ", ", p.k, "] @ [", p.k, ", ", p.n, "]");
  plan.algo = result.algo;
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

void lt_matmul(const Tensor& out, const Tensor& a, const Tensor& b, const Operand& va,
               const Operand& vb, const Tensor& bias) {
  Problem p{current_device(), out.dtype(), out.size(0), out.size(1), out.size(2), a.size(2),
            vb,               va,          g_allow_tf32.load(std::memory_order_relaxed),
            bias.defined()};
  const Plan& plan = plan_for(p);
  // A plan's descriptor is shared, so setting its bias pointer and enqueueing are one step.
  static std::mutex bias_mutex;
  std::unique_lock<std::mutex> bias_lock;
  if (bias.defined()) {
    bias_lock = std::unique_lock(bias_mutex);
    const void* bias_ptr = bias.data_ptr();
    TESSERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
        plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof(bias_ptr)));
  }
  const double one64 = 1, zero64 = 0;
  const float one32 = 1, zero32 = 0;
  const bool f64 = out.dtype() == kFloat64;
  const void* alpha = f64 ? static_cast<const void*>(&one64) : &one32;
  const void* beta = f64 ? static_cast<const void*>(&zero64) : &zero32;
  TESSERA_CUBLAS_CHECK(cublasLtMatmul(cublaslt_handle(), plan.op, alpha, b.data_ptr(), plan.a,
                                      a.data_ptr(), plan.b, beta, out.data_ptr(), plan.c,
                                      out.data_ptr(), plan.c, &plan.algo, workspace(),
                                      kWorkspaceBytes, current_stream()));
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
  lt_matmul(out, a, b, *va, *vb, bias);
}

void gemm(const Tensor& out, const Tensor& a, const Tensor& b) {
  gemm_with_bias(out, a, b, Tensor());
}

TESSERA_REGISTER_KERNEL(gemm_kernel, DeviceType::CUDA, &gemm);
TESSERA_REGISTER_KERNEL(gemm_bias_kernel, DeviceType::CUDA, &gemm_with_bias);

}  // namespace

void set_allow_tf32(bool allow) { g_allow_tf32.store(allow, std::memory_order_relaxed); }
bool allow_tf32() { return g_allow_tf32.load(std::memory_order_relaxed); }

}  // namespace tessera::cuda
