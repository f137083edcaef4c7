// The ops suite: workloads of bench/torch_ops.py timed in Tessera, alternating with PyTorch.
#include "tessera/bench/ops.h"

#include <chrono>
#include <functional>
#include <map>
#include <sstream>

#include "tessera/bench/hardware.h"
#include "tessera/bench/peaks.h"
#include "tessera/bench/stats.h"
#include "tessera/bench/subprocess.h"
#include "tessera/core/error.h"
#include "tessera/runtime/threads.h"
#include "tessera/tessera.h"

namespace tessera::bench {
namespace {

using Call = std::function<void()>;

struct Workload {
  OpWorkloadInfo info;
  int repeats;
  std::function<Call()> make;  // builds the inputs (seeded) and returns the timed call
};

constexpr double kF = 4.0;  // bytes per float32

std::vector<Workload> workloads() {
  const double M = 1 << 20;
  return {
      {{"add_1m", 0, 3 * M * kF, "fp32"},
       15,
       [] {
         Tensor a = randn({1 << 20}), b = randn({1 << 20});
         return Call([=] { add(a, b); });
       }},
      {{"exp_1m", 0, 2 * M * kF, "fp32"},
       15,
       [] {
         Tensor a = randn({1 << 20});
         return Call([=] { exp(a); });
       }},
      {{"gelu_tanh_1m", 0, 2 * M * kF, "fp32"},
       15,
       [] {
         Tensor a = randn({1 << 20});
         return Call([=] { gelu(a, "tanh"); });
       }},
      {{"mul_broadcast_1024x1024", 0, 2 * M * kF, "fp32"},
       15,
       [] {
         Tensor m = randn({1024, 1024}), row = randn({1024});
         return Call([=] { mul(m, row); });
       }},
      {{"sum_lastdim_1024x1024", 0, M * kF, "fp32"},
       15,
       [] {
         Tensor m = randn({1024, 1024});
         return Call([=] { sum(m, {1}); });
       }},
      {{"sum_dim0_1024x1024", 0, M * kF, "fp32"},
       15,
       [] {
         Tensor m = randn({1024, 1024});
         return Call([=] { sum(m, {0}); });
       }},
      {{"transpose_contiguous_2048", 0, 2 * 4 * M * kF, "fp32"},
       15,
       [] {
         Tensor big = randn({2048, 2048});
         return Call([=] { big.t().contiguous(); });
       }},
      {{"softmax_4096x1024", 0, 2 * 4 * M * kF, "fp32"},
       15,
       [] {
         Tensor s = randn({4096, 1024});
         return Call([=] { softmax(s, -1); });
       }},
      {{"layer_norm_4096x768", 0, 2 * 3 * M * kF, "fp32"},
       15,
       [] {
         Tensor x = randn({4096, 768}), w = randn({768}), b = randn({768});
         return Call([=] { layer_norm(x, {768}, w, b); });
       }},
      {{"rms_norm_4096x768", 0, 2 * 3 * M * kF, "fp32"},
       15,
       [] {
         Tensor x = randn({4096, 768}), w = randn({768});
         return Call([=] { rms_norm(x, w); });
       }},
      {{"cross_entropy_1024x8192", 0, 8 * M * kF, "fp32"},
       15,
       [] {
         Tensor logits = randn({1024, 8192});
         Tensor target = randint(0, 8192, {1024});
         return Call([=] { cross_entropy(logits, target); });
       }},
      {{"matmul_f32_1024", gemm_flops(1024, 1024, 1024), 0, "fp32"},
       9,
       [] {
         Tensor x = randn({1024, 1024}), y = randn({1024, 1024});
         return Call([=] { matmul(x, y); });
       }},
      {{"matmul_f32_1024_nt", gemm_flops(1024, 1024, 1024), 0, "fp32"},
       9,
       [] {
         Tensor x = randn({1024, 1024}), y = randn({1024, 1024});
         return Call([=] { matmul(x, y.t()); });
       }},
      {{"matmul_bf16_1024", gemm_flops(1024, 1024, 1024), 0, "bf16"},
       9,
       [] {
         Tensor x = randn({1024, 1024}).to(kBFloat16), y = randn({1024, 1024}).to(kBFloat16);
         return Call([=] { matmul(x, y); });
       }},
      // Causal attention: QK^T and PV over the lower triangle, 2 x 2 T^2 D / 2 per head.
      {{"sdpa_causal_4x12x256x64", 2.0 * 4 * 12 * 256 * 256 * 64, 0, "fp32"},
       9,
       [] {
         Tensor q = randn({4, 12, 256, 64}), k = randn({4, 12, 256, 64}),
                v = randn({4, 12, 256, 64});
         return Call([=] { scaled_dot_product_attention(q, k, v, std::nullopt, true); });
       }},
      // Forward and both backward GEMMs: 3 x 2 M N K.
      {{"linear_fwd_bwd_2048x768x3072", 3 * gemm_flops(2048, 3072, 768), 0, "fp32"},
       7,
       [] {
         Tensor inp = randn({2048, 768}).requires_grad_();
         Tensor weight = (randn({3072, 768}) * 0.02).requires_grad_();
         Tensor bias = zeros({3072}, TensorOptions().with_requires_grad());
         return Call([=] {
           autograd::GradModeGuard grad(true);
           sum(linear(inp, weight, bias)).backward();
         });
       }},
  };
}

double median_seconds(const Call& call, int repeats) {
  for (int i = 0; i < 2; ++i) call();  // warm-up (primitive caches, page faults)
  std::vector<double> t;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    call();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return median(t);
}

// One PyTorch round: "name milliseconds" lines of the script, in seconds by name.
std::map<std::string, double> torch_round(const OpsOptions& o, int repeats_override) {
  std::vector<std::string> argv{o.python, o.torch_script, std::to_string(get_num_threads()),
                                o.filter};
  if (repeats_override > 0) argv.push_back(std::to_string(repeats_override));
  const ProcessResult p =
      run_process(argv, {"OMP_NUM_THREADS=" + std::to_string(get_num_threads())});
  TESSERA_CHECK(p.exit_code == 0, RuntimeError, "[bench.ops] expected ", o.torch_script,
                " to succeed, got exit code ", p.exit_code, ": ", p.err.substr(0, 2000));
  std::map<std::string, double> seconds;
  std::istringstream in(p.out);
  std::string name;
  double ms = 0;
  while (in >> name >> ms) seconds[name] = ms / 1000.0;
  return seconds;
}

}  // namespace

std::vector<OpWorkloadInfo> op_workloads() {
  std::vector<OpWorkloadInfo> out;
  for (const auto& w : workloads()) out.push_back(w.info);
  return out;
}

void run_ops_suite(Result& result, const OpsOptions& o) {
  std::vector<Workload> selected;
  for (auto& w : workloads())
    if (o.filter.empty() || w.info.name.find(o.filter) != std::string::npos) selected.push_back(w);
  TESSERA_CHECK(!selected.empty(), ValueError,
                "[bench.ops] expected a filter matching a workload, got \"", o.filter, "\"");
  const bool torch = !o.torch_script.empty();
  const int rounds = o.quick ? 1 : o.rounds;
  const int total = rounds * static_cast<int>(selected.size() + torch);
  int done = 0;
  std::map<std::string, std::vector<double>> ours, theirs;
  for (int r = 0; r < rounds; ++r) {
    manual_seed(0);
    autograd::NoGradGuard no_grad;
    for (const auto& w : selected) {
      if (o.progress)
        o.progress("round " + std::to_string(r + 1) + ": " + w.info.name, done++, total);
      ours[w.info.name].push_back(median_seconds(w.make(), o.quick ? 2 : w.repeats));
    }
    if (!torch) continue;
    if (o.progress) o.progress("round " + std::to_string(r + 1) + ": PyTorch", done++, total);
    for (const auto& [name, s] : torch_round(o, o.quick ? 2 : 0)) theirs[name].push_back(s);
  }
  const bool measure = !o.quick;
  const double triad = triad_peak(o.hardware, measure);
  std::map<std::string, double> gemm;  // by dtype
  for (const auto& w : selected) {
    const auto& t = ours[w.info.name];
    result.add({"time",
                "s",
                Better::Lower,
                {{"op", w.info.name}, {"framework", "tessera"}},
                t,
                "median of timed calls after 2 warm-ups; one sample per round"});
    if (theirs.count(w.info.name))
      result.add({"time",
                  "s",
                  Better::Lower,
                  {{"op", w.info.name}, {"framework", "pytorch"}},
                  theirs[w.info.name],
                  "the same workload in bench/torch_ops.py, same round"});
    const bool compute = w.info.flops > 0;
    const double work = compute ? w.info.flops : w.info.bytes;
    std::vector<double> rate;
    for (double s : t) rate.push_back(work / s);
    result.add({"rate",
                compute ? "FLOP/s" : "B/s",
                Better::Higher,
                {{"op", w.info.name}},
                rate,
                compute ? "FLOPs / time" : "bytes read + written once / time"});
    if (compute && !gemm.count(w.info.dtype))
      gemm[w.info.dtype] = gemm_peak(o.hardware, w.info.dtype, measure);
    const double peak = compute ? gemm.at(w.info.dtype) : triad;
    if (peak <= 0) continue;
    std::vector<double> fraction;
    for (double x : rate) fraction.push_back(x / peak);
    result.add({"fraction_of_peak",
                "",
                Better::Higher,
                {{"op", w.info.name}},
                fraction,
                "rate / the machine's best GEMM of the op's dtype (compute-bound ops) or STREAM "
                "triad (memory-bound ones)"});
  }
  if (o.progress) o.progress("done", total, total);
}

}  // namespace tessera::bench
