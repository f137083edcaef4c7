// The benchmark suite's definitions: statistics, STREAM byte counts, nccl-tests' bus bandwidth
// factors, the result format, --compare's noise rule, charts and reports.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "tessera/bench/comm.h"
#include "tessera/bench/compare.h"
#include "tessera/bench/hardware.h"
#include "tessera/bench/report.h"
#include "tessera/bench/stats.h"
#include "tessera/bench/svg_chart.h"
#include "tessera/bench/train.h"
#include "tessera/core/error.h"

using namespace tessera;
using namespace tessera::bench;

namespace {

Figure figure(std::string name, nlohmann::json params, std::vector<double> samples,
              Better better = Better::Higher, std::string unit = "FLOP/s") {
  return {std::move(name), std::move(unit), better, std::move(params), std::move(samples), ""};
}

Result result_with(std::vector<Figure> figures) {
  Result r;
  r.suite = "test";
  r.machine.cpu_model = "Test CPU";
  r.machine.cpu_flags = {"avx2", "fma"};
  r.commit = "0123456789abcdef";
  r.date = "2026-11-23T00:00:00Z";
  r.command = "tessera bench test";
  r.figures = std::move(figures);
  return r;
}

}  // namespace

TEST(BenchStats, PercentilesInterpolateLikeNumpy) {
  // Values from numpy.percentile (linear interpolation) on the same data.
  const std::vector<double> v{10, 3, 1, 4, 2};
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1.0);
  EXPECT_DOUBLE_EQ(percentile(v, 50), 3.0);
  EXPECT_NEAR(percentile(v, 90), 7.6, 1e-12);
  EXPECT_NEAR(percentile(v, 99), 9.76, 1e-12);
  EXPECT_DOUBLE_EQ(percentile(v, 100), 10.0);
  const std::vector<double> w{0.5, 0.1, 0.7, 0.3};
  EXPECT_NEAR(percentile(w, 25), 0.25, 1e-12);
  EXPECT_NEAR(median(w), 0.4, 1e-12);
  EXPECT_NEAR(percentile(w, 99), 0.694, 1e-12);
  EXPECT_NEAR(stddev(v), 3.5355339059327378, 1e-12);  // numpy.std(ddof=1)
  EXPECT_DOUBLE_EQ(mean(v), 4.0);
  EXPECT_THROW(percentile({}, 50), ValueError);
  EXPECT_THROW(percentile(v, 101), ValueError);
  EXPECT_DOUBLE_EQ(relative_spread({9, 10, 11}), 0.2);
}

TEST(BenchHardware, StreamCountsBytesAsStreamDoes) {
  // copy and scale touch two arrays of n doubles, add and triad three.
  EXPECT_EQ(stream_bytes(StreamKernel::Copy, 1000), 16000);
  EXPECT_EQ(stream_bytes(StreamKernel::Scale, 1000), 16000);
  EXPECT_EQ(stream_bytes(StreamKernel::Add, 1000), 24000);
  EXPECT_EQ(stream_bytes(StreamKernel::Triad, 1000), 24000);
  EXPECT_DOUBLE_EQ(gemm_flops(2, 3, 4), 48.0);
}

TEST(BenchHardware, MeasurementsArePositive) {
  for (double s : time_stream(StreamKernel::Triad, 1 << 16, 2)) EXPECT_GT(s, 0.0);
  for (double ns : time_pointer_chase(1 << 14, 2)) EXPECT_GT(ns, 0.0);
  const auto gemm = time_gemm("fp32", 64, 2);
  ASSERT_EQ(gemm.size(), 2u);  // oneDNN runs fp32 on every x86-64 CPU
  EXPECT_THROW(time_gemm("fp8", 64, 1), ValueError);
}

