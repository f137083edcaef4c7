// tokenizer.json's normalizers, pre-tokenizers and decoders. Unicode normalization and the
// Split patterns (\p{L}, lookahead, (?i:...)) run on ICU, as the GPT-2 pre-tokenizer's classes do.
#include "tokenizers/hf_pipeline.h"

#include <unicode/normalizer2.h>
#include <unicode/regex.h>
#include <unicode/unistr.h>
#include <unicode/utext.h>

#include <algorithm>

#include "tessera/core/error.h"
#include "tessera/tokenizers/gpt2_tokenizer.h"
#include "tokenizers/utf8.h"

namespace tessera::tokenizers::hf {
namespace {

constexpr std::string_view kOp = "HuggingFaceTokenizer";

std::string type_of(const Json& j, std::string_view what) {
  TESSERA_CHECK(j.is_object() && j.contains("type") && j["type"].is_string(), ValueError, "[", kOp,
                "] expected a ", what, " object with a \"type\", got ", j.dump().substr(0, 200));
  return j["type"].get<std::string>();
}

[[noreturn]] void unsupported(std::string_view what, std::string_view type,
                              std::string_view supported) {
  throw ValueError(tessera::detail::str("[", kOp, "] expected a ", what, " of type ", supported,
                                        ", got '", type, "'"));
}

std::string string_field(const Json& j, const char* key, std::string_view what) {
  TESSERA_CHECK(j.contains(key) && j[key].is_string(), ValueError, "[", kOp, "] expected ", what,
                " to have a string \"", key, "\", got ", j.dump().substr(0, 200));
  return j[key].get<std::string>();
}

// A {"String": s} pattern (Replace); a {"Regex": r} one is refused where only strings work.
std::string literal_pattern(const Json& j, std::string_view what) {
  TESSERA_CHECK(j.contains("pattern") && j["pattern"].is_object() &&
                    j["pattern"].contains("String") && j["pattern"]["String"].is_string(),
                ValueError, "[", kOp, "] expected a ", what, " with a {\"String\": ...} pattern ",
                "(regular expressions are not implemented there), got ", j.dump().substr(0, 200));
  return j["pattern"]["String"].get<std::string>();
}

// Each step of j, a "Sequence" (under `list_key`) flattened.
template <class F>
void for_each_step(const Json& j, const char* list_key, std::string_view what, F&& f) {
  if (j.is_null()) return;
  if (type_of(j, what) == "Sequence") {
    TESSERA_CHECK(j.contains(list_key) && j[list_key].is_array(), ValueError, "[", kOp,
                  "] expected a Sequence ", what, " to list \"", list_key, "\"");
    for (const Json& step : j[list_key]) for_each_step(step, list_key, what, f);
    return;
  }
  f(j, type_of(j, what));
}

bool ascii(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<uint8_t>(c) < 0x80; });
}

std::string unicode_normalize(NormalizerStep::Kind kind, const std::string& text) {
  if (ascii(text)) return text;  // every normalization form leaves ASCII as it is
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* form =
      kind == NormalizerStep::Kind::kNfc    ? icu::Normalizer2::getNFCInstance(status)
      : kind == NormalizerStep::Kind::kNfkc ? icu::Normalizer2::getNFKCInstance(status)
      : kind == NormalizerStep::Kind::kNfd  ? icu::Normalizer2::getNFDInstance(status)
                                            : icu::Normalizer2::getNFKDInstance(status);
  icu::UnicodeString normalized =
      form->normalize(icu::UnicodeString::fromUTF8(icu::StringPiece(text)), status);
  TESSERA_CHECK(U_SUCCESS(status), RuntimeError, "[", kOp,
                "] Unicode normalization failed: ", u_errorName(status));
  std::string out;
  return normalized.toUTF8String(out);
}

// Split with behavior "Isolated": every match a piece, and every stretch between matches too.
void split_isolated(const icu::RegexPattern& regex, std::string_view text,
                    std::vector<std::string>& out) {
  UErrorCode status = U_ZERO_ERROR;
  UText* input = utext_openUTF8(nullptr, text.data(), static_cast<int64_t>(text.size()), &status);
  std::unique_ptr<icu::RegexMatcher> matcher(regex.matcher(status));
  TESSERA_CHECK(U_SUCCESS(status), RuntimeError, "[", kOp,
                "] regex matcher: ", u_errorName(status));
  matcher->reset(input);
  int64_t done = 0;  // native (byte) indexes, as UTF-8 UText gives them
  while (matcher->find(status) && U_SUCCESS(status)) {
    const int64_t begin = matcher->start64(status), end = matcher->end64(status);
    if (begin > done) out.emplace_back(text.substr(done, begin - done));
    if (end > begin) out.emplace_back(text.substr(begin, end - begin));
    done = end;
  }
  if (done < static_cast<int64_t>(text.size())) out.emplace_back(text.substr(done));
  matcher.reset();
  utext_close(input);
}

std::string to_byte_alphabet(std::string_view bytes) {
  std::string out;
  for (const char c : bytes)
    tessera::detail::append_utf8(out, gpt2_byte_to_unicode()[static_cast<uint8_t>(c)]);
  return out;
}

