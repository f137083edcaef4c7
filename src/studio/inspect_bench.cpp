// The bench result format (tessera-bench/1) as the studio reads it: validated on import, figures
// matched by name + params for comparisons and accelerator cards.
#include <algorithm>
#include <map>

#include "tessera/core/error.h"
#include "tessera/studio/inspect.h"

namespace tessera::studio {
using Json = nlohmann::json;

namespace {

void expect(bool ok, const std::string& field, const std::string& what, const Json& got) {
  if (!ok)
    throw ValueError("[studio.benchmarks] expected " + field + " to be " + what + ", got " +
                     got.dump().substr(0, 80));
}

// A figure's identity: its name and its params (nlohmann's objects are sorted, so dump is
// canonical).
std::string figure_key(const Json& f) { return f["name"].get<std::string>() + f["params"].dump(); }

double median(const Json& f) { return f["median"].get<double>(); }

}  // namespace

const Json& validate_bench(const Json& b) {
  expect(b.is_object(), "the body", "a JSON object", b);
  expect(b.value("format", "") == "tessera-bench/1", "format", "\"tessera-bench/1\"",
         b.value("format", Json()));
  static const Json suites = {"hardware", "ops", "comm", "train", "serve"};
  const Json suite = b.value("suite", Json());
  expect(std::find(suites.begin(), suites.end(), suite) != suites.end(), "suite",
         "one of hardware, ops, comm, train, serve", suite);
  expect(b.contains("machine") && b["machine"].is_object(), "machine", "an object",
         b.value("machine", Json()));
  expect(b.contains("figures") && b["figures"].is_array(), "figures", "an array",
         b.value("figures", Json()));
  for (size_t i = 0; i < b["figures"].size(); ++i) {
    const Json& f = b["figures"][i];
    const std::string at = "figures[" + std::to_string(i) + "]";
    expect(f.is_object(), at, "an object", f);
    expect(f.contains("name") && f["name"].is_string(), at + ".name", "a string",
           f.value("name", Json()));
    expect(f.contains("unit") && f["unit"].is_string(), at + ".unit", "a string",
           f.value("unit", Json()));
    expect(f.value("better", "") == "higher" || f.value("better", "") == "lower", at + ".better",
           "\"higher\" or \"lower\"", f.value("better", Json()));
    expect(f.contains("params") && f["params"].is_object(), at + ".params", "an object",
           f.value("params", Json()));
    expect(f.contains("median") && f["median"].is_number(), at + ".median", "a number",
           f.value("median", Json()));
    expect(f.contains("samples") && f["samples"].is_array(), at + ".samples", "an array",
           f.value("samples", Json()));
  }
  return b;
}

Json compare_bench(const Json& a, const Json& b) {
  Json out = Json::array();
  std::map<std::string, size_t> row_of;
  auto add = [&](const Json& f, const char* side) {
    const std::string key = figure_key(f);
    auto it = row_of.find(key);
    if (it == row_of.end()) {
      it = row_of.emplace(key, out.size()).first;
      out.push_back({{"name", f["name"]},
                     {"params", f["params"]},
                     {"unit", f["unit"]},
                     {"better", f["better"]},
                     {"a", nullptr},
                     {"b", nullptr},
                     {"ratio", nullptr},
                     {"improved", nullptr}});
    }
    out[it->second][side] = median(f);
  };
  for (const Json& f : a["figures"]) add(f, "a");
  for (const Json& f : b["figures"]) add(f, "b");
  for (Json& row : out) {
    if (!row["a"].is_number() || !row["b"].is_number()) continue;
    const double va = row["a"].get<double>(), vb = row["b"].get<double>();
    if (va == 0.0) continue;
    row["ratio"] = vb / va;
    row["improved"] = row["better"] == "higher" ? vb > va : vb < va;
  }
  return out;
}

Json hardware_summary(const Json& bench) {
  Json out = {{"gemm", Json::object()}, {"stream", Json::object()}, {"latency", Json::object()}};
  if (bench.value("suite", "") != "hardware") return out;
  for (const Json& f : bench["figures"]) {
    const std::string name = f["name"];
    const Json& p = f["params"];
    auto param = [&](const char* k) {
      return p.contains(k) ? (p[k].is_string() ? p[k].get<std::string>() : p[k].dump()) : "";
    };
    // GEMM is measured at several sizes: the card shows the best (the attainable peak).
    if (name == "gemm" && p.contains("dtype")) {
      Json& best = out["gemm"][param("dtype")];
      if (best.is_null() || f["median"].get<double>() > best.get<double>()) best = f["median"];
    }
    if (name == "stream" && p.contains("kernel")) out["stream"][param("kernel")] = f["median"];
    if (name == "latency" && p.contains("bytes")) out["latency"][param("bytes")] = f["median"];
  }
  return out;
}

}  // namespace tessera::studio
