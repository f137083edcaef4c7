// llm.c GPT-2 checkpoints <-> models::GPT2 (layout in tessera/io/importers.h).
#include <array>
#include <climits>
#include <cstring>
#include <vector>

#include "io/mapped_file.h"
#include "tessera/io/atomic_file.h"
#include "tessera/io/importers.h"
#include "tessera/nn/init.h"
#include "tessera/ops/creation.h"

namespace tessera::io {
namespace {

using tessera::detail::str;

constexpr int32_t kMagic = 20240326;
constexpr int32_t kVersionFp32 = 3, kVersionBf16 = 5;
constexpr size_t kHeaderBytes = 256 * sizeof(int32_t);

// One of llm.c's 16 parameter tensors: its shape in the file and our name for it ("{}" marks
// tensors stacked over layers: layer i is "transformer.h.<i>.<suffix>").
struct LlmcTensor {
  const char* llmc_name;
  Shape shape;
  std::string ours;
  bool per_layer;
};

std::vector<LlmcTensor> llmc_layout(int64_t Vp, int64_t maxT, int64_t L, int64_t C) {
  return {{"wte", {Vp, C}, "transformer.wte.weight", false},
          {"wpe", {maxT, C}, "transformer.wpe.weight", false},
          {"ln1w", {L, C}, "ln_1.weight", true},
          {"ln1b", {L, C}, "ln_1.bias", true},
          {"qkvw", {L, 3 * C, C}, "attn.c_attn.weight", true},
          {"qkvb", {L, 3 * C}, "attn.c_attn.bias", true},
          {"attprojw", {L, C, C}, "attn.c_proj.weight", true},
          {"attprojb", {L, C}, "attn.c_proj.bias", true},
          {"ln2w", {L, C}, "ln_2.weight", true},
          {"ln2b", {L, C}, "ln_2.bias", true},
          {"fcw", {L, 4 * C, C}, "mlp.c_fc.weight", true},
          {"fcb", {L, 4 * C}, "mlp.c_fc.bias", true},
          {"fcprojw", {L, C, 4 * C}, "mlp.c_proj.weight", true},
          {"fcprojb", {L, C}, "mlp.c_proj.bias", true},
          {"lnfw", {C}, "transformer.ln_f.weight", false},
          {"lnfb", {C}, "transformer.ln_f.bias", false}};
}

std::string layer_name(int64_t layer, const std::string& suffix) {
  return str("transformer.h.", layer, ".", suffix);
}

constexpr std::string_view kOp = "load_llmc_gpt2";

// What a checkpoint's header says, checked against the file's size: the config, the tensors in
// file order and their dtype.
struct LlmcHeader {
  models::GPT2Config config;
  std::vector<LlmcTensor> layout;
  DType dtype = kFloat32;
};

LlmcHeader read_header(const detail::MappedFile& file, const std::string& path) {
  constexpr std::string_view op = kOp;
  TESSERA_CHECK(file.size() >= kHeaderBytes, ValueError, "[", op, "] expected a header of ",
                kHeaderBytes, " bytes in '", path, "', got a file of ", file.size(), " bytes");
  std::array<int32_t, 256> h{};
  std::memcpy(h.data(), file.data(), kHeaderBytes);
  TESSERA_CHECK(h[0] == kMagic, ValueError, "[", op, "] expected magic ", kMagic, " in '", path,
                "' (an llm.c GPT-2 checkpoint), got ", h[0]);
  TESSERA_CHECK(h[1] == kVersionFp32 || h[1] == kVersionBf16, ValueError, "[", op,
                "] expected version 3 (fp32) or 5 (bf16) in '", path, "', got ", h[1]);
  const int64_t maxT = h[2], V = h[3], L = h[4], NH = h[5], C = h[6], Vp = h[7];
  TESSERA_CHECK(maxT > 0 && V > 0 && L > 0 && NH > 0 && C > 0 && Vp >= V && C % NH == 0, ValueError,
                "[", op, "] expected positive sizes with padded_vocab_size >= ",
                "vocab_size and channels % num_heads == 0 in '", path, "', got max_seq_len ", maxT,
                ", vocab_size ", V, ", num_layers ", L, ", num_heads ", NH, ", channels ", C,
                ", padded_vocab_size ", Vp);
  const DType dtype = h[1] == kVersionFp32 ? kFloat32 : kBFloat16;
  // Each size is below 2^31, so no tensor's product of at most 3 overflows int64 unless
  // L * C * C does; check that first.
  TESSERA_CHECK(L * C < (int64_t{1} << 40) && C < (int64_t{1} << 20), ValueError, "[", op,
                "] expected plausible sizes in '", path, "', got num_layers ", L, ", channels ", C);
  std::vector<LlmcTensor> layout = llmc_layout(Vp, maxT, L, C);
  // Each tensor's size fits int64, their sum in bytes may not: checked.
  uint64_t expected = kHeaderBytes;
  bool overflow = false;
  for (const LlmcTensor& t : layout) {
    uint64_t bytes = 0;
    overflow |= __builtin_mul_overflow(static_cast<uint64_t>(shape_numel(t.shape)), itemsize(dtype),
                                       &bytes);
    overflow |= __builtin_add_overflow(expected, bytes, &expected);
  }
  TESSERA_CHECK(!overflow, ValueError, "[", op, "] expected sizes in '", path,
                "' that describe fewer than 2^64 bytes, got max_seq_len ", maxT, ", num_layers ", L,
                ", channels ", C, ", padded_vocab_size ", Vp);
  TESSERA_CHECK(file.size() == expected, ValueError, "[", op, "] expected ", expected,
                " bytes in '", path, "' for the sizes in its header, got ", file.size());
  LlmcHeader header;
  header.config.vocab_size = V;
  header.config.block_size = maxT;
  header.config.n_layer = L;
  header.config.n_head = NH;
  header.config.n_embd = C;
  header.layout = std::move(layout);
  header.dtype = dtype;
  return header;
}

}  // namespace

models::GPT2Config llmc_gpt2_config(const std::string& path) {
  return read_header(detail::map_file(path, kOp), path).config;
}

std::shared_ptr<models::GPT2> load_llmc_gpt2(const std::string& path) {
  constexpr std::string_view op = kOp;
  detail::MappedFile file = detail::map_file(path, op);
  const LlmcHeader header = read_header(file, path);
  const int64_t V = header.config.vocab_size, L = header.config.n_layer;
  // Every weight is read from the file.
  auto model =
      nn::init::without_init([&] { return std::make_shared<models::GPT2>(header.config); });

  detail::TensorReader reader(file, kHeaderBytes, header.dtype, op);
  nn::TensorDict state;
  for (const LlmcTensor& t : header.layout) {
    Tensor data = reader.next(t.shape);
    if (!t.per_layer) {
      // The padding rows of wte never get a logit: keep the real vocabulary.
      state.insert(t.ours, t.llmc_name == std::string("wte") ? data.narrow(0, 0, V) : data);
      continue;
    }
    for (int64_t i = 0; i < L; ++i) state.insert(layer_name(i, t.ours), data.select(0, i));
  }
  state.insert("lm_head.weight", state.at("transformer.wte.weight"));
  model->load_state_dict(state, /*strict=*/true);
  return model;
}

void save_llmc_gpt2(const std::string& path, models::GPT2& model, int64_t padded_vocab_size) {
  constexpr std::string_view op = "save_llmc_gpt2";
  const models::GPT2Config& c = model.config;
  const int64_t Vp = padded_vocab_size > 0 ? padded_vocab_size : (c.vocab_size + 127) / 128 * 128;
  TESSERA_CHECK(Vp >= c.vocab_size && Vp <= INT32_MAX, ValueError, "[", op,
                "] expected padded_vocab_size in [vocab_size ", c.vocab_size, ", 2^31), got ", Vp);
  std::array<int32_t, 256> h{};
  h[0] = kMagic;
  h[1] = kVersionFp32;
  const int64_t sizes[] = {c.block_size, c.vocab_size, c.n_layer, c.n_head, c.n_embd, Vp};
  for (size_t i = 0; i < 6; ++i) h[2 + i] = static_cast<int32_t>(sizes[i]);

  const nn::TensorDict state = model.state_dict();
  auto f32 = [](const Tensor& t) { return t.detach().to(kCPU).to(kFloat32).contiguous(); };
  tessera::io::write_file_atomic(
      path,
      [&](int fd) {
        auto write_tensor = [&](const Tensor& t) {
          Tensor d = f32(t);
          tessera::io::write_all(fd, d.data_ptr(), static_cast<size_t>(d.numel()) * 4, op);
        };
        tessera::io::write_all(fd, h.data(), kHeaderBytes, op);
        for (const LlmcTensor& t : llmc_layout(Vp, c.block_size, c.n_layer, c.n_embd)) {
          if (!t.per_layer) {
            write_tensor(state.at(t.ours));
            if (t.llmc_name == std::string("wte"))
              write_tensor(zeros({Vp - c.vocab_size, c.n_embd}));
            continue;
          }
          for (int64_t i = 0; i < c.n_layer; ++i) write_tensor(state.at(layer_name(i, t.ours)));
        }
      },
      op);
}

}  // namespace tessera::io