// The bytes of a vocabulary string in the byte alphabet; characters outside it (an added
// token's text) pass through as they are.
std::string from_byte_alphabet(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const tessera::detail::Utf8Char c = tessera::detail::next_utf8(s, i);
    if (const int b = gpt2_unicode_to_byte(c.cp); b >= 0)
      out += static_cast<char>(b);
    else
      out.append(s.substr(i, c.len));
    i += c.len;
  }
  return out;
}

}  // namespace

std::vector<NormalizerStep> parse_normalizer(const Json& j) {
  std::vector<NormalizerStep> steps;
  for_each_step(j, "normalizers", "normalizer", [&](const Json& s, const std::string& type) {
    using K = NormalizerStep::Kind;
    if (type == "NFC" || type == "NFKC" || type == "NFD" || type == "NFKD") {
      steps.push_back({type == "NFC"    ? K::kNfc
                       : type == "NFKC" ? K::kNfkc
                       : type == "NFD"  ? K::kNfd
                                        : K::kNfkd,
                       "", ""});
    } else if (type == "Prepend") {
      steps.push_back({K::kPrepend, string_field(s, "prepend", "Prepend"), ""});
    } else if (type == "Replace") {
      steps.push_back({K::kReplace, literal_pattern(s, "Replace normalizer"),
                       string_field(s, "content", "Replace")});
    } else {
      unsupported("normalizer", type, "NFC, NFKC, NFD, NFKD, Prepend, Replace or Sequence");
    }
  });
  return steps;
}

std::string normalize(const std::vector<NormalizerStep>& steps, std::string text) {
  for (const NormalizerStep& s : steps) {
    switch (s.kind) {
      case NormalizerStep::Kind::kPrepend:
        if (!text.empty()) text = s.text + text;
        break;
      case NormalizerStep::Kind::kReplace:
        text = tessera::detail::replace_all(text, s.text, s.content);
        break;
      default:
        text = unicode_normalize(s.kind, text);
    }
  }
  return text;
}

std::vector<PreTokenizerStep> parse_pre_tokenizer(const Json& j) {
  std::vector<PreTokenizerStep> steps;
  for_each_step(j, "pretokenizers", "pre_tokenizer", [&](const Json& s, const std::string& type) {
    PreTokenizerStep step;
    if (type == "Split") {
      TESSERA_CHECK(s.value("behavior", "") == "Isolated" && !s.value("invert", false), ValueError,
                    "[", kOp, "] expected a Split pre_tokenizer with behavior Isolated and no ",
                    "invert, got ", s.dump().substr(0, 200));
      const Json& p = s.contains("pattern") ? s["pattern"] : Json();
      const bool regex = p.is_object() && p.contains("Regex") && p["Regex"].is_string();
      TESSERA_CHECK(regex || (p.is_object() && p.contains("String") && p["String"].is_string()),
                    ValueError, "[", kOp, "] expected a Split pattern {\"Regex\": ...} or ",
                    "{\"String\": ...}, got ", p.dump().substr(0, 200));
      const std::string text = p[regex ? "Regex" : "String"].get<std::string>();
      UErrorCode status = U_ZERO_ERROR;
      UParseError where{};
      step.kind = PreTokenizerStep::Kind::kSplit;
      step.regex.reset(
          icu::RegexPattern::compile(icu::UnicodeString::fromUTF8(icu::StringPiece(text)),
                                     regex ? 0 : UREGEX_LITERAL, where, status));
      TESSERA_CHECK(U_SUCCESS(status), ValueError, "[", kOp, "] expected a Split pattern ICU ",
                    "can compile, got '", text, "': ", u_errorName(status), " at offset ",
                    where.offset);
    } else if (type == "ByteLevel") {
      step.kind = PreTokenizerStep::Kind::kByteLevel;
      step.add_prefix_space = s.value("add_prefix_space", true);
      step.use_regex = s.value("use_regex", true);
    } else if (type == "Metaspace") {
      step.kind = PreTokenizerStep::Kind::kMetaspace;
      step.replacement = s.value("replacement", std::string("\u2581"));
      step.split = s.value("split", true);
      // Older files spell the scheme as add_prefix_space.
      const std::string scheme =
          s.value("prepend_scheme", s.value("add_prefix_space", true) ? "always" : "never");
      TESSERA_CHECK(scheme == "always" || scheme == "first" || scheme == "never", ValueError, "[",
                    kOp, "] expected Metaspace prepend_scheme always, first or never, got '",
                    scheme, "'");
      step.prepend = scheme == "always"  ? PreTokenizerStep::Prepend::kAlways
                     : scheme == "first" ? PreTokenizerStep::Prepend::kFirst
                                         : PreTokenizerStep::Prepend::kNever;
    } else {
      unsupported("pre_tokenizer", type, "Split, ByteLevel, Metaspace or Sequence");
    }
    steps.push_back(std::move(step));
  });
  return steps;
}

bool byte_level(const std::vector<PreTokenizerStep>& steps) {
  return std::any_of(steps.begin(), steps.end(), [](const PreTokenizerStep& s) {
    return s.kind == PreTokenizerStep::Kind::kByteLevel;
  });
}

