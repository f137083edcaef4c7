#pragma once
// The Sampler's draw, for rows whose logits stay where they are (a GPU): the same distribution
// (softmax(logits / temperature), top-k, then top-p over the stable descending order, then min_p,
// in float64) and the same inverse-CDF pick with the same uniform draw, philox(seed, step), which
// the caller computes on the host. Built from library ops, so it runs on any device; only the
// ids come back. Penalties and logprobs need the host (the engine keeps those rows there).
#include <span>

#include "tessera/core/tensor.h"
#include "tessera/infer/sampler.h"

namespace tessera::infer::detail {

// One token per row of logits [rows, vocab] (floating, on any device): int64 [rows] there.
Tensor sample_rows(const Tensor& logits, std::span<const RowSampling> rows);

}  // namespace tessera::infer::detail
