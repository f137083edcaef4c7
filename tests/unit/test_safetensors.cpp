// safetensors read/write: round trips of every dtype, zero-copy views of the mapping, files from
// other writers (unpadded headers), typed errors on truncated or corrupt input, state dicts with
// tied weights; and the CRC-32C that checkpoints use.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <string>

#include "io/mapped_file.h"
#include "tessera/io/safetensors.h"
#include "tessera/nn/layers.h"
#include "tessera/tessera.h"
#include "testing/expect_error.h"
#include "testing/temp_dir.h"

namespace tessera {
namespace {

using io::Metadata;
using nn::TensorDict;

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Exact equality of dtype, shape and every element (compared as float64, exact for all dtypes
// used here).
void expect_same(const Tensor& got, const Tensor& want, const std::string& name) {
  ASSERT_EQ(got.dtype(), want.dtype()) << name;
  ASSERT_EQ(got.sizes(), want.sizes()) << name;
  Tensor g = got.to(kFloat64).contiguous(), w = want.to(kFloat64).contiguous();
  for (int64_t i = 0; i < g.numel(); ++i)
    ASSERT_EQ(g.data_ptr<double>()[i], w.data_ptr<double>()[i]) << name << " element " << i;
}

// One tensor of every dtype, plus a 0-d, an empty and a non-contiguous one.
TensorDict all_dtypes() {
  TensorDict d;
  d.insert("f32", randn({3, 4}));
  d.insert("f64", randn({2, 3}, kFloat64));
  d.insert("f16", randn({5}).to(kFloat16));
  d.insert("bf16", randn({2, 2, 2}).to(kBFloat16));
  d.insert("i64", tensor(std::vector<int64_t>{-5, 0, 1LL << 40}));
  d.insert("i32", tensor(std::vector<int32_t>{-7, 8, 9, 10}, Shape{2, 2}));
  d.insert("i16", tensor(std::vector<int64_t>{-300, 300}).to(kInt16));
  d.insert("i8", tensor(std::vector<int64_t>{-128, 127, 0}).to(kInt8));
  d.insert("u8", tensor(std::vector<uint8_t>{0, 255}));
  d.insert("bool", tensor(std::vector<uint8_t>{1, 0, 1}).to(kBool));
  d.insert("scalar", scalar_tensor(2.5));
  d.insert("empty", zeros({0, 3}));
  d.insert("transposed", randn({3, 2}).t());
  return d;
}

TEST(Safetensors, RoundTripAllDtypes) {
  testing::TempDir dir;
  const std::string path = dir.file("all.safetensors");
  TensorDict tensors = all_dtypes();
  Metadata meta{{"format", "pt"}, {"note", "héllo \"quoted\""}};
  io::save_safetensors(path, tensors, meta);

  io::SafetensorsFile file = io::load_safetensors(path);
  ASSERT_EQ(file.tensors.size(), tensors.size());
  for (const auto& [name, t] : tensors) expect_same(file.tensors.at(name), t, name);
  EXPECT_EQ(file.metadata.at("format"), "pt");
  EXPECT_EQ(file.metadata.at("note"), "héllo \"quoted\"");
  // Grouped by element size, largest first, keeping the given order within a group.
  std::vector<std::string> keys = file.tensors.keys();
  EXPECT_EQ(std::vector<std::string>(keys.begin(), keys.begin() + 3),
            (std::vector<std::string>{"f64", "i64", "f32"}));
  EXPECT_EQ(keys.back(), "bool");

  // The bytes in memory are the file's; parsing them gives the same tensors.
  const std::string bytes = read_bytes(path);
  EXPECT_EQ(io::serialize_safetensors(tensors, meta), bytes);
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  EXPECT_EQ((8 + header_len) % 8, 0u) << "header padded to 8 bytes";
  io::SafetensorsFile parsed = io::parse_safetensors(bytes);
  for (const auto& [name, t] : tensors) expect_same(parsed.tensors.at(name), t, name);
}

TEST(Safetensors, ReadIsZeroCopyAndCopyOnWrite) {
  testing::TempDir dir;
  const std::string path = dir.file("w.safetensors");
  Tensor a = arange(0, 12, 1, kFloat32).reshape({3, 4});
  Tensor b = arange(0, 5, 1, kInt64);
  io::save_safetensors(path, TensorDict{{"a", a}, {"b", b}});

  Tensor la, lb;
  {
    io::SafetensorsFile file = io::load_safetensors(path);
    la = file.tensors.at("a");
    lb = file.tensors.at("b");
  }
  // Both view one storage: the mapping of the whole file, which outlives the SafetensorsFile.
  const Storage& storage = la.impl()->storage();
  EXPECT_EQ(storage.get(), lb.impl()->storage().get());
  EXPECT_EQ(storage->nbytes(), read_bytes(path).size());
  const auto* base = static_cast<const char*>(storage->data());
  EXPECT_GT(static_cast<const char*>(la.data_ptr()), base);
  EXPECT_LT(static_cast<const char*>(la.data_ptr()), base + storage->nbytes());
  expect_same(la, a, "a");
  expect_same(lb, b, "b");

  // Writes stay private to the process: the file is unchanged.
  la.fill_(7.0);
  EXPECT_EQ(la.sum().item<float>(), 84.0f);
  expect_same(io::load_safetensors(path).tensors.at("a"), a, "a after writing to a view");
}

// A header as Python's safetensors writes it, with a length that leaves the data unaligned.
std::string handmade(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

TEST(Safetensors, ReadsFilesOfOtherWriters) {
  float values[2] = {1.5f, -2.0f};
  std::string data(reinterpret_cast<const char*>(values), 8);
  // 8 + 59 header bytes: the F32 data starts at an odd offset, so it is copied, not viewed.
  const std::string header =
      R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"__metadata__":{"k":"v"}})";
  ASSERT_NE((8 + header.size()) % 4, 0u);
  testing::TempDir dir;
  write_bytes(dir.file("odd.safetensors"), handmade(header, data));
  io::SafetensorsFile file = io::load_safetensors(dir.file("odd.safetensors"));
  expect_same(file.tensors.at("x"), tensor(std::vector<float>{1.5f, -2.0f}), "x");
  EXPECT_EQ(file.metadata.at("k"), "v");
  // No tensors at all is a valid file.
  EXPECT_TRUE(io::parse_safetensors(handmade("{}", "")).tensors.empty());
}

void expect_bad(const std::string& bytes, const std::string& detail) {
  testing::expect_error<ValueError>([&] { io::parse_safetensors(bytes); }, "load_safetensors",
                                    detail);
}

TEST(Safetensors, CorruptFilesThrowValueError) {
  const std::string f32x2(8, '\0');
  auto entry = [](const std::string& dtype, const std::string& shape, const std::string& offsets) {
    return R"({"x":{"dtype":")" + dtype + R"(","shape":)" + shape + R"(,"data_offsets":)" +
           offsets + "}}";
  };
  expect_bad("", "at least 8 bytes");
  expect_bad(std::string("\x10\0\0\0\0\0\0\0{}", 10), "header length");
  expect_bad(std::string(8, '\xff') + "{}", "header length");
  expect_bad(handmade("{not json", ""), "JSON object");
  expect_bad(handmade("[1, 2]", ""), "JSON object");
  expect_bad(handmade(entry("F8_E4M3", "[2]", "[0,2]"), "xx"), "dtype");
  expect_bad(handmade(entry("F32", "[-2]", "[0,8]"), f32x2), "non-negative integer dims");
  expect_bad(handmade(entry("F32", "[2.5]", "[0,8]"), f32x2), "non-negative integer dims");
  // Empty, yet its strides would overflow int64.
  expect_bad(handmade(entry("F32", "[0,4611686018427387904,4]", "[0,0]"), ""), "fits in 63 bits");
  expect_bad(handmade(entry("F32", "[3]", "[0,8]"), f32x2), "spanning 12 bytes");
  expect_bad(handmade(entry("F32", "[2]", "[8,0]"), f32x2), "spanning 8 bytes");
  expect_bad(handmade(entry("F32", "[2]", "[0]"), f32x2), "data_offsets [begin, end]");
  expect_bad(handmade(entry("F32", "[4]", "[0,16]"), f32x2), "truncated");
  expect_bad(handmade(entry("F32", "[1]", "[4,8]"), f32x2), "gaps or overlaps");
  expect_bad(handmade(entry("F32", "[1]", "[0,4]"), f32x2), "data bytes after the header");
  expect_bad(handmade(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                      R"("y":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                      f32x2),
             "gaps or overlaps");
  expect_bad(handmade(entry("BOOL", "[2]", "[0,2]"), std::string("\x01\x02", 2)), "0 or 1");
  expect_bad(handmade(R"({"__metadata__":{"k":1}})", ""), "string values");
  expect_bad(handmade(R"({"x":5})", ""), "dtype, shape, data_offsets");
  // Nested deep enough that printing it (in the error message) would overflow the stack.
  const std::string deep(200000, '[');
  expect_bad(handmade(R"({"x":)" + deep + std::string(200000, ']') + "}", ""), "JSON object");
  EXPECT_TESSERA_ERROR(io::load_safetensors("/nonexistent/x.safetensors"), RuntimeError,
                       "[load_safetensors]");
}

TEST(Safetensors, EveryTruncationAndHeaderFlipIsAnErrorNotACrash) {
  const std::string bytes = io::serialize_safetensors(all_dtypes(), {{"k", "v"}});
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_THROW(io::parse_safetensors(bytes.substr(0, n)), ValueError) << "truncated to " << n;
  }
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  std::mt19937 rng(0);
  for (size_t i = 0; i < 8 + header_len; ++i) {
    std::string flipped = bytes;
    flipped[i] = static_cast<char>(flipped[i] ^ (1 + rng() % 255));
    try {
      io::parse_safetensors(flipped);  // a flip inside a name or the padding may stay valid
    } catch (const ValueError&) {
    }
  }
}

TEST(Safetensors, SaveRejectsBadNames) {
  testing::TempDir dir;
  EXPECT_TESSERA_ERROR(
      io::save_safetensors(dir.file("x"), TensorDict{{"__metadata__", zeros({1})}}), ValueError,
      "[save_safetensors]");
  EXPECT_TESSERA_ERROR(io::save_safetensors(dir.file("x"), TensorDict{{"a", Tensor()}}), ValueError,
                       "undefined");
  EXPECT_FALSE(std::filesystem::exists(dir.file("x")));
}

// A module with a tied weight, like GPT-2's lm_head.
struct Tied : nn::Module {
  std::shared_ptr<nn::Embedding> wte;
  std::shared_ptr<nn::Linear> head;
  Tied() {
    wte = register_module("wte", std::make_shared<nn::Embedding>(6, 4));
    head = register_module("head", std::make_shared<nn::Linear>(4, 6, false));
    head->weight = head->replace_parameter("weight", wte->weight);
  }
};

TEST(Safetensors, StateDictStoresTiedWeightsOnce) {
  testing::TempDir dir;
  const std::string path = dir.file("model.safetensors");
  auto a = std::make_shared<Tied>();
  io::save_state_dict(path, a->state_dict(), {{"step", "3"}});
  io::SafetensorsFile raw = io::load_safetensors(path);
  EXPECT_EQ(raw.tensors.keys(), std::vector<std::string>{"wte.weight"});
  EXPECT_EQ(raw.metadata.at("tessera.aliases"), R"({"head.weight":"wte.weight"})");

  Metadata meta;
  TensorDict state = io::load_state_dict(path, &meta);
  EXPECT_EQ(meta.at("step"), "3");
  EXPECT_EQ(state.keys(), (std::vector<std::string>{"wte.weight", "head.weight"}));
  auto b = std::make_shared<Tied>();
  b->load_state_dict(state, /*strict=*/true);
  expect_same(b->head->weight.detach(), a->wte->weight.detach(), "head.weight");
  EXPECT_TRUE(b->head->weight.is_same(b->wte->weight)) << "loading keeps the tie";

  io::save_safetensors(path, TensorDict{{"w", zeros({1})}}, {{"tessera.aliases", R"({"v":"x"})"}});
  EXPECT_TESSERA_ERROR(io::load_state_dict(path), ValueError, "alias 'v'");
}

TEST(Crc32c, KnownValuesAndIncremental) {
  const std::string check = "123456789";
  EXPECT_EQ(io::detail::crc32c(check.data(), check.size()), 0xE3069283u);
  EXPECT_EQ(io::detail::crc32c_portable(check.data(), check.size()), 0xE3069283u);
  const std::string zeros32(32, '\0');
  EXPECT_EQ(io::detail::crc32c(zeros32.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(io::detail::crc32c(nullptr, 0), 0u);

  std::mt19937 rng(1);
  std::string buf(1000, '\0');
  for (char& c : buf) c = static_cast<char>(rng());
  for (size_t n : {1, 7, 8, 9, 63, 64, 1000}) {
    const uint32_t whole = io::detail::crc32c(buf.data(), n);
    EXPECT_EQ(io::detail::crc32c_portable(buf.data(), n), whole) << n;
    const uint32_t part = io::detail::crc32c(buf.data(), n / 3);
    EXPECT_EQ(io::detail::crc32c(buf.data() + n / 3, n - n / 3, part), whole) << n;
  }
}

}  // namespace
}  // namespace tessera
