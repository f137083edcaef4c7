#include "tessera/infer/model_loader.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tessera/io/checkpoint.h"
#include "tessera/io/importers.h"
#include "tessera/io/safetensors.h"
#include "tessera/models/gpt2.h"
#include "tessera/models/llama.h"

namespace tessera::infer {
namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;
constexpr const char* kOp = "[load_model]";

bool is_gpt2_keys(const Json& j) { return j.contains("n_embd"); }
bool is_llama_keys(const Json& j) { return j.contains("dim") && j.contains("n_layers"); }
bool is_hf(const Json& j) { return j.contains("model_type") && j["model_type"].is_string(); }

// The first object (this one or nested up to depth 3) that configures a model.
const Json* find_config(const Json& j, int depth = 0) {
  if (!j.is_object()) return nullptr;
  if (is_gpt2_keys(j) || is_llama_keys(j) || is_hf(j)) return &j;
  if (depth == 3) return nullptr;
  for (const auto& [key, value] : j.items())
    if (const Json* found = find_config(value, depth + 1)) return found;
  return nullptr;
}

// Keeps the keys a Tessera config knows (from its own to_json), so from_json's unknown-key check
// does not trip on a run config's other entries.
std::string known_keys(const Json& j, const std::string& defaults_json) {
  const Json defaults = Json::parse(defaults_json);
  Json out = Json::object();
  for (const auto& [key, value] : j.items())
    if (defaults.contains(key)) out[key] = value;
  return out.dump();
}

template <class T>
T get_or(const Json& j, const char* key, T fallback) {
  return j.contains(key) && !j[key].is_null() ? j[key].get<T>() : fallback;
}

models::GPT2Config hf_gpt2(const Json& j) {
  models::GPT2Config c;
  c.vocab_size = get_or<int64_t>(j, "vocab_size", c.vocab_size);
  c.block_size = get_or<int64_t>(j, "n_positions", get_or<int64_t>(j, "n_ctx", c.block_size));
  c.n_layer = get_or<int64_t>(j, "n_layer", c.n_layer);
  c.n_head = get_or<int64_t>(j, "n_head", c.n_head);
  c.n_embd = get_or<int64_t>(j, "n_embd", c.n_embd);
  c.layer_norm_eps = get_or<double>(j, "layer_norm_epsilon", c.layer_norm_eps);
  c.dropout = 0.0;
  c.validate();
  return c;
}

models::LlamaConfig hf_llama(const Json& j) {
  models::LlamaConfig c;
  c.vocab_size = get_or<int64_t>(j, "vocab_size", c.vocab_size);
  c.dim = get_or<int64_t>(j, "hidden_size", c.dim);
  c.n_layers = get_or<int64_t>(j, "num_hidden_layers", c.n_layers);
  c.n_heads = get_or<int64_t>(j, "num_attention_heads", c.n_heads);
  c.n_kv_heads = get_or<int64_t>(j, "num_key_value_heads", c.n_heads);
  c.hidden_dim = get_or<int64_t>(j, "intermediate_size", c.hidden_dim);
  c.max_seq_len = get_or<int64_t>(j, "max_position_embeddings", c.max_seq_len);
  c.norm_eps = get_or<double>(j, "rms_norm_eps", c.norm_eps);
  c.rope_theta = get_or<double>(j, "rope_theta", c.rope_theta);
  c.tie_embeddings = get_or<bool>(j, "tie_word_embeddings", false);
  if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) {
    const Json& s = j["rope_scaling"];
    const std::string type =
        get_or<std::string>(s, "rope_type", get_or<std::string>(s, "type", ""));
    TESSERA_CHECK(type == "llama3", ValueError, kOp,
                  " expected rope_scaling of type llama3 (the only one implemented), got '", type,
                  "'");
    models::RopeScaling r;
    r.factor = get_or<double>(s, "factor", r.factor);
    r.low_freq_factor = get_or<double>(s, "low_freq_factor", r.low_freq_factor);
    r.high_freq_factor = get_or<double>(s, "high_freq_factor", r.high_freq_factor);
    r.original_max_position_embeddings =
        get_or<int64_t>(s, "original_max_position_embeddings", r.original_max_position_embeddings);
    c.rope_scaling = r;
  }
  c.validate();
  return c;
}

