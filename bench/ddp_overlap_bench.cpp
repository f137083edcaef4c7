// How much of DistributedDataParallel's gradient all-reduce hides behind backward, per progress
// mode (Poll, Thread, None), on GPT-2 models shaped like `tessera train`'s tiny and small configs.
// For each mode, in rounds that rotate the modes (and swap the order of the measurements):
//   step    forward + backward with gradient sync (DDP's buckets reduced while backward runs),
//   compute forward + backward with sync off (set_require_gradient_sync(false)),
//   comm    after that backward, a blocking all-reduce (Avg) of every bucket, one after another.
// efficiency = (compute + comm - step) / comm: 1 when the reduction hides entirely behind
// backward, 0 when it adds its whole time, below 0 when DDP costs more than a blocking reduction.
// Each time is the slowest rank's, after a barrier; the table gives medians over rounds, the
// efficiency of the medians, and the median (min-max) of each round's own efficiency. "DDP wait"
// is last_timing().wait_seconds: how long backward blocked at its end for reductions in flight,
// which includes waiting for the slower rank ("rank skew": the slowest rank's compute minus the
// fastest's).
// Usage: mpirun -np 2 ddp_overlap_bench [--configs tiny,small,small_v65] [--modes Poll,Thread,None]
//          [--rounds N] [--warmup N] [--threads N] [--bucket-mb MB] [--bucket-view]
#include <omp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "tessera/dist/ddp.h"
#include "tessera/dist/process_group_mpi.h"
#include "tessera/models/gpt2.h"
#include "tessera/ops/creation.h"

