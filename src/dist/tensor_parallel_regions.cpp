// Tensor-parallel regions (Megatron's mappings): autograd functions whose forward and backward
// are collectives over the TP group. Each backward calls the dual region, so it is itself
// differentiable under create_graph.
#include <functional>

#include "dist/tensor_parallel_internal.h"
#include "tessera/autograd/function.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/autograd/view_tracking.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/elementwise.h"

namespace tessera::dist {

namespace {

using Backward = std::function<Tensor(const Tensor&)>;

// out = forward() (a collective, run outside autograd), recorded as a function of x whose
// gradient is backward(g). aliases_x: out shares x's memory (writes through it are refused).
Tensor region(const char* name, const Tensor& x, const std::function<Tensor()>& forward,
              Backward backward, bool aliases_x = false) {
  Tensor out;
  {
    autograd::NoGradGuard ng;
    out = forward();
  }
  if (autograd::needs_grad({x})) {
    autograd::record(
        name, {x}, {out}, {},
        [backward = std::move(backward)](autograd::BackwardContext&, const TensorList& g) {
          return TensorList{backward(g[0])};
        });
  }
  if (aliases_x) autograd::track_opaque_view(x, out);
  return out;
}

// Checks the arguments every region takes; returns dim normalised (for the last-dim regions,
// pass -1). divisible: the dim is split into group->size() equal slices.
int64_t check_region(std::string_view op, const Tensor& x, const GroupPtr& group, int64_t dim,
                     bool divisible) {
  detail::check_group(op, group);
  TESSERA_CHECK(x.defined(), ValueError, "[", op, "] expected a defined tensor, got undefined");
  TESSERA_CHECK(x.dim() >= 1, ValueError, "[", op, "] expected a tensor with at least 1 dim, got ",
                x.sizes());
  const int64_t d = detail::normalize_dim(op, dim, x.dim());
  TESSERA_CHECK(!divisible || x.size(d) % group->size() == 0, ValueError, "[", op,
                "] expected dim ", d, " of ", x.sizes(), " divisible by the group size ",
                group->size(), ", got ", x.size(d));
  return d;
}

// Sum over the group of x (a new contiguous tensor).
Tensor all_reduce_sum(const Tensor& x, ProcessGroup& g) {
  Tensor out = x.clone();
  g.all_reduce(out)->wait();
  return out;
}

// This rank's slice of dim (a new contiguous tensor).
Tensor slice_dim(const Tensor& x, int64_t dim, const ProcessGroup& g) {
  const int64_t n = x.size(dim) / g.size();
  return x.narrow(dim, g.rank() * n, n).clone();
}

// The ranks' x concatenated along dim: gathered rank-major into [size, ...x.shape], then the rank
// dim moved in front of dim and merged with it.
Tensor all_gather_dim(const Tensor& x, int64_t dim, ProcessGroup& g) {
  Tensor in = x.contiguous();
  Shape buf_shape = in.sizes();
  buf_shape.insert(buf_shape.begin(), g.size());
  Tensor buf = empty(buf_shape, TensorOptions(in.dtype()).with_device(in.device()));
  g.all_gather(buf, in)->wait();
  Shape out_shape = in.sizes();
  out_shape[dim] *= g.size();
  if (dim == 0) return buf.view(out_shape);
  Shape perm;
  for (int64_t d = 1; d <= dim; ++d) perm.push_back(d);
  perm.push_back(0);
  for (int64_t d = dim + 1; d <= in.dim(); ++d) perm.push_back(d);
  return buf.permute(perm).reshape(out_shape);
}

// The group's sum of x split along dim, block rank() kept: dim is split into [size, n] and the
// size dim moved to the front so that each rank's block is contiguous (rank-major).
Tensor reduce_scatter_dim(const Tensor& x, int64_t dim, ProcessGroup& g) {
  Shape split = x.sizes();
  split[dim] /= g.size();
  Shape out_shape = split;
  split.insert(split.begin() + dim, g.size());
  Shape perm{dim};
  for (int64_t d = 0; d < static_cast<int64_t>(split.size()); ++d)
    if (d != dim) perm.push_back(d);
  Tensor in = x.reshape(split).permute(perm).contiguous();
  Tensor out = empty(out_shape, TensorOptions(x.dtype()).with_device(x.device()));
  g.reduce_scatter(out, in)->wait();
  return out;
}

// The differentiable pairs below take validated arguments; the public functions check them.
Tensor gather_dim(const Tensor& x, const GroupPtr& group, int64_t dim);

// forward: this rank's slice of dim; backward: all-gather along dim.
Tensor scatter_dim(const Tensor& x, const GroupPtr& group, int64_t dim) {
  return region(
      "ScatterToParallelRegionBackward", x, [&] { return slice_dim(x, dim, *group); },
      [group, dim](const Tensor& g) { return gather_dim(g, group, dim); });
}

// forward: all-gather along dim; backward: this rank's slice of dim.
Tensor gather_dim(const Tensor& x, const GroupPtr& group, int64_t dim) {
  return region(
      "GatherFromParallelRegionBackward", x, [&] { return all_gather_dim(x, dim, *group); },
      [group, dim](const Tensor& g) { return scatter_dim(g, group, dim); });
}

Tensor gather_reduce_scatter(const Tensor& x, const GroupPtr& group, int64_t dim);

// forward: reduce-scatter along dim; backward: all-gather along dim (its adjoint).
Tensor reduce_scatter_gather(const Tensor& x, const GroupPtr& group, int64_t dim) {
  return region(
      "ReduceScatterToSequenceParallelRegionBackward", x,
      [&] { return reduce_scatter_dim(x, dim, *group); },
      [group, dim](const Tensor& g) { return gather_reduce_scatter(g, group, dim); });
}

// forward: all-gather along dim; backward: reduce-scatter along dim (its adjoint).
Tensor gather_reduce_scatter(const Tensor& x, const GroupPtr& group, int64_t dim) {
  return region(
      "GatherFromSequenceParallelRegionBackward", x, [&] { return all_gather_dim(x, dim, *group); },
      [group, dim](const Tensor& g) { return reduce_scatter_gather(g, group, dim); });
}

}  // namespace

Tensor copy_to_tensor_parallel_region(const Tensor& x, const GroupPtr& group) {
  detail::check_group("copy_to_tensor_parallel_region", group);
  TESSERA_CHECK(x.defined(), ValueError,
                "[copy_to_tensor_parallel_region] expected a defined tensor, got undefined");
  if (group->size() == 1 || !autograd::needs_grad({x})) return x;
  // The output aliases x; in-place writes to it are refused.
  return region(
      "CopyToTensorParallelRegionBackward", x, [&] { return x.detach(); },
      [group](const Tensor& g) { return reduce_from_tensor_parallel_region(g, group); }, true);
}

Tensor reduce_from_tensor_parallel_region(const Tensor& x, const GroupPtr& group) {
  detail::check_group("reduce_from_tensor_parallel_region", group);
  TESSERA_CHECK(x.defined(), ValueError,
                "[reduce_from_tensor_parallel_region] expected a defined tensor, got undefined");
  if (group->size() == 1) return x;
  return region(
      "ReduceFromTensorParallelRegionBackward", x, [&] { return all_reduce_sum(x, *group); },
      [](const Tensor& g) { return g; });
}

Tensor scatter_to_tensor_parallel_region(const Tensor& x, const GroupPtr& group) {
  int64_t d = check_region("scatter_to_tensor_parallel_region", x, group, -1, true);
  return group->size() == 1 ? x : scatter_dim(x, group, d);
}

Tensor gather_from_tensor_parallel_region(const Tensor& x, const GroupPtr& group) {
  int64_t d = check_region("gather_from_tensor_parallel_region", x, group, -1, false);
  return group->size() == 1 ? x : gather_dim(x, group, d);
}

Tensor scatter_to_sequence_parallel_region(const Tensor& x, const GroupPtr& group, int64_t dim) {
  int64_t d = check_region("scatter_to_sequence_parallel_region", x, group, dim, true);
  return group->size() == 1 ? x : scatter_dim(x, group, d);
}

Tensor gather_from_sequence_parallel_region(const Tensor& x, const GroupPtr& group, int64_t dim) {
  int64_t d = check_region("gather_from_sequence_parallel_region", x, group, dim, false);
  return group->size() == 1 ? x : gather_reduce_scatter(x, group, d);
}

Tensor reduce_scatter_to_sequence_parallel_region(const Tensor& x, const GroupPtr& group,
                                                  int64_t dim) {
  int64_t d = check_region("reduce_scatter_to_sequence_parallel_region", x, group, dim, true);
  return group->size() == 1 ? x : reduce_scatter_gather(x, group, d);
}

}  // namespace tessera::dist
