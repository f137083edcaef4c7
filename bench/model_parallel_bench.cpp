// Model-parallel training, measured: for one DP x TP x PP layout of a GPT-2 (run under mpirun
// with dp x tp x pp ranks), the step time and tokens/s, each pipeline stage's bubble as the
// executor measures it (time not spent computing over time computing, against (p - 1) / m or
// (p - 1) / (v m)), and the bytes every group moves per step against the formulas below, rank by
// rank. With --synthetic F,B the stages compute nothing: each forward sleeps F ms and each
// backward B ms in all per micro-batch (split over the virtual stages), so the bubble of the
// schedule and executor shows without the cores' contention.
//
// The formulas (per rank and step; m micro-batches per DP rank of b x s tokens, width h, A = b s h
// float32 elements, L_r layers on the rank, M = b s rows of logits, padded vocabulary V_p):
//   TP, no SP: all-reduces of A: 2 per layer forward (attention and MLP outputs), 2 backward
//     (their column-parallel inputs), the embedding's forward on the first stage, the head
//     input's backward on the last; cross-entropy's max (M) and [sum of exp, target logit] (2M).
//   TP with SP: each of those A-sized all-reduces becomes an all-gather plus a reduce-scatter of
//     A (the same ring traffic), and once per step the replicated gradients are all-reduced: 6h
//     per layer (two norms, two row-parallel biases), the position embedding (block x h) on the
//     first stage, the final norm (2h) on the last.
//   PP: per micro-batch, an activation of A (A / TP under SP) to the next global chunk and its
//     gradient back, each after a 128-byte header; per step the schedule check (3 int64 per
//     stage, all-gathered), the loss broadcast (8 bytes) and the clipping norm (8 bytes).
//   Tied embedding (PP): the first and last stage all-reduce the token embedding's gradient
//     (V_p / TP x h) once per step.
//   DP: DDP all-reduces every local gradient once per step (4 bytes per local parameter) and the
//     Trainer the step's loss (8 bytes).
// Usage: mpirun -np N model_parallel_bench [--tp T] [--pp P] [--sp] [--schedule gpipe|1f1b]
//          [--vpp V] [--pp-layers 5,3] [--micro-batches M (global, per step)] [--steps S] [--warmup
//          W]
//          [--layers L] [--embd H] [--heads NH] [--seq S] [--batch B] [--vocab V]
//          [--synthetic F,B] [--threads N]
// Prints one JSON object (rank 0) on stdout.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "counting_process_group.h"
#include "tessera/autograd/function.h"
#include "tessera/dist/layout_groups.h"
#include "tessera/models/gpt2.h"
#include "tessera/models/pipeline_stage.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/reduce.h"
#include "tessera/optim/adam.h"
#include "tessera/train/model_parallel.h"

namespace {

using namespace tessera;
using bench::CommOp;
using bench::CountingProcessGroup;
using Clock = std::chrono::steady_clock;

struct Options {
  int tp = 1, pp = 1, vpp = 1;
  bool sp = false;
  std::string schedule = "1f1b";
  std::vector<int64_t> layer_sizes;  // per global chunk (--pp-layers 5,3); empty: even
  int64_t micro_batches = 8, steps = 5, warmup = 2;
  int64_t layers = 8, embd = 256, heads = 8, seq = 128, batch = 4, vocab = 8192;
  double synthetic_fwd_ms = 0, synthetic_bwd_ms = 0;  // > 0: the synthetic pipeline
  int threads = 1;
  bool synthetic() const { return synthetic_fwd_ms > 0; }
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "model_parallel_bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--tp")
      o.tp = std::stoi(next());
    else if (a == "--pp")
      o.pp = std::stoi(next());
    else if (a == "--vpp")
      o.vpp = std::stoi(next());
    else if (a == "--sp")
      o.sp = true;
    else if (a == "--schedule")
      o.schedule = next();
    else if (a == "--micro-batches")
      o.micro_batches = std::stoll(next());
    else if (a == "--steps")
      o.steps = std::stoll(next());
    else if (a == "--warmup")
      o.warmup = std::stoll(next());
    else if (a == "--layers")
      o.layers = std::stoll(next());
    else if (a == "--embd")
      o.embd = std::stoll(next());
    else if (a == "--heads")
      o.heads = std::stoll(next());
    else if (a == "--seq")
      o.seq = std::stoll(next());
    else if (a == "--batch")
      o.batch = std::stoll(next());
    else if (a == "--pp-layers") {
      std::string v = next();
      for (size_t at = 0; at <= v.size();) {
        const size_t comma = std::min(v.find(',', at), v.size());
        o.layer_sizes.push_back(std::stoll(v.substr(at, comma - at)));
        at = comma + 1;
      }
    } else if (a == "--vocab")
      o.vocab = std::stoll(next());
    else if (a == "--threads")
      o.threads = std::stoi(next());
    else if (a == "--synthetic") {
      const std::string v = next();
      const size_t comma = v.find(',');
      o.synthetic_fwd_ms = std::stod(v.substr(0, comma));
      o.synthetic_bwd_ms =
          comma == std::string::npos ? 2 * o.synthetic_fwd_ms : std::stod(v.substr(comma + 1));
    } else {
      std::fprintf(stderr, "model_parallel_bench: unknown argument %s\n", a.c_str());
      std::exit(2);
    }
  }
  return o;
}

