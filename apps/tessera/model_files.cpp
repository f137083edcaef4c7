#include "model_files.h"

#include <cstdint>
#include <filesystem>
#include <fstream>

#include "tessera/core/error.h"
#include "tessera/io/checkpoint.h"
#include "tessera/io/importers.h"
#include "tessera/io/safetensors.h"
#include "tessera/models/gpt2.h"
#include "tessera/models/llama.h"

namespace tessera::cli {

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr int32_t kLlmcGpt2Magic = 20240326;

Json read_json(const fs::path& path, std::string_view op) {
  std::ifstream in(path);
  TESSERA_CHECK(in.good(), ValueError, "[", op, "] expected a readable file, got '", path.string(),
                "'");
  Json j = Json::parse(in, nullptr, /*allow_exceptions=*/false);
  TESSERA_CHECK(j.is_object(), ValueError, "[", op, "] expected a JSON object in '", path.string(),
                "', got malformed JSON");
  return j;
}

// The spec and tokenizer a run config records (config.json, or a checkpoint's config).
LoadedModel from_run_config(const Json& cfg, const fs::path& base_dir, const std::string& where,
                            std::string_view op) {
  TESSERA_CHECK(cfg.contains("arch") && cfg["arch"].is_string() && cfg.contains("model") &&
                    cfg["model"].is_object(),
                ValueError, "[", op, "] expected a config with \"arch\" and \"model\" (as written ",
                "by tessera train) in ", where, ", got ", cfg.dump());
  LoadedModel loaded;
  loaded.spec = {cfg["arch"].get<std::string>(), cfg["model"]};
  loaded.run_config = cfg;
  if (cfg.contains("tokenizer") && cfg["tokenizer"].is_string()) {
    loaded.tokenizer =
        TokenizerRef{cfg["tokenizer"].get<std::string>(),
                     cfg.value("tokenizer_data_dir", std::string()), base_dir.string()};
  }
  return loaded;
}

void load_weights(LoadedModel& loaded, const nn::TensorDict& state, std::string_view op) {
  Generator unused(0);  // the weights are replaced right away
  loaded.model = build_model(loaded.spec, &unused, op);
  loaded.model->load_state_dict(state, /*strict=*/true);
  loaded.model->eval();
}

LoadedModel from_checkpoint(const fs::path& folder, std::string_view op) {
  io::Checkpoint ckpt = io::load_checkpoint(folder.string());
  // The run folder (holding tokenizer.chars) is the checkpoint's parent.
  LoadedModel loaded = from_run_config(Json::parse(ckpt.config), folder.parent_path(),
                                       (folder / "state.json").string(), op);
  load_weights(loaded, ckpt.model, op);
  loaded.source = folder.string();
  return loaded;
}

LoadedModel from_safetensors(const fs::path& file, std::string_view op) {
  const fs::path config = file.parent_path() / "config.json";
  TESSERA_CHECK(fs::exists(config), ValueError, "[", op, "] expected a config.json beside '",
                file.string(), "' describing the model, got none");
  LoadedModel loaded =
      from_run_config(read_json(config, op), file.parent_path(), config.string(), op);
  load_weights(loaded, io::load_state_dict(file.string()), op);
  loaded.source = file.string();
  return loaded;
}

int32_t first_int32(const fs::path& file) {
  int32_t magic = 0;
  std::ifstream in(file, std::ios::binary);
  in.read(reinterpret_cast<char*>(&magic), sizeof magic);
  return in ? magic : 0;
}

}  // namespace

std::shared_ptr<models::CausalLM> build_model(const ModelSpec& spec, Generator* gen,
                                              std::string_view op) {
  if (spec.arch == "gpt2")
    return std::make_shared<models::GPT2>(models::GPT2Config::from_json(spec.config.dump()), gen);
  if (spec.arch == "llama")
    return std::make_shared<models::Llama>(models::LlamaConfig::from_json(spec.config.dump()), gen);
  throw ValueError(
      tessera::detail::str("[", op, "] expected model gpt2 or llama, got '", spec.arch, "'"));
}

ModelSpec model_spec(const models::CausalLM& model) {
  if (auto* gpt2 = dynamic_cast<const models::GPT2*>(&model))
    return {"gpt2", Json::parse(gpt2->config.to_json())};
  if (auto* llama = dynamic_cast<const models::Llama*>(&model))
    return {"llama", Json::parse(llama->config.to_json())};
  throw ValueError("[model] expected a GPT2 or Llama model, got " + model.type_name());
}

std::string resolve_tokenizer_spec(const TokenizerRef& ref) {
  if (!ref.base_dir.empty() && fs::path(ref.spec).is_relative() &&
      fs::exists(fs::path(ref.base_dir) / ref.spec))
    return fs::absolute(fs::path(ref.base_dir) / ref.spec).lexically_normal().string();
  return ref.spec;
}

std::unique_ptr<tokenizers::Tokenizer> load_tokenizer(const TokenizerRef& ref) {
  tokenizers::TokenizerOptions options;
  options.data_dir = ref.data_dir;
  return tokenizers::make_tokenizer(resolve_tokenizer_spec(ref), options);
}

std::vector<int32_t> prompt_ids(const tokenizers::Tokenizer& tokenizer, std::string_view text) {
  const bool bos = tokenizer.bos_id().has_value();
  std::vector<int32_t> ids = tokenizer.encode(text, bos);
  if (!ids.empty()) return ids;
  try {
    ids = tokenizer.encode("\n");
  } catch (const Error&) {  // a vocabulary without a newline
    ids.clear();
  }
  if (ids.size() == 1) return ids;
  return {0};
}

bool ends_text(const tokenizers::Tokenizer& tokenizer, int32_t id) {
  return id == tokenizer.eos_id() || id == tokenizer.bos_id();
}

LoadedModel load_model(const std::string& path, std::string_view op) {
  const fs::path p(path);
  TESSERA_CHECK(fs::exists(p), ValueError, "[", op, "] expected an existing model path, got '",
                path, "'");
  if (fs::is_directory(p)) {
    if (fs::exists(p / "state.json")) return from_checkpoint(p, op);
    if (auto latest = io::latest_checkpoint(p.string())) return from_checkpoint(*latest, op);
    if (fs::exists(p / "model.safetensors")) return from_safetensors(p / "model.safetensors", op);
    throw ValueError(tessera::detail::str(
        "[", op,
        "] expected a training run folder (with ckpt_* checkpoints), a checkpoint "
        "folder, or a folder with model.safetensors and config.json, got '",
        path, "'"));
  }
  if (p.extension() == ".safetensors") {
    if (fs::exists(p.parent_path() / "state.json")) return from_checkpoint(p.parent_path(), op);
    return from_safetensors(p, op);
  }
  LoadedModel loaded;
  if (first_int32(p) == kLlmcGpt2Magic) {
    loaded.model = io::load_llmc_gpt2(path);
    loaded.tokenizer = TokenizerRef{"gpt2", "", ""};  // llm.c's GPT-2 uses the GPT-2 vocabulary
  } else {
    loaded.model = io::load_llama2c(path);  // its own checks name what does not match
  }
  loaded.model->eval();
  loaded.spec = model_spec(*loaded.model);
  loaded.source = path;
  return loaded;
}

}  // namespace tessera::cli
