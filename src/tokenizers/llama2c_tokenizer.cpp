#include "tessera/tokenizers/llama2c_tokenizer.h"

#include <cstring>
#include <fstream>
#include <iterator>

#include "tessera/core/error.h"
#include "tokenizers/greedy_merge.h"
#include "tokenizers/utf8.h"

namespace tessera::tokenizers {
namespace {

constexpr std::string_view kOp = "Llama2cTokenizer";
// run.c starts its best score at -1e10, so pieces scored at or below it never merge.
constexpr float kNoMergeScore = -1e10f;

}  // namespace

Llama2cTokenizer::Llama2cTokenizer(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TESSERA_CHECK(in, RuntimeError, "[", kOp, "] expected a readable file, got '", path, "'");
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t pos = 0;
  const auto check_left = [&](size_t n, std::string_view what) {
    TESSERA_CHECK(n <= data.size() - pos, ValueError, "[", kOp, "] expected ", what, " at byte ",
                  pos, " of '", path, "', got the end of the file (", data.size(), " bytes)");
  };
  const auto read = [&](void* dst, size_t n, std::string_view what) {
    check_left(n, what);
    std::memcpy(dst, data.data() + pos, n);
    pos += n;
  };
  read(&max_token_length_, 4, "the int32 max_token_length");
  TESSERA_CHECK(max_token_length_ > 0, ValueError, "[", kOp,
                "] expected a positive max_token_length in '", path, "', got ", max_token_length_);
  while (pos < data.size()) {
    float score = 0;
    int32_t len = 0;
    read(&score, 4, "a float32 score");
    read(&len, 4, "an int32 token length");
    TESSERA_CHECK(len >= 0 && len <= max_token_length_, ValueError, "[", kOp,
                  "] expected token lengths in [0, ", max_token_length_, "] in '", path, "', got ",
                  len, " for token ", pieces_.size());
    // Checked before allocating: a corrupt max_token_length lets len reach 2 GB.
    check_left(static_cast<size_t>(len), detail::str(len, " bytes of token ", pieces_.size()));
    pieces_.push_back(data.substr(pos, static_cast<size_t>(len)));
    pos += static_cast<size_t>(len);
    scores_.push_back(score);
  }
  TESSERA_CHECK(pieces_.size() >= 3, ValueError, "[", kOp,
                "] expected at least the <unk>, <s> and </s> tokens in '", path, "', got ",
                pieces_.size(), " tokens");
  byte_ids_.fill(-1);
  byte_of_.assign(pieces_.size(), -1);
  for (int32_t id = 0; id < static_cast<int32_t>(pieces_.size()); ++id) {
    const int b = detail::byte_token_value(pieces_[id]);
    if (b >= 0 && id >= 3) {
      byte_of_[id] = static_cast<int16_t>(b);
      if (byte_ids_[b] < 0) byte_ids_[b] = id;
    }
    // The first of duplicate pieces wins, as a sorted look-up would find.
    if (!is_special(id)) ids_.emplace(pieces_[id], id);
  }
}

const std::string& Llama2cTokenizer::piece(int32_t id) const {
  check_id(id, "piece");
  return pieces_[id];
}

float Llama2cTokenizer::score(int32_t id) const {
  check_id(id, "score");
  return scores_[id];
}

void Llama2cTokenizer::push_piece(std::string_view s, std::vector<int32_t>& out) const {
  const auto it = ids_.find(std::string(s));
  if (it != ids_.end()) {
    out.push_back(it->second);
    return;
  }
  for (char ch : s) {
    const int32_t id = byte_ids_[static_cast<uint8_t>(ch)];
    TESSERA_CHECK(id >= 0, ValueError, "[", kOp, ".encode] expected a byte-fallback token <",
                  detail::hex_byte(static_cast<uint8_t>(ch)), "> in the vocabulary, got none");
    out.push_back(id);
  }
}

void Llama2cTokenizer::encode_into(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::vector<int32_t> ids;
  ids.reserve(text.size() + 1);
  push_piece(" ", ids);  // SentencePiece's add_dummy_prefix
  // Group each lead byte with up to 3 following continuation bytes, exactly as run.c does (so
  // invalid UTF-8 still round-trips through the byte fallback).
  const auto is_cont = [&](size_t i) { return (static_cast<uint8_t>(text[i]) & 0xC0) == 0x80; };
  for (size_t i = 0; i < text.size();) {
    size_t j = i + 1;
    while (j < text.size() && j - i < 4 && is_cont(j)) ++j;
    push_piece(text.substr(i, j - i), ids);
    i = j;
  }
  std::string joined;
  detail::greedy_merge(ids, [&](int32_t a, int32_t b) -> std::optional<detail::PairMerge> {
    if (is_special(a) || is_special(b)) return std::nullopt;
    joined.assign(pieces_[a]).append(pieces_[b]);
    const auto it = ids_.find(joined);
    if (it == ids_.end() || !(scores_[it->second] > kNoMergeScore)) return std::nullopt;
    return detail::PairMerge{scores_[it->second], it->second};
  });
  out.insert(out.end(), ids.begin(), ids.end());
}

std::string Llama2cTokenizer::token_to_string(int32_t id, int32_t prev) const {
  check_id(id, "token_to_string");
  if (id == 1 || id == 2) return "";
  if (byte_of_[id] >= 0) return std::string(1, static_cast<char>(byte_of_[id]));
  std::string_view s = pieces_[id];
  if (prev == 1 && s.starts_with(' ')) s.remove_prefix(1);
  return std::string(s);
}

std::string Llama2cTokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  bool at_start = true;  // before the first printed piece: strip the dummy-prefix space
  for (int32_t id : ids) {
    check_id(id, "decode");
    if (id == 1 || id == 2) continue;
    std::string s = token_to_string(id);
    if (at_start && byte_of_[id] < 0 && s.starts_with(' ')) s.erase(0, 1);
    at_start = false;
    out += s;
  }
  return out;
}

}  // namespace tessera::tokenizers
