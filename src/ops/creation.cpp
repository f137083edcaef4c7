// Tensor factories and random sampling.
#include "tessera/ops/creation.h"

#include <cmath>

#include "backend/common/random_kernels.h"
#include "ops/op_utils.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/ops/op_info.h"
#include "tessera/ops/shape.h"
#include "tessera/runtime/op_scope.h"

namespace tessera {

using namespace detail;

namespace {
// Ops that compute their values on the host move them to the requested device here.
Tensor finish(Tensor t, const TensorOptions& o) {
  if (t.device() != o.device) t = t.to(o.device);
  if (o.requires_grad) t.requires_grad_(true);
  return t;
}

// The device's allocator, or page-locked host memory when options ask for it.
Allocator* allocator_for(const TensorOptions& o) {
  if (!o.pinned_memory) return get_allocator(o.device.type);
  TESSERA_CHECK(o.device.is_cpu(), ValueError,
                "[pin_memory] expected pinned memory for a CPU tensor, got device ", o.device);
  Allocator* pinned = pinned_host_allocator();
  TESSERA_CHECK(pinned != nullptr && device_count(DeviceType::CUDA) > 0, RuntimeError,
                "[pin_memory] expected a CUDA device: page-locked host memory is for transfers "
                "to one, and there is none here");
  return pinned;
}
}  // namespace

Tensor empty_strided(const Shape& shape, const Shape& strides, TensorOptions options) {
  TESSERA_OP_SCOPE("empty_strided");
  TESSERA_CHECK(shape.size() == strides.size(), ValueError,
                "[empty_strided] expected as many strides as sizes, got ", shape, " and ", strides);
  for (size_t i = 0; i < shape.size(); ++i)
    TESSERA_CHECK(shape[i] >= 0 && strides[i] >= 0, ValueError,
                  "[empty] expected non-negative sizes and strides, got ", shape, " and ", strides);
  const int64_t extent = view_extent(shape, strides, "empty");
  int64_t nbytes = 0;
  TESSERA_CHECK(
      !__builtin_mul_overflow(extent, static_cast<int64_t>(itemsize(options.dtype)), &nbytes),
      ValueError, "[empty] expected fewer than 2^63 bytes, got shape ", shape);
  auto storage = std::make_shared<StorageImpl>(static_cast<size_t>(nbytes), options.device,
                                               allocator_for(options));
  auto impl = std::make_shared<TensorImpl>(std::move(storage), shape, strides, 0, options.dtype);
  impl->is_inference = autograd::InferenceMode::is_enabled();
  return finish(Tensor(std::move(impl)), options);
}

Tensor empty(const Shape& shape, TensorOptions options) {
  TESSERA_OP_SCOPE("empty");
  shape_numel(shape);  // validates sizes
  return empty_strided(shape, contiguous_strides(shape), options);
}

Tensor full(const Shape& shape, const Scalar& value, TensorOptions options) {
  TESSERA_OP_SCOPE("full");
  bool rg = options.requires_grad;
  options.requires_grad = false;
  Tensor t = empty(shape, options);
  call_kernel<fill_kernel>(t.device(), t, value);
  if (rg) t.requires_grad_(true);
  return t;
}

Tensor zeros(const Shape& shape, TensorOptions options) {
  TESSERA_OP_SCOPE("zeros");
  return full(shape, 0, options);
}
Tensor ones(const Shape& shape, TensorOptions options) {
  TESSERA_OP_SCOPE("ones");
  return full(shape, 1, options);
}
Tensor scalar_tensor(const Scalar& value, TensorOptions options) {
  TESSERA_OP_SCOPE("scalar_tensor");
  return full({}, value, options);
}

template <class T>
Tensor tensor(const std::vector<T>& values, std::optional<Shape> shape) {
  TESSERA_OP_SCOPE("tensor");
  Shape s = shape.value_or(Shape{static_cast<int64_t>(values.size())});
  TESSERA_CHECK(shape_numel(s) == static_cast<int64_t>(values.size()), ValueError,
                "[tensor] expected ", shape_numel(s), " values for shape ", s, ", got ",
                values.size());
  Tensor t = empty(s, TensorOptions(dtype_of<T>));
  T* p = t.data_ptr<T>();
  for (size_t i = 0; i < values.size(); ++i) p[i] = values[i];
  return t;
}
template Tensor tensor<float>(const std::vector<float>&, std::optional<Shape>);
template Tensor tensor<double>(const std::vector<double>&, std::optional<Shape>);
template Tensor tensor<int64_t>(const std::vector<int64_t>&, std::optional<Shape>);
template Tensor tensor<int32_t>(const std::vector<int32_t>&, std::optional<Shape>);
template Tensor tensor<uint8_t>(const std::vector<uint8_t>&, std::optional<Shape>);
template Tensor tensor<Half>(const std::vector<Half>&, std::optional<Shape>);
template Tensor tensor<BFloat16>(const std::vector<BFloat16>&, std::optional<Shape>);

Tensor tensor(std::initializer_list<double> values, TensorOptions options) {
  Tensor t = tensor(std::vector<double>(values));
  return finish(cast_raw(t, options.dtype), options.with_requires_grad(options.requires_grad));
}

Tensor arange(const Scalar& end, std::optional<DType> dtype) { return arange(0, end, 1, dtype); }

Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step,
              std::optional<DType> dtype) {
  TESSERA_OP_SCOPE("arange");
  bool all_int = !start.is_floating() && !end.is_floating() && !step.is_floating();
  DType dt = dtype.value_or(all_int ? kInt64 : kFloat32);
  double s = start.to_double(), e = end.to_double(), st = step.to_double();
  TESSERA_CHECK(st != 0, ValueError, "[arange] expected a non-zero step, got 0");
  TESSERA_CHECK((e - s) * st >= 0, ValueError,
                "[arange] expected end on the side of start "
                "the step moves to, got start ",
                start, ", end ", end, ", step ", step);
  int64_t n = static_cast<int64_t>(std::ceil((e - s) / st));
  Tensor t = empty({n}, TensorOptions(dt));
  dispatch<kNumericTypes>(dt, "arange", [&]<class T>() {
    T* p = t.data_ptr<T>();
    for (int64_t i = 0; i < n; ++i) {
      if (all_int)
        p[i] = static_cast<T>(start.to_int() + i * step.to_int());
      else
        p[i] = static_cast<T>(s + static_cast<double>(i) * st);
    }
  });
  return t;
}