std::vector<std::string> pre_tokenize(const std::vector<PreTokenizerStep>& steps,
                                      std::string_view text, bool first) {
  std::vector<std::string> pieces{std::string(text)};
  for (const PreTokenizerStep& s : steps) {
    std::vector<std::string> next;
    for (std::string& piece : pieces) {
      switch (s.kind) {
        case PreTokenizerStep::Kind::kSplit:
          split_isolated(*s.regex, piece, next);
          break;
        case PreTokenizerStep::Kind::kByteLevel: {
          if (s.add_prefix_space && !piece.empty() && piece[0] != ' ') piece = " " + piece;
          if (!s.use_regex) {
            next.push_back(to_byte_alphabet(piece));
            break;
          }
          for (std::string_view part : gpt2_pretokenize(piece))
            next.push_back(to_byte_alphabet(part));
          break;
        }
        case PreTokenizerStep::Kind::kMetaspace: {
          piece = tessera::detail::replace_all(piece, " ", s.replacement);
          const bool prepend = s.prepend == PreTokenizerStep::Prepend::kAlways ||
                               (s.prepend == PreTokenizerStep::Prepend::kFirst && first);
          if (prepend && !piece.starts_with(s.replacement)) piece = s.replacement + piece;
          if (!s.split) {
            next.push_back(piece);
            break;
          }
          // Each replacement starts a new piece (the library's MergedWithNext).
          size_t start = 0;
          for (size_t at = piece.find(s.replacement, 1); at != std::string::npos;
               at = piece.find(s.replacement, at + 1)) {
            next.push_back(piece.substr(start, at - start));
            start = at;
          }
          next.push_back(piece.substr(start));
          break;
        }
      }
    }
    std::erase_if(next, [](const std::string& p) { return p.empty(); });
    pieces = std::move(next);
  }
  return pieces;
}

std::vector<DecoderStep> parse_decoder(const Json& j) {
  std::vector<DecoderStep> steps;
  for_each_step(j, "decoders", "decoder", [&](const Json& s, const std::string& type) {
    using K = DecoderStep::Kind;
    DecoderStep step{};
    if (type == "ByteLevel") {
      step.kind = K::kByteLevel;
    } else if (type == "Replace") {
      step = {K::kReplace,
              literal_pattern(s, "Replace decoder"),
              string_field(s, "content", "Replace"),
              0,
              0,
              false};
    } else if (type == "ByteFallback") {
      step.kind = K::kByteFallback;
    } else if (type == "Fuse") {
      step.kind = K::kFuse;
    } else if (type == "Strip") {
      step = {K::kStrip,
              string_field(s, "content", "Strip"),
              "",
              s.value("start", int64_t{0}),
              s.value("stop", int64_t{0}),
              false};
    } else if (type == "Metaspace") {
      const std::string scheme = s.value("prepend_scheme", "always");
      step = {K::kMetaspace,
              s.value("replacement", std::string("\u2581")),
              "",
              0,
              0,
              scheme != "never" && s.value("add_prefix_space", true)};
    } else {
      unsupported("decoder", type,
                  "ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace or Sequence");
    }
    steps.push_back(std::move(step));
  });
  return steps;
}

std::string decode(const std::vector<DecoderStep>& steps, std::vector<std::string> tokens,
                   bool at_start) {
  for (const DecoderStep& s : steps) {
    switch (s.kind) {
      case DecoderStep::Kind::kByteLevel:
        for (std::string& t : tokens) t = from_byte_alphabet(t);
        break;
      case DecoderStep::Kind::kReplace:
        for (std::string& t : tokens) t = tessera::detail::replace_all(t, s.text, s.content);
        break;
      case DecoderStep::Kind::kByteFallback:
        // Raw bytes, even where a run is not valid UTF-8 (the library writes U+FFFD there): a
        // stream printing token by token needs a character's bytes as they come.
        for (std::string& t : tokens)
          if (const int b = tessera::detail::byte_token_value(t); b >= 0)
            t = std::string(1, static_cast<char>(b));
        break;
      case DecoderStep::Kind::kFuse: {
        std::string all;
        for (const std::string& t : tokens) all += t;
        tokens = {all};
        break;
      }
      case DecoderStep::Kind::kStrip:
        if (!at_start) break;  // only where the text starts (after Fuse: the whole text's ends)
        for (std::string& t : tokens) {
          for (int64_t k = 0; k < s.start && t.starts_with(s.text); ++k) t.erase(0, s.text.size());
          for (int64_t k = 0; k < s.stop && t.ends_with(s.text); ++k)
            t.erase(t.size() - s.text.size());
        }
        break;
      case DecoderStep::Kind::kMetaspace:
        for (size_t i = 0; i < tokens.size(); ++i) {
          tokens[i] = tessera::detail::replace_all(tokens[i], s.text, " ");
          if (i == 0 && at_start && s.strip_first && tokens[i].starts_with(' '))
            tokens[i].erase(0, 1);
        }
        break;
    }
  }
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

}  // namespace tessera::tokenizers::hf
