// llama2.c model files -> models::Llama (layout and RoPE permutation in tessera/io/importers.h).
#include <array>
#include <cstdlib>
#include <cstring>
#include <map>

#include "io/mapped_file.h"
#include "tessera/io/importers.h"
#include "tessera/nn/init.h"

namespace tessera::io {
namespace {

using tessera::detail::str;

constexpr uint32_t kMagicV1 = 0x616b3432;  // "ak42"
constexpr size_t kLegacyHeaderBytes = 7 * sizeof(int32_t);
constexpr size_t kV1HeaderBytes = 256;

// Rows of an interleaved-RoPE projection [H * D, in] reordered to the half-split convention:
// within each head, row 2i -> i and row 2i+1 -> i + D/2.
Tensor interleaved_to_half_split(const Tensor& w, int64_t n_heads) {
  const int64_t rows = w.size(0), cols = w.size(1), D = rows / n_heads;
  return w.view({n_heads, D / 2, 2, cols}).transpose(1, 2).reshape({rows, cols});
}

constexpr std::string_view kOp = "load_llama2c";

// What a file's header says, checked against the file's size: the config, and the tensors'
// shapes by name and their order in the file from data_offset.
struct Llama2cLayout {
  models::LlamaConfig config;
  size_t data_offset = 0;
  std::map<std::string, Shape> shapes;
  std::vector<std::string> order;
};

Llama2cLayout read_layout(const detail::MappedFile& file, const std::string& path) {
  constexpr std::string_view op = kOp;
  TESSERA_CHECK(file.size() >= kLegacyHeaderBytes, ValueError, "[", op, "] expected a header of ",
                kLegacyHeaderBytes, " bytes in '", path, "', got a file of ", file.size(),
                " bytes");
  uint32_t magic = 0;
  std::memcpy(&magic, file.data(), 4);
  const bool v1 = magic == kMagicV1;
  std::array<int32_t, 7> p{};
  bool shared = false;
  size_t data_offset = kLegacyHeaderBytes;
  if (v1) {
    TESSERA_CHECK(file.size() >= kV1HeaderBytes, ValueError, "[", op,
                  "] expected a 256-byte header in '", path, "', got a file of ", file.size(),
                  " bytes");
    int32_t version = 0;
    std::memcpy(&version, file.data() + 4, 4);
    TESSERA_CHECK(version == 1, ValueError, "[", op, "] expected version 1 (fp32) in '", path,
                  "' (version 2 is int8-quantized, unsupported), got ", version);
    std::memcpy(p.data(), file.data() + 8, sizeof(p));
    shared = file.data()[8 + sizeof(p)] != 0;
    data_offset = kV1HeaderBytes;
  } else {
    std::memcpy(p.data(), file.data(), sizeof(p));
    shared = p[5] > 0;  // the legacy format flags an untied classifier with a negative vocab
  }
  // |vocab_size| in 64 bits: std::abs of INT32_MIN in int overflows.
  const int64_t dim = p[0], hidden = p[1], L = p[2], H = p[3], KV = p[4],
                V = std::abs(static_cast<int64_t>(p[5])), seq = p[6];
  TESSERA_CHECK(dim > 0 && hidden > 0 && L > 0 && H > 0 && KV > 0 && V > 0 && seq > 0 &&
                    dim % H == 0 && (dim / H) % 2 == 0 && H % KV == 0,
                ValueError, "[", op, "] expected a llama2.c header (positive sizes, dim % n_heads ",
                "== 0 with an even head size, n_heads % n_kv_heads == 0) in '", path, "', got dim ",
                dim, ", hidden_dim ", hidden, ", n_layers ", L, ", n_heads ", H, ", n_kv_heads ",
                KV, ", vocab_size ", p[5], ", seq_len ", seq);
  // Bounds that keep every size product below 2^63 (real models are far inside them).
  TESSERA_CHECK(
      dim < (1 << 20) && hidden < (1 << 22) && L < (1 << 16) && V < (1 << 24) && seq < (1 << 24),
      ValueError, "[", op, "] expected plausible sizes in '", path, "', got dim ", dim,
      ", hidden_dim ", hidden, ", n_layers ", L, ", vocab_size ", V, ", seq_len ", seq);
  const int64_t D = dim / H, kv_dim = KV * D;
  // Version 1 files carry no RoPE tables, so nothing else bounds the tables the model builds.
  TESSERA_CHECK(seq * D <= (int64_t{1} << 28), ValueError, "[", op, "] expected seq_len * ",
                "head_dim <= 2^28 in '", path, "' (the RoPE tables), got seq_len ", seq,
                " and head_dim ", D);

  // Shapes in file order, by name; the layer weights are stacked over layers.
  std::map<std::string, Shape> shapes = {
      {"emb", {V, dim}},           {"rms_att", {L, dim}},    {"wq", {L, dim, dim}},
      {"wk", {L, kv_dim, dim}},    {"wv", {L, kv_dim, dim}}, {"wo", {L, dim, dim}},
      {"rms_ffn", {L, dim}},       {"w1", {L, hidden, dim}}, {"w2", {L, dim, hidden}},
      {"w3", {L, hidden, dim}},    {"rms_final", {dim}},     {"freq_real", {seq, D / 2}},
      {"freq_imag", {seq, D / 2}}, {"wcls", {V, dim}}};
  std::vector<std::string> order =
      v1 ? std::vector<std::string>{"rms_att", "rms_ffn", "rms_final", "emb", "wq", "wk",
                                    "wv",      "wo",      "w1",        "w2",  "w3"}
         : std::vector<std::string>{"emb",       "rms_att",   "wq",       "wk", "wv",
                                    "wo",        "rms_ffn",   "w1",       "w2", "w3",
                                    "rms_final", "freq_real", "freq_imag"};
  if (!shared) order.push_back("wcls");
  uint64_t expected = data_offset;
  for (const std::string& name : order) expected += shape_numel(shapes.at(name)) * sizeof(float);
  TESSERA_CHECK(file.size() == expected, ValueError, "[", op, "] expected ", expected,
                " bytes in '", path, "' for the sizes in its header, got ", file.size());

  Llama2cLayout layout;
  models::LlamaConfig& config = layout.config;
  config.vocab_size = V;
  config.dim = dim;
  config.n_layers = L;
  config.n_heads = H;
  config.n_kv_heads = KV;
  config.hidden_dim = hidden;
  config.max_seq_len = seq;
  config.norm_eps = 1e-5;  // run.c's rmsnorm
  config.rope_theta = 10000.0;
  config.tie_embeddings = shared;
  layout.data_offset = data_offset;
  layout.shapes = std::move(shapes);
  layout.order = std::move(order);
  return layout;
}

}  // namespace

models::LlamaConfig llama2c_config(const std::string& path) {
  return read_layout(detail::map_file(path, kOp), path).config;
}

std::shared_ptr<models::Llama> load_llama2c(const std::string& path) {
  constexpr std::string_view op = kOp;
  detail::MappedFile file = detail::map_file(path, op);
  const Llama2cLayout layout = read_layout(file, path);
  const models::LlamaConfig& config = layout.config;
  const int64_t L = config.n_layers, H = config.n_heads, KV = config.n_kv_heads;
  detail::TensorReader reader(file, layout.data_offset, kFloat32, op);
  std::map<std::string, Tensor> w;
  for (const std::string& name : layout.order) w[name] = reader.next(layout.shapes.at(name));
  // Every weight is read from the file.
  auto model = nn::init::without_init([&] { return std::make_shared<models::Llama>(config); });

  nn::TensorDict state;
  state.insert("model.embed_tokens.weight", w["emb"]);
  for (int64_t i = 0; i < L; ++i) {
    const std::string layer = str("model.layers.", i, ".");
    state.insert(layer + "self_attn.q_proj.weight",
                 interleaved_to_half_split(w["wq"].select(0, i), H));
    state.insert(layer + "self_attn.k_proj.weight",
                 interleaved_to_half_split(w["wk"].select(0, i), KV));
    state.insert(layer + "self_attn.v_proj.weight", w["wv"].select(0, i));
    state.insert(layer + "self_attn.o_proj.weight", w["wo"].select(0, i));
    state.insert(layer + "mlp.gate_proj.weight", w["w1"].select(0, i));
    state.insert(layer + "mlp.up_proj.weight", w["w3"].select(0, i));
    state.insert(layer + "mlp.down_proj.weight", w["w2"].select(0, i));
    state.insert(layer + "input_layernorm.weight", w["rms_att"].select(0, i));
    state.insert(layer + "post_attention_layernorm.weight", w["rms_ffn"].select(0, i));
  }
  state.insert("model.norm.weight", w["rms_final"]);
  state.insert("lm_head.weight", config.tie_embeddings ? w["emb"] : w["wcls"]);
  model->load_state_dict(state, /*strict=*/true);
  return model;
}

}  // namespace tessera::io