namespace {

using namespace tessera;
using Clock = std::chrono::steady_clock;

struct BenchConfig {
  const char* name;
  int64_t vocab, layers, heads, embd, seq, batch;
};
// As bench/train_bench.sh and `tessera train` build them (block size = sequence length). small's
// tied 50257-row embedding gets its gradient last, so about 3/4 of its gradient bytes can only be
// reduced after backward; small_v65 (small's shape with tiny's vocabulary, not run by default)
// shows the overlap of the transformer blocks alone.
constexpr std::array<BenchConfig, 3> kConfigs = {{{"tiny", 65, 4, 4, 128, 128, 16},
                                                  {"small", 50257, 6, 6, 384, 256, 4},
                                                  {"small_v65", 65, 6, 6, 384, 256, 4}}};

constexpr std::array<dist::Progress, 3> kModes = {dist::Progress::Poll, dist::Progress::Thread,
                                                  dist::Progress::None};
const char* mode_name(dist::Progress p) {
  switch (p) {
    case dist::Progress::Poll:
      return "Poll";
    case dist::Progress::Thread:
      return "Thread";
    case dist::Progress::None:
      return "None";
  }
  return "?";
}

// What one round measures for one mode, in seconds.
// kSkew: the slowest rank's compute minus the fastest's.
enum Column { kStep, kCompute, kComm, kWait, kWindow, kSkew, kColumns };

// "AMD EPYC; flags: avx2" from /proc/cpuinfo.
std::string cpu_description() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, model = "unknown", flags;
  while (std::getline(in, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (line.rfind("model name", 0) == 0 && model == "unknown") model = value;
    if (line.rfind("flags", 0) == 0 && flags.empty()) flags = value;
  }
  std::string found;
  std::istringstream words(flags);
  for (std::string w; words >> w;)
    if (w == "avx2" || w == "avx512f" || w == "avx512_bf16" || w == "amx_bf16") found += " " + w;
  return model + "; flags:" + (found.empty() ? " none of avx2/avx512f/avx512_bf16" : found);
}

// CPU seconds the whole machine spent outside idle since boot (/proc/stat's first line).
double machine_busy_seconds() {
  std::ifstream in("/proc/stat");
  std::string cpu;
  double user, nice, system, idle, iowait, irq, softirq, steal;
  in >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal;
  return (user + nice + system + irq + softirq + steal) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// CPU seconds of this process (all its threads).
double own_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// One progress mode: its own copy of the model (same seed, so the same weights) and DDP wrapper.
struct Replica {
  std::shared_ptr<models::GPT2> model;
  std::unique_ptr<dist::DistributedDataParallel> ddp;
};

class Bench {
 public:
  Bench(const BenchConfig& c, std::shared_ptr<dist::ProcessGroup> pg,
        const std::vector<dist::Progress>& modes, double bucket_mb, bool bucket_view)
      : pg_(std::move(pg)), bucket_view_(bucket_view) {
    models::GPT2Config config;
    config.vocab_size = c.vocab;
    config.block_size = c.seq;
    config.n_layer = c.layers;
    config.n_head = c.heads;
    config.n_embd = c.embd;
    for (dist::Progress mode : modes) {
      Generator init(1337);
      Replica r;
      r.model = std::make_shared<models::GPT2>(config, &init);
      r.model->train();
      r.ddp = std::make_unique<dist::DistributedDataParallel>(
          *r.model, pg_,
          dist::DDPOptions{.bucket_cap_mb = bucket_mb,
                           .gradient_as_bucket_view = bucket_view,
                           .progress = mode});
      replicas_.push_back(std::move(r));
    }
    // Each rank its own batch, the same every iteration.
    Generator data(100 + static_cast<uint64_t>(pg_->rank()));
    x_ = randint(0, c.vocab, {c.batch, c.seq}, TensorOptions(kInt64), &data);
    y_ = randint(0, c.vocab, {c.batch, c.seq}, TensorOptions(kInt64), &data);
  }

  int64_t num_parameters() const { return replicas_[0].model->num_parameters(); }
  const std::vector<dist::GradBucket>& buckets() const { return replicas_[0].ddp->buckets(); }

  // Forward + backward of replica m with sync on or off; seconds, after a barrier.
  double backward(size_t m, bool sync) {
    Replica& r = replicas_[m];
    // Bucket views survive only an in-place zero_grad (torch's advice for that option too).
    r.model->zero_grad(/*set_to_none=*/!bucket_view_);
    r.ddp->set_require_gradient_sync(sync);
    pg_->barrier()->wait();
    const Clock::time_point start = Clock::now();
    Tensor loss = r.model->loss(x_, y_);
    loss.backward();
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    r.ddp->set_require_gradient_sync(true);
    return s;
  }

  // A blocking all-reduce (Avg) of each of replica m's buckets in turn; seconds, after a barrier.
  double blocking_comm(size_t m) {
    const auto& buckets = replicas_[m].ddp->buckets();
    pg_->barrier()->wait();
    const Clock::time_point start = Clock::now();
    for (const dist::GradBucket& b : buckets)
      pg_->all_reduce(b.buffer, dist::ReduceOp::Avg)->wait();
    return std::chrono::duration<double>(Clock::now() - start).count();
  }

  // Synchronised steps (the first rebuilds the buckets), plain backwards and reductions.
  void warm_up(int iterations) {
    for (size_t m = 0; m < replicas_.size(); ++m)
      for (int i = 0; i < iterations; ++i) {
        backward(m, true);
        backward(m, false);
        blocking_comm(m);
      }
  }

  struct Result {
    std::vector<std::vector<std::array<double, kColumns>>> rows;  // [mode][round][column]
    std::vector<double> foreign;  // per round: cores busy with other processes, on average
  };

  // The slowest rank's figures, and how busy the machine was with other work.
  Result run(int rounds) {
    const size_t modes = replicas_.size();
    Tensor t = zeros({static_cast<int64_t>(modes), rounds, kColumns}, TensorOptions(kFloat64));
    double* at = t.data_ptr<double>();
    // Per round: wall seconds and machine busy seconds (rank 0), this rank's CPU seconds.
    Tensor load = zeros({rounds, 3}, TensorOptions(kFloat64));
    double* ld = load.data_ptr<double>();
    const bool root = pg_->rank() == 0;
    for (int round = 0; round < rounds; ++round) {
      pg_->barrier()->wait();
      const Clock::time_point start = Clock::now();
      const double busy = root ? machine_busy_seconds() : 0.0, cpu = own_cpu_seconds();
      for (size_t k = 0; k < modes; ++k) {
        const size_t m = (k + static_cast<size_t>(round)) % modes;
        double* row = at + (m * rounds + round) * kColumns;
        auto step = [&] {
          row[kStep] = backward(m, true);
          const auto timing = replicas_[m].ddp->last_timing();
          row[kWait] = timing.wait_seconds;
          row[kWindow] = timing.comm_window_seconds;
        };
        if (round % 2) step();
        row[kCompute] = backward(m, false);
        row[kComm] = blocking_comm(m);
        if (round % 2 == 0) step();
      }
      pg_->barrier()->wait();
      ld[round * 3] = root ? std::chrono::duration<double>(Clock::now() - start).count() : 0.0;
      ld[round * 3 + 1] = root ? machine_busy_seconds() - busy : 0.0;
      ld[round * 3 + 2] = own_cpu_seconds() - cpu;
    }
    pg_->all_reduce(load, dist::ReduceOp::Sum)->wait();
    Result result;
    for (int round = 0; round < rounds; ++round)
      result.foreign.push_back(std::max(0.0, ld[round * 3 + 1] - ld[round * 3 + 2]) /
                               ld[round * 3]);
    Tensor fastest = t.clone();
    pg_->all_reduce(t, dist::ReduceOp::Max)->wait();
    pg_->all_reduce(fastest, dist::ReduceOp::Min)->wait();
    const double* lo = fastest.data_ptr<double>();
    std::vector<std::vector<std::array<double, kColumns>>>& rows = result.rows;
    rows.resize(modes);
    for (size_t m = 0; m < modes; ++m)
      for (int round = 0; round < rounds; ++round) {
        std::array<double, kColumns> r;
        const int64_t offset = (m * rounds + round) * kColumns;
        std::copy_n(at + offset, kColumns, r.begin());
        r[kSkew] = r[kCompute] - lo[offset + kCompute];
        rows[m].push_back(r);
      }
    return result;
  }

 private:
  std::shared_ptr<dist::ProcessGroup> pg_;
  bool bucket_view_;
  std::vector<Replica> replicas_;
  Tensor x_, y_;
};

void print_table(const BenchConfig& c, const std::vector<dist::Progress>& modes,
                 const std::vector<std::vector<std::array<double, kColumns>>>& rows) {
  for (size_t m = 0; m < rows.size(); ++m) {
    auto column = [&](Column col) {
      std::vector<double> v;
      for (const auto& r : rows[m]) v.push_back(r[col]);
      return v;
    };
    std::vector<double> eff;
    for (const auto& r : rows[m]) eff.push_back((r[kCompute] + r[kComm] - r[kStep]) / r[kComm]);
    const double step = median(column(kStep)), compute = median(column(kCompute)),
                 comm = median(column(kComm));
    std::printf(
        "| %s | %s | %.1f | %.1f | %.1f | %+.1f | %.2f | %.2f (%.2f to %.2f) | %.1f | %.1f | %.1f "
        "|\n",
        c.name, mode_name(modes[m]), step * 1e3, compute * 1e3, comm * 1e3, (step - compute) * 1e3,
        (compute + comm - step) / comm, median(eff), *std::min_element(eff.begin(), eff.end()),
        *std::max_element(eff.begin(), eff.end()), median(column(kWait)) * 1e3,
        median(column(kWindow)) * 1e3, median(column(kSkew)) * 1e3);
  }
  std::fflush(stdout);
}

// Whether a comma-separated list holds name.
bool listed(const std::string& list, const std::string& name) {
  return ("," + list + ",").find("," + name + ",") != std::string::npos;
}

int usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--configs tiny,small,small_v65] [--modes Poll,Thread,None] [--rounds N] "
               "[--warmup N] [--threads N] [--bucket-mb MB] [--bucket-view]\n",
               argv0);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string configs = "tiny,small", mode_list = "Poll,Thread,None";
  int rounds = 12, warmup = 2, threads = 1;
  double bucket_mb = 25.0;
  bool bucket_view = false;
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (!std::strcmp(argv[i], "--configs") && has_value) {
      configs = argv[++i];
    } else if (!std::strcmp(argv[i], "--modes") && has_value) {
      mode_list = argv[++i];
    } else if (!std::strcmp(argv[i], "--rounds") && has_value) {
      rounds = std::max(1, std::atoi(argv[++i]));
    } else if (!std::strcmp(argv[i], "--warmup") && has_value) {
      warmup = std::max(1, std::atoi(argv[++i]));
    } else if (!std::strcmp(argv[i], "--threads") && has_value) {
      threads = std::max(1, std::atoi(argv[++i]));
    } else if (!std::strcmp(argv[i], "--bucket-mb") && has_value) {
      bucket_mb = std::atof(argv[++i]);
    } else if (!std::strcmp(argv[i], "--bucket-view")) {
      bucket_view = true;
    } else {
      return usage(argv[0]);
    }
  }
  std::vector<dist::Progress> modes;
  for (dist::Progress m : kModes)
    if (listed(mode_list, mode_name(m))) modes.push_back(m);
  if (modes.empty()) return usage(argv[0]);
  omp_set_num_threads(threads);
  dist::init();
  {
    std::shared_ptr<dist::ProcessGroup> pg = dist::ProcessGroupMPI::world();
    const bool root = pg->rank() == 0;
    if (root) {
      std::printf("CPU: %s\n", cpu_description().c_str());
      std::printf(
          "%d ranks x %d threads; buckets of %g MiB (first 1 MiB)%s; %d rounds after %d warm-up "
          "iterations per mode; times are medians of the slowest rank's, in ms\n\n",
          pg->size(), threads, bucket_mb,
          bucket_view ? ", gradient_as_bucket_view, zero_grad in place" : "", rounds, warmup);
      std::printf(
          "| config | progress | step | compute | comm | step - compute | efficiency | "
          "per-round efficiency | DDP wait | DDP comm window | rank skew |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|\n");
    }
    std::string notes;
    for (const BenchConfig& c : kConfigs) {
      if (!listed(configs, c.name)) continue;
      Bench bench(c, pg, modes, bucket_mb, bucket_view);
      bench.warm_up(warmup);
      const auto result = bench.run(rounds);
      if (!root) continue;
      print_table(c, modes, result.rows);
      // Float32 gradients, in launch order.
      std::string sizes;
      for (const dist::GradBucket& b : bench.buckets()) {
        char mib[32];
        std::snprintf(mib, sizeof mib, "%s%.1f", sizes.empty() ? "" : ", ",
                      static_cast<double>(b.padded_numel()) * 4 / (1 << 20));
        sizes += mib;
      }
      char line[96];
      std::snprintf(line, sizeof line,
                    "%s: %.2fM parameters; buckets in launch order, MiB: ", c.name,
                    static_cast<double>(bench.num_parameters()) / 1e6);
      notes += line + sizes;
      std::snprintf(
          line, sizeof line, "; other processes kept %.2f cores busy (median, max %.2f)\n",
          median(result.foreign), *std::max_element(result.foreign.begin(), result.foreign.end()));
      notes += line;
    }
    if (root) std::printf("\n%s", notes.c_str());
  }
  dist::finalize();
  return 0;
}
