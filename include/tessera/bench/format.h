#pragma once
// Numbers as benchmark tables print them: SI prefixes on rates and bytes ("212.4 GFLOP/s",
// "25.1 GB/s"), times in the unit that keeps them readable ("83.2 ns", "4.1 ms").
#include <string>

namespace tessera::bench {

std::string format_value(double value, const std::string& unit);
// 4096 -> "4 KiB", 33554432 -> "32 MiB".
std::string format_bytes(double bytes);
// A commit as tables show it: 12 hex digits, keeping a "-dirty" suffix.
std::string short_commit(const std::string& commit);

}  // namespace tessera::bench
