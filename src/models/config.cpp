#include "tessera/models/config.h"
#include "tessera/core/json_parse.h"

#include <nlohmann/json.hpp>
#include <utility>

#include "tessera/core/error.h"

namespace tessera::models {
namespace {

using tessera::detail::str;
using Json = nlohmann::ordered_json;

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

Json parse_object(std::string_view text, std::string_view op) {
  Json doc = parse_json(text);
  TESSERA_CHECK(!doc.is_discarded() && doc.is_object(), ValueError, "[", op,
                "] expected a JSON object, got '", text, "'");
  return doc;
}

// Reads doc's keys into the named fields; ValueError on an unknown key or a wrong type.
// extra_key is read by the caller.
template <class Fields>
void read_fields(const Json& doc, const Fields& fields, std::string_view op,
                 std::string_view extra_key = "") {
  // Named references, not a structured binding: clang 14 (the fuzz build) cannot capture
  // structured bindings in the lambda below.
  for (const auto& item : doc.items()) {
    const std::string& key = item.key();
    const Json& value = item.value();
    bool known = false;
    fields([&](const char* name, auto& field) {
      if (key != name) return;
      known = true;
      using T = std::decay_t<decltype(field)>;
      constexpr bool is_bool = std::is_same_v<T, bool>;
      constexpr bool is_string = std::is_same_v<T, std::string>;
      const bool ok = is_bool                 ? value.is_boolean()
                      : is_string             ? value.is_string()
                      : std::is_integral_v<T> ? value.is_number_integer()
                                              : value.is_number();
      TESSERA_CHECK(ok, ValueError, "[", op, "] expected a ",
                    is_bool     ? "boolean"
                    : is_string ? "string"
                                : "number",
                    " for '", key, "', got ", value.dump());
      field = value.template get<T>();
    });
    if (!extra_key.empty() && key == extra_key) known = true;
    TESSERA_CHECK(known, ValueError, "[", op, "] expected known config keys, got '", key, "'");
  }
}

// Calls f(name, field) for every field (const or not: one list drives to_json and from_json).
template <class C, class F>
void gpt2_fields(C& c, F&& f) {
  f("vocab_size", c.vocab_size);
  f("block_size", c.block_size);
  f("n_layer", c.n_layer);
  f("n_head", c.n_head);
  f("n_embd", c.n_embd);
  f("dropout", c.dropout);
  f("bias", c.bias);
  f("layer_norm_eps", c.layer_norm_eps);
}

template <class C, class F>
void llama_fields(C& c, F&& f) {
  f("vocab_size", c.vocab_size);
  f("dim", c.dim);
  f("n_layers", c.n_layers);
  f("n_heads", c.n_heads);
  f("n_kv_heads", c.n_kv_heads);
  f("hidden_dim", c.hidden_dim);
  f("max_seq_len", c.max_seq_len);
  f("norm_eps", c.norm_eps);
  f("rope_theta", c.rope_theta);
  f("tie_embeddings", c.tie_embeddings);
  f("qkv_bias", c.qkv_bias);
  f("attention_bias", c.attention_bias);
  f("head_dim", c.explicit_head_dim);
  f("qk_norm", c.qk_norm);
  f("n_experts", c.n_experts);
  f("n_experts_per_token", c.n_experts_per_token);
  f("router_aux_loss_coef", c.router_aux_loss_coef);
  f("norm_topk_prob", c.norm_topk_prob);
  f("qwen_moe", c.qwen_moe);
}

template <class C, class F>
void scaling_fields(C& s, F&& f) {
  f("factor", s.factor);
  f("low_freq_factor", s.low_freq_factor);
  f("high_freq_factor", s.high_freq_factor);
  f("original_max_position_embeddings", s.original_max_position_embeddings);
  f("rope_type", s.rope_type);
  f("beta_fast", s.beta_fast);
  f("beta_slow", s.beta_slow);
  f("attention_factor", s.attention_factor);
  f("mscale", s.mscale);
  f("mscale_all_dim", s.mscale_all_dim);
  f("truncate", s.truncate);
}

GPT2Config gpt2_shape(int64_t n_layer, int64_t n_head, int64_t n_embd) {
  GPT2Config c;
  c.n_layer = n_layer;
  c.n_head = n_head;
  c.n_embd = n_embd;
  return c;
}

const std::vector<std::pair<std::string, GPT2Config>>& gpt2_presets() {
  static const std::vector<std::pair<std::string, GPT2Config>> presets = {
      {"gpt2", gpt2_shape(12, 12, 768)},
      {"gpt2-medium", gpt2_shape(24, 16, 1024)},
      {"gpt2-large", gpt2_shape(36, 20, 1280)},
      {"gpt2-xl", gpt2_shape(48, 25, 1600)},
      {"d6", gpt2_shape(6, 6, 384)},
      {"d12", gpt2_shape(12, 12, 768)},
      {"d24", gpt2_shape(24, 16, 1024)},
      {"d36", gpt2_shape(36, 20, 1280)},
      {"d48", gpt2_shape(48, 25, 1600)}};
  return presets;
}

struct LlamaShape {
  int64_t vocab, dim, layers, heads, kv_heads, hidden, seq;
  double theta;
  std::optional<RopeScaling> scaling;
  bool tied;
  int64_t experts = 0;
};

LlamaConfig llama_shape(const LlamaShape& s) {
  LlamaConfig c;
  c.vocab_size = s.vocab;
  c.dim = s.dim;
  c.n_layers = s.layers;
  c.n_heads = s.heads;
  c.n_kv_heads = s.kv_heads;
  c.hidden_dim = s.hidden;
  c.max_seq_len = s.seq;
  c.rope_theta = s.theta;
  c.rope_scaling = s.scaling;
  c.tie_embeddings = s.tied;
  c.n_experts = s.experts;
  return c;
}

// Qwen3: heads of head_dim apart from the width, query and key norms, eps 1e-6.
LlamaConfig qwen3_shape(const LlamaShape& s, int64_t head_dim) {
  LlamaConfig c = llama_shape(s);
  c.explicit_head_dim = head_dim;
  c.qk_norm = true;
  c.norm_eps = 1e-6;
  return c;
}

const std::vector<std::pair<std::string, LlamaConfig>>& llama_presets() {
  const RopeScaling llama31{8.0, 1.0, 4.0, 8192};
  const RopeScaling llama32{32.0, 1.0, 4.0, 8192};
  static const std::vector<std::pair<std::string, LlamaConfig>> presets = {
      {"llama2-7b", llama_shape({32000, 4096, 32, 32, 32, 11008, 4096, 1e4, {}, false})},
      {"llama2-13b", llama_shape({32000, 5120, 40, 40, 40, 13824, 4096, 1e4, {}, false})},
      {"llama3-8b", llama_shape({128256, 4096, 32, 32, 8, 14336, 8192, 5e5, {}, false})},
      {"llama3.1-8b", llama_shape({128256, 4096, 32, 32, 8, 14336, 131072, 5e5, llama31, false})},
      {"llama3.2-1b", llama_shape({128256, 2048, 16, 32, 8, 8192, 131072, 5e5, llama32, true})},
      {"tinyllama-1.1b", llama_shape({32000, 2048, 22, 32, 4, 5632, 2048, 1e4, {}, false})},
      {"stories260K", llama_shape({512, 64, 5, 8, 4, 172, 512, 1e4, {}, true})},
      {"stories15M", llama_shape({32000, 288, 6, 6, 6, 768, 256, 1e4, {}, true})},
      {"stories42M", llama_shape({32000, 512, 8, 8, 8, 1376, 1024, 1e4, {}, true})},
      {"stories110M", llama_shape({32000, 768, 12, 12, 12, 2048, 1024, 1e4, {}, true})},
      {"llama-test",
       llama_shape({96, 64, 2, 4, 2, 128, 64, 1e4, RopeScaling{4.0, 1.0, 4.0, 16}, false})},
      {"mixtral-8x7b", llama_shape({32000, 4096, 32, 32, 8, 14336, 32768, 1e6, {}, false, 8})},
      {"mixtral-test", llama_shape({96, 64, 2, 4, 2, 96, 64, 1e4, {}, false, 4})},
      {"qwen3-0.6b",
       qwen3_shape({151936, 1024, 28, 16, 8, 3072, 40960, 1e6, {}, true}, /*head_dim=*/128)},
      {"qwen3-8b",
       qwen3_shape({151936, 4096, 36, 32, 8, 12288, 40960, 1e6, {}, false}, /*head_dim=*/128)},
      {"qwen3-test", qwen3_shape({96, 64, 2, 4, 2, 128, 64, 1e6, {}, true}, /*head_dim=*/24)}};
  return presets;
}

template <class Config>
Config find_preset(const std::vector<std::pair<std::string, Config>>& presets,
                   std::string_view name, std::string_view op) {
  std::vector<std::string> names;
  for (const auto& [n, config] : presets) {
    if (n == name) return config;
    names.push_back(n);
  }
  throw ValueError(
      str("[", op, "] expected a preset name among ", join(names), ", got '", name, "'"));
}

template <class Config>
std::vector<std::string> preset_names(const std::vector<std::pair<std::string, Config>>& presets) {
  std::vector<std::string> names;
  for (const auto& [n, config] : presets) names.push_back(n);
  return names;
}

}  // namespace

// ---- GPT-2 ----

GPT2Config GPT2Config::from_name(std::string_view name) {
  return find_preset(gpt2_presets(), name, "GPT2Config");
}

std::vector<std::string> GPT2Config::names() { return preset_names(gpt2_presets()); }

void GPT2Config::validate() const {
  TESSERA_CHECK(vocab_size > 0 && block_size > 0 && n_layer > 0 && n_head > 0 && n_embd > 0,
                ValueError,
                "[GPT2Config] expected positive vocab_size, block_size, n_layer, n_head, n_embd, "
                "got ",
                vocab_size, ", ", block_size, ", ", n_layer, ", ", n_head, ", ", n_embd);
  TESSERA_CHECK(n_embd % n_head == 0, ValueError,
                "[GPT2Config] expected n_embd divisible by n_head, got ", n_embd, " and ", n_head);
  TESSERA_CHECK(dropout >= 0.0 && dropout < 1.0, ValueError,
                "[GPT2Config] expected dropout in [0, 1), got ", dropout);
  TESSERA_CHECK(layer_norm_eps > 0.0, ValueError, "[GPT2Config] expected layer_norm_eps > 0, got ",
                layer_norm_eps);
}

std::string GPT2Config::to_json() const {
  Json doc = Json::object();
  gpt2_fields(*this, [&](const char* name, const auto& v) { doc[name] = v; });
  return doc.dump();
}

GPT2Config GPT2Config::from_json(std::string_view json) {
  const Json doc = parse_object(json, "GPT2Config");
  GPT2Config c;
  read_fields(
      doc, [&](auto&& f) { gpt2_fields(c, f); }, "GPT2Config");
  c.validate();
  return c;
}

// ---- LLaMA ----

LlamaConfig LlamaConfig::from_name(std::string_view name) {
  return find_preset(llama_presets(), name, "LlamaConfig");
}

std::vector<std::string> LlamaConfig::names() { return preset_names(llama_presets()); }

namespace {

void validate_rope_scaling(const RopeScaling& s) {
  const std::string& type = s.rope_type;
  TESSERA_CHECK(type == "llama3" || type == "linear" || type == "yarn", ValueError,
                "[LlamaConfig] expected rope_scaling rope_type llama3, linear or yarn, got '", type,
                "'");
  TESSERA_CHECK(s.factor > 0.0 && s.original_max_position_embeddings > 0, ValueError,
                "[LlamaConfig] expected rope_scaling with factor > 0 and "
                "original_max_position_embeddings > 0, got factor ",
                s.factor, " and original ", s.original_max_position_embeddings);
  if (type == "llama3")
    TESSERA_CHECK(s.low_freq_factor > 0.0 && s.high_freq_factor > s.low_freq_factor, ValueError,
                  "[LlamaConfig] expected llama3 rope_scaling with 0 < low_freq_factor < "
                  "high_freq_factor, got low ",
                  s.low_freq_factor, ", high ", s.high_freq_factor);
  if (type == "yarn")
    TESSERA_CHECK(s.beta_fast > 0.0 && s.beta_slow > 0.0 && s.attention_factor >= 0.0 &&
                      s.mscale >= 0.0 && s.mscale_all_dim >= 0.0,
                  ValueError,
                  "[LlamaConfig] expected yarn rope_scaling with beta_fast, beta_slow > 0 and "
                  "attention_factor, mscale, mscale_all_dim >= 0 (0: unset), got beta_fast ",
                  s.beta_fast, ", beta_slow ", s.beta_slow, ", attention_factor ",
                  s.attention_factor, ", mscale ", s.mscale, ", mscale_all_dim ", s.mscale_all_dim);
}

}  // namespace

void LlamaConfig::validate() const {
  TESSERA_CHECK(vocab_size > 0 && dim > 0 && n_layers > 0 && n_heads > 0 && n_kv_heads > 0 &&
                    hidden_dim > 0 && max_seq_len > 0,
                ValueError,
                "[LlamaConfig] expected positive vocab_size, dim, n_layers, n_heads, n_kv_heads, "
                "hidden_dim, max_seq_len, got ",
                vocab_size, ", ", dim, ", ", n_layers, ", ", n_heads, ", ", n_kv_heads, ", ",
                hidden_dim, ", ", max_seq_len);
  TESSERA_CHECK(explicit_head_dim >= 0 && (explicit_head_dim > 0 || dim % n_heads == 0) &&
                    head_dim() % 2 == 0,
                ValueError,
                "[LlamaConfig] expected dim divisible by n_heads into an even head dim (or an "
                "even head_dim), got dim ",
                dim, ", n_heads ", n_heads, " and head_dim ", explicit_head_dim);
  TESSERA_CHECK(n_heads % n_kv_heads == 0, ValueError,
                "[LlamaConfig] expected n_heads divisible by n_kv_heads, got ", n_heads, " and ",
                n_kv_heads);
  TESSERA_CHECK(norm_eps > 0.0 && rope_theta > 0.0, ValueError,
                "[LlamaConfig] expected norm_eps > 0 and rope_theta > 0, got ", norm_eps, " and ",
                rope_theta);
  TESSERA_CHECK(n_experts >= 0 && (n_experts == 0 ||
                                   (n_experts_per_token >= 1 && n_experts_per_token <= n_experts)),
                ValueError,
                "[LlamaConfig] expected n_experts >= 0 and, with experts, 1 <= "
                "n_experts_per_token <= n_experts, got ",
                n_experts, " and ", n_experts_per_token);
  TESSERA_CHECK(router_aux_loss_coef >= 0.0, ValueError,
                "[LlamaConfig] expected router_aux_loss_coef >= 0, got ", router_aux_loss_coef);
  if (rope_scaling) validate_rope_scaling(*rope_scaling);
}

std::string LlamaConfig::to_json() const {
  Json doc = Json::object();
  llama_fields(*this, [&](const char* name, const auto& v) { doc[name] = v; });
  doc["rope_scaling"] = nullptr;
  if (rope_scaling) {
    Json s = Json::object();
    scaling_fields(*rope_scaling, [&](const char* name, const auto& v) { s[name] = v; });
    doc["rope_scaling"] = s;
  }
  return doc.dump();
}

LlamaConfig LlamaConfig::from_json(std::string_view json) {
  const Json doc = parse_object(json, "LlamaConfig");
  LlamaConfig c;
  read_fields(
      doc, [&](auto&& f) { llama_fields(c, f); }, "LlamaConfig", "rope_scaling");
  if (doc.contains("rope_scaling") && !doc["rope_scaling"].is_null()) {
    const Json& s = doc["rope_scaling"];
    TESSERA_CHECK(s.is_object(), ValueError,
                  "[LlamaConfig] expected rope_scaling to be an object or null, got ", s.dump());
    RopeScaling scaling;
    read_fields(
        s, [&](auto&& f) { scaling_fields(scaling, f); }, "LlamaConfig");
    c.rope_scaling = scaling;
  }
  c.validate();
  return c;
}

}  // namespace tessera::models
