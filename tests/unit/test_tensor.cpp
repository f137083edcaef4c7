// Core: dtypes and promotion, storage sharing, views and strides, allocator counters, printing.
#include <gtest/gtest.h>

#include "tessera/core/json_parse.h"
#include "tessera/tessera.h"

namespace tessera {
namespace {

TEST(DType, PromotionFollowsTorch) {
  EXPECT_EQ(promote_types(kUInt8, kInt8), kInt16);
  EXPECT_EQ(promote_types(kBool, kInt32), kInt32);
  EXPECT_EQ(promote_types(kInt64, kFloat16), kFloat16);
  EXPECT_EQ(promote_types(kFloat16, kBFloat16), kFloat32);
  EXPECT_EQ(promote_types(kFloat32, kFloat64), kFloat64);
  EXPECT_EQ(promote_types(kInt32, kInt64), kInt64);
  EXPECT_EQ(promote_types(kUInt8, kInt64), kInt64);
}

TEST(DType, ScalarsAndZeroDimTensorsPromoteWithLowerPriority) {
  Tensor i = arange(4, kInt32);
  Tensor h = zeros({2}, kFloat16);
  EXPECT_EQ((i + 1).dtype(), kInt32);                      // int scalar keeps int32
  EXPECT_EQ((i * 2.5).dtype(), kFloat32);                  // float scalar -> default float
  EXPECT_EQ((h * 2.5).dtype(), kFloat16);                  // same category keeps the tensor dtype
  EXPECT_EQ((h + zeros({}, kFloat64)).dtype(), kFloat16);  // 0-d tensor of the same category
  EXPECT_EQ((i + zeros({}, kFloat64)).dtype(), kFloat64);  // 0-d tensor of a higher category
  EXPECT_EQ((ones({2}, kBool) + 1).dtype(), kInt64);
  EXPECT_EQ(dtype_from_string("bf16"), kBFloat16);
  EXPECT_THROW(dtype_from_string("float8"), ValueError);
}

TEST(JsonParse, TextNestedTooDeepIsDiscardedLikeInvalidJson) {
  EXPECT_EQ(parse_json(R"({"a": [1, {"b": "]]]["}]})")["a"][1]["b"], "]]][");
  EXPECT_TRUE(parse_json("{not json").is_discarded());
  const auto nested = [](int depth) { return std::string(depth, '[') + std::string(depth, ']'); };
  EXPECT_FALSE(parse_json(nested(kMaxJsonDepth)).is_discarded());
  EXPECT_TRUE(parse_json(nested(kMaxJsonDepth + 1)).is_discarded());
  EXPECT_TRUE(parse_json(nested(1000000)).is_discarded());  // dump() would overflow the stack
  // Brackets inside strings (escaped quotes too) do not count.
  EXPECT_TRUE(json_nesting_within("[\"" + std::string(1000, '[') + "\\\"\"]", 2));
}

TEST(Half, RoundTripsAndRoundsToNearestEven) {
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f, 0.333251953f})
    EXPECT_EQ(static_cast<float>(Half(f)), f) << f;
  EXPECT_TRUE(std::isinf(static_cast<float>(Half(70000.0f))));
  EXPECT_TRUE(std::isnan(static_cast<float>(Half(std::nanf("")))));
  EXPECT_EQ(static_cast<float>(BFloat16(1.0f)), 1.0f);
  EXPECT_EQ(BFloat16(1.00390625f).x, BFloat16(1.0f).x);       // tie rounds to even
  EXPECT_EQ(BFloat16(1.01171875f).x, BFloat16(1.015625f).x);  // tie rounds up to even
}

TEST(Tensor, ViewsShareStorageAndStrides) {
  Tensor a = arange(24, kFloat32).reshape({2, 3, 4});
  EXPECT_TRUE(a.is_contiguous());
  EXPECT_EQ(a.strides(), (Shape{12, 4, 1}));
  Tensor t = a.transpose(0, 2);
  EXPECT_EQ(t.sizes(), (Shape{4, 3, 2}));
  EXPECT_EQ(t.strides(), (Shape{1, 4, 12}));
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.data_ptr(), a.data_ptr());
  Tensor s = a.select(1, 2).slice(1, 1, std::nullopt, 2);  // a[:, 2, 1::2]
  EXPECT_EQ(s.sizes(), (Shape{2, 2}));
  EXPECT_EQ(s.storage_offset(), 9);
  EXPECT_EQ(s.strides(), (Shape{12, 2}));
  s.fill_(-1.0f);
  EXPECT_EQ(a.select(1, 2).select(0, 1).select(0, 3).item<float>(), -1.0f);
  EXPECT_EQ(a.select(1, 2).select(0, 1).select(0, 2).item<float>(), 22.0f);
  Tensor e = arange(3, kFloat32).unsqueeze(1).expand({3, 5});
  EXPECT_EQ(e.strides(), (Shape{1, 0}));
  Tensor c = t.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_NE(c.data_ptr(), a.data_ptr());
  EXPECT_TRUE(allclose(c, t));
  // Empty tensors are contiguous whatever their strides, as torch's (zeros [1, 2, 8, 0] was not).
  EXPECT_TRUE(zeros({1, 2, 8, 0}).is_contiguous());
  EXPECT_TRUE(zeros({0, 3}).t().is_contiguous());
}

