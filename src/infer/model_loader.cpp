#include "tessera/infer/model_loader.h"
#include "tessera/core/json_parse.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tessera/io/checkpoint.h"
#include "tessera/io/importers.h"
#include "tessera/io/lora_adapter.h"
#include "tessera/io/safetensors.h"
#include "tessera/models/registry.h"
#include "tessera/nn/init.h"

namespace tessera::infer {
namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;
constexpr const char* kOp = "[load_model]";

bool is_hf(const Json& j) { return j.contains("model_type") && j["model_type"].is_string(); }

// The family whose Tessera config keys j has, or null.
const models::ModelFamily* family_of_keys(const Json& j) {
  for (const models::ModelFamily& f : models::model_families())
    if (j.contains(f.config_key)) return &f;
  return nullptr;
}

// The first object (this one or nested up to depth 3) that configures a model; J is Json or
// const Json.
template <class J>
J* find_config(J& j, int depth = 0) {
  if (!j.is_object()) return nullptr;
  if (family_of_keys(j) || is_hf(j)) return &j;
  if (depth == 3) return nullptr;
  for (J& value : j)
    if (J* found = find_config(value, depth + 1)) return found;
  return nullptr;
}

// config with overrides (a JSON object) merged into the model's config object as an RFC 7396
// merge patch: nested objects merge, null removes a key.
std::string with_overrides(const std::string& config, const std::string& overrides,
                           const std::string& source) {
  if (overrides.empty()) return config;
  const Json patch = parse_json(overrides);
  TESSERA_CHECK(patch.is_object(), ValueError, kOp,
                " expected config overrides as a JSON object, got ", overrides.substr(0, 200));
  Json doc = parse_json(config);
  Json* target = doc.is_discarded() ? nullptr : find_config(doc);
  TESSERA_CHECK(target != nullptr, ValueError, kOp, " expected a model config in '", source,
                "' to apply overrides to, got none");
  target->merge_patch(patch);
  return doc.dump();
}

std::string read_text(const fs::path& p) {
  std::ifstream f(p);
  TESSERA_CHECK(f.good(), RuntimeError, kOp, " could not read '", p.string(), "'");
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// Whether key is a fused projection some families store, which want (the model's state) holds as
// parts: Phi-3's self_attn.qkv_proj ([q; k; v] rows) and mlp.gate_up_proj ([gate; up], as
// Phi3MLP chunks its output). If so, its parts go into state, split by the rows each has.
bool split_fused(const std::string& key, const Tensor& v, const nn::TensorDict& want,
                 nn::TensorDict& state) {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> fused = {
      {"self_attn.qkv_proj.weight", {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}},
      {"mlp.gate_up_proj.weight", {"mlp.gate_proj", "mlp.up_proj"}},
  };
  for (const auto& [suffix, parts] : fused) {
    if (!key.ends_with(suffix) || want.contains(key)) continue;
    const std::string prefix = key.substr(0, key.size() - suffix.size());
    int64_t row = 0;
    for (const std::string& part : parts) {
      const std::string name = prefix + part + ".weight";
      TESSERA_CHECK(want.contains(name), ValueError, kOp, " expected '", name,
                    "' in the model for the fused '", key, "', got none");
      const int64_t rows = want.at(name).size(0);
      TESSERA_CHECK(v.dim() == 2 && row + rows <= v.size(0), ValueError, kOp, " expected '", key,
                    "' to hold the rows of its parts, got ", v.shape_str());
      state.insert_or_assign(name, v.narrow(0, row, rows).contiguous());
      row += rows;
    }
    TESSERA_CHECK(row == v.size(0), ValueError, kOp, " expected '", key, "' to have ", row,
                  " rows (its parts'), got ", v.shape_str());
    return true;
  }
  return false;
}

// Renames Hugging Face GPT-2 keys to nanoGPT's, transposes its Conv1D weights, splits fused
// projections, drops buffers the model does not keep, casts to float32 and fills a tied lm_head;
// then loads strictly.
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
    if (!split_fused(key, v, want, state)) state.insert_or_assign(key, v);
  }
  for (const char* emb : {"transformer.wte.weight", "model.embed_tokens.weight"})
    if (want.contains("lm_head.weight") && !state.contains("lm_head.weight") && state.contains(emb))
      state.insert("lm_head.weight", state.at(emb));
  model.load_state_dict(state, /*strict=*/true);
}

std::shared_ptr<models::CausalLM> load_bin(const std::string& path, bool weights) {
  std::ifstream f(path, std::ios::binary);
  TESSERA_CHECK(f.good(), RuntimeError, kOp, " could not open '", path, "'");
  int32_t magic = 0;
  f.read(reinterpret_cast<char*>(&magic), sizeof(magic));
  const bool llmc = magic == 20240326;
  if (weights)
    return llmc ? std::shared_ptr<models::CausalLM>(io::load_llmc_gpt2(path))
                : io::load_llama2c(path);  // its own checks name what does not match
  return nn::init::without_init([&]() -> std::shared_ptr<models::CausalLM> {
    if (llmc) return std::make_shared<models::GPT2>(io::llmc_gpt2_config(path));
    return std::make_shared<models::Llama>(io::llama2c_config(path));
  });
}

