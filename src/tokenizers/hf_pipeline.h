#pragma once
// The text stages of a tokenizer.json around its BPE model: normalizers, pre-tokenizers and
// decoders, each parsed once from its JSON into a list of steps (a "Sequence" flattened) and
// applied in order. Used by HuggingFaceTokenizer.
#include <unicode/regex.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::tokenizers::hf {

using Json = nlohmann::json;

struct NormalizerStep {
  enum class Kind { kNfc, kNfkc, kNfd, kNfkd, kPrepend, kReplace } kind;
  std::string text, content;  // Prepend's text; Replace's pattern and content
};
// Steps of a "normalizer" entry (null: none). ValueError naming an unsupported type.
std::vector<NormalizerStep> parse_normalizer(const Json& j);
std::string normalize(const std::vector<NormalizerStep>& steps, std::string text);

struct PreTokenizerStep {
  enum class Kind { kSplit, kByteLevel, kMetaspace } kind;
  std::shared_ptr<const icu::RegexPattern> regex;  // Split: the pattern (a string compiled quoted)
  bool add_prefix_space = false, use_regex = false;  // ByteLevel
  std::string replacement;                           // Metaspace
  enum class Prepend { kAlways, kFirst, kNever } prepend = Prepend::kAlways;
  bool split = false;
};
std::vector<PreTokenizerStep> parse_pre_tokenizer(const Json& j);
// The pieces BPE encodes one by one; first: the span starts the text (Metaspace's "first").
// After a ByteLevel step the pieces are spelled in GPT-2's byte alphabet.
std::vector<std::string> pre_tokenize(const std::vector<PreTokenizerStep>& steps,
                                      std::string_view text, bool first);
// Whether the steps spell pieces in the byte alphabet (a ByteLevel step is among them).
bool byte_level(const std::vector<PreTokenizerStep>& steps);

struct DecoderStep {
  enum class Kind { kByteLevel, kReplace, kByteFallback, kFuse, kStrip, kMetaspace } kind;
  std::string text, content;    // Replace's pattern and content; Strip's and Metaspace's character
  int64_t start = 0, stop = 0;  // Strip
  bool strip_first = false;     // Metaspace: the first token loses its leading space
};
std::vector<DecoderStep> parse_decoder(const Json& j);
// The bytes of tokens (vocabulary strings) through the steps; at_start: the first token begins
// the text (where Strip and Metaspace drop a leading space).
std::string decode(const std::vector<DecoderStep>& steps, std::vector<std::string> tokens,
                   bool at_start);

}  // namespace tessera::tokenizers::hf
