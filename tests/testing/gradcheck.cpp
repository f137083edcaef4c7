#include "testing/gradcheck.h"

#include <cmath>
#include <sstream>

namespace tessera::testing {

namespace {

// Position (in elements from the storage base) of the i-th logical element of t.
int64_t element_offset(const Tensor& t, int64_t i) {
  int64_t off = t.storage_offset();
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    off += (i % t.size(d)) * t.stride(d);
    i /= t.size(d);
  }
  return off;
}

double* element(const Tensor& t, int64_t i) {
  return static_cast<double*>(t.impl()->storage()->data()) + element_offset(t, i);
}

// sum_k sum(out_k * v_k) as a double.
Tensor weighted(const TensorList& outs, const TensorList& vs) {
  Tensor total = zeros({}, kFloat64);
  for (size_t k = 0; k < outs.size(); ++k)
    if (vs[k].defined()) total = total + sum(outs[k] * vs[k]);
  return total;
}

TensorList make_vectors(const TensorList& outs, Generator& gen) {
  TensorList vs;
  for (const Tensor& o : outs)
    vs.push_back(o.defined() && o.is_floating_point() ? randn(o.sizes(), kFloat64, &gen) : Tensor());
  return vs;
}

std::string compare(const Tensor& analytic, const std::vector<double>& numeric, size_t input,
                    const GradcheckOptions& o, const char* what) {
  for (size_t j = 0; j < numeric.size(); ++j) {
    double a = analytic.defined() ? *element(analytic.contiguous(), static_cast<int64_t>(j)) : 0.0;
    double n = numeric[j];
    if (!(std::fabs(a - n) <= o.atol + o.rtol * std::fabs(n))) {
      std::ostringstream os;
      os << what << " mismatch for input " << input << " element " << j << ": analytic " << a
         << " vs numeric " << n;
      return os.str();
    }
  }
  return "";
}

}  // namespace

std::string gradcheck(const OpFn& fn, const TensorList& inputs, const GradcheckOptions& o) {
  Generator gen(1234);
  for (int trial = 0; trial < o.n_vectors; ++trial) {
    TensorList outs = fn(inputs);
    TensorList vs = make_vectors(outs, gen);
    Tensor loss = weighted(outs, vs);
    TensorList diff;
    std::vector<size_t> which;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (inputs[i].defined() && inputs[i].requires_grad()) {
        diff.push_back(inputs[i]);
        which.push_back(i);
      }
    }
    if (diff.empty()) return "no input requires grad";
    // An output that does not depend on the inputs (e.g. the second derivative of a linear op)
    // has zero analytic gradient.
    TensorList grads = loss.requires_grad()
                           ? autograd::grad({loss}, diff, {}, false, false, /*allow_unused=*/true)
                           : TensorList(diff.size());
    for (size_t k = 0; k < diff.size(); ++k) {
      const Tensor& x = diff[k];
      if (x.dtype() != kFloat64) return "gradcheck needs float64 inputs";
      std::vector<double> numeric(x.numel());
      for (int64_t j = 0; j < x.numel(); ++j) {
        double* p = element(x, j);
        const double orig = *p;
        *p = orig + o.eps;
        double plus = weighted(fn(inputs), vs).item<double>();
        *p = orig - o.eps;
        double minus = weighted(fn(inputs), vs).item<double>();
        *p = orig;
        numeric[j] = (plus - minus) / (2 * o.eps);
      }
      std::string err = compare(grads[k], numeric, which[k], o, "gradient");
      if (!err.empty()) return err;
    }
  }
  return "";
}

std::string gradgradcheck(const OpFn& fn, const TensorList& inputs, const GradcheckOptions& o) {
  // The function under test becomes x -> d(sum(fn(x) * v))/dx with v fixed.
  Generator gen(99);
  TensorList outs0 = fn(inputs);
  TensorList vs = make_vectors(outs0, gen);
  TensorList diff;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) diff.push_back(t);
  OpFn first = [&](const TensorList& in) {
    TensorList outs = fn(in);
    TensorList d;
    for (const Tensor& t : in)
      if (t.defined() && t.requires_grad()) d.push_back(t);
    TensorList g = autograd::grad({weighted(outs, vs)}, d, {}, true, /*create_graph=*/true, true);
    for (size_t i = 0; i < g.size(); ++i)
      if (!g[i].defined()) g[i] = zeros_like(d[i]);
    return g;
  };
  return gradcheck(first, inputs, o);
}

}  // namespace tessera::testing
