// inspect_model: the library's loader reads the file's config and headers (and validates them)
// and builds the architecture without its weights; the studio keeps the facts a model card
// shows.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "tessera/core/error.h"
#include "tessera/infer/kv_cache.h"
#include "tessera/io/checkpoint.h"
#include "tessera/io/safetensors.h"
#include "tessera/llm/model_files.h"
#include "tessera/studio/inspect.h"

namespace tessera::studio {
namespace fs = std::filesystem;

namespace {

constexpr int32_t kLlmcMagic = 20240326;  // llm.c's GPT-2 checkpoint header

// The dtype the weights are stored in: safetensors say so per tensor; llm.c's version 5 is bf16;
// llama2.c files are float32.
std::string file_dtype(const std::string& path, const std::string& format) {
  std::string weights = path;
  if (format == "tessera") {
    const auto ckpt = fs::is_directory(path) && fs::exists(fs::path(path) / "state.json")
                          ? std::optional<std::string>(path)
                          : io::latest_checkpoint(path);
    if (!ckpt) return "float32";
    weights = (fs::path(*ckpt) / "model.safetensors").string();
  }
  if (format == "safetensors" || format == "tessera") {
    const io::SafetensorsFile f = io::load_safetensors(weights);  // mapped, not read
    for (const auto& item : f.tensors) return std::string(dtype_name(item.second.dtype()));
    return "float32";
  }
  if (format == "llm.c") {
    int32_t header[2] = {0, 0};
    std::ifstream in(path, std::ios::binary);
    in.read(reinterpret_cast<char*>(header), sizeof(header));
    return header[1] == 5 ? "bfloat16" : "float32";
  }
  return "float32";
}

std::string file_format(const std::string& path) {
  if (fs::is_directory(path)) return "tessera";
  if (fs::path(path).extension() == ".safetensors") return "safetensors";
  int32_t magic = 0;
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(&magic), sizeof(magic));
  return magic == kLlmcMagic ? "llm.c" : "llama2.c";
}

}  // namespace

nlohmann::json inspect_model(const std::string& path) {
  if (path.empty() || !fs::exists(path))
    throw ValueError("[studio.models] expected an existing model file or folder, got '" + path +
                     "'");
  infer::LoadOptions header_only;
  header_only.weights = false;
  const llm::LoadedModel loaded = llm::load_model(path, header_only);
  int64_t parameters = 0;
  for (const Tensor& p : loaded.model->parameters()) parameters += p.numel();
  const std::string format = file_format(path);
  const models::InferenceLayout layout = loaded.model->inference_layout();
  const infer::KVCacheSpec kv{loaded.model->n_layers(), layout.n_kv_heads,
                              layout.dim / layout.n_heads};
  return {{"format", format},
          {"arch", loaded.spec.arch},
          {"parameters", parameters},
          {"dtype", file_dtype(path, format)},
          {"memory_bytes", parameters * int64_t{4}},
          {"kv_bytes_per_token", kv.bytes_per_token()},
          {"context_length", loaded.model->max_seq_len()},
          {"config", loaded.spec.config},
          {"tokenizer", loaded.tokenizer ? llm::resolve_tokenizer_spec(*loaded.tokenizer) : ""}};
}

}  // namespace tessera::studio
