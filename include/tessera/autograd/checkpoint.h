#pragma once
// Activation checkpointing (torch.utils.checkpoint, reentrant form): checkpoint(fn, inputs) runs
// fn without keeping its intermediate activations; the backward pass runs fn again on the saved
// inputs, with the same random numbers and autocast state, and backpropagates through that.
// Memory falls from every activation of fn to its inputs and outputs; time grows by one forward.
//
//   Tensor h = autograd::checkpoint([&](const TensorList& in) { return TensorList{block(in[0])}; },
//                                   {x})[0];
//
// Parameters fn uses get their gradients accumulated into .grad during the recompute, so use it
// with backward() (not autograd::grad), and give it at least one input that requires grad (as
// PyTorch's reentrant checkpoint): otherwise nothing links fn's outputs to the graph.
#include <functional>

#include "tessera/core/tensor.h"

namespace tessera::autograd {

using CheckpointFn = std::function<TensorList(const TensorList&)>;

TensorList checkpoint(const CheckpointFn& fn, const TensorList& inputs);

}  // namespace tessera::autograd
