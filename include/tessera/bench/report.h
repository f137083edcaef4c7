#pragma once
// Markdown from results: BENCHMARKS.md is generated from suite JSON by `tessera bench report`.
// Figures measured for two frameworks (params "framework": "tessera" / "pytorch") share a row with
// their ratio, > 1 meaning Tessera is faster (or uses less, for lower-is-better figures).
#include <string>

#include "tessera/bench/result.h"

namespace tessera::bench {

// A section: "## <suite>", the machine, commit, date and command, then one table row per
// measurement: median, min-max and the sample count.
std::string markdown_report(const Result& result);

}  // namespace tessera::bench
