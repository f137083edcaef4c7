#pragma once
// The parts of `tessera train` that turn options into objects: the model architecture, the
// tokenizer and the train/validation token streams.
#include <memory>
#include <optional>
#include <string>

#include "tessera/data/token_buffer.h"
#include "tessera/llm/model_files.h"
#include "train_options.h"

namespace tessera::cli {

using namespace llm;  // model files and their tokenizers

// The architecture from --model, --preset and the size options, for a vocabulary of vocab_size
// (defaults without a preset: 4 layers, 4 heads, 128 channels, 128 positions). ValueError
// "[train] ..." for options the architecture does not have or sizes it rejects.
ModelSpec spec_from_options(const TrainOptions& options, int64_t vocab_size);

// Whether path starts with an llm.c token-file magic number (else it is read as text).
bool is_token_file(const std::string& path);

// The tokenizer of a new run: --tokenizer when given, else `inherited` (the tokenizer of an
// --init-from model) when known, else "char" for text data and "gpt2" for token files. A "char"
// vocabulary is built from the text of --data (and --val-data).
struct ChosenTokenizer {
  std::unique_ptr<tokenizers::Tokenizer> tokenizer;
  std::string spec;      // what to record: a name or an absolute path ("char" for new vocabularies)
  std::string data_dir;  // absolute, or empty
};
ChosenTokenizer choose_tokenizer(const TrainOptions& options,
                                 const std::optional<TokenizerRef>& inherited);

struct Corpus {
  data::TokenBuffer train, val;
  std::string description;  // e.g. "input.txt: 1,003,854 train / 111,540 val tokens"
};
// The tokens of --data (text encoded with tokenizer, or an llm.c token file), split into train
// and validation (--val-data, else the last --val-fraction). ValueError when a split is shorter
// than seq_len + 1 tokens or a token id is outside the tokenizer's vocabulary.
Corpus load_corpus(const TrainOptions& options, const tokenizers::Tokenizer& tokenizer,
                   int64_t seq_len);

}  // namespace tessera::cli
