#pragma once
// What a benchmark ran on, recorded with every result: figures from different machines (or the
// same VM with other CPU flags) are not comparable.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tessera::bench {

struct Gpu {
  std::string name;
  std::string driver;
  int64_t memory_bytes = 0;
};

struct Machine {
  std::string cpu_model;
  std::vector<std::string> cpu_flags;  // the SIMD-relevant subset (avx2, avx512f, amx_bf16, ...)
  int cores = 0;                       // online logical CPUs
  int threads = 0;                     // OpenMP threads the benchmark used
  int64_t memory_bytes = 0;
  std::vector<int64_t> cache_bytes;  // per level, L1d first (from sysfs; empty if unknown)
  std::string os;
  std::vector<Gpu> gpus;

  // This machine, now (CPU from /proc/cpuinfo, caches from sysfs, GPUs from the CUDA runtime
  // when built with it).
  static Machine detect();
  // The last-level cache's size, or 32 MiB when unknown.
  int64_t last_level_cache_bytes() const;
  bool has_flag(const std::string& flag) const;
  // "AMD EPYC, 2 cores, avx2 fma": one line for tables.
  std::string summary() const;

  nlohmann::json to_json() const;
  static Machine from_json(const nlohmann::json& j);
};

}  // namespace tessera::bench