// The groups a rank talks over, each behind a counter. embedding is null off the tied stages.
struct CountedGroups {
  std::shared_ptr<CountingProcessGroup> dp, tp, pp, embedding;
  std::vector<CountingProcessGroup*> all() const {
    return {dp.get(), tp.get(), pp.get(), embedding.get()};
  }
};
constexpr const char* kGroupNames[] = {"dp", "tp", "pp", "embedding"};
constexpr const char* kOpNames[] = {"all_reduce", "all_gather", "reduce_scatter", "broadcast",
                                    "send"};
constexpr int kGroups = 4;

std::shared_ptr<CountingProcessGroup> counted(const std::shared_ptr<dist::ProcessGroupMPI>& g) {
  return g ? std::make_shared<CountingProcessGroup>(g) : nullptr;
}

// Expected calls and bytes per (group, op) of one rank's step: the formulas of the file comment.
using Table = std::array<std::array<bench::CommCount, bench::kCommOps>, kGroups>;

struct RankShape {
  int dp, tp, pp, stage;
  bool first, last;      // holds the embedding / the head
  int64_t layers;        // on this rank
  int64_t local_params;  // elements this rank trains
  int64_t local_chunks_sending, local_chunks_receiving_grads;
};

Table expected_volume(const Options& o, const RankShape& r, int64_t m) {
  Table e{};
  auto add = [&](int group, CommOp op, int64_t calls, int64_t bytes_each) {
    bench::CommCount& c = e[group][static_cast<int>(op)];
    c.calls += calls;
    c.bytes += calls * bytes_each;
  };
  const int64_t A = o.batch * o.seq * o.embd * 4, M = o.batch * o.seq * 4, h = o.embd;
  const int first = r.first, last = r.last;
  if (r.tp > 1) {
    const int64_t big = m * (4 * r.layers + first + last);
    if (o.sp) {
      add(1, CommOp::AllGather, big, A);
      add(1, CommOp::ReduceScatter, big, A);
      add(1, CommOp::AllReduce, 6 * r.layers, h * 4);  // replicated gradients
      add(1, CommOp::AllReduce, first, 1024 * h * 4);  // the position embedding (block 1024)
      add(1, CommOp::AllReduce, 2 * last, h * 4);      // the final norm
    } else {
      add(1, CommOp::AllReduce, big, A);
    }
    add(1, CommOp::AllReduce, m * last, M);      // cross-entropy's max
    add(1, CommOp::AllReduce, m * last, 2 * M);  // its sum of exps and target logit
    add(1, CommOp::AllReduce, 1, 8);             // the clipping norm
  }
  if (r.pp > 1) {
    const int64_t act = o.sp ? A / r.tp : A;
    const int64_t transfers = m * (r.local_chunks_sending + r.local_chunks_receiving_grads);
    add(2, CommOp::Send, transfers, act);
    add(2, CommOp::Send, transfers, 16 * 8);
    add(2, CommOp::AllGather, 1, 3 * 8 * r.pp);  // the schedule check
    add(2, CommOp::Broadcast, 1, 8);             // the loss
    add(2, CommOp::AllReduce, 1, 8);             // the clipping norm
    if (first || last) add(3, CommOp::AllReduce, 1, o.vocab / r.tp * h * 4);
  }
  if (r.dp > 1) {
    bench::CommCount& c = e[0][static_cast<int>(CommOp::AllReduce)];
    c.bytes += r.local_params * 4 + 8;
    c.calls = -1;  // the bucket count: DDP's business, not a formula's
  }
  return e;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Every rank's values, rank-major, on every rank (over MPI's world, outside the counters).
