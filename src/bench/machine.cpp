// Machine::detect: the CPU from /proc/cpuinfo, caches from sysfs, memory from sysconf, the OS
// from uname, GPUs from the CUDA runtime (none in a CPU-only build).
#include "tessera/bench/machine.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tessera/runtime/cuda.h"
#include "tessera/runtime/threads.h"

namespace tessera::bench {
namespace {

// The flags that decide which kernels run (and so what a figure means).
constexpr const char* kSimdFlags[] = {
    "sse4_2",   "avx",      "avx2",        "fma",         "f16c",        "avx512f",
    "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx_vnni",
    "amx_tile", "amx_bf16", "amx_int8",    "asimd",       "sve"};

std::string cpuinfo_field(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key, 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(" \t"));
    return value;
  }
  return {};
}

// "48K" / "32768K" / "1M" as sysfs writes cache sizes.
int64_t parse_size(std::string s) {
  if (s.empty()) return 0;
  int64_t scale = 1;
  const char unit = s.back();
  if (unit == 'K') scale = 1024;
  if (unit == 'M') scale = 1024 * 1024;
  if (scale != 1) s.pop_back();
  try {
    return std::stoll(s) * scale;
  } catch (const std::exception&) {
    return 0;
  }
}

std::string read_line(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::string line;
  std::getline(in, line);
  return line;
}

// Data and unified caches of cpu0 by level (an instruction cache is not where data lives).
std::vector<int64_t> cache_sizes() {
  std::vector<int64_t> by_level;
  const std::filesystem::path dir = "/sys/devices/system/cpu/cpu0/cache";
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.path().filename().string().rfind("index", 0) != 0) continue;
    if (read_line(entry.path() / "type") == "Instruction") continue;
    const int level = std::atoi(read_line(entry.path() / "level").c_str());
    if (level < 1 || level > 8) continue;
    if (static_cast<int>(by_level.size()) < level) by_level.resize(level, 0);
    by_level[level - 1] = parse_size(read_line(entry.path() / "size"));
  }
  return by_level;
}

}  // namespace

Machine Machine::detect() {
  Machine m;
  std::ifstream in("/proc/cpuinfo");
  std::stringstream text;
  text << in.rdbuf();
  m.cpu_model = cpuinfo_field(text.str(), "model name");
  if (m.cpu_model.empty()) m.cpu_model = cpuinfo_field(text.str(), "CPU part");
  std::istringstream flags(" " + cpuinfo_field(text.str(), "flags") + " " +
                           cpuinfo_field(text.str(), "Features") + " ");
  std::vector<std::string> all;
  for (std::string f; flags >> f;) all.push_back(f);
  for (const char* f : kSimdFlags)
    if (std::find(all.begin(), all.end(), f) != all.end()) m.cpu_flags.push_back(f);
  m.cores = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  m.threads = get_num_threads();
  m.memory_bytes = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  m.cache_bytes = cache_sizes();
  utsname u{};
  if (uname(&u) == 0) m.os = std::string(u.sysname) + " " + u.release;
  for (int i = 0; i < cuda::device_count(); ++i) {
    const cuda::DeviceProperties p = cuda::get_device_properties(i);
    m.gpus.push_back({p.name,
                      std::to_string(p.driver_version / 1000) + "." +
                          std::to_string(p.driver_version % 1000 / 10),
                      p.total_memory});
  }
  return m;
}

int64_t Machine::last_level_cache_bytes() const {
  for (auto it = cache_bytes.rbegin(); it != cache_bytes.rend(); ++it)
    if (*it > 0) return *it;
  return int64_t(32) << 20;
}

bool Machine::has_flag(const std::string& flag) const {
  return std::find(cpu_flags.begin(), cpu_flags.end(), flag) != cpu_flags.end();
}

std::string Machine::summary() const {
  std::string s =
      cpu_model + ", " + std::to_string(cores) + " cores, " + std::to_string(threads) + " threads";
  if (!cpu_flags.empty()) {
    s += ",";
    for (const auto& f : cpu_flags) s += " " + f;
  }
  for (const auto& g : gpus) s += "; " + g.name + " (driver " + g.driver + ")";
  return s;
}

nlohmann::json Machine::to_json() const {
  nlohmann::json gpu_list = nlohmann::json::array();
  for (const auto& g : gpus)
    gpu_list.push_back({{"name", g.name}, {"driver", g.driver}, {"memory_bytes", g.memory_bytes}});
  return {{"cpu_model", cpu_model},
          {"cpu_flags", cpu_flags},
          {"cores", cores},
          {"threads", threads},
          {"memory_bytes", memory_bytes},
          {"cache_bytes", cache_bytes},
          {"os", os},
          {"gpus", gpu_list}};
}

Machine Machine::from_json(const nlohmann::json& j) {
  Machine m;
  m.cpu_model = j.value("cpu_model", "");
  m.cpu_flags = j.value("cpu_flags", std::vector<std::string>{});
  m.cores = j.value("cores", 0);
  m.threads = j.value("threads", 0);
  m.memory_bytes = j.value("memory_bytes", int64_t(0));
  m.cache_bytes = j.value("cache_bytes", std::vector<int64_t>{});
  m.os = j.value("os", "");
  for (const auto& g : j.value("gpus", nlohmann::json::array()))
    m.gpus.push_back(
        {g.value("name", ""), g.value("driver", ""), g.value("memory_bytes", int64_t(0))});
  return m;
}

}  // namespace tessera::bench
