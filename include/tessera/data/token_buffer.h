#pragma once
// Token sequences for language modelling: llm.c `.bin` shards memory-mapped without copying, or
// the tokens of a text. A TokenBuffer is a cheap handle; slices share the underlying memory,
// which stays mapped while any slice or tensor view of it lives.
//
// llm.c file layout: a 1024-byte header of 256 int32 (header[0] magic, header[1] version,
// header[2] token count), then the tokens: magic 20240520 / version 1 with uint16 tokens (GPT-2),
// magic 20240801 / version 7 with uint32 tokens (Llama 3).
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tessera/core/tensor.h"
#include "tessera/tokenizers/tokenizer.h"

namespace tessera::data {

enum class TokenFormat { UInt16, UInt32 };

inline constexpr int64_t kTokenFileHeaderBytes = 1024;
inline constexpr int32_t kTokenFileMagicUInt16 = 20240520, kTokenFileVersionUInt16 = 1;
inline constexpr int32_t kTokenFileMagicUInt32 = 20240801, kTokenFileVersionUInt32 = 7;

class TokenBuffer {
 public:
  TokenBuffer() = default;  // no tokens
  // Copies ids (each >= 0) into memory as uint32.
  static TokenBuffer from_ids(std::span<const int32_t> ids);

  int64_t size() const { return size_; }
  TokenFormat format() const { return format_; }
  // Token i (IndexError outside [0, size())).
  int64_t at(int64_t i) const;
  // Tokens [start, end), sharing memory.
  TokenBuffer slice(int64_t start, int64_t end) const;
  // (train, val): the first (1 - val_fraction) of the tokens and the rest, as nanoGPT splits
  // shakespeare_char (train = first int(n * 0.9) for val_fraction 0.1).
  std::pair<TokenBuffer, TokenBuffer> split(double val_fraction) const;
  // Tokens [start, start + n) widened to int64, into out / into a new 1-d int64 tensor.
  void copy_to(int64_t start, int64_t n, int64_t* out) const;
  Tensor window(int64_t start, int64_t n) const;
  // All tokens as a 1-d int32 tensor viewing this memory (no copy). Only for uint32 tokens
  // (tessera has no uint16 dtype); use window() for uint16 files. Writes to a view of a mapped
  // file stay private to the process.
  Tensor as_tensor() const;
  std::vector<int32_t> to_vector() const;

 private:
  friend TokenBuffer read_token_file(const std::string& path);
  TokenBuffer(Storage storage, int64_t byte_offset, int64_t size, TokenFormat format)
      : storage_(std::move(storage)), byte_offset_(byte_offset), size_(size), format_(format) {}
  const uint8_t* base() const;

  Storage storage_;
  int64_t byte_offset_ = 0;  // of token 0 within storage_
  int64_t size_ = 0;
  TokenFormat format_ = TokenFormat::UInt32;
};

// Memory-maps an llm.c token file, validating magic, version and size (ValueError naming the
// file and the field).
TokenBuffer read_token_file(const std::string& path);
// Writes tokens as an llm.c file atomically (temp file, fsync, rename). ValueError if a token
// does not fit the format.
void write_token_file(const std::string& path, std::span<const int32_t> tokens,
                      TokenFormat format = TokenFormat::UInt16);
// The tokens of text (no BOS/EOS), in memory.
TokenBuffer tokenize_text(std::string_view text, const tokenizers::Tokenizer& tokenizer);

}  // namespace tessera::data
