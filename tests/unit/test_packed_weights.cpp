// bf16 GEMM weight packing on CPU: a weight linear reads without taking its gradient is reordered
// once into oneDNN's blocked layout and reused until it changes; results match the unpacked GEMM.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tessera/bench/machine.h"
#include "tessera/runtime/autocast.h"
#include "tessera/runtime/profiler.h"
#include "tessera/tessera.h"

namespace tessera {
namespace {

// oneDNN has a blocked bf16 matmul only on CPUs with AVX-512 bf16 instructions; elsewhere bf16
// GEMMs run in float32 and nothing is packed.
bool cpu_has_bf16_gemm() {
  static const bool has = [] {
    const std::vector<std::string> flags = bench::Machine::detect().cpu_flags;
    return std::find(flags.begin(), flags.end(), "avx512_bf16") != flags.end();
  }();
  return has;
}

Tensor uniform(const Shape& shape, uint64_t seed, DType dtype = kBFloat16) {
  Generator gen(seed);
  return cast(rand(shape, kFloat32, &gen) * 2.0 - 1.0, dtype);
}

// How many times `fn` packed a weight.
template <class Fn>
int64_t packs_during(Fn&& fn) {
  profiler::Profiler prof;
  fn();
  const profiler::Profile profile = prof.stop();
  int64_t packs = 0;
  for (const profiler::Event& e : profile.events()) packs += e.name == "gemm_weight_pack";
  return packs;
}

// linear in float32 from the same bf16 values: the bf16 GEMM accumulates in float32 too, so only
// the final rounding to bf16 differs.
void expect_matches_float32(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b) {
  const Tensor ref = linear(cast(x, kFloat32), cast(w, kFloat32), cast(b, kFloat32));
  EXPECT_TRUE(allclose(cast(y, kFloat32), ref, 1e-2, 1e-2));
}

class PackedWeights : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cpu_has_bf16_gemm()) GTEST_SKIP() << "this CPU has no avx512_bf16: no bf16 GEMM to pack for";
  }
};

TEST_F(PackedWeights, AFrozenWeightIsPackedOnceAndReusedUntilItChanges) {
  autograd::NoGradGuard no_grad;
  Tensor w = uniform({512, 256}, 1), b = uniform({512}, 2);
  Tensor x1 = uniform({64, 256}, 3), x2 = uniform({8, 4, 256}, 4);
  Tensor y1, y2, y3;
  EXPECT_EQ(packs_during([&] {
              y1 = linear(x1, w, b);
              y2 = linear(x2, w, b);
            }),
            1);
  expect_matches_float32(y1, x1, w, b);
  expect_matches_float32(y2, x2, w, b);
  // The same values as the GEMM on an unpacked copy (a fresh storage nothing marked).
  Tensor unpacked;
  EXPECT_EQ(packs_during([&] { unpacked = matmul(x1, w.clone().t()); }), 0);
  EXPECT_TRUE(allclose(cast(linear(x1, w), kFloat32), cast(unpacked, kFloat32), 0, 0));

  w.mul_(-0.5);  // an in-place change bumps the version: the stale copy is not read again
  EXPECT_EQ(packs_during([&] { y3 = linear(x1, w, b); }), 1);
  expect_matches_float32(y3, x1, w, b);
  EXPECT_EQ(packs_during([&] { y3 = linear(x1, w, b); }), 0);
  // A write autograd does not track (torch's x.data) still makes the packed copy stale.
  w.variable_data().mul_(2.0);
  EXPECT_EQ(w.version(), 1u) << "the write through variable_data is not autograd's";
  EXPECT_EQ(packs_during([&] { y3 = linear(x1, w, b); }), 1);
  expect_matches_float32(y3, x1, w, b);
}

TEST_F(PackedWeights, AViewOfAPackedWeightIsPackedOnItsOwn) {
  autograd::NoGradGuard no_grad;
  Tensor w = uniform({512, 256}, 5), x = uniform({32, 256}, 6);
  Tensor top = w.narrow(0, 0, 256), bottom = w.narrow(0, 256, 256);
  Tensor y_top, y_bottom;
  EXPECT_EQ(packs_during([&] {
              y_top = linear(x, top);
              y_bottom = linear(x, bottom);
              linear(x, top);
            }),
            2);
  const Tensor zero = zeros({256}, kBFloat16);
  expect_matches_float32(y_top, x, top, zero);
  expect_matches_float32(y_bottom, x, bottom, zero);
}

TEST_F(PackedWeights, AWeightBeingTrainedIsNotPacked) {
  Tensor w = uniform({256, 128}, 7).requires_grad_(true);
  Tensor x = uniform({16, 128}, 8);
  EXPECT_EQ(packs_during([&] { linear(x, w).sum().backward(); }), 0);
  EXPECT_TRUE(w.grad().defined());
}

TEST_F(PackedWeights, AutocastEvaluationPacksEachCastWeightOnce) {
  nn::Linear layer(256, 512);
  Tensor x = uniform({16, 256}, 9, kFloat32);
  autograd::NoGradGuard no_grad;
  AutocastGuard autocast(DeviceType::CPU, kBFloat16);
  Tensor y;
  EXPECT_EQ(packs_during([&] {
              for (int i = 0; i < 3; ++i) y = layer(x);
            }),
            1);
  EXPECT_EQ(y.dtype(), kBFloat16);
  expect_matches_float32(y, cast(x, kBFloat16), cast(layer.weight, kBFloat16),
                         cast(layer.bias, kBFloat16));
  // A write through the weight's x.data (untracked by autograd) reaches the cached bf16 cast.
  layer.weight.variable_data().mul_(-1.0);
  EXPECT_EQ(packs_during([&] { y = layer(x); }), 1);
  expect_matches_float32(y, cast(x, kBFloat16), cast(layer.weight, kBFloat16),
                         cast(layer.bias, kBFloat16));
}

TEST_F(PackedWeights, ThePackedCopyIsFreedWithItsWeight) {
  autograd::NoGradGuard no_grad;
  Allocator* alloc = cpu_allocator();
  Tensor x = uniform({16, 256}, 10);
  const int64_t before = alloc->stats().live_bytes;
  {
    Tensor w = uniform({1024, 256}, 11);
    Tensor y = linear(x, w);
    EXPECT_GE(alloc->stats().live_bytes - before, 2 * w.numel() * 2);  // weight and its packed copy
  }
  EXPECT_EQ(alloc->stats().live_bytes, before);
}

}  // namespace
}  // namespace tessera