std::string read_text(const fs::path& p) {
  std::ifstream f(p);
  TESSERA_CHECK(f.good(), RuntimeError, kOp, " could not read '", p.string(), "'");
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// Renames Hugging Face GPT-2 keys to nanoGPT's, transposes its Conv1D weights, drops buffers
// the model does not keep, casts to float32 and fills a tied lm_head; then loads strictly.
void load_weights(models::CausalLM& model, const nn::TensorDict& raw) {
  const nn::TensorDict want = model.state_dict();
  // Hugging Face's GPT-2 stores every Conv1D weight as [in, out]; c_attn's shape gives it away
  // ([C, 3C]), and then the square c_proj weights must be transposed too.
  bool conv1d = false;
  for (const auto& [name, t] : raw)
    if (name.ends_with("attn.c_attn.weight") && t.dim() == 2 && t.size(0) < t.size(1))
      conv1d = true;
  auto is_conv1d = [](const std::string& key) {
    return key.ends_with("attn.c_attn.weight") || key.ends_with("attn.c_proj.weight") ||
           key.ends_with("mlp.c_fc.weight") || key.ends_with("mlp.c_proj.weight");
  };
  nn::TensorDict state;
  for (const auto& [name, t] : raw) {
    std::string key = name;
    if (!want.contains(key) && want.contains("transformer." + key)) key = "transformer." + key;
    if (!want.contains(key)) {
      // Non-learned buffers some exporters save (causal masks, rotary inverse frequencies).
      const bool buffer = key.ends_with(".attn.bias") || key.ends_with(".attn.masked_bias") ||
                          key.ends_with("rotary_emb.inv_freq");
      if (buffer) continue;
    }
    Tensor v = t.to(kFloat32);
    if (conv1d && is_conv1d(key) && v.dim() == 2) v = v.t().contiguous();  // -> Linear [out, in]
    state.insert_or_assign(key, v);
  }
  for (const char* emb : {"transformer.wte.weight", "model.embed_tokens.weight"})
    if (want.contains("lm_head.weight") && !state.contains("lm_head.weight") && state.contains(emb))
      state.insert("lm_head.weight", state.at(emb));
  model.load_state_dict(state, /*strict=*/true);
}

std::shared_ptr<models::CausalLM> load_bin(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  TESSERA_CHECK(f.good(), RuntimeError, kOp, " could not open '", path, "'");
  int32_t magic = 0;
  f.read(reinterpret_cast<char*>(&magic), sizeof(magic));
  if (magic == 20240326) return io::load_llmc_gpt2(path);
  return io::load_llama2c(path);  // its own checks name what does not match
}

// The model config describes, with the weights of state (whose names tell GPT-2 from LLaMA
// when the config's keys do not).
LoadedModel build_and_load(const nn::TensorDict& state, std::string config, std::string source) {
  const bool gpt2 = state.contains("transformer.wte.weight") || state.contains("wte.weight");
  LoadedModel out{make_model_from_config(config, gpt2 ? "gpt2" : "llama"), std::move(source),
                  std::move(config)};
  load_weights(*out.model, state);
  return out;
}

LoadedModel from_checkpoint(const std::string& folder) {
  const io::Checkpoint ckpt = io::load_checkpoint(folder);
  return build_and_load(ckpt.model, ckpt.config, folder);
}

LoadedModel from_safetensors(const fs::path& file) {
  const fs::path config = file.parent_path() / "config.json";
  TESSERA_CHECK(fs::exists(config), ValueError, kOp, " expected a config.json beside '",
                file.string(), "'");
  return build_and_load(io::load_state_dict(file.string()), read_text(config), file.string());
}

}  // namespace

std::shared_ptr<models::CausalLM> make_model_from_config(const std::string& json,
                                                         const std::string& kind_hint) {
  const Json doc = Json::parse(json, nullptr, /*allow_exceptions=*/false);
  const Json* j = doc.is_discarded() ? nullptr : find_config(doc);
  TESSERA_CHECK(j != nullptr, ValueError, kOp,
                " expected a model config (GPT-2 / LLaMA keys or a Hugging Face config.json), got ",
                json.substr(0, 200));
  Generator gen(0);  // the weights are overwritten: keep the default generator untouched
  if (is_hf(*j)) {
    const std::string type = (*j)["model_type"].get<std::string>();
    if (type == "gpt2") return std::make_shared<models::GPT2>(hf_gpt2(*j), &gen);
    TESSERA_CHECK(type == "llama" || type == "mistral", ValueError, kOp,
                  " expected model_type gpt2 or llama, got '", type, "'");
    return std::make_shared<models::Llama>(hf_llama(*j), &gen);
  }
  const bool gpt2 = kind_hint == "gpt2" || (kind_hint != "llama" && is_gpt2_keys(*j));
  if (gpt2) {
    return std::make_shared<models::GPT2>(
        models::GPT2Config::from_json(known_keys(*j, models::GPT2Config().to_json())), &gen);
  }
  return std::make_shared<models::Llama>(
      models::LlamaConfig::from_json(known_keys(*j, models::LlamaConfig().to_json())), &gen);
}

LoadedModel load_model_with_config(const std::string& path) {
  fs::path p = fs::path(path).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();  // "run/" is the folder "run"
  TESSERA_CHECK(fs::exists(p), ValueError, kOp, " expected an existing model path, got '", path,
                "'");
  LoadedModel out;
  if (fs::is_directory(p)) {
    if (fs::exists(p / "state.json")) {
      out = from_checkpoint(p.string());
    } else if (auto latest = io::latest_checkpoint(p.string())) {
      out = from_checkpoint(*latest);
    } else {
      TESSERA_CHECK(fs::exists(p / "model.safetensors"), ValueError, kOp,
                    " expected a training run folder (with ckpt_* checkpoints), a checkpoint "
                    "folder, or a folder with model.safetensors and config.json, got '",
                    path, "'");
      out = from_safetensors(p / "model.safetensors");
    }
  } else if (p.extension() == ".safetensors") {
    // A checkpoint's weights: its config is in state.json, not in a config.json.
    const bool checkpoint = fs::exists(p.parent_path() / "state.json");
    out = checkpoint ? from_checkpoint(p.parent_path().string()) : from_safetensors(p);
  } else {
    out = {load_bin(p.string()), p.string(), ""};
  }
  out.model->eval();
  return out;
}

std::shared_ptr<models::CausalLM> load_model(const std::string& path) {
  return load_model_with_config(path).model;
}

}  // namespace tessera::infer
