#pragma once
// Finite-difference gradient checking in float64.
#include <functional>
#include <string>

#include "tessera/tessera.h"

namespace tessera::testing {

using OpFn = std::function<TensorList(const TensorList&)>;

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
  int n_vectors = 2;  // random output weightings v in d(sum(out * v))/d(input)
};

// Compares autograd's input gradients of sum(fn(inputs) * v) with central differences, for
// every input that requires grad. Returns an empty string on success, else what mismatched.
std::string gradcheck(const OpFn& fn, const TensorList& inputs, const GradcheckOptions& o = {});

// Same for second derivatives: checks the gradient of the (create_graph) first gradient.
std::string gradgradcheck(const OpFn& fn, const TensorList& inputs, const GradcheckOptions& o = {});

}  // namespace tessera::testing