// The model config describes, with the weights of state (whose names tell the family when the
// config's keys do not) unless weights is false.
LoadedModel build_and_load(const nn::TensorDict& state, std::string config, std::string source,
                           const LoadOptions& options) {
  config = with_overrides(config, options.config_overrides, source);
  const bool weights = options.weights;
  std::string hint;
  for (const models::ModelFamily& f : models::model_families()) {
    const std::string marker(f.weight_marker);
    const std::string unprefixed = marker.substr(marker.find('.') + 1);  // "wte.weight"
    if (state.contains(marker) || state.contains(unprefixed)) hint = f.name;
  }
  LoadedModel out{nn::init::without_init([&] { return make_model_from_config(config, hint); }),
                  std::move(source), std::move(config)};
  if (!weights) return out;
  // A LoRA run's checkpoint holds its branches beside the frozen weights: merged here.
  nn::TensorDict base;
  nn::LoraAdapter lora;
  for (const auto& [key, t] : state)
    (key.find(".lora_A.") != std::string::npos || key.find(".lora_B.") != std::string::npos
         ? lora.weights
         : base)
        .insert(key, t);
  load_weights(*out.model, base);
  if (!lora.weights.empty()) {
    const Json doc = parse_json(out.config);
    TESSERA_CHECK(doc.is_object() && doc.contains("lora"), ValueError, kOp,
                  " expected the config of '", out.source,
                  "' to describe its LoRA weights (a \"lora\" entry), got none");
    lora.config = io::parse_lora_config(doc["lora"].dump());
    nn::merge_lora(*out.model, lora);
  }
  return out;
}

LoadedModel from_checkpoint(const std::string& folder, const LoadOptions& options) {
  const io::Checkpoint ckpt = io::load_checkpoint(folder);
  return build_and_load(ckpt.model, ckpt.config, folder, options);
}

LoadedModel from_safetensors(const fs::path& file, const LoadOptions& options) {
  const fs::path config = file.parent_path() / "config.json";
  TESSERA_CHECK(fs::exists(config), ValueError, kOp, " expected a config.json beside '",
                file.string(), "'");
  // Mapped, not read: without weights only the header is parsed (and checked).
  return build_and_load(io::load_state_dict(file.string()), read_text(config), file.string(),
                        options);
}

}  // namespace

std::shared_ptr<models::CausalLM> make_model_from_config(const std::string& json,
                                                         const std::string& kind_hint) {
  const Json doc = parse_json(json);
  const Json* j = doc.is_discarded() ? nullptr : find_config(doc);
  TESSERA_CHECK(j != nullptr, ValueError, kOp,
                " expected a model config (GPT-2 / LLaMA keys or a Hugging Face config.json), got ",
                json.substr(0, 200));
  Generator gen(0);  // the weights are overwritten: keep the default generator untouched
  if (is_hf(*j)) {
    const std::string type = (*j)["model_type"].get<std::string>();
    const models::ModelFamily* family = models::family_of_hf_type(type);
    if (!family) {
      std::string known;
      for (const models::ModelFamily& f : models::model_families())
        for (std::string_view t : f.hf_model_types)
          known += (known.empty() ? "" : ", ") + std::string(t);
      throw ValueError(
          tessera::detail::str(kOp, " expected model_type one of ", known, ", got '", type, "'"));
    }
    return family->build(family->config_from_hf(j->dump()), &gen);
  }
  const models::ModelFamily* family =
      kind_hint.empty() ? family_of_keys(*j) : &models::model_family(kind_hint, "load_model");
  return family->build(j->dump(), &gen);
}

LoadedModel load_model_with_config(const std::string& path, const LoadOptions& options) {
  fs::path p = fs::path(path).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();  // "run/" is the folder "run"
  TESSERA_CHECK(fs::exists(p), ValueError, kOp, " expected an existing model path, got '", path,
                "'");
  LoadedModel out;
  if (fs::is_directory(p)) {
    if (fs::exists(p / "state.json")) {
      out = from_checkpoint(p.string(), options);
    } else if (auto latest = io::latest_checkpoint(p.string())) {
      out = from_checkpoint(*latest, options);
    } else {
      TESSERA_CHECK(fs::exists(p / "model.safetensors"), ValueError, kOp,
                    " expected a training run folder (with ckpt_* checkpoints), a checkpoint "
                    "folder, or a folder with model.safetensors and config.json, got '",
                    path, "'");
      out = from_safetensors(p / "model.safetensors", options);
    }
  } else if (p.extension() == ".safetensors") {
    // A checkpoint's weights: its config is in state.json, not in a config.json.
    const bool checkpoint = fs::exists(p.parent_path() / "state.json");
    out = checkpoint ? from_checkpoint(p.parent_path().string(), options)
                     : from_safetensors(p, options);
  } else {
    TESSERA_CHECK(options.config_overrides.empty(), ValueError, kOp,
                  " expected a model with a config to apply overrides to, got '", path,
                  "' (llm.c and llama2.c files have none)");
    out = {load_bin(p.string(), options.weights), p.string(), ""};
  }
  out.model->eval();
  return out;
}

std::shared_ptr<models::CausalLM> load_model(const std::string& path) {
  return load_model_with_config(path, LoadOptions{}).model;
}

}  // namespace tessera::infer
