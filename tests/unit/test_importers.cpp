// Importers: llm.c GPT-2 checkpoints (fp32 and bf16, written here in llm.c's layout from random
// weights, and re-exported byte for byte) and llama2.c model files (versions 0 and 1, tied and
// untied, GQA), whose imported logits must equal llama2.c's forward computed directly on the raw
// weights with interleaved RoPE. Parity with PyTorch on stories260K is in
// tests/e2e/test_models_vs_torch.cpp.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <fstream>
#include <map>
#include <string>

#include "tessera/io/importers.h"
#include "tessera/tessera.h"
#include "testing/expect_error.h"
#include "testing/temp_dir.h"

namespace tessera {
namespace {

void append(std::string& out, const Tensor& t) {
  Tensor c = t.contiguous();
  out.append(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
}

template <class T, size_t N>
void append(std::string& out, const std::array<T, N>& header) {
  out.append(reinterpret_cast<const char*>(header.data()), sizeof(T) * N);
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void expect_equal(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  EXPECT_EQ(max(abs(got.detach().to(kFloat64) - want.to(kFloat64))).item<double>(), 0.0) << what;
}

// ---- llm.c GPT-2 ----

constexpr int64_t kL = 2, kC = 16, kNH = 2, kT = 12, kV = 50, kVp = 64;

// llm.c's 16 tensors in file order, random, the padding rows of wte zero.
std::vector<std::pair<std::string, Tensor>> llmc_weights() {
  manual_seed(11);
  Tensor wte = randn({kVp, kC});
  wte.narrow(0, kV, kVp - kV).zero_();
  return {{"wte", wte},
          {"wpe", randn({kT, kC})},
          {"ln1w", randn({kL, kC})},
          {"ln1b", randn({kL, kC})},
          {"qkvw", randn({kL, 3 * kC, kC})},
          {"qkvb", randn({kL, 3 * kC})},
          {"attprojw", randn({kL, kC, kC})},
          {"attprojb", randn({kL, kC})},
          {"ln2w", randn({kL, kC})},
          {"ln2b", randn({kL, kC})},
          {"fcw", randn({kL, 4 * kC, kC})},
          {"fcb", randn({kL, 4 * kC})},
          {"fcprojw", randn({kL, kC, 4 * kC})},
          {"fcprojb", randn({kL, kC})},
          {"lnfw", randn({kC})},
          {"lnfb", randn({kC})}};
}

std::string llmc_file(int32_t version, DType dtype) {
  std::array<int32_t, 256> h{};
  h[0] = 20240326;
  h[1] = version;
  h[2] = kT;
  h[3] = kV;
  h[4] = kL;
  h[5] = kNH;
  h[6] = kC;
  h[7] = kVp;
  std::string out;
  append(out, h);
  for (const auto& [name, t] : llmc_weights()) append(out, t.to(dtype));
  return out;
}

TEST(ImportLlmc, Gpt2WeightsLandOnNanoGptNames) {
  testing::TempDir dir;
  const std::string path = dir.file("gpt2_tiny.bin");
  const std::string bytes = llmc_file(3, kFloat32);
  write_bytes(path, bytes);
  std::shared_ptr<models::GPT2> model = io::load_llmc_gpt2(path);
  EXPECT_EQ(model->config.vocab_size, kV);
  EXPECT_EQ(model->config.block_size, kT);
  EXPECT_EQ(model->config.n_layer, kL);
  EXPECT_EQ(model->config.n_head, kNH);
  EXPECT_EQ(model->config.n_embd, kC);

  std::map<std::string, Tensor> w;
  for (const auto& [name, t] : llmc_weights()) w[name] = t;
  nn::TensorDict state = model->state_dict();
  expect_equal(state.at("transformer.wte.weight"), w["wte"].narrow(0, 0, kV), "wte");
  expect_equal(state.at("lm_head.weight"), w["wte"].narrow(0, 0, kV), "lm_head");
  expect_equal(state.at("transformer.wpe.weight"), w["wpe"], "wpe");
  expect_equal(state.at("transformer.ln_f.weight"), w["lnfw"], "lnfw");
  expect_equal(state.at("transformer.ln_f.bias"), w["lnfb"], "lnfb");
  const std::map<std::string, std::string> per_layer = {{"ln1w", "ln_1.weight"},
                                                        {"ln1b", "ln_1.bias"},
                                                        {"qkvw", "attn.c_attn.weight"},
                                                        {"qkvb", "attn.c_attn.bias"},
                                                        {"attprojw", "attn.c_proj.weight"},
                                                        {"attprojb", "attn.c_proj.bias"},
                                                        {"ln2w", "ln_2.weight"},
                                                        {"ln2b", "ln_2.bias"},
                                                        {"fcw", "mlp.c_fc.weight"},
                                                        {"fcb", "mlp.c_fc.bias"},
                                                        {"fcprojw", "mlp.c_proj.weight"},
                                                        {"fcprojb", "mlp.c_proj.bias"}};
  for (int64_t l = 0; l < kL; ++l) {
    for (const auto& [llmc, ours] : per_layer) {
      const std::string name = "transformer.h." + std::to_string(l) + "." + ours;
      expect_equal(state.at(name), w[llmc].select(0, l), name);
    }
  }
  EXPECT_EQ((*model)(randint(0, kV, {1, kT})).sizes(), (Shape{1, kT, kV}));

  // Export writes the same bytes (zero padding rows included); default padding is to 128.
  io::save_llmc_gpt2(dir.file("again.bin"), *model, kVp);
  EXPECT_EQ(read_bytes(dir.file("again.bin")), bytes);
  io::save_llmc_gpt2(dir.file("padded.bin"), *model);
  EXPECT_EQ(
      io::load_llmc_gpt2(dir.file("padded.bin"))->state_dict().at("transformer.wte.weight").sizes(),
      (Shape{kV, kC}));
  EXPECT_EQ(read_bytes(dir.file("padded.bin")).size(),
            bytes.size() + static_cast<size_t>((128 - kVp) * kC * 4));
}

TEST(ImportLlmc, Bf16AndMalformedFiles) {
  testing::TempDir dir;
  write_bytes(dir.file("bf16.bin"), llmc_file(5, kBFloat16));
  std::shared_ptr<models::GPT2> model = io::load_llmc_gpt2(dir.file("bf16.bin"));
  expect_equal(model->state_dict().at("transformer.h.1.mlp.c_fc.weight"),
               llmc_weights()[10].second.select(0, 1).to(kBFloat16).to(kFloat32), "bf16 fcw");
  EXPECT_EQ(model->transformer->wte->weight.dtype(), kFloat32);

  std::string bytes = llmc_file(3, kFloat32);
  auto expect_bad = [&](std::string b, const std::string& detail) {
    write_bytes(dir.file("bad.bin"), b);
    testing::expect_error<ValueError>([&] { io::load_llmc_gpt2(dir.file("bad.bin")); },
                                      "load_llmc_gpt2", detail);
  };
  expect_bad(bytes.substr(0, 100), "header of 1024 bytes");
  expect_bad(bytes.substr(0, bytes.size() - 4), "for the sizes in its header");
  std::string b = bytes;
  b[0] = 1;
  expect_bad(b, "magic 20240326");
  b = bytes;
  b[4] = 4;
  expect_bad(b, "version 3 (fp32) or 5 (bf16)");
  b = bytes;
  b[6 * 4] = 15;  // channels 15 with 2 heads
  expect_bad(b, "channels % num_heads");
  b = bytes;
  // Plausible one by one, these sizes make the tensors' bytes sum past 2^64 (it wrapped).
  const int32_t huge[] = {(1 << 20) - 1, 1, (1 << 20) - 1};  // num_layers, num_heads, channels
  std::memcpy(b.data() + 4 * 4, huge, sizeof(huge));
  expect_bad(b, "fewer than 2^64 bytes");
}

// ---- llama2.c ----

struct RawLlama {
  int64_t dim = 16, hidden = 24, L = 2, H = 4, KV = 2, V = 30, seq = 10;
  bool shared = false;
  Tensor emb, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final, wcls;

  explicit RawLlama(bool shared_classifier) : shared(shared_classifier) {
    manual_seed(12);
    const int64_t D = dim / H;
    emb = randn({V, dim});
    rms_att = 1 + 0.1 * randn({L, dim});
    wq = 0.3 * randn({L, dim, dim});
    wk = 0.3 * randn({L, KV * D, dim});
    wv = 0.3 * randn({L, KV * D, dim});
    wo = 0.3 * randn({L, dim, dim});
    rms_ffn = 1 + 0.1 * randn({L, dim});
    w1 = 0.3 * randn({L, hidden, dim});
    w2 = 0.3 * randn({L, dim, hidden});
    w3 = 0.3 * randn({L, hidden, dim});
    rms_final = 1 + 0.1 * randn({dim});
    wcls = shared ? emb : randn({V, dim});
  }

  std::array<int32_t, 7> params() const {
    return {int32_t(dim), int32_t(hidden), int32_t(L),  int32_t(H),
            int32_t(KV),  int32_t(V),      int32_t(seq)};
  }

  // export.py's legacy_export (version 0).
  std::string v0() const {
    std::array<int32_t, 7> p = params();
    if (!shared) p[5] = -p[5];
    std::string out;
    append(out, p);
    for (const Tensor& t : {emb, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final})
      append(out, t);
    auto [cos, sin] = rope_tables(seq, dim / H);
    append(out, cos);
    append(out, sin);
    if (!shared) append(out, wcls);
    return out;
  }

  // export.py's version1_export.
  std::string v1() const {
    std::string out;
    append(out, std::array<uint32_t, 1>{0x616b3432});
    append(out, std::array<int32_t, 1>{1});
    append(out, params());
    out.push_back(shared ? 1 : 0);
    out.resize(256, '\0');
    for (const Tensor& t : {rms_att, rms_ffn, rms_final, emb, wq, wk, wv, wo, w1, w2, w3})
      append(out, t);
    if (!shared) append(out, wcls);
    return out;
  }

  // run.c's forward on the raw weights: interleaved RoPE pairs (x[2i], x[2i+1]).
  Tensor forward(const Tensor& idx) const {
    const int64_t B = idx.size(0), T = idx.size(1), D = dim / H;
    auto [cos, sin] = rope_tables(T, D);
    auto heads = [&](const Tensor& t, int64_t n) { return t.view({B, T, n, D}).transpose(1, 2); };
    Tensor x = embedding(emb, idx);
    for (int64_t l = 0; l < L; ++l) {
      Tensor xb = rms_norm(x, rms_att.select(0, l), 1e-5);
      Tensor q = rope(heads(linear(xb, wq.select(0, l)), H), cos, sin, /*interleaved=*/true);
      Tensor k = rope(heads(linear(xb, wk.select(0, l)), KV), cos, sin, /*interleaved=*/true);
      Tensor v = heads(linear(xb, wv.select(0, l)), KV);
      Tensor y = scaled_dot_product_attention(q, k, v, std::nullopt, /*is_causal=*/true);
      x = x + linear(y.transpose(1, 2).reshape({B, T, dim}), wo.select(0, l));
      xb = rms_norm(x, rms_ffn.select(0, l), 1e-5);
      x = x +
          linear(silu(linear(xb, w1.select(0, l))) * linear(xb, w3.select(0, l)), w2.select(0, l));
    }
    return linear(rms_norm(x, rms_final, 1e-5), wcls);
  }
};

TEST(ImportLlama2c, LogitsMatchInterleavedForwardOnRawWeights) {
  testing::TempDir dir;
  for (bool shared : {false, true}) {
    RawLlama raw(shared);
    for (int version : {0, 1}) {
      SCOPED_TRACE("shared " + std::to_string(shared) + ", version " + std::to_string(version));
      const std::string path = dir.file("model.bin");
      write_bytes(path, version == 0 ? raw.v0() : raw.v1());
      std::shared_ptr<models::Llama> model = io::load_llama2c(path);
      EXPECT_EQ(model->config.n_kv_heads, 2);
      EXPECT_EQ(model->config.max_seq_len, 10);
      EXPECT_EQ(model->config.tie_embeddings, shared);
      EXPECT_EQ(model->lm_head->weight.is_same(model->model->embed_tokens->weight), shared);
      // v_proj is copied as is; q_proj's rows are permuted within each head.
      expect_equal(model->state_dict().at("model.layers.1.self_attn.v_proj.weight"),
                   raw.wv.select(0, 1), "v_proj");
      expect_equal(model->state_dict().at("model.layers.0.self_attn.q_proj.weight").select(0, 1),
                   raw.wq.select(0, 0).select(0, 2), "q_proj row 1 = wq row 2");
      Tensor idx = randint(0, raw.V, {2, 9});
      Tensor got = (*model)(idx), want = raw.forward(idx);
      EXPECT_LT(max(abs(got - want)).item<float>(), 1e-5 * max(abs(want)).item<float>());
    }
  }
}

TEST(ImportLlama2c, MalformedFiles) {
  testing::TempDir dir;
  const std::string good = RawLlama(false).v0();
  auto expect_bad = [&](const std::string& b, const std::string& detail) {
    write_bytes(dir.file("bad.bin"), b);
    testing::expect_error<ValueError>([&] { io::load_llama2c(dir.file("bad.bin")); },
                                      "load_llama2c", detail);
  };
  expect_bad(good.substr(0, 10), "header of 28 bytes");
  expect_bad(good.substr(0, good.size() - 4), "for the sizes in its header");
  expect_bad(good + "xxxx", "for the sizes in its header");
  std::string b = good;
  b[3 * 4] = 3;  // 3 heads do not divide dim 16
  expect_bad(b, "n_heads");
  b = RawLlama(true).v1();
  b[4] = 2;
  expect_bad(b, "version 1 (fp32)");
  // A version 1 file has no RoPE tables, so its seq_len alone sized them (2^23 * 1024 floats).
  b = RawLlama(true).v1();
  const int32_t long_heads[] = {1 << 10, 24, 2, 1, 1};  // dim, hidden_dim, layers, heads, kv
  std::memcpy(b.data() + 8, long_heads, sizeof(long_heads));
  const int32_t seq = 1 << 23;
  std::memcpy(b.data() + 8 + 6 * 4, &seq, sizeof(seq));
  expect_bad(b, "seq_len * head_dim <= 2^28");
  EXPECT_TESSERA_ERROR(io::load_llama2c(dir.file("missing.bin")), RuntimeError, "[load_llama2c]");
}

}  // namespace
}  // namespace tessera