std::vector<double> gather_all(dist::ProcessGroup& world, const std::vector<double>& mine) {
  Tensor all = empty({static_cast<int64_t>(mine.size()) * world.size()}, kFloat64);
  world.all_gather(all, tensor(mine))->wait();
  const double* a = all.data_ptr<double>();
  return {a, a + all.numel()};
}

// The synthetic pipeline's chunks: a [batch, 8] activation between them, a sleep in each
// forward and in the backward node each forward records (so a backward's sleep starts only once
// its gradient has arrived, as real compute would).
double synthetic_step(const Options& o, dist::PipelineExecutor& pp, const Tensor& weight,
                      int64_t m) {
  using Ms = std::chrono::duration<double, std::milli>;
  const Ms fwd(o.synthetic_fwd_ms / o.vpp), bwd(o.synthetic_bwd_ms / o.vpp);
  const dist::PipelineCallbacks cb{.forward = [&](int chunk, int64_t, const Tensor& input) {
    std::this_thread::sleep_for(fwd);
    Tensor x = input.defined() ? input : ones({o.batch, 8}) * weight;
    Tensor y = x.detach() * 1.0;
    autograd::record("SleepBackward", {x}, {y}, {},
                     [bwd](autograd::BackwardContext&, const TensorList& g) {
                       std::this_thread::sleep_for(bwd);
                       return TensorList{g[0]};
                     });
    return pp.is_last_chunk(chunk) ? sum(y) : y;
  }};
  return pp.run(m, cb);
}