TEST(BenchComm, BusBandwidthFactorsAreNcclTests) {
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::AllReduce, 4), 1.5);  // 2(n-1)/n
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::AllReduce, 1), 0.0);
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::AllGather, 4), 0.75);  // (n-1)/n
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::ReduceScatter, 8), 0.875);
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::Broadcast, 4), 1.0);
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::SendRecv, 4), 1.0);
  EXPECT_EQ(parse_collective("reduce_scatter"), Collective::ReduceScatter);
  EXPECT_THROW(parse_collective("alltoall"), ValueError);
}

TEST(BenchTrain, FlopsPerTokenIsNanoGptsFormula) {
  const TrainConfig& c = train_config("tiny");
  // 6 N + 12 L T C
  EXPECT_DOUBLE_EQ(train_flops_per_token(c, 1000), 6000.0 + 12.0 * 4 * 128 * 128);
  EXPECT_THROW(train_config("huge"), ValueError);
  const TrainMeasurement m = parse_train_measurement(train_measurement_json({1234.5, 42}));
  EXPECT_DOUBLE_EQ(m.tokens_per_s, 1234.5);
  EXPECT_EQ(m.parameters, 42);
  EXPECT_THROW(parse_train_measurement("oops"), ValueError);
}

TEST(BenchResult, RoundTripsThroughJsonFile) {
  Result r = Result::start("hardware", "tessera bench hardware");
  EXPECT_FALSE(r.machine.cpu_model.empty());
  EXPECT_GT(r.machine.cores, 0);
  EXPECT_FALSE(r.commit.empty());
  r.add(figure("gemm", {{"dtype", "fp32"}, {"m", 64}}, {1e9, 3e9, 2e9}));
  const std::string path =
      (std::filesystem::temp_directory_path() / "tessera_bench_result.json").string();
  r.save(path);
  const Result back = Result::load(path);
  std::filesystem::remove(path);
  EXPECT_EQ(back.suite, "hardware");
  EXPECT_EQ(back.commit, r.commit);
  EXPECT_EQ(back.machine.cpu_flags, r.machine.cpu_flags);
  ASSERT_EQ(back.figures.size(), 1u);
  EXPECT_EQ(back.figures[0].samples, (std::vector<double>{1e9, 3e9, 2e9}));
  EXPECT_DOUBLE_EQ(back.figures[0].median(), 2e9);
  const auto j = back.to_json();
  EXPECT_EQ(j["format"], "tessera-bench/1");
  EXPECT_EQ(j["figures"][0]["max"], 3e9);
  ASSERT_NE(back.find("gemm", {{"dtype", "fp32"}}), nullptr);
  EXPECT_EQ(back.find("gemm", {{"dtype", "bf16"}}), nullptr);
}

TEST(BenchResult, RejectsOtherFormats) {
  EXPECT_THROW(Result::from_json({{"format", "other/1"}}), ValueError);
  EXPECT_THROW(Result::from_json({{"format", "tessera-bench/1"}, {"suite", "x"}}), ValueError);
  EXPECT_THROW(Result::from_json({{"format", "tessera-bench/1"},
                                  {"suite", "x"},
                                  {"figures", {{{"name", "f"}, {"samples", "fast"}}}}}),
               ValueError);
  EXPECT_THROW(Result::load("/nonexistent/result.json"), ValueError);
}

