#include "bench_common.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "tessera/bench/compare.h"
#include "tessera/bench/report.h"
#include "tessera/bench/subprocess.h"
#include "tessera/bench/svg_chart.h"
#include "tessera/io/atomic_file.h"
#include "tessera/runtime/threads.h"

namespace tessera::cli {
namespace {

std::string command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string out;
  for (char ch : raw) out += ch == '\0' ? ' ' : ch;
  while (!out.empty() && out.back() == ' ') out.pop_back();
  const auto slash = out.find_last_of('/', out.find(' '));
  return slash == std::string::npos ? out : out.substr(slash + 1);  // "tessera bench ..."
}

}  // namespace

std::string default_torch_dir() { return TESSERA_SOURCE_DIR "/bench"; }

void add_bench_common(CLI::App* cmd, BenchCommon& c, bool peers) {
  cmd->add_option("--json", c.json, "Write the result (tessera-bench/1 JSON) to this file");
  cmd->add_option("--compare", c.compare,
                  "Print each figure's change against this earlier result; regressions beyond "
                  "the measured noise are flagged");
  cmd->add_option("--svg", c.svg_dir, "Write the suite's charts as SVG files into this folder");
  cmd->add_flag("--quick", c.quick, "A short smoke run that proves the suite works (CI)");
  cmd->add_option("--threads", c.threads, "OpenMP threads (default: all cores)");
  if (!peers) return;
  cmd->add_option("--hardware", c.hardware,
                  "A `tessera bench hardware` result whose peaks rates are held against "
                  "(default: measured briefly)");
  cmd->add_flag("--no-torch", c.no_torch, "Do not run PyTorch beside Tessera");
  cmd->add_option("--torch-scripts", c.torch_dir, "Folder of the PyTorch peer scripts")
      ->capture_default_str();
  cmd->add_option("--python", c.python, "Python interpreter with torch")->capture_default_str();
}

std::string self_exe() { return std::filesystem::read_symlink("/proc/self/exe").string(); }

std::string torch_script(const BenchCommon& c, const char* name) {
  if (c.no_torch) return "";
  const std::string path = c.torch_dir + "/" + name;
  if (!std::filesystem::exists(path)) {
    std::fprintf(stderr, "bench: %s not found; measuring Tessera alone\n", path.c_str());
    return "";
  }
  if (!bench::python_has_torch(c.python)) {
    std::fprintf(stderr, "bench: %s cannot import torch; measuring Tessera alone\n",
                 c.python.c_str());
    return "";
  }
  return path;
}

bench::Progress progress_bar(std::shared_ptr<ProgressBar>& bar) {
  bar = std::make_shared<ProgressBar>(1, ProgressBar::stderr_is_terminal());
  return [bar](const std::string& what, int64_t done, int64_t total) {
    bar->set_total(total);
    bar->update(done, what);
  };
}

int finish_bench(const bench::Result& r, const BenchCommon& c) {
  std::printf("%s", bench::markdown_report(r).c_str());
  if (!c.json.empty()) {
    r.save(c.json);
    std::printf("result: %s\n", c.json.c_str());
  }
  if (!c.svg_dir.empty()) {
    std::filesystem::create_directories(c.svg_dir);
    for (const auto& chart : bench::charts_for(r)) {
      const std::string path = c.svg_dir + "/" + chart.file;
      io::write_file_atomic(path, bench::render_svg(chart), "bench");
      std::printf("chart: %s\n", path.c_str());
    }
  }
  if (!c.compare.empty()) {
    const bench::Result old = bench::Result::load(c.compare);
    const auto changes = bench::compare(old, r);
    std::printf("\n%s", bench::format_changes(old, r, changes).c_str());
  }
  return 0;
}

bench::Result start_bench(const std::string& suite, const BenchCommon& c) {
  if (c.threads > 0) set_num_threads(c.threads);
  return bench::Result::start(suite, command_line());
}

std::unique_ptr<bench::Result> load_hardware(const BenchCommon& c) {
  return c.hardware.empty() ? nullptr
                            : std::make_unique<bench::Result>(bench::Result::load(c.hardware));
}

}  // namespace tessera::cli
