#include "train_setup.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/models/config.h"
#include "tessera/tokenizers/char_tokenizer.h"

namespace tessera::cli {

namespace {

namespace fs = std::filesystem;
using tessera::detail::str;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TESSERA_CHECK(in.good(), ValueError, "[train] expected a readable data file, got '", path, "'");
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// llama2.c's SwiGLU width: 2/3 of 4 * dim, rounded up to a multiple of 32.
int64_t llama2c_hidden_dim(int64_t dim) {
  const int64_t hidden = 2 * (4 * dim) / 3;
  return (hidden + 31) / 32 * 32;
}

std::string with_commas(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// Token files hold ids from another tokenizer run: they must fit the model's vocabulary.
void check_token_ids(const data::TokenBuffer& tokens, int64_t vocab_size, const std::string& path) {
  constexpr int64_t kChunk = 1 << 20;
  std::vector<int64_t> buf(kChunk);
  for (int64_t start = 0; start < tokens.size(); start += kChunk) {
    const int64_t n = std::min(kChunk, tokens.size() - start);
    tokens.copy_to(start, n, buf.data());
    const int64_t top = *std::max_element(buf.begin(), buf.begin() + n);
    TESSERA_CHECK(top < vocab_size, ValueError, "[train] expected token ids below the ",
                  "tokenizer's vocabulary size ", vocab_size, " in '", path, "', got ", top,
                  " (pass the --tokenizer the file was made with)");
  }
}

data::TokenBuffer load_tokens(const std::string& path, const tokenizers::Tokenizer& tokenizer) {
  if (is_token_file(path)) {
    data::TokenBuffer tokens = data::read_token_file(path);
    check_token_ids(tokens, tokenizer.vocab_size(), path);
    return tokens;
  }
  return data::tokenize_text(read_text(path), tokenizer);
}

}  // namespace

ModelSpec spec_from_options(const TrainOptions& o, int64_t vocab_size) {
  auto set = [](int64_t& field, int64_t value) {
    if (value > 0) field = value;
  };
  if (o.model == "gpt2") {
    TESSERA_CHECK(o.n_experts == 0 && o.experts_per_token == 0 && o.router_aux_loss_coef < 0,
                  ValueError,
                  "[train] expected --n-experts, --experts-per-token and --router-aux-loss-coef "
                  "only with --model llama (a Mixtral), got --model gpt2");
    TESSERA_CHECK(o.head_dim == 0 && !o.qk_norm, ValueError,
                  "[train] expected --head-dim and --qk-norm only with --model llama, got "
                  "--model gpt2");
    TESSERA_CHECK(
        o.n_kv_head == 0, ValueError,
        "[train] expected --n-kv-head only with --model llama (GPT-2 has no grouped-query "
        "attention), got --n-kv-head ",
        o.n_kv_head);
    models::GPT2Config c;
    if (!o.preset.empty()) {
      c = models::GPT2Config::from_name(o.preset);
    } else {
      c.n_layer = 4, c.n_head = 4, c.n_embd = 128, c.block_size = 128;
    }
    set(c.n_layer, o.n_layer);
    set(c.n_head, o.n_head);
    set(c.n_embd, o.n_embd);
    set(c.block_size, o.seq_len);
    c.dropout = o.dropout;
    c.vocab_size = vocab_size;
    c.validate();
    return {"gpt2", nlohmann::json::parse(c.to_json())};
  }
  if (o.model == "llama") {
    TESSERA_CHECK(o.dropout == 0.0, ValueError,
                  "[train] expected --dropout only with --model gpt2 (LLaMA has no dropout), got ",
                  o.dropout);
    models::LlamaConfig c;
    if (!o.preset.empty()) {
      c = models::LlamaConfig::from_name(o.preset);
    } else {
      c.n_layers = 4, c.n_heads = 4, c.n_kv_heads = 4, c.dim = 128, c.max_seq_len = 128;
      c.tie_embeddings = true;  // as llama2.c's small models
    }
    set(c.n_layers, o.n_layer);
    set(c.n_heads, o.n_head);
    if (o.n_head > 0) c.n_kv_heads = c.n_heads;  // plain multi-head unless --n-kv-head says
    set(c.n_kv_heads, o.n_kv_head);
    set(c.dim, o.n_embd);
    if (o.n_embd > 0 || o.preset.empty()) c.hidden_dim = llama2c_hidden_dim(c.dim);
    set(c.max_seq_len, o.seq_len);
    set(c.explicit_head_dim, o.head_dim);
    c.qk_norm = c.qk_norm || o.qk_norm;
    set(c.n_experts, o.n_experts);
    set(c.n_experts_per_token, o.experts_per_token);
    if (o.router_aux_loss_coef >= 0) c.router_aux_loss_coef = o.router_aux_loss_coef;
    TESSERA_CHECK(
        c.mixture_of_experts() || (o.experts_per_token == 0 && o.router_aux_loss_coef < 0),
        ValueError,
        "[train] expected --experts-per-token and --router-aux-loss-coef only with "
        "--n-experts (or a mixture-of-experts preset)");
    c.vocab_size = vocab_size;
    c.validate();
    return {"llama", nlohmann::json::parse(c.to_json())};
  }
  throw ValueError(str("[train] expected --model gpt2 or llama, got '", o.model, "'"));
}

bool is_token_file(const std::string& path) {
  int32_t magic = 0;
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(&magic), sizeof magic);
  return in && (magic == data::kTokenFileMagicUInt16 || magic == data::kTokenFileMagicUInt32);
}

ChosenTokenizer choose_tokenizer(const TrainOptions& o,
                                 const std::optional<TokenizerRef>& inherited) {
  TESSERA_CHECK(fs::is_regular_file(o.data), ValueError,
                "[train] expected --data to be a text file or an llm.c .bin token file, got '",
                o.data, "' (no such file)");
  ChosenTokenizer chosen;
  if (o.tokenizer.empty() && inherited) {
    chosen.spec = resolve_tokenizer_spec(*inherited);
    chosen.data_dir = inherited->data_dir;
    chosen.tokenizer = load_tokenizer(*inherited);
    return chosen;
  }
  const bool tokens = is_token_file(o.data);
  std::string spec = o.tokenizer.empty() ? (tokens ? "gpt2" : "char") : o.tokenizer;
  if (spec == "char") {
    TESSERA_CHECK(!tokens, ValueError, "[train] expected --tokenizer gpt2 or a tokenizer file for ",
                  "the token file '", o.data, "' (it holds ids, not text), got char");
    std::string corpus = read_text(o.data);
    if (!o.val_data.empty() && !is_token_file(o.val_data)) corpus += read_text(o.val_data);
    chosen.tokenizer = std::make_unique<tokenizers::CharTokenizer>(corpus);
    chosen.spec = "char";
    return chosen;
  }
  if (fs::exists(spec)) spec = fs::absolute(spec).lexically_normal().string();
  std::string data_dir = o.data_dir;
  if (data_dir.empty())
    if (const char* env = std::getenv("TESSERA_DATA_DIR")) data_dir = env;
  if (!data_dir.empty()) data_dir = fs::absolute(data_dir).lexically_normal().string();
  tokenizers::TokenizerOptions topt;
  topt.data_dir = data_dir;
  chosen.tokenizer = tokenizers::make_tokenizer(spec, topt);
  chosen.spec = spec;
  chosen.data_dir = data_dir;
  return chosen;
}

Corpus load_corpus(const TrainOptions& o, const tokenizers::Tokenizer& tokenizer, int64_t seq_len) {
  Corpus corpus;
  data::TokenBuffer all = load_tokens(o.data, tokenizer);
  if (!o.val_data.empty()) {
    corpus.train = all;
    corpus.val = load_tokens(o.val_data, tokenizer);
  } else {
    TESSERA_CHECK(o.val_fraction > 0.0 && o.val_fraction < 1.0, ValueError,
                  "[train] expected --val-fraction in (0, 1), got ", o.val_fraction);
    std::tie(corpus.train, corpus.val) = all.split(o.val_fraction);
  }
  for (const auto& [name, split] :
       {std::pair{"training", &corpus.train}, {"validation", &corpus.val}})
    TESSERA_CHECK(split->size() > seq_len, ValueError,
                  "[train] expected at least seq_len + 1 = ", seq_len + 1, " tokens in the ", name,
                  " split, got ", split->size(),
                  " (use more data, a larger --val-fraction or a shorter --seq-len)");
  corpus.description =
      str(fs::path(o.data).filename().string(), ": ", with_commas(corpus.train.size()), " train / ",
          with_commas(corpus.val.size()), " val tokens");
  return corpus;
}

}  // namespace tessera::cli
