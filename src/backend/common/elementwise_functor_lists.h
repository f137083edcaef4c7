#pragma once
// The elementwise functors every backend registers a kernel for, listed once so that a functor
// added here reaches the CPU and CUDA backends alike.
#include "backend/common/activation_grad_functors.h"
#include "backend/common/elementwise_functors.h"

namespace tessera::fn {

template <class... Fns>
struct FunctorList {};

using UnaryFunctors =
    FunctorList<NegFn, AbsFn, SignFn, SquareFn, ExpFn, LogFn, Log1pFn, SqrtFn, RsqrtFn,
                ReciprocalFn, SinFn, CosFn, TanhFn, SigmoidFn, ReluFn, GeluFn, GeluTanhFn, SiluFn,
                ErfFn, LogicalNotFn, IsnanFn, IsinfFn, IsfiniteFn, BitwiseNotFn>;

// f(a, b) with both operands of one dtype (activation gradients take (grad, x)).
using BinaryFunctors =
    FunctorList<AddFn, SubFn, MulFn, DivFn, PowFn, MaximumFn, MinimumFn, EqFn, NeFn, LtFn, LeFn,
                GtFn, GeFn, LogicalAndFn, LogicalOrFn, LogicalXorFn, BitwiseAndFn, BitwiseOrFn,
                BitwiseXorFn, SwigluFn, GeluGradFn, GeluTanhGradFn, SiluGradFn>;

}  // namespace tessera::fn
