#pragma once
// The peaks a suite's rates are held against, taken from a hardware suite's result when one is
// given, else measured briefly (enough for a fraction, not a hardware report).
#include <string>

#include "tessera/bench/result.h"

namespace tessera::bench {

// The best GEMM FLOP/s of dtype ("fp32", "bf16", ...): the fastest "gemm" figure of that dtype
// in hardware, else (when measure) a 1024^3 oneDNN GEMM, best of 5. 0 when there is none: no
// such figure, measure false, or no oneDNN kernel for dtype on this CPU.
double gemm_peak(const Result* hardware, const std::string& dtype, bool measure);

// STREAM triad bandwidth in B/s, the same way: hardware's "stream" triad figure, else (when
// measure) a best of 5 over arrays of 4x the last-level cache; 0 when there is none.
double triad_peak(const Result* hardware, bool measure);

}  // namespace tessera::bench
