#include "tessera/io/lora_adapter.h"

#include <filesystem>
#include <fstream>

#include "tessera/core/json_parse.h"
#include "tessera/io/atomic_file.h"
#include "tessera/io/safetensors.h"

namespace tessera::io {

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
constexpr const char* kOp = "[load_lora_adapter]";
constexpr std::string_view kPrefix = "base_model.model.";

// Whether key is absent or holds one of PEFT's "off" values (null, false, "none", {}, []).
bool unset(const Json& j, const char* key) {
  if (!j.contains(key)) return true;
  const Json& v = j[key];
  return v.is_null() || v == false || v == "none" || (v.is_structured() && v.empty());
}

}  // namespace

std::string lora_config_json(const nn::LoraConfig& config, const std::string& base_model) {
  Json j = {{"peft_type", "LORA"},
            {"task_type", "CAUSAL_LM"},
            {"base_model_name_or_path", base_model},
            {"r", config.r},
            {"lora_alpha", config.lora_alpha},
            {"lora_dropout", config.lora_dropout},
            {"use_rslora", config.use_rslora},
            {"bias", "none"},
            {"fan_in_fan_out", false},
            {"inference_mode", true},
            {"modules_to_save", nullptr},
            {"use_dora", false}};
  if (config.target_regex.empty())
    j["target_modules"] = config.target_modules;
  else
    j["target_modules"] = config.target_regex;
  return j.dump(2) + "\n";
}

nn::LoraConfig parse_lora_config(const std::string& json) {
  const Json j = parse_json(json);
  TESSERA_CHECK(j.is_object(), ValueError, kOp, " expected adapter_config.json to hold a JSON ",
                "object, got ", json.substr(0, 120));
  TESSERA_CHECK(!j.contains("peft_type") || j["peft_type"] == "LORA", ValueError, kOp,
                " expected peft_type LORA, got ",
                j.contains("peft_type") ? j["peft_type"].dump() : "");
  for (const char* key : {"use_dora", "rank_pattern", "alpha_pattern", "modules_to_save", "bias"})
    TESSERA_CHECK(unset(j, key), ValueError, kOp, " expected no ", key,
                  " (not applied by Tessera; merge those weights into the base model), got ",
                  j[key].dump());
  nn::LoraConfig c;
  // A number too large for an integer parses as a float, which get<int64_t> would convert with
  // undefined behaviour (found by fuzz_lora_adapter).
  TESSERA_CHECK(j.contains("r") && j["r"].is_number_integer(), ValueError, kOp,
                " expected r to be an integer, got ", j.contains("r") ? j["r"].dump() : "none");
  try {
    c.r = j.at("r").get<int64_t>();
    c.lora_alpha = j.value("lora_alpha", static_cast<double>(c.r));
    c.lora_dropout = j.value("lora_dropout", 0.0);
    c.use_rslora = j.value("use_rslora", false);
    if (j.contains("target_modules") && j["target_modules"].is_string())
      c.target_regex = j["target_modules"].get<std::string>();
    else if (j.contains("target_modules") && !j["target_modules"].is_null())
      c.target_modules = j["target_modules"].get<std::vector<std::string>>();
  } catch (const nlohmann::json::exception& e) {
    throw ValueError(tessera::detail::str(kOp, " expected r, lora_alpha, lora_dropout, ",
                                          "use_rslora and target_modules of PEFT's types, got ",
                                          e.what()));
  }
  TESSERA_CHECK(c.r > 0, ValueError, kOp, " expected r > 0, got ", c.r);
  return c;
}

void save_lora_adapter(const std::string& dir, const nn::LoraAdapter& adapter,
                       const std::string& base_model) {
  (void)nn::lora_pairs(adapter);  // refuses anything but LoRA pairs before writing
  fs::create_directories(dir);
  nn::TensorDict prefixed;
  for (const auto& [key, t] : adapter.weights) prefixed.insert(std::string(kPrefix) + key, t);
  save_safetensors((fs::path(dir) / "adapter_model.safetensors").string(), prefixed,
                   Metadata{{"format", "pt"}});
  write_file_atomic((fs::path(dir) / "adapter_config.json").string(),
                    lora_config_json(adapter.config, base_model), "save_lora_adapter");
}

nn::LoraAdapter load_lora_adapter(const std::string& path) {
  fs::path dir(path);
  if (dir.filename() == "adapter_config.json") dir = dir.parent_path();
  const fs::path config = dir / "adapter_config.json", weights = dir / "adapter_model.safetensors";
  TESSERA_CHECK(fs::exists(config), ValueError, kOp, " expected a PEFT adapter folder holding ",
                "adapter_config.json, got '", path, "'");
  TESSERA_CHECK(fs::exists(weights), ValueError, kOp, " expected ", weights.string(),
                fs::exists(dir / "adapter_model.bin")
                    ? " (adapter_model.bin is a pickle: save the adapter with safetensors)"
                    : "",
                ", got none");
  std::ifstream f(config);
  TESSERA_CHECK(f.good(), RuntimeError, kOp, " could not read '", config.string(), "'");
  nn::LoraAdapter out;
  out.config = parse_lora_config({std::istreambuf_iterator<char>(f), {}});
  for (auto& [key, t] : load_safetensors(weights.string()).tensors)
    out.weights.insert(key.starts_with(kPrefix) ? key.substr(kPrefix.size()) : key, t);
  const std::vector<nn::LoraPair> pairs = nn::lora_pairs(out);
  TESSERA_CHECK(!pairs.empty(), ValueError, kOp, " expected LoRA weights in ", weights.string(),
                ", got none");
  for (const nn::LoraPair& p : pairs)
    TESSERA_CHECK(p.a.size(0) == out.config.r, ValueError, kOp, " expected rank ", out.config.r,
                  " (adapter_config.json's r) for '", p.layer, "', got ", p.a.size(0));
  return out;
}

}  // namespace tessera::io
