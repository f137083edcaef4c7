// A PEFT LoRA adapter folder: input = adapter_config.json and adapter_model.safetensors separated
// by fuzz::kPartSeparator (an empty part leaves its file out). An adapter that loads must then
// register in a small GPT-2's inference runner and merge into its weights, or be refused by
// either with a typed error; a model it merged into must run.
#include <filesystem>
#include <fstream>

#include "fuzz_util.h"
#include "tessera/core/error.h"
#include "tessera/infer/model_runner.h"
#include "tessera/io/lora_adapter.h"

namespace {

using namespace tessera;
namespace fs = std::filesystem;

// The folder's files from the input's parts, in a scratch folder of their own.
std::string write_adapter(std::string_view input) {
  const fs::path dir = fs::path(fuzz::scratch_dir()) / "lora_adapter";
  fs::create_directories(dir);
  const std::vector<std::string_view> parts = fuzz::split_parts(input, 2);
  const char* names[] = {"adapter_config.json", "adapter_model.safetensors"};
  for (size_t i = 0; i < 2; ++i) {
    const fs::path file = dir / names[i];
    fs::remove(file);
    if (!parts[i].empty())
      std::ofstream(file, std::ios::binary)
          .write(parts[i].data(), static_cast<std::streamsize>(parts[i].size()));
  }
  return dir.string();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input = fuzz::bytes(data, size);
  nn::LoraAdapter adapter;
  try {
    adapter = io::load_lora_adapter(write_adapter(input));
  } catch (const Error& e) {
    fuzz::rejected(e);
    return 0;
  }
  std::shared_ptr<models::CausalLM> model = fuzz::tiny_gpt2();
  try {
    infer::ModelRunner runner(*model);
    runner.add_lora(adapter);
  } catch (const Error& e) {
    fuzz::rejected(e);
  }
  try {
    nn::merge_lora(*model, adapter);
    fuzz::check_model_runs(*model, input);
  } catch (const Error& e) {
    fuzz::rejected(e);
  }
  return 0;
}
