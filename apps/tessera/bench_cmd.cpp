// `tessera bench <suite>`: runs a suite of the benchmark library (src/bench/), prints its table,
// and writes the JSON result, SVG charts and a comparison against an older result on request.
// `tessera bench report` turns result files into markdown (BENCHMARKS.md).
#include <cstdio>
#include <memory>

#include "bench_common.h"
#include "commands.h"
#include "tessera/bench/compare.h"
#include "tessera/bench/hardware.h"
#include "tessera/bench/ops.h"
#include "tessera/bench/report.h"
#include "tessera/bench/serve.h"
#include "tessera/bench/train.h"
#include "tessera/core/error.h"
#include "tessera/runtime/threads.h"

namespace tessera::cli {
namespace {

// A --rates entry: requests per second, or "inf" (every request at once).
double parse_rate(const std::string& text) {
  if (text == "inf") return bench::kInf;
  try {
    size_t used = 0;
    const double rate = std::stod(text, &used);
    if (used == text.size() && rate > 0) return rate;
  } catch (const std::exception&) {
  }
  throw ValueError("[bench.serve] expected --rates of positive numbers or inf, got \"" + text + "\"");
}

}  // namespace

Command add_bench_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "bench",
      "Benchmark suites: hardware, ops, comm, train, serve; JSON results, charts, "
      "comparisons");
  cmd->require_subcommand(1);
  cmd->footer(
      "\nExamples:\n  tessera bench hardware --json hw.json --svg charts/\n"
      "  tessera bench ops --hardware hw.json --json ops.json --compare old_ops.json\n"
      "  tessera bench comm --ranks 2,4 --json comm.json     (or under mpirun -np N)\n"
      "  tessera bench train --configs tiny --dtypes float32 --json train.json\n"
      "  tessera bench compare old/ops.json ops.json\n"
      "  tessera bench report hw.json ops.json > BENCHMARKS.md");
  auto c = std::make_shared<BenchCommon>();
  // The command chosen on the command line sets it from its callback.
  auto run = std::make_shared<std::function<int()>>();

  // A suite's command: its callback runs body between start_bench and finish_bench, with the
  // --hardware result (or null) and a progress bar.
  using Body = std::function<void(bench::Result&, const bench::Result* hardware, bench::Progress)>;
  auto add_suite = [=](const char* name, const char* help, bool peers, Body body) {
    CLI::App* sub = cmd->add_subcommand(name, help);
    add_bench_common(sub, *c, peers);
    sub->callback([=] {
      *run = [=] {
        bench::Result r = start_bench(name, *c);
        auto hw_result = load_hardware(*c);
        std::shared_ptr<ProgressBar> bar;
        body(r, hw_result.get(), progress_bar(bar));
        bar->clear();
        return finish_bench(r, *c);
      };
    });
    return sub;
  };

  auto hw = std::make_shared<bench::HardwareOptions>();
  CLI::App* hardware =
      add_suite("hardware",
                "GEMM peak per dtype (oneDNN), STREAM bandwidth, memory latency sweep, GPU copies",
                false, [=](bench::Result& r, const bench::Result*, bench::Progress progress) {
                  hw->quick = c->quick;
                  hw->progress = std::move(progress);
                  bench::run_hardware_suite(r, *hw);
                });
  hardware->add_option("--repetitions", hw->repetitions, "Repetitions (best of N)")
      ->capture_default_str();
  hardware->add_option("--gemm-size", hw->gemm_size, "m = n = k of the GEMMs (default 2048)");

  auto ops = std::make_shared<bench::OpsOptions>();
  CLI::App* ops_cmd = add_suite(
      "ops", "Op workloads: latency, FLOP/s or bytes/s against the peaks, PyTorch side by side",
      true, [=](bench::Result& r, const bench::Result* hardware, bench::Progress progress) {
        ops->quick = c->quick;
        ops->hardware = hardware;
        ops->torch_script = torch_script(*c, "torch_ops.py");
        ops->python = c->python;
        ops->progress = std::move(progress);
        bench::run_ops_suite(r, *ops);
      });
  ops_cmd->add_option("--rounds", ops->rounds, "Alternating rounds")->capture_default_str();
  ops_cmd->add_option("--filter", ops->filter, "Only workloads whose name contains this");

  auto train = std::make_shared<bench::TrainOptions>();
  CLI::App* train_cmd = add_suite(
      "train", "GPT-2 training step: tokens/s, step time, MFU, peak memory; PyTorch side by side",
      true, [=](bench::Result& r, const bench::Result* hardware, bench::Progress progress) {
        train->quick = c->quick;
        train->hardware = hardware;
        train->torch_script = torch_script(*c, "torch_train_step.py");
        train->python = c->python;
        train->worker_command = {self_exe(), "bench", "train-worker"};
        if (c->threads > 0)
          train->worker_command.push_back("--threads=" + std::to_string(c->threads));
        train->progress = std::move(progress);
        bench::run_train_suite(r, *train);
      });
  train_cmd->add_option("--rounds", train->rounds, "Alternating rounds")->capture_default_str();
  train_cmd->add_option("--steps", train->steps, "Steps per round (3 warm-up)")
      ->capture_default_str();
  train_cmd->add_option("--configs", train->configs, "tiny, small")->delimiter(',');
  train_cmd->add_option("--dtypes", train->dtypes, "float32, bfloat16")->delimiter(',');

  auto serve = std::make_shared<bench::ServeSuiteOptions>();
  auto rates = std::make_shared<std::vector<std::string>>();
  CLI::App* serve_cmd = add_suite(
      "serve",
      "Load generator against tessera serve (TTFT, TPOT, ITL, E2EL, goodput as vLLM's benchmark) "
      "and llama-bench's pp/tg table",
      false, [=](bench::Result& r, const bench::Result*, bench::Progress progress) {
        serve->quick = c->quick;
        serve->rates.clear();
        for (const auto& rate : *rates) serve->rates.push_back(parse_rate(rate));
        serve->progress = std::move(progress);
        bench::run_serve_suite(r, *serve);
        const std::string table = bench::llama_bench_table(r);
        if (!table.empty()) std::printf("%s\n", table.c_str());
      });
  serve_cmd->add_option("--url", serve->url, "A running server (default: start one from --model)");
  serve_cmd->add_option("--model", serve->model, "Model file or run folder (in-process server, pp/tg)");
  serve_cmd->add_option("--tokenizer", serve->tokenizer, "Tokenizer (default: the model's)");
  serve_cmd->add_option("--data-dir", serve->data_dir, "Folder of gpt2/encoder.json and vocab.bpe");
  serve_cmd->add_option("--device", serve->device, "cpu or cuda[:N]")->capture_default_str();
  serve_cmd->add_option("--max-batch", serve->max_batch, "The in-process engine's batch limit");
  serve_cmd->add_option("--served-model-name", serve->served_model_name, "\"model\" sent to --url");
  serve_cmd->add_option("--api-key", serve->api_key, "Bearer token for --url");
  serve_cmd->add_option("--rates", *rates, "Request rates per second, inf: all at once (default inf)")
      ->delimiter(',');
  serve_cmd->add_option("--max-concurrency", serve->max_concurrency, "Requests in flight at most");
  serve_cmd->add_option("--num-prompts", serve->num_prompts, "Requests per rate (default 200)");
  serve_cmd->add_option("--prompt-len", serve->prompt_len, "Prompt tokens (default 256)");
  serve_cmd->add_option("--output-len", serve->output_len, "Output tokens (default 128)");
  serve_cmd->add_option("--range-ratio", serve->range_ratio,
                        "Lengths uniform in len x [1 - r, 1 + r] (vLLM's random dataset)");
  serve_cmd->add_option("--burstiness", serve->burstiness,
                        "Gamma arrivals of this shape (1: Poisson)")->capture_default_str();
  serve_cmd->add_option("--seed", serve->seed, "Arrivals and prompts");
  serve_cmd->add_option("--goodput", serve->goodput, "SLOs in ms, e.g. ttft:500 tpot:50");
  serve_cmd->add_option("--pp", serve->pp, "Prefill tokens of the pp test (default 512)");
  serve_cmd->add_option("--tg", serve->tg, "Generated tokens of the tg test (default 128)");
  serve_cmd->add_option("--reps", serve->reps, "pp/tg repetitions (default 5)");
  serve_cmd->add_flag("--skip-load", serve->skip_load, "Only the pp/tg table");
  serve_cmd->add_flag("--skip-llama-bench", serve->skip_llama_bench, "Only the load test");

  // The Tessera side of one train round in its own process (run by the train suite).
  struct Worker {
    std::string config, dtype;
    int steps = 20, warmup = 3, threads = 0;
  };
  auto worker = std::make_shared<Worker>();
  CLI::App* worker_cmd = cmd->add_subcommand("train-worker", "")->group("");
  worker_cmd->add_option("--config", worker->config)->required();
  worker_cmd->add_option("--dtype", worker->dtype)->required();
  worker_cmd->add_option("--steps", worker->steps);
  worker_cmd->add_option("--warmup", worker->warmup);
  worker_cmd->add_option("--threads", worker->threads);
  worker_cmd->callback([=] {
    *run = [=] {
      if (worker->threads > 0) set_num_threads(worker->threads);
      const auto m = bench::measure_tessera_train(bench::train_config(worker->config),
                                                  worker->dtype, worker->steps, worker->warmup);
      std::printf("%s", bench::train_measurement_json(m).c_str());
      return 0;
    };
  });

  auto comm = std::make_shared<bench::CommOptions>();
  auto ranks = std::make_shared<std::vector<int>>(std::vector<int>{2});
  auto collectives = std::make_shared<std::vector<std::string>>();
  CLI::App* comm_cmd = cmd->add_subcommand(
      "comm", "Collectives over MPI: time, algbw, busbw (nccl-tests' definitions) by size");
  add_bench_common(comm_cmd, *c, false);
  comm_cmd
      ->add_option("--ranks", *ranks,
                   "Process counts to launch with mpirun, one run each (ignored under mpirun)")
      ->delimiter(',');
  comm_cmd
      ->add_option("--collectives", *collectives,
                   "all_reduce, all_gather, reduce_scatter, broadcast, sendrecv")
      ->delimiter(',');
  comm_cmd->add_option("--max-bytes", comm->max_bytes, "Largest message")->capture_default_str();
  comm_cmd->callback(
      [=] { *run = [=] { return run_comm_command(*c, *comm, *ranks, *collectives); }; });

  CLI::App* report = cmd->add_subcommand("report", "Markdown tables from result files");
  auto files = std::make_shared<std::vector<std::string>>();
  report->add_option("files", *files, "tessera-bench/1 JSON files")->required();
  report->callback([=] {
    *run = [=] {
      for (const auto& f : *files)
        std::printf("%s", bench::markdown_report(bench::Result::load(f)).c_str());
      return 0;
    };
  });

  CLI::App* compare = cmd->add_subcommand(
      "compare", "Each figure of NEW against OLD (two result files), regressions flagged");
  auto pair = std::make_shared<std::vector<std::string>>();
  compare->add_option("files", *pair, "OLD.json NEW.json")->required()->expected(2);
  compare->callback([=] {
    *run = [=] {
      const auto old = bench::Result::load((*pair)[0]), now = bench::Result::load((*pair)[1]);
      std::printf("%s", bench::format_changes(old, now, bench::compare(old, now)).c_str());
      return 0;
    };
  });

  return {cmd, [run] { return (*run)(); }};
}

}  // namespace tessera::cli
