#include "tessera/llm/model_files.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>

#include "tessera/core/error.h"
#include "tessera/infer/model_loader.h"
#include "tessera/models/registry.h"

namespace tessera::llm {

namespace fs = std::filesystem;
using Json = nlohmann::json;

std::shared_ptr<models::CausalLM> build_model(const ModelSpec& spec, Generator* gen,
                                              std::string_view op) {
  return models::model_family(spec.arch, op).build(spec.config.dump(), gen);
}

ModelSpec model_spec(const models::CausalLM& model) {
  const models::ModelFamily& family = models::family_of(model);
  return {std::string(family.name), Json::parse(*family.config_of(model))};
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

std::vector<int32_t> text_end_ids(const tokenizers::Tokenizer& tokenizer) {
  std::vector<int32_t> ids;
  for (std::optional<int32_t> id : {tokenizer.eos_id(), tokenizer.bos_id()})
    if (id) ids.push_back(*id);
  return ids;
}

bool ends_text(const tokenizers::Tokenizer& tokenizer, int32_t id) {
  const std::vector<int32_t> ends = text_end_ids(tokenizer);
  return std::find(ends.begin(), ends.end(), id) != ends.end();
}

std::string LoadedModel::folder() const {
  const fs::path p(source);
  return fs::is_directory(p) ? source : p.parent_path().string();
}

LoadedModel load_model(const std::string& path, const infer::LoadOptions& options) {
  infer::LoadedModel files = infer::load_model_with_config(path, options);
  LoadedModel loaded;
  loaded.model = std::move(files.model);
  loaded.spec = model_spec(*loaded.model);
  loaded.source = std::move(files.source);
  loaded.generation = infer::read_generation_config(loaded.folder());
  if (files.config.empty()) {
    // A .bin: llm.c's GPT-2 uses the GPT-2 vocabulary; llama2.c files name no tokenizer.
    if (loaded.spec.arch == "gpt2") loaded.tokenizer = TokenizerRef{"gpt2", "", ""};
    return loaded;
  }
  loaded.run_config = Json::parse(files.config);
  const Json& cfg = loaded.run_config;
  if (cfg.contains("tokenizer") && cfg["tokenizer"].is_string()) {
    // Relative to the run folder (holding tokenizer.chars): a checkpoint's or the file's parent.
    loaded.tokenizer = TokenizerRef{cfg["tokenizer"].get<std::string>(),
                                    cfg.value("tokenizer_data_dir", std::string()),
                                    fs::path(loaded.source).parent_path().string()};
  } else if (const fs::path hf = fs::path(loaded.source).parent_path() / "tokenizer.json";
             fs::exists(hf)) {
    loaded.tokenizer = TokenizerRef{hf.string(), "", ""};  // a Hugging Face model folder
  }
  return loaded;
}

namespace {

// A tokenizer whose vocabulary the model's embedding pads (Qwen2.5: 151665 ids, 152064 rows):
// the padding ids print as nothing, as vLLM's detokenizer skips ids its tokenizer lacks, so a
// sampled padding id cannot fail a request; structured output never allows them (no bytes).
class PaddedTokenizer : public tokenizers::Tokenizer {
 public:
  PaddedTokenizer(std::unique_ptr<tokenizers::Tokenizer> inner, int64_t vocab)
      : inner_(std::move(inner)), vocab_(vocab) {}
  std::string decode(std::span<const int32_t> ids) const override {
    std::vector<int32_t> known;
    for (const int32_t id : ids) {
      check_id(id, "decode");
      if (id < inner_->vocab_size()) known.push_back(id);
    }
    return inner_->decode(known);
  }
  std::string token_to_string(int32_t id, int32_t prev) const override {
    check_id(id, "token_to_string");
    if (id >= inner_->vocab_size()) return "";
    return inner_->token_to_string(id, prev < inner_->vocab_size() ? prev : -1);
  }
  int64_t vocab_size() const override { return vocab_; }
  std::optional<int32_t> bos_id() const override { return inner_->bos_id(); }
  std::optional<int32_t> eos_id() const override { return inner_->eos_id(); }
  std::string_view name() const override { return inner_->name(); }

 protected:
  void encode_into(std::string_view text, std::vector<int32_t>& out) const override {
    const std::vector<int32_t> ids = inner_->encode(text);
    out.insert(out.end(), ids.begin(), ids.end());
  }

 private:
  std::unique_ptr<tokenizers::Tokenizer> inner_;
  int64_t vocab_;
};

}  // namespace

std::unique_ptr<tokenizers::Tokenizer> model_tokenizer(const LoadedModel& loaded,
                                                       const std::string& spec,
                                                       const std::string& data_dir,
                                                       std::string_view op) {
  std::unique_ptr<tokenizers::Tokenizer> tokenizer;
  if (!spec.empty()) {
    tokenizer = load_tokenizer({spec, data_dir, ""});
  } else {
    TESSERA_CHECK(loaded.tokenizer.has_value(), ValueError, "[", op, "] expected --tokenizer for '",
                  loaded.source,
                  "' (the file records none; llama2.c models use their tokenizer.bin)");
    TokenizerRef ref = *loaded.tokenizer;
    if (!data_dir.empty()) ref.data_dir = data_dir;
    tokenizer = load_tokenizer(ref);
  }
  // A model may pad its embedding past the tokenizer's ids (to a multiple of 64 or 128): a
  // little, not a vocabulary of another size (another tokenizer).
  const int64_t model_vocab = loaded.model->vocab_size(),
                pad = model_vocab - tokenizer->vocab_size();
  TESSERA_CHECK(pad >= 0 && pad <= model_vocab / 64, ValueError, "[", op,
                "] expected a tokenizer with the model's vocabulary of ", model_vocab,
                " tokens (or a few less, where the model pads its embedding), got ",
                tokenizer->vocab_size());
  if (pad > 0) return std::make_unique<PaddedTokenizer>(std::move(tokenizer), model_vocab);
  return tokenizer;
}

Device device_option(const std::string& spec, std::string_view op) {
  const Device device(spec);
  TESSERA_CHECK(device.index < device_count(device.type), ValueError, "[", op,
                "] expected device '", spec, "' to name one of this machine's ",
                device_count(device.type), " ", device.is_cpu() ? "cpu" : "CUDA", " devices");
  return device;
}

}  // namespace tessera::llm
