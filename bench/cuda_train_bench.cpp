// Training throughput on one CUDA GPU: a GPT-2 or LLaMA model trained with the library Trainer
// (AdamW, gradient clipping, optional bf16 autocast) on byte tokens of a text file. Prints the
// loss of every step, then the median step time, tokens/s and model FLOPs utilisation (nanoGPT's
// estimate: 6 N + 12 L H Q T FLOPs per token, against the GPU's dense bf16 peak).
//
//   cuda_train_bench --data input.txt [--model gpt2|llama] [--preset gpt2|stories110M]
//                    [--batch 8] [--seq 1024] [--steps 50] [--dtype float32|bfloat16]
//                    [--peak-tflops 989] [--profile STEPS] [--trace FILE] [--check-step S]
//
// --profile runs STEPS more steps under the profiler with GPU times (CUDA events around every op
// and backward node) and prints the table by self GPU time, then the steps' wall time beside
// the GPU time the events cover (the rest is the GPU waiting for the host); --trace also writes
// the Chrome trace. --check-step computes step S's loss (float32, no autocast) from the same
// weights and batch on the GPU and on a CPU copy of the model, before the step runs.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "tessera/models/registry.h"
#include "tessera/optim/adam.h"
#include "tessera/runtime/cuda.h"
#include "tessera/runtime/profiler.h"
#include "tessera/tessera.h"
#include "tessera/train/trainer.h"

using namespace tessera;

namespace {

struct Args {
  std::string data, model = "gpt2", preset = "gpt2", dtype = "float32", trace;
  int64_t batch = 8, seq = 1024, steps = 50, profile = 0, check_step = -1;
  double peak_tflops = 989;  // H100 SXM dense bf16
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--data") a.data = v;
    else if (k == "--model") a.model = v;
    else if (k == "--preset") a.preset = v;
    else if (k == "--dtype") a.dtype = v;
    else if (k == "--batch") a.batch = std::stoll(v);
    else if (k == "--seq") a.seq = std::stoll(v);
    else if (k == "--steps") a.steps = std::stoll(v);
    else if (k == "--peak-tflops") a.peak_tflops = std::stod(v);
    else if (k == "--profile") a.profile = std::stoll(v);
    else if (k == "--check-step") a.check_step = std::stoll(v);
    else if (k == "--trace") a.trace = v;
    else throw ValueError("[cuda_train_bench] unknown option " + k);
  }
  if (a.data.empty()) throw ValueError("[cuda_train_bench] expected --data FILE");
  return a;
}

// Step's loss on the GPU and on a CPU copy of the model, from the same weights and batch.
void check_on_cpu(const models::ModelFamily& family, const std::string& preset,
                  models::CausalLM& gpu_model, const data::Batch& batch) {
  autograd::NoGradGuard no_grad;
  Generator gen(0);
  std::shared_ptr<models::CausalLM> cpu_model = family.build(family.preset(preset), &gen);
  const TensorList from = gpu_model.parameters(), to = cpu_model->parameters();
  for (size_t i = 0; i < from.size(); ++i) {
    Tensor p = to[i];
    p.copy_(from[i]);
  }
  const double gpu = train::causal_lm_loss(gpu_model)(batch).item<double>();
  data::Batch cpu_batch;
  for (const Tensor& t : batch) cpu_batch.push_back(t.to(kCPU));
  const double cpu = train::causal_lm_loss(*cpu_model)(cpu_batch).item<double>();
  std::printf("check: float32 loss of this step's batch: cuda %.6f, cpu %.6f\n", gpu, cpu);
}

}  // namespace

