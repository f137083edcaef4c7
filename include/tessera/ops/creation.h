#pragma once
// Tensor creation and random sampling.
#include <cstdint>
#include <optional>
#include <vector>

#include "tessera/core/generator.h"
#include "tessera/core/tensor.h"

namespace tessera {

struct TensorOptions {
  DType dtype = kFloat32;
  Device device = kCPU;
  bool requires_grad = false;
  bool pinned_memory = false;  // CPU tensors in page-locked memory (torch's pin_memory=True)

  TensorOptions() = default;
  TensorOptions(DType d) : dtype(d) {}
  TensorOptions(Device dev) : device(dev) {}
  TensorOptions with_dtype(DType d) const { auto o = *this; o.dtype = d; return o; }
  TensorOptions with_device(Device d) const { auto o = *this; o.device = d; return o; }
  TensorOptions with_requires_grad(bool r = true) const {
    auto o = *this;
    o.requires_grad = r;
    return o;
  }
  TensorOptions with_pinned_memory(bool p = true) const {
    auto o = *this;
    o.pinned_memory = p;
    return o;
  }
};

// Uninitialised contiguous tensor.
Tensor empty(const Shape& shape, TensorOptions options = {});
// Strided tensor over fresh storage large enough for the given strides.
Tensor empty_strided(const Shape& shape, const Shape& strides, TensorOptions options = {});
Tensor zeros(const Shape& shape, TensorOptions options = {});
Tensor ones(const Shape& shape, TensorOptions options = {});
Tensor full(const Shape& shape, const Scalar& value, TensorOptions options = {});
// 0-d tensor holding value (dtype from options).
Tensor scalar_tensor(const Scalar& value, TensorOptions options = {});
// Tensor copying the values (row-major) into the given shape (defaults to 1-d).
template <class T>
Tensor tensor(const std::vector<T>& values, std::optional<Shape> shape = std::nullopt);
Tensor tensor(std::initializer_list<double> values, TensorOptions options = {});

// Values start, start+step, ... < end; the dtype is int64 when all arguments are integers.
Tensor arange(const Scalar& end, std::optional<DType> dtype = std::nullopt);
Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step = 1,
              std::optional<DType> dtype = std::nullopt);
Tensor linspace(double start, double end, int64_t steps, TensorOptions options = {});
Tensor eye(int64_t n, std::optional<int64_t> m = std::nullopt, TensorOptions options = {});

// *_like: same shape (and dtype/device unless given).
Tensor empty_like(const Tensor& t, std::optional<DType> dtype = std::nullopt);
Tensor zeros_like(const Tensor& t, std::optional<DType> dtype = std::nullopt);
Tensor ones_like(const Tensor& t, std::optional<DType> dtype = std::nullopt);
Tensor full_like(const Tensor& t, const Scalar& value, std::optional<DType> dtype = std::nullopt);
Tensor rand_like(const Tensor& t, std::optional<DType> dtype = std::nullopt);
Tensor randn_like(const Tensor& t, std::optional<DType> dtype = std::nullopt);

// Random tensors from the default generator (or `gen`): uniform [0, 1), standard normal,
// integers in [low, high).
Tensor rand(const Shape& shape, TensorOptions options = {}, Generator* gen = nullptr);
Tensor randn(const Shape& shape, TensorOptions options = {}, Generator* gen = nullptr);
Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions options = {kInt64},
               Generator* gen = nullptr);
// Random permutation of 0..n-1 (int64).
Tensor randperm(int64_t n, Generator* gen = nullptr);

// In-place fills from distributions.
Tensor& normal_(Tensor& t, double mean = 0.0, double std = 1.0, Generator* gen = nullptr);
Tensor& uniform_(Tensor& t, double low = 0.0, double high = 1.0, Generator* gen = nullptr);
// Samples 0/1 with probability p (elementwise tensor of probabilities), same dtype as p.
Tensor bernoulli(const Tensor& p, Generator* gen = nullptr);
Tensor bernoulli(const Tensor& like, double p, Generator* gen = nullptr);
// num_samples category indices (int64) per row of non-negative weights (1-d [n] -> [num_samples],
// 2-d [m, n] -> [m, num_samples]), with or without replacement, as torch.multinomial.
Tensor multinomial(const Tensor& input, int64_t num_samples, bool replacement = false,
                   Generator* gen = nullptr);

}  // namespace tessera
