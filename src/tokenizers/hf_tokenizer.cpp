// tokenizer.json: its BPE model, added tokens and post-processor here; the text stages around
// the model in hf_pipeline.cpp.
#include "tessera/tokenizers/hf_tokenizer.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <unordered_map>

#include "tessera/core/error.h"
#include "tokenizers/greedy_merge.h"
#include "tokenizers/hf_pipeline.h"
#include "tokenizers/utf8.h"

namespace tessera::tokenizers {
namespace {

using Json = hf::Json;
constexpr std::string_view kOp = "HuggingFaceTokenizer";
constexpr size_t kMaxCacheEntries = 1 << 16;
constexpr size_t kMaxCachedPieceBytes = 256;

Json read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TESSERA_CHECK(in, ValueError, "[", kOp, "] expected a readable file, got '", path, "'");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  TESSERA_CHECK(j.is_object(), ValueError, "[", kOp, "] expected a JSON object in '", path, "'");
  return j;
}

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// A token named in tokenizer_config.json: a string, or an AddedToken object's "content".
std::optional<std::string> config_token(const Json& config, const char* key) {
  if (!config.contains(key)) return std::nullopt;
  const Json& t = config[key];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_object() && t.contains("content") && t["content"].is_string())
    return t["content"].get<std::string>();
  return std::nullopt;
}

}  // namespace

struct HuggingFaceTokenizer::Impl {
  struct Added {
    std::string content;
    int32_t id;
    bool special, lstrip, rstrip;
  };
  struct Merge {
    int32_t rank, merged;
  };

  std::vector<hf::NormalizerStep> normalizer;
  std::vector<hf::PreTokenizerStep> pre_tokenizer;
  std::vector<hf::DecoderStep> decoder;
  bool byte_level = false;
  // The BPE model.
  std::unordered_map<std::string, int32_t> vocab;
  std::vector<std::string> tokens;  // id -> its string ("" where no token has the id)
  std::unordered_map<uint64_t, Merge> merges;
  bool ignore_merges = false, byte_fallback = false, fuse_unk = false;
  std::optional<int32_t> unk;
  std::array<int32_t, 256> byte_fallback_ids{};
  std::vector<Added> added;
  // Indexes into added by first byte, longest first: the candidates at a position of the text.
  std::array<std::vector<int32_t>, 256> added_by_byte;
  std::vector<bool> is_special;
  std::optional<int32_t> bos, eos;

  mutable std::mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache;

  int32_t id_of(const std::string& token, std::string_view what) const {
    const auto it = vocab.find(token);
    TESSERA_CHECK(it != vocab.end(), ValueError, "[", kOp, "] expected ", what, " '", token,
                  "' in the vocabulary, got none");
    return it->second;
  }

  void add_token(const std::string& token, int32_t id) {
    // Real vocabularies stay far below 2^22 (Gemma's 262k is among the largest); an id table
    // is allocated up to the largest id.
    TESSERA_CHECK(id >= 0 && id < (1 << 22), ValueError, "[", kOp,
                  "] expected token ids in [0, 2^22), got ", id, " for '", token, "'");
    if (static_cast<size_t>(id) >= tokens.size()) tokens.resize(id + 1);
    tokens[id] = token;
    vocab.insert_or_assign(token, id);
  }

  void load_model(const Json& m) {
    TESSERA_CHECK(m.is_object() && m.value("type", "") == "BPE", ValueError, "[", kOp,
                  "] expected a model of type BPE, got ",
                  m.is_object() ? "'" + m.value("type", std::string("?")) + "'" : m.dump());
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
      TESSERA_CHECK(!m.contains(key) || m[key].is_null() || m[key] == "", ValueError, "[", kOp,
                    "] expected no BPE ", key, " (not implemented), got ", m[key].dump());
    TESSERA_CHECK(!m.contains("dropout") || m["dropout"].is_null(), ValueError, "[", kOp,
                  "] expected no BPE dropout, got ", m["dropout"].dump());
    TESSERA_CHECK(m.contains("vocab") && m["vocab"].is_object(), ValueError, "[", kOp,
                  "] expected the BPE model's vocab to be an object");
    for (const auto& [token, id] : m["vocab"].items()) {
      TESSERA_CHECK(id.is_number_integer(), ValueError, "[", kOp, "] expected integer ids in the ",
                    "vocab, got ", id.dump(), " for '", token, "'");
      add_token(token, id.get<int32_t>());
    }
    ignore_merges = m.value("ignore_merges", false);
    byte_fallback = m.value("byte_fallback", false);
    fuse_unk = m.value("fuse_unk", false);
    if (m.contains("unk_token") && m["unk_token"].is_string())
      unk = id_of(m["unk_token"].get<std::string>(), "unk_token");
    if (byte_fallback)
      for (int b = 0; b < 256; ++b)
        byte_fallback_ids[b] = id_of("<" + tessera::detail::hex_byte(b) + ">", "byte token");
    const Json& list = m.contains("merges") ? m["merges"] : Json::array();
    TESSERA_CHECK(list.is_array(), ValueError, "[", kOp, "] expected the BPE merges as a list");
    int32_t rank = 0;
    for (const Json& merge : list) {
      std::string left, right;
      if (merge.is_string()) {  // "a b"
        const std::string s = merge.get<std::string>();
        const size_t space = s.find(' ');
        TESSERA_CHECK(space != std::string::npos && s.find(' ', space + 1) == std::string::npos,
                      ValueError, "[", kOp, "] expected merges \"a b\", got '", s, "'");
        left = s.substr(0, space);
        right = s.substr(space + 1);
      } else {
        TESSERA_CHECK(
            merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string(),
            ValueError, "[", kOp, "] expected merges as \"a b\" or [a, b], got ",
            merge.dump().substr(0, 100));
        left = merge[0].get<std::string>();
        right = merge[1].get<std::string>();
      }
      const int32_t a = id_of(left, "merge part"), b = id_of(right, "merge part");
      const int32_t merged = id_of(left + right, "merged token");
      merges.emplace(pair_key(a, b), Merge{rank++, merged});  // the first rank of a pair holds
    }
  }

