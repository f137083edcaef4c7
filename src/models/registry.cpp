// The table of model families and the Hugging Face config readers of each.
#include "tessera/models/registry.h"

#include <algorithm>
#include <optional>

#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/models/gpt2.h"
#include "tessera/models/llama.h"

namespace tessera::models {

namespace {

using Json = nlohmann::json;

template <class T>
T get_or(const Json& j, const char* key, T fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  try {
    return j[key].get<T>();
  } catch (const Json::exception&) {
    throw ValueError(tessera::detail::str("[load_model] expected config key '", key, "' to be a ",
                                          std::is_same_v<T, std::string> ? "string"
                                          : std::is_same_v<T, bool>      ? "boolean"
                                                                         : "number",
                                          ", got ", j[key].dump().substr(0, 60)));
  }
}

// The keys of j that Config knows (from its own to_json), so from_json's unknown-key check does
// not trip on a run config's other entries.
template <class Config>
Config from_known_keys(const std::string& json) {
  const Json j = Json::parse(json);
  const Json defaults = Json::parse(Config().to_json());
  Json out = Json::object();
  for (const auto& [key, value] : j.items())
    if (defaults.contains(key)) out[key] = value;
  return Config::from_json(out.dump());
}

std::string gpt2_from_hf(const std::string& hf_json) {
  const Json j = Json::parse(hf_json);
  GPT2Config c;
  c.vocab_size = get_or<int64_t>(j, "vocab_size", c.vocab_size);
  c.block_size = get_or<int64_t>(j, "n_positions", get_or<int64_t>(j, "n_ctx", c.block_size));
  c.n_layer = get_or<int64_t>(j, "n_layer", c.n_layer);
  c.n_head = get_or<int64_t>(j, "n_head", c.n_head);
  c.n_embd = get_or<int64_t>(j, "n_embd", c.n_embd);
  c.layer_norm_eps = get_or<double>(j, "layer_norm_epsilon", c.layer_norm_eps);
  c.dropout = 0.0;
  c.validate();
  return c.to_json();
}

// Hugging Face's rope_scaling object ("rope_type", or "type" in older configs). Like vLLM,
// linear and YaRN scaling lengthen the context: to max_position_embeddings x factor for linear,
// original_max_position_embeddings x factor for YaRN (Qwen's instructions add the object and
// leave max_position_embeddings at the pretrained length).
std::optional<RopeScaling> hf_rope_scaling(const Json& s, int64_t& max_seq_len) {
  const std::string type = get_or<std::string>(s, "rope_type", get_or<std::string>(s, "type", ""));
  if (type == "default") return std::nullopt;
  TESSERA_CHECK(type != "dynamic", NotImplementedError,
                "[load_model] rope_scaling of type dynamic (NTK scaling recomputed for each "
                "sequence length, which a KV cache cannot follow) is not implemented; yarn is "
                "the static alternative");
  TESSERA_CHECK(type == "llama3" || type == "linear" || type == "yarn", NotImplementedError,
                "[load_model] expected rope_scaling of type llama3, linear, yarn or default, got '",
                type, "'");
  RopeScaling r;
  r.rope_type = type;
  r.factor = get_or<double>(s, "factor", r.factor);
  r.original_max_position_embeddings =
      get_or<int64_t>(s, "original_max_position_embeddings",
                      type == "llama3" ? r.original_max_position_embeddings : max_seq_len);
  r.low_freq_factor = get_or<double>(s, "low_freq_factor", r.low_freq_factor);
  r.high_freq_factor = get_or<double>(s, "high_freq_factor", r.high_freq_factor);
  r.beta_fast = get_or<double>(s, "beta_fast", r.beta_fast);
  r.beta_slow = get_or<double>(s, "beta_slow", r.beta_slow);
  r.attention_factor = get_or<double>(s, "attention_factor", r.attention_factor);
  r.mscale = get_or<double>(s, "mscale", r.mscale);
  r.mscale_all_dim = get_or<double>(s, "mscale_all_dim", r.mscale_all_dim);
  r.truncate = get_or<bool>(s, "truncate", r.truncate);
  const auto scaled = [&](int64_t n) {
    const double positions = static_cast<double>(n) * std::max(r.factor, 1.0);
    TESSERA_CHECK(positions < 1e12, ValueError,
                  "[load_model] expected a rope_scaling factor that lengthens the context to "
                  "fewer than 1e12 positions, got factor ",
                  r.factor, " over ", n);
    return static_cast<int64_t>(positions);
  };
  if (type == "linear") max_seq_len = scaled(max_seq_len);
  if (type == "yarn")
    max_seq_len = std::max(max_seq_len, scaled(r.original_max_position_embeddings));
  return r;
}

std::string llama_from_hf(const std::string& hf_json) {
  const Json j = Json::parse(hf_json);
  LlamaConfig c;
  c.vocab_size = get_or<int64_t>(j, "vocab_size", c.vocab_size);
  c.dim = get_or<int64_t>(j, "hidden_size", c.dim);
  c.n_layers = get_or<int64_t>(j, "num_hidden_layers", c.n_layers);
  c.n_heads = get_or<int64_t>(j, "num_attention_heads", c.n_heads);
  c.n_kv_heads = get_or<int64_t>(j, "num_key_value_heads", c.n_heads);
  c.hidden_dim = get_or<int64_t>(j, "intermediate_size", c.hidden_dim);
  c.max_seq_len = get_or<int64_t>(j, "max_position_embeddings", c.max_seq_len);
  // Transformers 5 writes rope_theta and the scaling together as rope_parameters.
  const char* rope_key = j.contains("rope_parameters") ? "rope_parameters" : "rope_scaling";
  if (j.contains(rope_key) && j[rope_key].is_object()) {
    c.rope_theta = get_or<double>(j[rope_key], "rope_theta", c.rope_theta);
    c.rope_scaling = hf_rope_scaling(j[rope_key], c.max_seq_len);
  }
  // Sliding-window attention (Mistral v0.1: 4096 of 32768) equals full attention within the
  // window, which this model implements: the context is capped there so results stay exact.
  const int64_t window = get_or<int64_t>(j, "sliding_window", 0);
  if (window > 0 && get_or<bool>(j, "use_sliding_window", true))
    c.max_seq_len = std::min(c.max_seq_len, window);
  // Qwen3 and Mistral NeMo size heads apart from the width; the default is dim / n_heads.
  const int64_t head_dim = get_or<int64_t>(j, "head_dim", 0);
  if (head_dim * c.n_heads != c.dim) c.explicit_head_dim = head_dim;
  c.norm_eps = get_or<double>(j, "rms_norm_eps", c.norm_eps);
  c.rope_theta = get_or<double>(j, "rope_theta", c.rope_theta);
  c.tie_embeddings = get_or<bool>(j, "tie_word_embeddings", false);
  // Qwen2 is LLaMA with biases on q, k and v; Hugging Face Llama's attention_bias adds o's.
  const std::string type = get_or<std::string>(j, "model_type", "");
  c.qkv_bias = type == "qwen2";
  // Qwen3: Qwen2 without the biases, query and key heads normed.
  c.qk_norm = type == "qwen3" || type == "qwen3_moe";
  // Phi-3 and Phi-4 are LLaMA with fused qkv_proj / gate_up_proj weights (split as they load);
  // Phi-4-mini rotates only part of each head.
  TESSERA_CHECK(get_or<double>(j, "partial_rotary_factor", 1.0) == 1.0, NotImplementedError,
                "[load_model] expected partial_rotary_factor 1 (rotary embedding over part of each "
                "head, as Phi-4-mini's, is not implemented), got ",
                get_or<double>(j, "partial_rotary_factor", 1.0));
  c.attention_bias = get_or<bool>(j, "attention_bias", false);
  TESSERA_CHECK(!get_or<bool>(j, "mlp_bias", false), ValueError,
                "[load_model] expected mlp_bias false (MLP biases are not implemented)");
  // Mixtral's mixture of experts (model_type "mixtral").
  c.n_experts = get_or<int64_t>(j, "num_local_experts", 0);
  c.n_experts_per_token = get_or<int64_t>(j, "num_experts_per_tok", c.n_experts_per_token);
  c.router_aux_loss_coef = get_or<double>(j, "router_aux_loss_coef", c.router_aux_loss_coef);
  if (type == "qwen3_moe") {  // every layer a mixture of experts of moe_intermediate_size units
    c.qwen_moe = true;
    c.n_experts = get_or<int64_t>(j, "num_experts", 0);
    c.hidden_dim = get_or<int64_t>(j, "moe_intermediate_size", c.hidden_dim);
    c.norm_topk_prob = get_or<bool>(j, "norm_topk_prob", false);  // Qwen3MoeConfig's default
    const bool dense_layers = get_or<int64_t>(j, "decoder_sparse_step", 1) != 1 ||
                              (j.contains("mlp_only_layers") && j["mlp_only_layers"].is_array() &&
                               !j["mlp_only_layers"].empty());
    TESSERA_CHECK(!dense_layers, NotImplementedError,
                  "[load_model] expected every layer a mixture of experts (decoder_sparse_step 1, "
                  "no mlp_only_layers): dense layers among sparse ones are not implemented");
  }
  c.validate();
  return c.to_json();
}

// The registry entry of a model class with its Config.
template <class Model, class Config>
ModelFamily family(std::string_view name, std::vector<std::string_view> hf_types,
                   std::string_view config_key, std::string_view weight_marker,
                   std::vector<std::string> lora_targets,
                   std::string (*from_hf)(const std::string&)) {
  return {
      name,
      std::move(hf_types),
      config_key,
      weight_marker,
      std::move(lora_targets),
      [](const std::string& json, Generator* gen) -> std::shared_ptr<CausalLM> {
        return std::make_shared<Model>(from_known_keys<Config>(json), gen);
      },
      from_hf,
      [](const CausalLM& model) -> std::optional<std::string> {
        const auto* m = dynamic_cast<const Model*>(&model);
        return m ? std::optional<std::string>(m->config.to_json()) : std::nullopt;
      },
      [] { return Config::names(); },
      [](std::string_view preset) { return Config::from_name(preset).to_json(); },
  };
}

std::string family_names() {
  std::string names;
  for (const ModelFamily& f : model_families())
    names += (names.empty() ? "" : " or ") + std::string(f.name);
  return names;
}

}  // namespace

const std::vector<ModelFamily>& model_families() {
  static const std::vector<ModelFamily> families = {
      family<GPT2, GPT2Config>("gpt2", {"gpt2"}, "n_embd", "transformer.wte.weight", {"c_attn"},
                               &gpt2_from_hf),
      family<Llama, LlamaConfig>(
          "llama", {"llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe", "phi3"},
          "n_layers", "model.embed_tokens.weight", {"q_proj", "v_proj"}, &llama_from_hf),
  };
  return families;
}

const ModelFamily& model_family(std::string_view name, std::string_view op) {
  for (const ModelFamily& f : model_families())
    if (f.name == name) return f;
  throw ValueError(
      tessera::detail::str("[", op, "] expected model ", family_names(), ", got '", name, "'"));
}

const ModelFamily& family_of(const CausalLM& model) {
  for (const ModelFamily& f : model_families())
    if (f.config_of(model)) return f;
  throw ValueError(tessera::detail::str("[model] expected a model of a registered family (",
                                        family_names(), "), got ", model.type_name()));
}

const ModelFamily* family_of_hf_type(std::string_view type) {
  for (const ModelFamily& f : model_families())
    for (std::string_view t : f.hf_model_types)
      if (t == type) return &f;
  return nullptr;
}

}  // namespace tessera::models