TEST(Tensor, ViewRequiresCompatibleStridesReshapeCopies) {
  Tensor a = arange(12, kFloat32).reshape({3, 4}).t();
  EXPECT_THROW(a.view({12}), ValueError);
  Tensor r = a.reshape({12});
  EXPECT_NE(r.data_ptr(), a.data_ptr());
  EXPECT_EQ(r.select(0, 1).item<float>(), 4.0f);
  Tensor b = arange(12, kFloat32).reshape({3, 4});
  EXPECT_EQ(b.view({2, -1}).sizes(), (Shape{2, 6}));
  EXPECT_EQ(b.view({2, -1}).data_ptr(), b.data_ptr());
  EXPECT_THROW(b.view({5, -1}), ValueError);
  EXPECT_THROW(b.view({-1, -1}), ValueError);
}

TEST(Tensor, AsStridedAndFlatten) {
  Tensor a = arange(10, kFloat32);
  Tensor w = a.as_strided({4, 3}, {2, 1});
  EXPECT_EQ(w.select(0, 3).select(0, 2).item<float>(), 8.0f);
  EXPECT_THROW(a.as_strided({4, 4}, {3, 1}), IndexError);
  EXPECT_EQ(zeros({2, 3, 4}).flatten(1).sizes(), (Shape{2, 12}));
  EXPECT_EQ(zeros({2, 1, 3}).squeeze().sizes(), (Shape{2, 3}));
  EXPECT_EQ(zeros({2, 1, 3}).squeeze(0).sizes(), (Shape{2, 1, 3}));
}

TEST(Allocator, CountsLiveAndPeakBytes) {
  Allocator* alloc = cpu_allocator();
  int64_t before = alloc->stats().live_bytes;
  alloc->reset_peak();
  {
    Tensor t = empty({1000}, kFloat64);
    EXPECT_EQ(alloc->stats().live_bytes, before + 8000);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % 64, 0u);
  }
  EXPECT_EQ(alloc->stats().live_bytes, before);
  EXPECT_GE(alloc->stats().peak_bytes, before + 8000);
}

TEST(Allocator, ReusesLargeFreedBlocksOfTheSameSizeClass) {
  CpuAllocator alloc;
  const size_t big = 300000;  // class 327680: 256 KiB plus quarters of it
  EXPECT_EQ(CpuAllocator::block_bytes(big), CpuAllocator::kCaches ? 327680u : 300032u);
  EXPECT_EQ(CpuAllocator::block_bytes(1000), 1024u);
  void* p = alloc.allocate(big);
  alloc.deallocate(p, big);
  EXPECT_EQ(alloc.stats().live_bytes, 0);
  if (!CpuAllocator::kCaches) GTEST_SKIP() << "the cache is off under AddressSanitizer";
  EXPECT_EQ(alloc.stats().cached_bytes, 327680);
  void* q = alloc.allocate(290000);  // the same class
  EXPECT_EQ(q, p);
  EXPECT_EQ(alloc.stats().cached_bytes, 0);
  EXPECT_EQ(alloc.stats().live_bytes, 290000);
  alloc.deallocate(q, 290000);
  void* r = alloc.allocate(400000);  // another class: the cached block is released first
  EXPECT_EQ(alloc.stats().cached_bytes, 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(r) % CpuAllocator::kAlignment, 0u);
  void* s = alloc.allocate(300000);
  alloc.deallocate(r, 400000);
  alloc.deallocate(s, 300000);
  void* small = alloc.allocate(1000);  // small blocks go back to malloc at once
  alloc.deallocate(small, 1000);
  EXPECT_EQ(alloc.stats().cached_bytes, 327680 + 458752);
  alloc.empty_cache();
  EXPECT_EQ(alloc.stats().cached_bytes, 0);
  EXPECT_EQ(alloc.stats().live_bytes, 0);
}