  void load_added(const Json& list) {
    if (list.is_null()) return;
    TESSERA_CHECK(list.is_array(), ValueError, "[", kOp, "] expected added_tokens as a list");
    for (const Json& t : list) {
      TESSERA_CHECK(t.is_object() && t.contains("id") && t["id"].is_number_integer() &&
                        t.contains("content") && t["content"].is_string(),
                    ValueError, "[", kOp,
                    "] expected added tokens {\"id\", \"content\", ...}, got ",
                    t.dump().substr(0, 100));
      Added a{t["content"].get<std::string>(), t["id"].get<int32_t>(), t.value("special", false),
              t.value("lstrip", false), t.value("rstrip", false)};
      TESSERA_CHECK(!a.content.empty(), ValueError, "[", kOp, "] expected non-empty added tokens");
      add_token(a.content, a.id);
      if (static_cast<size_t>(a.id) >= is_special.size()) is_special.resize(a.id + 1, false);
      is_special[a.id] = a.special;
      added.push_back(std::move(a));
    }
    std::stable_sort(added.begin(), added.end(), [](const Added& x, const Added& y) {
      return x.content.size() > y.content.size();
    });
    for (size_t k = 0; k < added.size(); ++k)
      added_by_byte[static_cast<uint8_t>(added[k].content[0])].push_back(static_cast<int32_t>(k));
  }

  // The post-processor's special tokens before and after the sequence ("single" template).
  void load_post_processor(const Json& p) {
    if (p.is_null()) return;
    if (p.value("type", "") == "Sequence" && p.contains("processors")) {
      for (const Json& step : p["processors"]) load_post_processor(step);
      return;
    }
    if (p.value("type", "") != "TemplateProcessing" || !p.contains("single")) return;
    bool before = true;
    for (const Json& piece : p["single"]) {
      if (piece.contains("Sequence")) {
        before = false;
      } else if (piece.contains("SpecialToken")) {
        const int32_t id =
            id_of(piece["SpecialToken"].value("id", std::string()), "post-processor token");
        (before ? bos : eos) = id;
      }
    }
  }

  // BPE of one pre-tokenized piece, memoised.
  void encode_piece(const std::string& piece, std::vector<int32_t>& out) const {
    if (ignore_merges) {
      if (const auto it = vocab.find(piece); it != vocab.end()) {
        out.push_back(it->second);
        return;
      }
    }
    const bool cached = piece.size() <= kMaxCachedPieceBytes;
    if (cached) {
      std::lock_guard<std::mutex> lock(cache_mutex);
      if (const auto it = cache.find(piece); it != cache.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        return;
      }
    }
    std::vector<int32_t> ids;
    bool last_unknown = false;
    for (size_t i = 0; i < piece.size();) {
      const int len = tessera::detail::next_utf8(piece, i).len;
      const std::string ch = piece.substr(i, len);
      i += len;
      if (const auto it = vocab.find(ch); it != vocab.end()) {
        ids.push_back(it->second);
        last_unknown = false;
      } else if (byte_fallback) {
        for (const char c : ch) ids.push_back(byte_fallback_ids[static_cast<uint8_t>(c)]);
        last_unknown = false;
      } else if (unk) {
        if (!(fuse_unk && last_unknown)) ids.push_back(*unk);
        last_unknown = true;
      }  // no unk token: the library drops the character
    }
    tessera::detail::greedy_merge(
        ids, [&](int32_t a, int32_t b) -> std::optional<tessera::detail::PairMerge> {
          const auto it = merges.find(pair_key(a, b));
          if (it == merges.end()) return std::nullopt;
          return tessera::detail::PairMerge{-static_cast<double>(it->second.rank),
                                            it->second.merged};
        });
    out.insert(out.end(), ids.begin(), ids.end());
    if (!cached) return;
    std::lock_guard<std::mutex> lock(cache_mutex);
    if (cache.size() >= kMaxCacheEntries) cache.clear();
    cache.emplace(piece, std::move(ids));
  }

