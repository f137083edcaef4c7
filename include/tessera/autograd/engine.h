#pragma once
// The backward engine: dependency counts + a ready queue ordered by node creation (latest first),
// no recursion. Saved tensors are freed as soon as their node has run unless retain_graph.
#include <cstdint>
#include <functional>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::autograd {

// Accumulates d(sum(tensors * grad_tensors))/d(leaf) into every leaf's .grad.
void backward(const TensorList& tensors, const TensorList& grad_tensors = {},
              bool retain_graph = false, bool create_graph = false);

// Returns d(sum(outputs * grad_outputs))/d(input) for each input without touching .grad.
// retain_graph defaults to create_graph. Unused inputs raise unless allow_unused (then undefined).
TensorList grad(const TensorList& outputs, const TensorList& inputs,
                const TensorList& grad_outputs = {}, std::optional<bool> retain_graph = {},
                bool create_graph = false, bool allow_unused = false);

// Runs fn once the outermost backward pass running on this thread has finished every node
// (nested passes, such as activation checkpointing's recomputation, do not count), before
// backward() returns: how DistributedDataParallel waits for its gradient reductions, like torch's
// queue_callback. Callbacks are dropped when the pass throws. RuntimeError outside a backward.
void queue_callback(std::function<void()> fn);

// A number identifying the outermost backward pass running on this thread (0 outside one): a
// hook can tell a new pass from one that threw before its callbacks ran.
uint64_t backward_pass_id();

}  // namespace tessera::autograd