Tensor linspace(double start, double end, int64_t steps, TensorOptions options) {
  TESSERA_OP_SCOPE("linspace");
  TESSERA_CHECK(steps >= 0, ValueError, "[linspace] expected steps >= 0, got ", steps);
  Tensor t = empty({steps}, TensorOptions(kFloat64));
  double* p = t.data_ptr<double>();
  double step = steps > 1 ? (end - start) / static_cast<double>(steps - 1) : 0.0;
  // Fill symmetrically from both ends so the last value is exactly `end`.
  for (int64_t i = 0; i < steps; ++i)
    p[i] = i < steps / 2 ? start + step * static_cast<double>(i)
                         : end - step * static_cast<double>(steps - 1 - i);
  return finish(cast_raw(t, options.dtype), options);
}

Tensor eye(int64_t n, std::optional<int64_t> m, TensorOptions options) {
  TESSERA_OP_SCOPE("eye");
  int64_t cols = m.value_or(n);
  TESSERA_CHECK(n >= 0 && cols >= 0, ValueError, "[eye] expected non-negative sizes, got ", n,
                " and ", cols);
  Tensor t = zeros({n, cols}, TensorOptions(options.dtype));
  dispatch(options.dtype, "eye", [&]<class T>() {
    T* p = t.data_ptr<T>();
    for (int64_t i = 0; i < std::min(n, cols); ++i) p[i * cols + i] = static_cast<T>(1);
  });
  return finish(t, options);
}

namespace {
TensorOptions like(const Tensor& t, std::optional<DType> dtype) {
  return TensorOptions(dtype.value_or(t.dtype())).with_device(t.device());
}
}  // namespace

Tensor empty_like(const Tensor& t, std::optional<DType> d) {
  TESSERA_OP_SCOPE("empty_like", t);
  return empty(t.sizes(), like(t, d));
}
Tensor zeros_like(const Tensor& t, std::optional<DType> d) {
  TESSERA_OP_SCOPE("zeros_like", t);
  return zeros(t.sizes(), like(t, d));
}
Tensor ones_like(const Tensor& t, std::optional<DType> d) {
  TESSERA_OP_SCOPE("ones_like", t);
  return ones(t.sizes(), like(t, d));
}
Tensor full_like(const Tensor& t, const Scalar& v, std::optional<DType> d) {
  TESSERA_OP_SCOPE("full_like", t);
  return full(t.sizes(), v, like(t, d));
}
Tensor rand_like(const Tensor& t, std::optional<DType> d) {
  TESSERA_OP_SCOPE("rand_like", t);
  return rand(t.sizes(), like(t, d));
}
Tensor randn_like(const Tensor& t, std::optional<DType> d) {
  TESSERA_OP_SCOPE("randn_like", t);
  return randn(t.sizes(), like(t, d));
}

namespace {
Generator& gen_or_default(Generator* gen) { return gen ? *gen : default_generator(); }

// Runs a sampling kernel into t (through a contiguous buffer if t is strided).
template <class Key, class... Args>
void sample_into(Tensor& t, Generator* gen, Args... args) {
  Generator& g = gen_or_default(gen);
  uint64_t offset = g.reserve(static_cast<uint64_t>(t.numel()));
  if (t.is_contiguous()) {
    call_kernel<Key>(t.device(), t, args..., g.seed(), offset);
    return;
  }
  Tensor buf = empty(t.sizes(), TensorOptions(t.dtype()).with_device(t.device()));
  call_kernel<Key>(t.device(), buf, args..., g.seed(), offset);
  autograd::NoGradGuard ng;
  copy_(t, buf);
}

void check_floating(const TensorOptions& o, std::string_view op) {
  TESSERA_CHECK(is_floating(o.dtype), TypeError, "[", op, "] expected a floating-point dtype, got ",
                o.dtype);
}
}  // namespace