  // A span of text between added tokens.
  void encode_span(std::string_view span, bool first, std::vector<int32_t>& out) const {
    if (span.empty()) return;
    const std::string normalized = hf::normalize(normalizer, std::string(span));
    for (const std::string& piece : hf::pre_tokenize(pre_tokenizer, normalized, first))
      encode_piece(piece, out);
  }

  // The longest added token starting at byte i of text, or null.
  const Added* added_at(std::string_view text, size_t i) const {
    for (const int32_t k : added_by_byte[static_cast<uint8_t>(text[i])])  // longest first
      if (text.compare(i, added[k].content.size(), added[k].content) == 0) return &added[k];
    return nullptr;
  }
};

HuggingFaceTokenizer::HuggingFaceTokenizer(const std::string& path)
    : impl_(std::make_unique<Impl>()) {
  const Json j = read_json(path);
  impl_->load_model(j.contains("model") ? j["model"] : Json());
  impl_->load_added(j.contains("added_tokens") ? j["added_tokens"] : Json());
  impl_->normalizer = hf::parse_normalizer(j.contains("normalizer") ? j["normalizer"] : Json());
  impl_->pre_tokenizer =
      hf::parse_pre_tokenizer(j.contains("pre_tokenizer") ? j["pre_tokenizer"] : Json());
  impl_->byte_level = hf::byte_level(impl_->pre_tokenizer);
  impl_->decoder = hf::parse_decoder(j.contains("decoder") ? j["decoder"] : Json());
  impl_->load_post_processor(j.contains("post_processor") ? j["post_processor"] : Json());
  impl_->is_special.resize(impl_->tokens.size(), false);

  // tokenizer_config.json names the EOS (and a BOS the post-processor may not add itself).
  const std::filesystem::path config =
      std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  if (std::filesystem::exists(config)) {
    const Json c = read_json(config.string());
    if (const auto eos = config_token(c, "eos_token")) impl_->eos = impl_->id_of(*eos, "eos_token");
    if (const auto bos = config_token(c, "bos_token");
        bos && !impl_->bos && c.value("add_bos_token", false))
      impl_->bos = impl_->id_of(*bos, "bos_token");
  }
}

HuggingFaceTokenizer::~HuggingFaceTokenizer() = default;

int64_t HuggingFaceTokenizer::vocab_size() const {
  return static_cast<int64_t>(impl_->tokens.size());
}

std::optional<int32_t> HuggingFaceTokenizer::bos_id() const { return impl_->bos; }
std::optional<int32_t> HuggingFaceTokenizer::eos_id() const { return impl_->eos; }

std::vector<Tokenizer::Special> HuggingFaceTokenizer::special_tokens() const {
  std::vector<Special> out;
  for (const Impl::Added& a : impl_->added)
    if (a.special) out.push_back({a.content, a.id});
  return out;
}

void HuggingFaceTokenizer::encode_into(std::string_view text, std::vector<int32_t>& out) const {
  const auto is_space = [](char c) { return c == ' ' || (c >= '\t' && c <= '\r'); };
  size_t start = 0;  // the span not yet encoded
  for (size_t i = 0; i < text.size();) {
    const Impl::Added* a = impl_->added_at(text, i);
    if (a == nullptr) {
      ++i;
      continue;
    }
    size_t span_end = i, next = i + a->content.size();
    if (a->lstrip)
      while (span_end > start && is_space(text[span_end - 1])) --span_end;
    if (a->rstrip)
      while (next < text.size() && is_space(text[next])) ++next;
    impl_->encode_span(text.substr(start, span_end - start), start == 0, out);
    out.push_back(a->id);
    start = i = next;
  }
  impl_->encode_span(text.substr(start), start == 0, out);
}

std::string HuggingFaceTokenizer::decode(std::span<const int32_t> ids) const {
  std::vector<std::string> tokens;
  for (const int32_t id : ids) {
    check_id(id, "decode");
    tokens.push_back(impl_->tokens[id]);
  }
  return hf::decode(impl_->decoder, std::move(tokens), /*at_start=*/true);
}

std::string HuggingFaceTokenizer::token_to_string(int32_t id, int32_t prev) const {
  check_id(id, "token_to_string");
  // The text starts at the first token, or after a special one such as BOS (what a reader sees
  // once special tokens are skipped).
  const bool at_start =
      prev < 0 || (static_cast<size_t>(prev) < impl_->is_special.size() && impl_->is_special[prev]);
  return hf::decode(impl_->decoder, {impl_->tokens[id]}, at_start);
}

}  // namespace tessera::tokenizers
