#pragma once
// f(i) for i in [0, n), across OpenMP threads when `parallel`, else a plain loop. The serial
// path never enters the OpenMP runtime: a decode step runs ~50 tiny loops, and even a
// one-thread parallel region costs more than some of them. Inside a parallel region (the
// runner's split batch) it runs serially too. Used by the inference runner's kernels.
#include <omp.h>

#include <cstdint>

namespace tessera::cpu {

template <class F>
void parallel_for(int64_t n, bool parallel, const F& f) {
  if (!parallel || n < 2 || omp_in_parallel()) {
    for (int64_t i = 0; i < n; ++i) f(i);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) f(i);
}

}  // namespace tessera::cpu
