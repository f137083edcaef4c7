#include "tessera/tokenizers/gpt2_tokenizer.h"

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tessera/core/error.h"
#include "tokenizers/greedy_merge.h"
#include "tokenizers/utf8.h"

namespace tessera::tokenizers {
namespace {

// Bounds the memo of piece encodings; a long run over varied text would grow it without end.
constexpr size_t kMaxCacheEntries = 1 << 16;
// Longer pieces are not cached (as HF tokenizers' BPE cache): the entry cap alone let a stream
// of long distinct words hold gigabytes.
constexpr size_t kMaxCachedPieceBytes = 256;

std::string read_file(const std::string& path, std::string_view op) {
  std::ifstream in(path, std::ios::binary);
  TESSERA_CHECK(in, RuntimeError, "[", op, "] expected a readable file, got '", path, "'");
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Inverse of gpt2_byte_to_unicode for a vocabulary string: its bytes, or nullopt if some
// character is outside the table.
std::optional<std::string> unicode_to_bytes(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const detail::Utf8Char c = detail::next_utf8(s, i);
    const int b = gpt2_unicode_to_byte(c.cp);
    if (b < 0) return std::nullopt;
    out += static_cast<char>(b);
    i += c.len;
  }
  return out;
}

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

}  // namespace

const std::array<char32_t, 256>& gpt2_byte_to_unicode() {
  // Printable Latin-1 bytes map to themselves; the rest take codepoints 256, 257, ... in order,
  // so no token string contains whitespace or control characters.
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    const auto printable = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) t[b] = printable(b) ? static_cast<char32_t>(b) : next++;
    return t;
  }();
  return table;
}

int gpt2_unicode_to_byte(char32_t cp) {
  // The table's characters all lie below U+0144 (256 + the 68 unprintable bytes).
  static const std::array<int16_t, 512> inverse = [] {
    std::array<int16_t, 512> m;
    m.fill(-1);
    for (int b = 0; b < 256; ++b) m[gpt2_byte_to_unicode()[b]] = static_cast<int16_t>(b);
    return m;
  }();
  return cp < inverse.size() ? inverse[cp] : -1;
}

GPT2Tokenizer::GPT2Tokenizer(const std::string& encoder_json_path,
                             const std::string& vocab_bpe_path) {
  constexpr std::string_view op = "GPT2Tokenizer";
  nlohmann::json encoder;
  try {
    encoder = nlohmann::json::parse(read_file(encoder_json_path, op));
  } catch (const nlohmann::json::exception& e) {
    throw ValueError(detail::str("[", op, "] expected a JSON object in '", encoder_json_path,
                                 "', got a parse error: ", e.what()));
  }
  TESSERA_CHECK(encoder.is_object() && !encoder.empty(), ValueError, "[", op,
                "] expected a non-empty JSON object mapping tokens to ids in '", encoder_json_path,
                "', got ", encoder.type_name());
  tokens_.resize(encoder.size());
  std::vector<bool> seen(encoder.size(), false);
  for (const auto& [key, value] : encoder.items()) {
    TESSERA_CHECK(value.is_number_integer() && value.get<int64_t>() >= 0 &&
                      value.get<int64_t>() < static_cast<int64_t>(encoder.size()),
                  ValueError, "[", op, "] expected ids in [0, ", encoder.size(), ") in '",
                  encoder_json_path, "', got ", value.dump(), " for '", key, "'");
    const auto id = value.get<int32_t>();
    TESSERA_CHECK(!seen[id], ValueError, "[", op, "] expected unique ids in '", encoder_json_path,
                  "', got ", id, " twice");
    seen[id] = true;
    // Special tokens such as <|endoftext|> are stored literally, not in the byte alphabet.
    std::optional<std::string> bytes = unicode_to_bytes(key);
    tokens_[id] = bytes ? *bytes : key;
    ids_.emplace(tokens_[id], id);
    if (key == "<|endoftext|>") end_of_text_ = id;
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = ids_.find(std::string(1, static_cast<char>(b)));
    TESSERA_CHECK(it != ids_.end(), ValueError, "[", op, "] expected a token for every byte in '",
                  encoder_json_path, "', got none for byte ", detail::hex_byte(b));
    byte_ids_[b] = it->second;
  }
  load_merges(vocab_bpe_path);
}

void GPT2Tokenizer::load_merges(const std::string& path) {
  constexpr std::string_view op = "GPT2Tokenizer";
  std::istringstream in(read_file(path, op));
  std::string line;
  int32_t rank = 0;
  for (int64_t line_no = 1; std::getline(in, line); ++line_no) {
    if (line_no == 1 && line.starts_with("#version")) continue;
    std::istringstream fields(line);
    std::string left, right, extra;
    if (!(fields >> left)) continue;  // blank lines (the file ends with one)
    TESSERA_CHECK((fields >> right) && !(fields >> extra), ValueError, "[", op,
                  "] expected two tokens per merge line in '", path, "', got line ", line_no, ": '",
                  line, "'");
    const std::optional<std::string> a = unicode_to_bytes(left), b = unicode_to_bytes(right);
    TESSERA_CHECK(a && b, ValueError, "[", op, "] expected merge tokens in the byte alphabet in '",
                  path, "', got line ", line_no, ": '", line, "'");
    const auto ia = ids_.find(*a), ib = ids_.find(*b), im = ids_.find(*a + *b);
    TESSERA_CHECK(ia != ids_.end() && ib != ids_.end() && im != ids_.end(), ValueError, "[", op,
                  "] expected both parts of each merge and their concatenation in the vocabulary",
                  ", got line ", line_no, " of '", path, "': '", line, "'");
    // A repeated pair keeps its last rank, as dict(zip(merges, ranks)) does in the reference.
    merges_.insert_or_assign(pair_key(ia->second, ib->second), Merge{rank++, im->second});
  }
}

std::unique_ptr<GPT2Tokenizer> GPT2Tokenizer::from_directory(const std::string& dir) {
  return std::make_unique<GPT2Tokenizer>(dir + "/encoder.json", dir + "/vocab.bpe");
}

void GPT2Tokenizer::encode_into(std::string_view text, std::vector<int32_t>& out) const {
  for (std::string_view piece : gpt2_pretokenize(text)) encode_piece(piece, out);
}

void GPT2Tokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  const bool cached = piece.size() <= kMaxCachedPieceBytes;
  if (cached) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    const auto it = cache_.find(std::string(piece));
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  ids.reserve(piece.size());
  for (char ch : piece) ids.push_back(byte_ids_[static_cast<uint8_t>(ch)]);
  // Lower rank merges first.
  detail::greedy_merge(ids, [&](int32_t a, int32_t b) -> std::optional<detail::PairMerge> {
    const auto it = merges_.find(pair_key(a, b));
    if (it == merges_.end()) return std::nullopt;
    return detail::PairMerge{-static_cast<double>(it->second.rank), it->second.merged};
  });
  out.insert(out.end(), ids.begin(), ids.end());
  if (!cached) return;
  std::lock_guard<std::mutex> lock(cache_mutex_);
  if (cache_.size() >= kMaxCacheEntries) cache_.clear();
  cache_.emplace(std::string(piece), std::move(ids));
}

const std::string& GPT2Tokenizer::token_bytes(int32_t id) const {
  check_id(id, "token_bytes");
  return tokens_[id];
}

std::string GPT2Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) {
    check_id(id, "decode");
    out += tokens_[id];
  }
  return out;
}

std::string GPT2Tokenizer::token_to_string(int32_t id, int32_t) const { return token_bytes(id); }

}  // namespace tessera::tokenizers