int main(int argc, char** argv) try {
  const Args a = parse(argc, argv);
  const Device gpu{DeviceType::CUDA, 0};
  std::ifstream in(a.data, std::ios::binary);
  std::vector<int64_t> bytes;
  for (std::istreambuf_iterator<char> it(in), end; it != end; ++it)
    bytes.push_back(static_cast<unsigned char>(*it));
  const Tensor text = tensor(bytes).to(gpu);

  Generator gen(1337);
  const models::ModelFamily& family = models::model_family(a.model);
  std::shared_ptr<models::CausalLM> model = family.build(family.preset(a.preset), &gen);
  model->to(gpu);
  optim::AdamW opt(model->parameters(), {.lr = 3e-4, .weight_decay = 0.1});
  train::TrainerOptions topts{.grad_clip = 1.0, .device = DeviceType::CUDA};
  if (a.dtype == "bfloat16") topts.autocast_dtype = kBFloat16;
  train::Trainer trainer(*model, train::causal_lm_loss(*model), opt, nullptr, nullptr, topts);

  // Windows at fixed pseudo-random offsets, the same for every dtype.
  Generator data_gen(7);
  const int64_t limit = text.numel() - a.seq - 1;
  auto next_batch = [&]() -> data::Batch {
    Tensor starts = randint(0, limit, {a.batch}, TensorOptions(kInt64), &data_gen).to(gpu);
    Tensor offsets = arange(a.seq + 1).to(gpu);
    Tensor rows = index_select(text, 0, (starts.unsqueeze(1) + offsets.unsqueeze(0)).flatten())
                      .reshape({a.batch, a.seq + 1});
    return {rows.slice(1, 0, a.seq).contiguous(), rows.slice(1, 1, a.seq + 1).contiguous()};
  };

  std::vector<double> times;
  double prev_loss = 0;
  for (int64_t s = 0; s < a.steps; ++s) {
    cuda::synchronize();
    auto t0 = std::chrono::steady_clock::now();
    const data::Batch batch = next_batch();
    if (s == a.check_step) check_on_cpu(family, a.preset, *model, batch);
    train::StepResult r = trainer.step([&] { return batch; });  // reads the loss: waits
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s >= 3) times.push_back(dt);
    if (s > 0 && r.loss > 2 * prev_loss)
      std::printf("loss jump at step %lld (rerun with --check-step %lld)\n",
                  static_cast<long long>(s), static_cast<long long>(s));
    prev_loss = r.loss;
    std::printf("step %3lld loss %.4f grad_norm %.3f time %.1f ms\n", static_cast<long long>(s),
                r.loss, r.grad_norm, dt * 1e3);
  }
  std::sort(times.begin(), times.end());
  const double median = times.empty() ? 0 : times[times.size() / 2];
  const double tokens = static_cast<double>(a.batch * a.seq);
  const int64_t n_params = model->num_parameters();
  const models::InferenceLayout layout = model->inference_layout();
  const double flops_per_token =
      6.0 * n_params + 12.0 * static_cast<double>(layout.layers.size()) * layout.dim * a.seq;
  const double tok_s = tokens / median;
  std::printf("%s %s %s batch %lld seq %lld: %.1f M params, median step %.1f ms, %.0f tok/s, "
              "MFU %.1f%% (of %.0f TFLOP/s), peak memory %.2f GiB\n",
              a.model.c_str(), a.preset.c_str(), a.dtype.c_str(), static_cast<long long>(a.batch),
              static_cast<long long>(a.seq), n_params / 1e6, median * 1e3, tok_s,
              100.0 * flops_per_token * tok_s / (a.peak_tflops * 1e12), a.peak_tflops,
              cuda::memory_stats().peak_bytes / double(1 << 30));
  if (a.profile > 0) {
    cuda::synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    profiler::Profiler prof({.device_time = true});
    for (int64_t s = 0; s < a.profile; ++s) trainer.step(next_batch);
    cuda::synchronize();
    const double wall_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const profiler::Profile p = prof.stop();
    std::printf("%s", p.table(profiler::SortBy::kSelfDevice, 60).c_str());
    int64_t covered_ns = 0;  // GPU time of the top-level events (nothing counted twice)
    for (const profiler::Event& e : p.events())
      if (e.depth == 0 && e.has_device_time()) covered_ns += e.device_end_ns - e.device_start_ns;
    std::printf("profiled %lld steps: wall %.1f ms per step, GPU spans of ops %.1f ms per step\n",
                static_cast<long long>(a.profile), wall_ms / a.profile,
                covered_ns / 1e6 / a.profile);
    if (!a.trace.empty()) p.export_chrome_trace(a.trace);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