// Runs the layout and prints its JSON on rank 0; returns the exit status.
int run(const Options& o) {
  omp_set_num_threads(o.threads);
  auto world = dist::ProcessGroupMPI::world();
  const dist::Layout layout = dist::Layout::from_world(world->size(), o.tp, o.pp);
  const dist::LayoutGroups g = dist::make_layout_groups(*world, layout);
  const CountedGroups groups{counted(g.dp), counted(g.tp), counted(g.pp), counted(g.embedding)};
  const int dp = g.dp->size(), stage = g.pp->rank();
  if (o.micro_batches % dp != 0) {
    std::fprintf(stderr, "model_parallel_bench: --micro-batches must divide by DP %d\n", dp);
    return 2;
  }
  const int64_t m = o.micro_batches / dp;  // per DP rank
  const dist::PipelineScheduleKind kind = o.vpp > 1 ? dist::PipelineScheduleKind::Interleaved1F1B
                                                    : dist::parse_pipeline_schedule(o.schedule);

  std::shared_ptr<models::GPT2> model;
  std::unique_ptr<train::ModelParallel> parallel;
  std::unique_ptr<optim::Optimizer> optimizer;
  std::unique_ptr<train::Trainer> trainer;
  std::unique_ptr<dist::PipelineExecutor> synthetic_pp;
  Tensor weight = ones({8}).requires_grad_(true);
  std::vector<data::Batch> batches;
  if (o.synthetic()) {
    synthetic_pp = std::make_unique<dist::PipelineExecutor>(groups.pp, kind, o.vpp);
  } else {
    models::GPT2Config c;
    c.vocab_size = o.vocab;
    c.block_size = 1024;
    c.n_layer = o.layers;
    c.n_head = o.heads;
    c.n_embd = o.embd;
    manual_seed(1);
    model = std::make_shared<models::GPT2>(c);
    parallel = std::make_unique<train::ModelParallel>(
        model, train::ModelParallelGroups{groups.dp, groups.tp, groups.pp, groups.embedding},
        train::ModelParallelOptions{.sequence_parallel = o.sp,
                                    .schedule = kind,
                                    .virtual_stages = o.vpp,
                                    .layer_sizes = o.layer_sizes});
    train::TrainerOptions options{.grad_accum = m, .grad_clip = 1.0};
    parallel->configure(options);
    optimizer = std::make_unique<optim::AdamW>(
        optim::weight_decay_param_groups(parallel->trained().parameters(), 0.1),
        optim::AdamOptions{.lr = 3e-4, .weight_decay = 0.1});
    trainer = std::make_unique<train::Trainer>(parallel->trained(), parallel->loss(), *optimizer,
                                               nullptr, nullptr, options);
    Generator gen(7 + static_cast<uint64_t>(g.dp->rank()));
    for (int64_t i = 0; i < m; ++i) {
      Tensor x = randint(0, o.vocab, {o.batch, o.seq}, {kInt64}, &gen);
      batches.push_back({x, randint(0, o.vocab, {o.batch, o.seq}, {kInt64}, &gen)});
    }
  }
  dist::PipelineExecutor* executor = o.synthetic() ? synthetic_pp.get() : parallel->executor();

  std::vector<double> step_s, pipe_wall, pipe_compute;
  Table measured{};
  for (int64_t step = 0; step < o.warmup + o.steps; ++step) {
    world->barrier()->wait();
    for (CountingProcessGroup* c : groups.all())
      if (c) c->reset();
    const Clock::time_point start = Clock::now();
    if (o.synthetic()) {
      synthetic_step(o, *executor, weight, m);
    } else {
      int64_t next = 0;
      trainer->step([&] { return batches[next++]; });
    }
    const double wall = std::chrono::duration<double>(Clock::now() - start).count();
    if (step < o.warmup) continue;
    step_s.push_back(wall);
    if (executor) {
      const dist::PipelineTiming& t = executor->last_timing();
      pipe_wall.push_back(t.wall_seconds);
      pipe_compute.push_back(t.compute_seconds);
    }
    for (int k = 0; k < kGroups; ++k)
      if (CountingProcessGroup* c = groups.all()[k]) measured[k] = c->counts;
  }

  // This rank's shape, for the formulas.
  RankShape r{dp, g.tp->size(), g.pp->size(), stage, stage == 0, stage == g.pp->size() - 1, 0, 0, 0,
              0};
  if (parallel) {
    for (const Tensor& p : parallel->trained().parameters()) r.local_params += p.numel();
    r.layers = o.layers;
    if (const auto& chunks = parallel->chunks()) {
      r.layers = 0;
      for (size_t c = 0; c < chunks->size(); ++c) {
        const auto& chunk = *chunks->at<models::PipelineStage>(c);
        r.layers += chunk.end() - chunk.begin();
        r.local_chunks_sending += !chunk.is_last();
        r.local_chunks_receiving_grads += !chunk.is_first();
      }
    }
  }
  const Table expected = expected_volume(o, r, m);

  // Per rank: [step, executor wall, executor compute (medians), then per (group, op): calls,
  // bytes, expected calls, expected bytes, bus bytes].
  constexpr size_t kHead = 3;
  std::vector<double> mine = {median(step_s), median(pipe_wall), median(pipe_compute)};
  for (int k = 0; k < kGroups; ++k) {
    const int n = groups.all()[k] ? groups.all()[k]->size() : 1;
    for (int op = 0; op < bench::kCommOps; ++op) {
      mine.push_back(static_cast<double>(measured[k][op].calls));
      mine.push_back(static_cast<double>(measured[k][op].bytes));
      mine.push_back(static_cast<double>(expected[k][op].calls));
      mine.push_back(static_cast<double>(expected[k][op].bytes));
      mine.push_back(bench::bus_bytes(static_cast<CommOp>(op), measured[k][op].bytes, n));
    }
  }
  const std::vector<double> all = gather_all(*world, mine);
  if (world->rank() != 0) return 0;
  const size_t per = mine.size();
  const int ranks = world->size();
  const double step = mine[0];
  const double tokens = static_cast<double>(o.micro_batches * o.batch * o.seq);
  // The pipeline's bubble: its slowest stage's time over the stages' mean compute, less 1
  // (stage s's TP rank 0 of DP replica 0 is world rank s * tp: Megatron order, TP fastest).
  std::string compute;
  double slowest = 0, mean_compute = 0;
  for (int s = 0; s < o.pp; ++s) {
    const double* v = &all[static_cast<size_t>(s * o.tp) * per];
    slowest = std::max(slowest, v[1]);
    mean_compute += v[2] / o.pp;
    compute += (s ? "," : "") + std::to_string(v[2]);
  }
  const double bubble = executor && mean_compute > 0 ? slowest / mean_compute - 1 : 0;
  std::string comm;
  bool all_match = !o.synthetic();
  for (int k = 0; k < kGroups; ++k)
    for (int op = 0; op < bench::kCommOps; ++op) {
      double calls = 0, bytes = 0, want_calls = 0, want_bytes = 0, bus = 0;
      bool match = true;
      for (int rank = 0; rank < ranks; ++rank) {
        const double* v = &all[rank * per + kHead + (k * bench::kCommOps + op) * 5];
        calls += v[0];
        bytes += v[1];
        want_calls += v[2];
        want_bytes += v[3];
        bus += v[4];
        match = match && v[1] == v[3] && (v[2] < 0 || v[0] == v[2]);
      }
      if (o.synthetic() || (bytes == 0 && want_bytes == 0)) continue;
      all_match = all_match && match;
      char row[512];
      std::snprintf(row, sizeof row,
                    "%s{\"group\":\"%s\",\"op\":\"%s\",\"calls\":%.0f,\"bytes\":%.0f,"
                    "\"expected_bytes\":%.0f,\"bus_bytes\":%.0f,\"matches\":%s}",
                    comm.empty() ? "" : ",", kGroupNames[k], kOpNames[op], calls, bytes, want_bytes,
                    bus, match ? "true" : "false");
      comm += row;
    }
  std::string pp_layers;
  for (int64_t n : o.layer_sizes) pp_layers += (pp_layers.empty() ? "" : ",") + std::to_string(n);
  const int p = o.pp, v = o.vpp;
  const double theory = p > 1 ? static_cast<double>(p - 1) / (static_cast<double>(v) * m) : 0;
  // The schedule's own bubble with free communication and these forward : backward times (1 : 2
  // for a real model, as its FLOPs are), for the executor's overhead beside the formula's.
  const double fwd = o.synthetic() ? o.synthetic_fwd_ms : 1.0;
  const double bwd = o.synthetic() ? o.synthetic_bwd_ms : 2.0;
  const double simulated = dist::simulate_pipeline(dist::make_pipeline_schedules(kind, p, m, v), m,
                                                   v, {.forward = fwd / v, .backward = bwd / v})
                               .bubble_overhead;
  std::printf(
      "{\"layout\":{\"dp\":%d,\"tp\":%d,\"pp\":%d,\"vpp\":%d,\"sp\":%s,\"schedule\":\"%s\"},"
      "\"threads\":%d,\"pp_layers\":\"%s\","
      "\"micro_batches\":%lld,\"synthetic\":%s,\"step_s\":%.4f,\"tokens_per_s\":%.1f,"
      "\"stage_compute_s\":[%s],\"bubble\":%.4f,\"bubble_theory\":%.4f,"
      "\"bubble_simulated\":%.4f,\"comm\":[%s],"
      "\"comm_matches\":%s}\n",
      dp, o.tp, o.pp, o.vpp, o.sp ? "true" : "false",
      std::string(dist::pipeline_schedule_name(kind)).c_str(), o.threads, pp_layers.c_str(),
      static_cast<long long>(o.micro_batches), o.synthetic() ? "true" : "false", step,
      tokens / step, compute.c_str(), bubble, theory, simulated, comm.c_str(),
      all_match ? "true" : "false");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int status = run(parse(argc, argv));
  dist::finalize();  // after every group is gone
  return status;
}