TEST(Allocator, AMissReleasesOnlyTheExcessOverTheHighWaterMarkAndItsHalf) {
  if (!CpuAllocator::kCaches) GTEST_SKIP() << "the cache is off under AddressSanitizer";
  CpuAllocator alloc;
  constexpr size_t MiB = size_t{1} << 20;
  void* a = alloc.allocate(MiB);
  void* b = alloc.allocate(MiB);
  void* c = alloc.allocate(MiB);  // 3 MiB live: the high-water mark
  alloc.deallocate(b, MiB);
  alloc.deallocate(c, MiB);
  EXPECT_EQ(alloc.stats().cached_bytes, static_cast<int64_t>(2 * MiB));
  // 1 MiB live + 2.5 MiB new + 2 MiB cached would exceed 3 MiB and its half (4.5 MiB) by 1 MiB:
  // one cached block goes, not both.
  void* d = alloc.allocate(MiB * 5 / 2);
  EXPECT_EQ(alloc.stats().cached_bytes, static_cast<int64_t>(MiB));
  void* e = alloc.allocate(MiB);  // served by the block that stayed
  EXPECT_TRUE(e == b || e == c);
  EXPECT_EQ(alloc.stats().cached_bytes, 0);
  for (auto [p, n] : {std::pair{a, MiB}, {d, MiB * 5 / 2}, {e, MiB}}) alloc.deallocate(p, n);
  alloc.empty_cache();
  EXPECT_EQ(alloc.stats().live_bytes, 0);
}

TEST(Tensor, ItemPrintAndTypedAccess) {
  Tensor t = full({2, 2}, 1.5, kFloat32);
  EXPECT_THROW(t.item<float>(), ValueError);
  EXPECT_THROW(t.data_ptr<double>(), TypeError);
  EXPECT_EQ(t.sum().item<float>(), 6.0f);
  std::string s = arange(4, kInt64).reshape({2, 2}).str();
  EXPECT_NE(s.find("[[0, 1],"), std::string::npos) << s;
  EXPECT_NE(s.find("dtype=int64"), std::string::npos) << s;
  EXPECT_EQ(Tensor().str(), "tensor(undefined)");
  EXPECT_THROW(Tensor().sizes(), RuntimeError);
}

TEST(Creation, FactoriesMatchTorch) {
  EXPECT_EQ(arange(5).dtype(), kInt64);
  EXPECT_EQ(arange(0.0, 1.0, 0.25).numel(), 4);
  Tensor l = linspace(0, 1, 5);
  EXPECT_FLOAT_EQ(l.select(0, 4).item<float>(), 1.0f);
  EXPECT_FLOAT_EQ(l.select(0, 1).item<float>(), 0.25f);
  Tensor e = eye(3, 4);
  EXPECT_EQ(e.sum().item<float>(), 3.0f);
  EXPECT_EQ(e.select(0, 2).select(0, 2).item<float>(), 1.0f);
  EXPECT_EQ(ones_like(e, kInt32).dtype(), kInt32);
  EXPECT_THROW(arange(0, 5, 0), ValueError);
  EXPECT_THROW(empty({-1, 2}), ValueError);
  EXPECT_THROW(rand({2}, kInt64), TypeError);
}

TEST(Random, PhiloxIsSeededAndThreadCountIndependent) {
  manual_seed(42);
  Tensor a = randn({1000});
  manual_seed(42);
  Tensor b = randn({1000});
  EXPECT_TRUE(allclose(a, b, 0, 0));
  Tensor c = randn({1000});
  EXPECT_FALSE(allclose(a, c));
  // Large draws run on several threads; the result must equal a serial draw element by element.
  Generator g1(7), g2(7);
  Tensor big = rand({100000}, kFloat64, &g1);
  Tensor small = rand({100000}, kFloat64, &g2);
  EXPECT_TRUE(allclose(big, small, 0, 0));
  double m = mean(randn({200000}, kFloat64)).item<double>();
  double sd = std(randn({200000}, kFloat64)).item<double>();
  EXPECT_NEAR(m, 0.0, 0.01);
  EXPECT_NEAR(sd, 1.0, 0.01);
  Tensor u = rand({100000}, kFloat64);
  EXPECT_GE(min(u).item<double>(), 0.0);
  EXPECT_LT(max(u).item<double>(), 1.0);
  Tensor r = randint(3, 7, {10000});
  EXPECT_EQ(min(r).item<int64_t>(), 3);
  EXPECT_EQ(max(r).item<int64_t>(), 6);
  Tensor bern = bernoulli(zeros({10000}, kFloat64), 0.3);
  EXPECT_NEAR(mean(bern).item<double>(), 0.3, 0.02);
  Tensor p = randperm(50);
  EXPECT_EQ(sum(p).item<int64_t>(), 49 * 50 / 2);
  Tensor strided = zeros({4, 6}).t();
  normal_(strided, 1.0, 0.0);
  EXPECT_EQ(sum(strided).item<float>(), 24.0f);
}

TEST(Dispatcher, MissingKernelIsNotImplemented) {
  Tensor t = zeros({2});
  Device cuda(DeviceType::CUDA, 0);
  EXPECT_THROW(empty({2}, TensorOptions(cuda)), RuntimeError);
  EXPECT_EQ(Device("cuda:1").index, 1);
  EXPECT_THROW(Device("tpu"), ValueError);
  EXPECT_THROW(Device("cuda:x"), ValueError);
}

}  // namespace
}  // namespace tessera
