#pragma once
// The train suite: tokens/s, step time, MFU and peak memory of a GPT-2 training step (AdamW with
// betas 0.9/0.95 and decay on matrices, clipping at 1.0, random token batches) for named
// configs, float32 and bfloat16 autocast, alternating with the same step in PyTorch
// (bench/torch_train_step.py) round by round. Each round runs each framework in its own process,
// so peak resident memory is measured the same way for both (getrusage of the child).
// MFU = FLOPs per token x tokens/s / the machine's GEMM peak of the dtype, with nanoGPT's
// 6 N + 12 L T C FLOPs per token (N parameters, L layers, T sequence, C width).
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/bench/progress.h"
#include "tessera/bench/result.h"

namespace tessera::bench {

struct TrainConfig {
  std::string name;
  int64_t vocab, n_layer, n_head, n_embd, seq, batch;
};
// "tiny" (vocab 65, 4 layers, 4 heads, 128 wide, seq 128, batch 16) and "small" (vocab 50257,
// 6 layers, 6 heads, 384 wide, seq 256, batch 4).
const std::vector<TrainConfig>& train_configs();
// ValueError listing the names for an unknown one.
const TrainConfig& train_config(const std::string& name);
double train_flops_per_token(const TrainConfig& c, int64_t parameters);

// One framework's run: the median tokens/s of the steps after warm-up.
struct TrainMeasurement {
  double tokens_per_s = 0;
  int64_t parameters = 0;
};
// The Tessera step in this process: `steps` steps, the first `warmup` untimed.
TrainMeasurement measure_tessera_train(const TrainConfig& c, const std::string& dtype, int steps,
                                       int warmup);
// measure_tessera_train's result as the one JSON line a worker prints, and back.
std::string train_measurement_json(const TrainMeasurement& m);
TrainMeasurement parse_train_measurement(const std::string& text);

struct TrainOptions {
  bool quick = false;  // 1 round of 4 steps of the tiny config in float32
  int rounds = 5;
  int steps = 20;  // per round and framework; the first 3 are warm-up
  std::vector<std::string> configs = {"tiny", "small"};
  std::vector<std::string> dtypes = {"float32", "bfloat16"};
  // Runs a Tessera measurement in a child process: the command, to which --config NAME --dtype D
  // --steps N --warmup W are appended, prints train_measurement_json. Empty: in this process
  // (no peak memory figure).
  std::vector<std::string> worker_command;
  std::string torch_script;  // empty: Tessera alone
  std::string python = "/usr/bin/python3";
  const Result* hardware = nullptr;  // GEMM peaks for MFU; null: measured briefly
  Progress progress;
};

// Figures "tokens_per_s" (tok/s), "step_time" (s) and "peak_rss" (B; with a worker) with params
// config, dtype, framework; "mfu" (params config, dtype, peak) for Tessera.
void run_train_suite(Result& result, const TrainOptions& options);

}  // namespace tessera::bench
