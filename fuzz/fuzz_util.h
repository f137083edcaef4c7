#pragma once
// Helpers shared by the libFuzzer targets: a per-process scratch folder for loaders that only
// take paths, splitting one input into several files, and tiny synthetic tokenizers built at
// start-up (so no target needs data outside the repository).
//
// Every target calls the library inside `try { ... } catch (const tessera::Error&) {}`: a typed
// error is the expected answer to bad input; anything else escaping (std::out_of_range, a JSON
// library exception), a sanitizer report or an abort is a bug that libFuzzer records as a crash.
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/models/transformer.h"
#include "tessera/tokenizers/gpt2_tokenizer.h"
#include "tessera/tokenizers/llama2c_tokenizer.h"
#include "tessera/tokenizers/sentencepiece_tokenizer.h"

namespace tessera::fuzz {

// The input as a string_view.
inline std::string_view bytes(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// ../shared/data beside the repository (real vocabularies; its files may be missing).
std::string shared_data_dir();

// This process's scratch folder (created on first use, removed at exit).
const std::string& scratch_dir();
// Writes bytes to scratch_dir()/name and returns its path.
std::string write_scratch(std::string_view name, std::string_view bytes);

// Splits input at each kPartSeparator into exactly n parts (missing parts are empty, the last
// part keeps any further separators), so one input can describe several files.
inline constexpr std::string_view kPartSeparator = "\n=====\n";
std::vector<std::string_view> split_parts(std::string_view input, size_t n);

// Called with each typed error a target catches: prints it when TESSERA_FUZZ_VERBOSE is set, to
// see why an input (a seed, say) was rejected.
void rejected(const std::exception& e);

// Abort (a libFuzzer crash) with a message when a property that must hold does not.
[[noreturn]] void fail(std::string_view what, std::string_view input);

// A model an importer accepted must run: one forward of token 0 gives [1, 1, vocab_size] logits.
void check_model_runs(models::CausalLM& model, std::string_view input);

// A fresh GPT-2 of 1 layer, 2 heads, 16 channels, vocabulary 32 and context 8 (fixed weights):
// what LoRA adapters are fuzzed against.
std::shared_ptr<models::CausalLM> tiny_gpt2();

// Tokenizer files and tokenizers over a small vocabulary: all 256 bytes plus a few English
// merges. The files are what the seed corpora start from.
std::string synthetic_gpt2_encoder_json();
std::string synthetic_gpt2_vocab_bpe();
std::string synthetic_llama2c_tokenizer_bin();
std::string synthetic_sentencepiece_model();  // a serialized ModelProto (BPE, byte fallback)
const tokenizers::GPT2Tokenizer& synthetic_gpt2();
const tokenizers::Llama2cTokenizer& synthetic_llama2c();
const tokenizers::SentencePieceTokenizer& synthetic_sentencepiece();

}  // namespace tessera::fuzz
