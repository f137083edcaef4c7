// read_run: a run folder as `tessera train --out` writes it, read while training appends to it.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tessera/core/error.h"
#include "tessera/core/json_parse.h"
#include "tessera/io/checkpoint.h"
#include "tessera/studio/inspect.h"

namespace tessera::studio {
namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

Json read_run(const std::string& path, int64_t after) {
  if (!fs::is_directory(path))
    throw ValueError("[studio.runs] expected a training run folder, got '" + path + "'");
  if (after < 0)
    throw ValueError("[studio.runs] expected after >= 0, got " + std::to_string(after));
  const fs::path dir(path);
  Json out = {{"path", path}, {"config", nullptr}, {"metrics", Json::array()}};
  if (fs::exists(dir / "config.json")) {
    // Half-written or corrupt: null (a discarded value would print as <discarded>, not JSON).
    const Json config = parse_json(slurp(dir / "config.json"));
    out["config"] = config.is_discarded() ? Json(nullptr) : config;
  }

  // Only whole lines: the trainer may be halfway through writing the last one.
  std::ifstream in(dir / "metrics.jsonl", std::ios::binary);
  std::string line;
  int64_t n = 0;
  while (in.peek() != EOF && std::getline(in, line)) {
    if (in.eof()) break;  // no newline yet
    if (n++ < after) continue;
    Json record = parse_json(line);
    if (record.is_object()) out["metrics"].push_back(std::move(record));
  }
  out["next"] = std::max(n, after);

  out["samples"] = Json::array();
  std::ifstream samples(dir / "samples.jsonl", std::ios::binary);
  while (std::getline(samples, line)) {
    Json record = parse_json(line);
    if (record.is_object()) out["samples"].push_back(std::move(record));
  }
  out["checkpoints"] = Json::array();
  for (const std::string& c : io::list_checkpoints(path))
    out["checkpoints"].push_back(fs::path(c).filename().string());
  return out;
}

}  // namespace tessera::studio
