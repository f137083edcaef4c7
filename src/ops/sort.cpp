// sort, argsort and topk along a dim, as torch's. The order comes from the backend's
// sort_rows_kernel where it has one (CUDA), else from the host (a copy of the input moved so
// that dim is last, one row per thread chunk); the values are gathered from the input with it,
// so autograd comes from gather. Ties keep index order (a stable order for every call, so
// results do not depend on the thread count) and NaN counts as larger than every number, as in
// torch.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <type_traits>

#include "backend/common/index_kernels.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/core/dtype_dispatch.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/index.h"
#include "tessera/ops/op_info.h"
#include "tessera/ops/shape.h"
#include "tessera/ops/sort.h"
#include "tessera/runtime/op_scope.h"

namespace tessera {

namespace {

template <class T>
bool is_nan(T v) {
  if constexpr (std::is_integral_v<T>) return false;
  else return std::isnan(static_cast<double>(v));
}

// The first k indices of each row of the contiguous [rows, n] x in ascending (or descending)
// order, written to out [rows, k].
template <class T>
void order_rows(const T* x, int64_t rows, int64_t n, int64_t k, bool descending, int64_t* out) {
#pragma omp parallel for schedule(static) if (rows * n > 32768 && rows > 1)
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = x + r * n;
    // a before b: NaN largest, then by value, then by index.
    auto before = [row, descending](int64_t a, int64_t b) {
      const bool na = is_nan(row[a]), nb = is_nan(row[b]);
      if (na != nb) return descending ? na : nb;
      if (!na && row[a] != row[b]) return descending ? row[b] < row[a] : row[a] < row[b];
      return a < b;
    };
    std::vector<int64_t> idx(static_cast<size_t>(n));
    std::iota(idx.begin(), idx.end(), int64_t{0});
    if (k < n) std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), before);
    else std::sort(idx.begin(), idx.end(), before);
    std::copy(idx.begin(), idx.begin() + k, out + r * k);
  }
}

// order_along by the backend's sort_rows_kernel, on x's device.
Tensor order_on_device(const Tensor& x, int64_t dim, int64_t k, bool descending) {
  Tensor rows = transpose(x.detach(), dim, -1).contiguous();
  Tensor order = empty(rows.sizes(), TensorOptions(kInt64).with_device(x.device()));
  call_kernel<sort_rows_kernel>(x.device(), order, rows, descending);
  if (k < rows.size(-1)) order = order.narrow(-1, 0, k);
  return transpose(order, dim, -1).contiguous();
}

// Indices of the first k elements along dim in the requested order (int64, dim's size k): on
// the device where its backend has sort_rows_kernel, else on the host.
Tensor order_along(const Tensor& x, int64_t dim, int64_t k, bool descending, const char* op) {
  autograd::NoGradGuard no_grad;
  if (has_kernel<sort_rows_kernel>(x.device().type)) return order_on_device(x, dim, k, descending);
  Tensor rows = transpose(x.detach(), dim, -1).to(kCPU).contiguous();
  const int64_t n = rows.size(-1);
  Shape out_shape = rows.sizes();
  out_shape.back() = k;
  Tensor out = empty(out_shape, TensorOptions(kInt64));
  const int64_t count = n == 0 ? 0 : rows.numel() / n;
  dispatch<kAllTypes>(rows.dtype(), op, [&]<class T>() {
    order_rows<T>(rows.data_ptr<T>(), count, n, k, descending, out.data_ptr<int64_t>());
  });
  return transpose(out, dim, -1).to(x.device());
}

}  // namespace

// The order is always stable, and topk's always sorted (an order `sorted = false` allows).
std::tuple<Tensor, Tensor> sort(const Tensor& x, int64_t dim, bool descending,
                                [[maybe_unused]] bool stable) {
  TESSERA_OP_SCOPE("sort", x);
  return topk(x, x.dim() == 0 ? 1 : x.size(wrap_dim(dim, x.dim(), "sort")), dim, descending);
}

Tensor argsort(const Tensor& x, int64_t dim, bool descending, bool stable) {
  TESSERA_OP_SCOPE("argsort", x);
  autograd::NoGradGuard no_grad;
  return std::get<1>(sort(x, dim, descending, stable));
}

std::tuple<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest,
                                [[maybe_unused]] bool sorted) {
  TESSERA_OP_SCOPE("topk", x);
  if (x.dim() == 0) {  // as a 1-element vector (torch gives the element for k = 0 too)
    TESSERA_CHECK(k == 0 || k == 1, IndexError, "[topk] expected k <= 1 for a 0-d tensor, got ", k);
    auto [values, indices] = topk(x.reshape({1}), 1, 0, largest);
    return {values.reshape({}), indices.reshape({})};
  }
  dim = wrap_dim(dim, x.dim(), "topk");
  TESSERA_CHECK(k >= 0 && k <= x.size(dim), IndexError, "[topk] expected 0 <= k <= ",
                x.size(dim), " (the size of dim ", dim, "), got k = ", k);
  Tensor indices = order_along(x, dim, k, largest, "topk");
  return {gather(x, dim, indices), indices};
}

TESSERA_REGISTER_OPS({"sort", "index", kAllTypes, true}, {"argsort", "index", kAllTypes, false},
                     {"topk", "index", kAllTypes, true});

}  // namespace tessera