Tensor rand(const Shape& shape, TensorOptions options, Generator* gen) {
  TESSERA_OP_SCOPE("rand");
  check_floating(options, "rand");
  Tensor t = empty(shape, options.with_requires_grad(false));
  uniform_(t, 0.0, 1.0, gen);
  return finish(t, options);
}

Tensor randn(const Shape& shape, TensorOptions options, Generator* gen) {
  TESSERA_OP_SCOPE("randn");
  check_floating(options, "randn");
  Tensor t = empty(shape, options.with_requires_grad(false));
  normal_(t, 0.0, 1.0, gen);
  return finish(t, options);
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions options,
               Generator* gen) {
  TESSERA_OP_SCOPE("randint");
  TESSERA_CHECK(low < high, ValueError, "[randint] expected low < high, got low ", low,
                " and high ", high);
  Tensor t = empty(shape, options);
  sample_into<randint_kernel>(t, gen, low, high);
  return t;
}

Tensor randperm(int64_t n, Generator* gen) {
  TESSERA_OP_SCOPE("randperm");
  TESSERA_CHECK(n >= 0, ValueError, "[randperm] expected n >= 0, got ", n);
  Tensor keys = rand({n}, TensorOptions(kFloat64), gen);
  const double* k = keys.data_ptr<double>();
  std::vector<int64_t> idx(n);
  for (int64_t i = 0; i < n; ++i) idx[i] = i;
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return k[a] < k[b]; });
  return tensor(idx);
}

Tensor& normal_(Tensor& t, double mean, double std, Generator* gen) {
  TESSERA_OP_SCOPE("normal_", t);
  TESSERA_CHECK(std >= 0, ValueError, "[normal_] expected std >= 0, got ", std);
  autograd::check_inplace(t, "normal_");
  sample_into<normal_kernel>(t, gen, mean, std);
  record_overwritten(t, "NormalBackward");
  return t;
}

Tensor& uniform_(Tensor& t, double low, double high, Generator* gen) {
  TESSERA_OP_SCOPE("uniform_", t);
  TESSERA_CHECK(low <= high, ValueError, "[uniform_] expected low <= high, got ", low, " and ",
                high);
  autograd::check_inplace(t, "uniform_");
  sample_into<uniform_kernel>(t, gen, low, high);
  record_overwritten(t, "UniformBackward");
  return t;
}

Tensor bernoulli(const Tensor& p, Generator* gen) {
  TESSERA_OP_SCOPE("bernoulli", p);
  TESSERA_CHECK(is_floating(p.dtype()), TypeError,
                "[bernoulli] expected floating-point probabilities, got ", p.dtype());
  Tensor prob = p.detach().contiguous();
  Tensor out = empty(p.sizes(), TensorOptions(p.dtype()).with_device(p.device()));
  Generator& g = gen_or_default(gen);
  uint64_t offset = g.reserve(static_cast<uint64_t>(out.numel()));
  call_kernel<bernoulli_kernel>(out.device(), out, prob, g.seed(), offset);
  return out;
}

Tensor bernoulli(const Tensor& like_t, double p, Generator* gen) {
  TESSERA_CHECK(p >= 0 && p <= 1, ValueError, "[bernoulli] expected p in [0, 1], got ", p);
  DType dt = is_floating(like_t.dtype()) ? like_t.dtype() : kFloat32;
  return bernoulli(full(like_t.sizes(), p, TensorOptions(dt).with_device(like_t.device())), gen);
}

TESSERA_REGISTER_OPS(
    {"empty", "creation", kAllTypes, false}, {"empty_strided", "creation", kAllTypes, false},
    {"zeros", "creation", kAllTypes, false}, {"ones", "creation", kAllTypes, false},
    {"full", "creation", kAllTypes, false}, {"scalar_tensor", "creation", kAllTypes, false},
    {"tensor", "creation", kAllTypes, false}, {"arange", "creation", kNumericTypes, false},
    {"linspace", "creation", kAllTypes, false}, {"eye", "creation", kAllTypes, false},
    {"empty_like", "creation", kAllTypes, false}, {"zeros_like", "creation", kAllTypes, false},
    {"ones_like", "creation", kAllTypes, false}, {"full_like", "creation", kAllTypes, false},
    {"rand_like", "random", kFloatingTypes, false}, {"randn_like", "random", kFloatingTypes, false},
    {"rand", "random", kFloatingTypes, false}, {"randn", "random", kFloatingTypes, false},
    {"randint", "random", kNumericTypes, false}, {"randperm", "random", dtype_bit(kInt64), false},
    {"normal_", "random", kFloatingTypes, false}, {"uniform_", "random", kFloatingTypes, false},
    {"bernoulli", "random", kFloatingTypes, false});

}  // namespace tessera
