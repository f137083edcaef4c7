// STREAM's four kernels and a pointer-chasing latency probe.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <random>

#include "tessera/bench/hardware.h"
#include "tessera/bench/stats.h"
#include "tessera/core/error.h"

namespace tessera::bench {
namespace {

double seconds_of(const std::function<void()>& fn) {
  const auto start = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// 64-byte aligned float64 arrays, freed with the struct.
struct Arrays {
  explicit Arrays(int64_t n) : n(n) {
    for (auto** p : {&a, &b, &c}) *p = static_cast<double*>(std::aligned_alloc(64, bytes()));
    TESSERA_CHECK(a && b && c, RuntimeError, "[bench.stream] expected ", 3 * bytes(),
                  " bytes of memory for the arrays, got an allocation failure");
    // First touch by the threads that use each part (NUMA placement, as STREAM does).
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      a[i] = 1.0;
      b[i] = 2.0;
      c[i] = 0.0;
    }
  }
  ~Arrays() {
    std::free(a);
    std::free(b);
    std::free(c);
  }
  Arrays(const Arrays&) = delete;
  Arrays& operator=(const Arrays&) = delete;
  size_t bytes() const { return (static_cast<size_t>(n) * sizeof(double) + 63) / 64 * 64; }
  int64_t n;
  double *a = nullptr, *b = nullptr, *c = nullptr;
};

void run_stream_kernel(StreamKernel k, Arrays& x) {
  const double s = 3.0;
  double *a = x.a, *b = x.b, *c = x.c;
  const int64_t n = x.n;
  switch (k) {
    case StreamKernel::Copy:
#pragma omp parallel for simd schedule(static)
      for (int64_t i = 0; i < n; ++i) c[i] = a[i];
      break;
    case StreamKernel::Scale:
#pragma omp parallel for simd schedule(static)
      for (int64_t i = 0; i < n; ++i) b[i] = s * c[i];
      break;
    case StreamKernel::Add:
#pragma omp parallel for simd schedule(static)
      for (int64_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
      break;
    case StreamKernel::Triad:
#pragma omp parallel for simd schedule(static)
      for (int64_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
      break;
  }
}

}  // namespace

const char* stream_kernel_name(StreamKernel k) {
  switch (k) {
    case StreamKernel::Copy:
      return "copy";
    case StreamKernel::Scale:
      return "scale";
    case StreamKernel::Add:
      return "add";
    case StreamKernel::Triad:
      return "triad";
  }
  return "?";
}

int64_t stream_bytes(StreamKernel k, int64_t n) {
  const int arrays = (k == StreamKernel::Copy || k == StreamKernel::Scale) ? 2 : 3;
  return arrays * static_cast<int64_t>(sizeof(double)) * n;
}

std::vector<double> time_stream(StreamKernel kernel, int64_t n, int repetitions, int passes) {
  TESSERA_CHECK(n > 0 && repetitions > 0 && passes > 0, ValueError,
                "[bench.stream] expected positive array length, repetitions and passes, got ", n,
                ", ", repetitions, " and ", passes);
  Arrays x(n);
  run_stream_kernel(kernel, x);  // warm-up (STREAM also discards its first pass)
  std::vector<double> seconds;
  for (int i = 0; i < repetitions; ++i) {
    const double s = seconds_of([&] {
      for (int p = 0; p < passes; ++p) run_stream_kernel(kernel, x);
    });
    seconds.push_back(s / passes);
  }
  return seconds;
}

std::vector<double> time_pointer_chase(int64_t bytes, int repetitions) {
  struct alignas(64) Node {
    Node* next;
  };
  const int64_t count = std::max<int64_t>(bytes / static_cast<int64_t>(sizeof(Node)), 2);
  std::vector<Node> nodes(count);
  // Sattolo's algorithm: a random permutation that is one cycle through every node, so the chase
  // visits them all in an order the prefetchers cannot follow.
  std::vector<int64_t> order(count);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(42);
  for (int64_t i = count - 1; i > 0; --i) {
    std::uniform_int_distribution<int64_t> pick(0, i - 1);
    std::swap(order[i], order[pick(rng)]);
  }
  for (int64_t i = 0; i < count; ++i) nodes[i].next = &nodes[order[i]];
  // Enough loads to run ~10 ms in DRAM and to go round small buffers many times.
  const int64_t loads = std::max<int64_t>(count * 4, 1 << 20);
  volatile Node* sink = nullptr;
  Node* p = &nodes[0];
  for (int64_t i = 0; i < count; ++i) p = p->next;  // warm the caches and TLB
  std::vector<double> ns;
  for (int r = 0; r < repetitions; ++r) {
    const double s = seconds_of([&] {
      for (int64_t i = 0; i < loads; ++i) p = p->next;
    });
    ns.push_back(s * 1e9 / loads);
  }
  sink = p;
  (void)sink;
  return ns;
}

}  // namespace tessera::bench
