// The train suite: the GPT-2 step of `tessera train` against bench/torch_train_step.py.
#include "tessera/bench/train.h"

#include <chrono>
#include <map>

#include "tessera/bench/hardware.h"
#include "tessera/bench/peaks.h"
#include "tessera/bench/stats.h"
#include "tessera/bench/subprocess.h"
#include "tessera/core/error.h"
#include "tessera/models/gpt2.h"
#include "tessera/optim/adam.h"
#include "tessera/runtime/threads.h"
#include "tessera/tessera.h"
#include "tessera/train/trainer.h"

namespace tessera::bench {
namespace {

struct Sample {
  double tokens_per_s = 0;
  int64_t rss = 0;
};

Sample run_worker(const TrainOptions& o, const TrainConfig& c, const std::string& dtype, int steps,
                  int warmup) {
  std::vector<std::string> argv = o.worker_command;
  argv.insert(argv.end(), {"--config", c.name, "--dtype", dtype, "--steps", std::to_string(steps),
                           "--warmup", std::to_string(warmup)});
  const ProcessResult p = run_process(argv);
  TESSERA_CHECK(p.exit_code == 0, RuntimeError,
                "[bench.train] expected the Tessera worker to succeed, got exit code ", p.exit_code,
                ": ", p.err.substr(0, 2000));
  return {parse_train_measurement(p.out).tokens_per_s, p.max_rss_bytes};
}

Sample run_torch(const TrainOptions& o, const TrainConfig& c, const std::string& dtype, int steps,
                 int warmup) {
  const std::string threads = std::to_string(get_num_threads());
  const ProcessResult p = run_process(
      {o.python, o.torch_script, std::to_string(c.vocab), std::to_string(c.n_layer),
       std::to_string(c.n_head), std::to_string(c.n_embd), std::to_string(c.seq),
       std::to_string(c.batch), std::to_string(steps), threads, dtype, std::to_string(warmup)},
      {"OMP_NUM_THREADS=" + threads});
  TESSERA_CHECK(p.exit_code == 0, RuntimeError, "[bench.train] expected ", o.torch_script,
                " to succeed, got exit code ", p.exit_code, ": ", p.err.substr(0, 2000));
  return {std::stod(p.out), p.max_rss_bytes};
}

// The best GEMM FLOP/s per dtype name of the train suite ("float32", "bfloat16").
std::map<std::string, double> gemm_peaks(const TrainOptions& o) {
  std::map<std::string, double> peaks;
  for (const auto& [dtype, gemm] :
       std::map<std::string, std::string>{{"float32", "fp32"}, {"bfloat16", "bf16"}})
    if (const double peak = gemm_peak(o.hardware, gemm, !o.quick); peak > 0) peaks[dtype] = peak;
  return peaks;
}

models::GPT2Config gpt2_config(const TrainConfig& c) {
  models::GPT2Config config;
  config.vocab_size = c.vocab;
  config.block_size = c.seq;
  config.n_layer = c.n_layer;
  config.n_head = c.n_head;
  config.n_embd = c.n_embd;
  return config;
}

}  // namespace

const std::vector<TrainConfig>& train_configs() {
  static const std::vector<TrainConfig> configs{{"tiny", 65, 4, 4, 128, 128, 16},
                                                {"small", 50257, 6, 6, 384, 256, 4}};
  return configs;
}

const TrainConfig& train_config(const std::string& name) {
  for (const auto& c : train_configs())
    if (c.name == name) return c;
  throw ValueError(
      detail::str("[bench.train] expected a config tiny or small, got \"", name, "\""));
}

double train_flops_per_token(const TrainConfig& c, int64_t parameters) {
  return 6.0 * parameters + 12.0 * c.n_layer * c.seq * c.n_embd;
}

TrainMeasurement measure_tessera_train(const TrainConfig& c, const std::string& dtype, int steps,
                                       int warmup) {
  TESSERA_CHECK(dtype == "float32" || dtype == "bfloat16", ValueError,
                "[bench.train] expected dtype float32 or bfloat16, got \"", dtype, "\"");
  TESSERA_CHECK(steps > warmup && warmup >= 0, ValueError,
                "[bench.train] expected more steps than warm-up steps, got ", steps, " and ",
                warmup);
  manual_seed(0);
  models::GPT2 model(gpt2_config(c));
  optim::AdamOptions adam;  // the groups set weight decay, as bench/torch_train_step.py does
  adam.lr = 1e-3;
  adam.beta2 = 0.95;
  optim::AdamW optimizer(optim::weight_decay_param_groups(model.parameters(), 0.1), adam);
  train::TrainerOptions options;
  options.grad_clip = 1.0;
  if (dtype == "bfloat16") options.autocast_dtype = kBFloat16;
  train::Trainer trainer(model, train::causal_lm_loss(model), optimizer, nullptr, nullptr, options);
  std::vector<double> rates;
  for (int step = 0; step < steps; ++step) {
    data::Batch batch{randint(0, c.vocab, {c.batch, c.seq}), randint(0, c.vocab, {c.batch, c.seq})};
    const auto start = std::chrono::steady_clock::now();
    trainer.step([&] { return batch; });
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (step >= warmup) rates.push_back(c.batch * c.seq / s);
  }
  return {median(rates), model.num_parameters()};
}

std::string train_measurement_json(const TrainMeasurement& m) {
  return nlohmann::json{{"tokens_per_s", m.tokens_per_s}, {"parameters", m.parameters}}.dump() +
         "\n";
}

TrainMeasurement parse_train_measurement(const std::string& text) {
  try {
    const auto j = nlohmann::json::parse(text);
    return {j.at("tokens_per_s").get<double>(), j.at("parameters").get<int64_t>()};
  } catch (const nlohmann::json::exception& e) {
    throw ValueError(detail::str("[bench.train] expected a worker's JSON line, got \"",
                                 text.substr(0, 200), "\": ", e.what()));
  }
}

void run_train_suite(Result& result, const TrainOptions& o) {
  const std::vector<std::string> configs = o.quick ? std::vector<std::string>{"tiny"} : o.configs;
  const std::vector<std::string> dtypes = o.quick ? std::vector<std::string>{"float32"} : o.dtypes;
  const int rounds = o.quick ? 1 : o.rounds, steps = o.quick ? 4 : o.steps,
            warmup = o.quick ? 1 : 3;
  const bool torch = !o.torch_script.empty();
  const auto peaks = gemm_peaks(o);
  const int64_t total = static_cast<int64_t>(configs.size() * dtypes.size()) * rounds * (1 + torch);
  int64_t done = 0;
  std::map<std::string, std::vector<Sample>> torch_float32;  // PyTorch's float32 rounds by config
  // One definition for every row's mfu (the report prints a figure's definition once).
  std::string mfu_definition = "(6 N + 12 L T C) x tokens/s / the GEMM peak of the row's dtype:";
  for (const auto& [dtype, peak] : peaks)
    mfu_definition += detail::str(" ", dtype, " ", peak / 1e9, " GFLOP/s;");
  mfu_definition.pop_back();
  for (const auto& dtype : dtypes) {
    for (const auto& name : configs) {
      const TrainConfig& c = train_config(name);
      std::vector<Sample> ours, theirs;
      for (int r = 0; r < rounds; ++r) {
        const std::string round = " round " + std::to_string(r + 1);
        if (o.progress) o.progress(name + " " + dtype + round + ": Tessera", done++, total);
        ours.push_back(o.worker_command.empty()
                           ? Sample{measure_tessera_train(c, dtype, steps, warmup).tokens_per_s, 0}
                           : run_worker(o, c, dtype, steps, warmup));
        if (!torch) continue;
        if (o.progress) o.progress(name + " " + dtype + round + ": PyTorch", done++, total);
        theirs.push_back(run_torch(o, c, dtype, steps, warmup));
      }
      auto add = [&](const std::vector<Sample>& samples, const char* framework) {
        if (samples.empty()) return;
        const nlohmann::json params = {
            {"config", name}, {"dtype", dtype}, {"framework", framework}};
        std::vector<double> tps, step, rss;
        for (const auto& s : samples) {
          tps.push_back(s.tokens_per_s);
          step.push_back(c.batch * c.seq / s.tokens_per_s);
          if (s.rss > 0) rss.push_back(static_cast<double>(s.rss));
        }
        result.add({"tokens_per_s", "tok/s", Better::Higher, params, tps,
                    "median over a round's timed steps; one sample per round"});
        result.add({"step_time", "s", Better::Lower, params, step, "batch x seq / tokens_per_s"});
        if (!rss.empty())
          result.add(
              {"peak_rss", "B", Better::Lower, params, rss, "the process's peak resident set"});
      };
      add(ours, "tessera");
      add(theirs, "pytorch");
      // A lower precision's gain is held against PyTorch in float32, round by round (needs
      // float32 listed first among the dtypes).
      if (dtype == "float32") {
        torch_float32[name] = theirs;
      } else if (torch_float32[name].size() == ours.size() && !ours.empty()) {
        std::vector<double> ratio;
        for (size_t r = 0; r < ours.size(); ++r)
          ratio.push_back(ours[r].tokens_per_s / torch_float32[name][r].tokens_per_s);
        result.add({"vs_pytorch_float32", "x", Better::Higher,
                    {{"config", name}, {"dtype", dtype}}, ratio,
                    "Tessera's tokens/s in this dtype / PyTorch's float32 tokens/s of the same "
                    "round"});
      }
      if (!peaks.count(dtype)) continue;
      const int64_t params = models::GPT2(gpt2_config(c)).num_parameters();
      std::vector<double> mfu;
      for (const auto& s : ours)
        mfu.push_back(train_flops_per_token(c, params) * s.tokens_per_s / peaks.at(dtype));
      result.add({"mfu",
                  "",
                  Better::Higher,
                  {{"config", name}, {"dtype", dtype}},
                  mfu,
                  mfu_definition});
    }
  }
  if (o.progress) o.progress("done", total, total);
}

}  // namespace tessera::bench