TEST(BenchCompare, FlagsChangesBeyondTheMeasuredNoise) {
  const Result old =
      result_with({figure("gemm", {{"dtype", "fp32"}}, {100, 102, 98}),
                   figure("latency", {{"bytes", 4096}}, {1.0, 1.0}, Better::Lower, "s"),
                   figure("stream", {{"kernel", "copy"}}, {50, 60, 55})});
  const Result now =
      result_with({figure("gemm", {{"dtype", "fp32"}}, {80, 81, 79}),  // -20%
                   figure("latency", {{"bytes", 4096}}, {0.5, 0.5}, Better::Lower, "s"),
                   figure("stream", {{"kernel", "copy"}}, {52, 58, 53}),  // in noise
                   figure("new", {}, {1})});
  const auto changes = compare(old, now);
  ASSERT_EQ(changes.size(), 3u);  // "new" has no old figure
  EXPECT_TRUE(changes[0].noise_measured);
  EXPECT_FALSE(changes[1].noise_measured);  // two samples: a spread of 0 means nothing
  EXPECT_EQ(changes[1].noise, kUnmeasuredNoiseFloor);
  EXPECT_TRUE(changes[0].regression);
  EXPECT_NEAR(changes[0].change, -0.2, 1e-12);
  EXPECT_TRUE(changes[1].improvement);  // half the latency is twice as good
  EXPECT_NEAR(changes[1].change, 1.0, 1e-12);
  EXPECT_FALSE(changes[2].regression);
  EXPECT_FALSE(changes[2].improvement);
  const std::string text = format_changes(old, now, changes);
  EXPECT_NE(text.find("REGRESSION"), std::string::npos);
  EXPECT_NE(text.find("1 regressions beyond the noise"), std::string::npos);
  // One sample each: a 5% change is no verdict (it was flagged beyond a 1% floor).
  const auto single = compare(result_with({figure("ttft", {}, {1.0}, Better::Lower, "s")}),
                              result_with({figure("ttft", {}, {1.05}, Better::Lower, "s")}));
  ASSERT_EQ(single.size(), 1u);
  EXPECT_FALSE(single[0].regression);
  EXPECT_NE(format_changes(old, now, single).find("(n < 3)"), std::string::npos);
}

TEST(BenchReport, PairsFrameworksWithTheirRatio) {
  const Result r = result_with(
      {figure("time", {{"op", "add"}, {"framework", "tessera"}}, {1e-3}, Better::Lower, "s"),
       figure("time", {{"op", "add"}, {"framework", "pytorch"}}, {2e-3}, Better::Lower, "s"),
       figure("rate", {{"op", "add"}}, {4e9}, Better::Higher, "B/s")});
  const std::string md = markdown_report(r);
  EXPECT_NE(md.find("| op | time (tessera) | time (pytorch) | time: Tessera / PyTorch | rate |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| add | 1.00 ms | 2.00 ms | 2.00x | 4.0 GB/s |"), std::string::npos) << md;
  EXPECT_NE(md.find("Test CPU"), std::string::npos);
}

TEST(BenchChart, RendersOnePathPerSeriesAndEscapesText) {
  Chart c;
  c.title = "a < b & c";
  c.x_unit = "B";
  c.y_unit = "B/s";
  c.log_x = true;
  c.series = {{"one", {{1024, 1e9}, {4096, 2e9}}}, {"two", {{1024, 3e9}, {4096, 1e9}}}};
  const std::string svg = render_svg(c);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("a &lt; b &amp; c"), std::string::npos);
  size_t paths = 0;
  for (size_t at = svg.find("<path"); at != std::string::npos; at = svg.find("<path", at + 1))
    ++paths;
  EXPECT_EQ(paths, 2u);
  EXPECT_NE(svg.find("1 KiB"), std::string::npos);  // byte ticks
  EXPECT_EQ(svg.find("nan"), std::string::npos);
}

TEST(BenchChart, EachSuiteDrawsItsSweeps) {
  Result r = result_with({figure("latency", {{"bytes", 4096}}, {1e-9}, Better::Lower, "s"),
                          figure("latency", {{"bytes", 8192}}, {2e-9}, Better::Lower, "s")});
  r.suite = "hardware";
  auto charts = charts_for(r);
  ASSERT_EQ(charts.size(), 1u);
  EXPECT_EQ(charts[0].series[0].points.size(), 2u);
  r.suite = "comm";
  r.figures = {figure("busbw", {{"collective", "all_reduce"}, {"ranks", 2}, {"bytes", 8}}, {1e6}),
               figure("busbw", {{"collective", "all_reduce"}, {"ranks", 4}, {"bytes", 8}}, {1e6})};
  charts = charts_for(r);
  ASSERT_EQ(charts.size(), 1u);
  EXPECT_EQ(charts[0].series.size(), 2u);  // one line per rank count
}
