#include "tessera/dist/parallel_gradients.h"

#include <cmath>
#include <unordered_set>

#include "tessera/autograd/grad_mode.h"
#include "tessera/ops/creation.h"
#include "tessera/optim/clip_grad.h"

namespace tessera::dist {

namespace {

bool spans_ranks(const GroupPtr& group) { return group && group->size() > 1; }

TensorList requiring_grad(const TensorList& params) {
  TensorList out;
  for (const Tensor& p : params)
    if (p.requires_grad()) out.push_back(p);
  return out;
}

// Sum of squares of the gradients of params (float64; 0 without any), leaving out `skip`.
double squared_norm(const TensorList& params, const std::unordered_set<const void*>& skip) {
  TensorList counted;
  for (const Tensor& p : params)
    if (!skip.count(p.impl())) counted.push_back(p);
  const double n = optim::grad_norm(counted).item<double>();
  return n * n;
}

double sum_over(const GroupPtr& group, double value) {
  if (!spans_ranks(group)) return value;
  Tensor t = scalar_tensor(value, TensorOptions(kFloat64));
  group->all_reduce(t, ReduceOp::Sum)->wait();
  return t.item<double>();
}

// Sums the defined gradients of params over group: all the all-reduces in flight, then waited.
void sum_gradients(const TensorList& params, const GroupPtr& group) {
  std::vector<WorkHandle> work;
  for (const Tensor& p : params)
    if (p.grad().defined()) work.push_back(group->all_reduce(p.grad(), ReduceOp::Sum));
  for (const WorkHandle& w : work) w->wait();
}

}  // namespace

ParallelGradients::ParallelGradients(const nn::Module& module, ParallelGradientsOptions options)
    : options_(std::move(options)) {
  if (spans_ranks(options_.tp)) {
    TensorParallelParams split = tensor_parallel_params(module);
    sharded_ = requiring_grad(split.sharded);
    replicated_ = requiring_grad(split.replicated);
  } else {
    replicated_ = requiring_grad(module.parameters());
  }
  TESSERA_CHECK(options_.tied.empty() || options_.tied_group, ValueError,
                "[ParallelGradients] expected a group for the tied weights, got none");
}

void ParallelGradients::synchronize() {
  autograd::NoGradGuard no_grad;
  if (options_.sequence_parallel && spans_ranks(options_.tp))
    sum_gradients(replicated_, options_.tp);
  if (spans_ranks(options_.tied_group)) sum_gradients(options_.tied, options_.tied_group);
}

Tensor ParallelGradients::clip_grad_norm_(double max_norm) {
  std::unordered_set<const void*> skip;
  if (!options_.count_tied_in_norm)
    for (const Tensor& t : options_.tied) skip.insert(t.impl());
  double total =
      sum_over(options_.tp, squared_norm(sharded_, skip)) + squared_norm(replicated_, skip);
  total = sum_over(options_.pp, total);
  const double norm = std::sqrt(total);
  const double coef = max_norm / (norm + 1e-6);
  if (max_norm > 0 && coef < 1.0) {
    autograd::NoGradGuard no_grad;
    for (const TensorList* list : {&sharded_, &replicated_})
      for (const Tensor& p : *list)
        if (p.grad().defined()) p.grad().mul_(coef);
  }
  return scalar_tensor(norm, TensorOptions(kFloat32));
}

}  // namespace tessera::dist
