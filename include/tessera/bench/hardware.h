#pragma once
// The hardware suite: what this machine can do at best, the figures every other suite is judged
// against.
// - GEMM peak per dtype through oneDNN (fp32, bf16, fp16, int8 where the CPU runs them): FLOP/s
//   (int8: OP/s) = 2 m n k / time of one call, square m = n = k.
// - Memory bandwidth as STREAM defines it: copy c = a, scale b = s c, add c = a + b,
//   triad a = b + s c over float64 arrays of at least 4x the last-level cache each; bytes counted
//   as STREAM counts them (2 or 3 arrays of n doubles; no write-allocate traffic); the best of N.
// - A bandwidth sweep: triad over working sets from 48 KiB to the STREAM size, which shows each
//   cache level's bandwidth.
// - Memory latency by pointer chasing: a random cyclic permutation of cache-line-sized nodes
//   (each load depends on the previous one) over sizes from 4 KiB to 4x the last-level cache;
//   the curve steps at each cache level.
// - On a GPU: host-to-device and device-to-host copy bandwidth.
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/bench/progress.h"
#include "tessera/bench/result.h"

namespace tessera::bench {

enum class StreamKernel { Copy, Scale, Add, Triad };
const char* stream_kernel_name(StreamKernel k);
// STREAM's byte count of one pass over arrays of n float64: 16 n for copy/scale, 24 n for
// add/triad.
int64_t stream_bytes(StreamKernel k, int64_t n);
// 2 m n k: a GEMM's multiply-adds counted as two operations.
double gemm_flops(int64_t m, int64_t n, int64_t k);

struct HardwareOptions {
  bool quick = false;    // small sizes and few repetitions: proves the suite runs
  int repetitions = 10;  // STREAM's NTIMES; GEMM timed calls
  std::vector<std::string> gemm_dtypes = {"fp32", "bf16", "fp16", "int8"};
  int64_t gemm_size = 0;           // m = n = k; 0: 2048 (256 when quick)
  int64_t stream_array_bytes = 0;  // per array; 0: 4x the last-level cache (4 MiB when quick)
  int64_t latency_max_bytes = 0;   // 0: 4x the last-level cache (1 MiB when quick)
  Progress progress;
};

// One GEMM's seconds per call (repetitions samples) in oneDNN at dtype ("fp32", "bf16", "fp16",
// "int8"); empty when oneDNN has no implementation of it on this CPU.
std::vector<double> time_gemm(const std::string& dtype, int64_t size, int repetitions);
// Seconds per pass of kernel over arrays of n float64, repetitions samples (OpenMP threads);
// each sample times `passes` back-to-back passes (small arrays need many to be timed).
std::vector<double> time_stream(StreamKernel kernel, int64_t n, int repetitions, int passes = 1);
// Nanoseconds per dependent load over a chase through bytes of memory (median of repetitions).
std::vector<double> time_pointer_chase(int64_t bytes, int repetitions);

// Runs the suite into result: figures "gemm" (params dtype, m, n, k; unit FLOP/s or OP/s),
// "stream" (kernel, array_bytes; B/s), "bandwidth" (triad by working set: bytes of the three
// arrays; B/s), "latency" (bytes; s), "copy" (direction; B/s, GPU only).
void run_hardware_suite(Result& result, const HardwareOptions& options);

}  // namespace tessera::bench
