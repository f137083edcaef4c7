#include "fuzz_util.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <utility>

#include "tessera/autograd/grad_mode.h"
#include "tessera/models/gpt2.h"
#include "tessera/ops/creation.h"

namespace tessera::fuzz {
namespace {

namespace fs = std::filesystem;

// Byte pairs merged by the synthetic tokenizers, highest priority first (GPT-2 rank order,
// llama2.c/SentencePiece scores descending). Each merged piece's parts come earlier or are bytes.
const std::vector<std::pair<std::string, std::string>>& merges() {
  static const std::vector<std::pair<std::string, std::string>> m = {
      {" ", "t"}, {"t", "h"},   {"h", "e"},      {"th", "e"}, {" t", "he"}, {" ", "a"},
      {"i", "n"}, {"in", "g"},  {"e", "r"},      {"o", "n"},  {"l", "l"},   {"e", "s"},
      {" ", " "}, {"\n", "\n"}, {"\xC3", "\xA9"}};  // the last one: UTF-8 é
  return m;
}

// The byte string in GPT-2's printable byte alphabet (encoder.json and vocab.bpe spell it so).
std::string gpt2_spelling(std::string_view bytes) {
  std::string out;
  for (unsigned char b : bytes) {
    const char32_t cp = tokenizers::gpt2_byte_to_unicode()[b];
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else {  // every table entry is below U+0800: two UTF-8 bytes
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  return out;
}

void append_raw(std::string& out, const void* p, size_t n) {
  out.append(static_cast<const char*>(p), n);
}

// ---- protobuf wire format, enough for a SentencePiece ModelProto ----
void varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>(0x80 | (v & 0x7F));
    v >>= 7;
  }
  out += static_cast<char>(v);
}
void tag(std::string& out, int field, int wire) { varint(out, (uint64_t(field) << 3) | wire); }
void pb_bytes(std::string& out, int field, std::string_view s) {
  tag(out, field, 2);
  varint(out, s.size());
  out += s;
}
void pb_varint(std::string& out, int field, uint64_t v) {
  tag(out, field, 0);
  varint(out, v);
}
void pb_float(std::string& out, int field, float f) {
  tag(out, field, 5);
  append_raw(out, &f, 4);
}

// SentencePiece::Type values of sentencepiece_model.proto.
constexpr int kNormal = 1, kUnknown = 2, kControl = 3, kByte = 6;

std::string sp_piece(std::string_view piece, float score, int type) {
  std::string m;
  pb_bytes(m, 1, piece);
  pb_float(m, 2, score);
  if (type != kNormal) pb_varint(m, 3, type);
  return m;
}

std::string byte_piece(int b) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
  return buf;
}

// Replaces spaces by U+2581, SentencePiece's visible space.
std::string sp_spelling(std::string_view s) {
  std::string out;
  for (char c : s) out += c == ' ' ? std::string("\xE2\x96\x81") : std::string(1, c);
  return out;
}

template <class T>
const T& load_once(const char* file, const std::string& bytes) {
  static const T tok(write_scratch(file, bytes));
  return tok;
}

}  // namespace

std::string shared_data_dir() { return TESSERA_SHARED_DATA_DIR; }

const std::string& scratch_dir() {
  // Never destroyed: the atexit handler below runs after static destructors would have.
  static const std::string& dir = *new std::string([] {
    std::string pattern = (fs::temp_directory_path() / "tessera-fuzz-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      std::perror("tessera fuzz: mkdtemp");
      std::abort();
    }
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(scratch_dir(), ec);
    });
    return pattern;
  }());
  return dir;
}

std::string write_scratch(std::string_view name, std::string_view bytes) {
  const std::string path = (fs::path(scratch_dir()) / name).string();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "tessera fuzz: cannot write %s\n", path.c_str());
    std::abort();
  }
  return path;
}

std::vector<std::string_view> split_parts(std::string_view input, size_t n) {
  std::vector<std::string_view> parts;
  while (parts.size() + 1 < n) {
    const size_t at = input.find(kPartSeparator);
    if (at == std::string_view::npos) break;
    parts.push_back(input.substr(0, at));
    input.remove_prefix(at + kPartSeparator.size());
  }
  parts.push_back(input);
  parts.resize(n);
  return parts;
}

void rejected(const std::exception& e) {
  static const bool verbose = std::getenv("TESSERA_FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "rejected: %s\n", e.what());
}

void fail(std::string_view what, std::string_view input) {
  std::fprintf(stderr, "tessera fuzz: %.*s\ninput (%zu bytes):", int(what.size()), what.data(),
               input.size());
  for (unsigned char c : input) std::fprintf(stderr, " %02x", c);
  std::fprintf(stderr, "\n");
  std::abort();
}

void check_model_runs(models::CausalLM& model, std::string_view input) {
  autograd::NoGradGuard no_grad;
  const Tensor logits = model.forward(zeros({1, 1}, TensorOptions(kInt64)));
  if (logits.sizes() != Shape{1, 1, model.vocab_size()})
    fail("an imported model gave logits of the wrong shape", input);
}

std::shared_ptr<models::CausalLM> tiny_gpt2() {
  models::GPT2Config c;
  c.vocab_size = 32;
  c.block_size = 8;
  c.n_layer = 1;
  c.n_head = 2;
  c.n_embd = 16;
  Generator gen(0);
  auto model = std::make_shared<models::GPT2>(c, &gen);
  model->eval();
  return model;
}

std::string synthetic_gpt2_encoder_json() {
  nlohmann::ordered_json enc = nlohmann::ordered_json::object();
  int id = 0;
  for (int b = 0; b < 256; ++b) enc[gpt2_spelling(std::string(1, char(b)))] = id++;
  for (const auto& [a, b] : merges()) enc[gpt2_spelling(a + b)] = id++;
  enc["<|endoftext|>"] = id;
  return enc.dump();
}

std::string synthetic_gpt2_vocab_bpe() {
  std::string out = "#version: 0.2\n";
  for (const auto& [a, b] : merges()) out += gpt2_spelling(a) + " " + gpt2_spelling(b) + "\n";
  return out;
}

std::string synthetic_llama2c_tokenizer_bin() {
  std::vector<std::pair<std::string, float>> pieces = {
      {"<unk>", 0.f}, {"\n<s>\n", 0.f}, {"\n</s>\n", 0.f}};
  for (int b = 0; b < 256; ++b) pieces.emplace_back(byte_piece(b), 0.f);
  // Single characters (all ASCII letters and the space) never win a merge over real pairs.
  for (char c : std::string(" etaoinshrdlucmfwypvbgkjqxz"))
    pieces.emplace_back(std::string(1, c), -1e3f);
  float score = -1;
  for (const auto& [a, b] : merges()) pieces.emplace_back(a + b, score--);
  std::string out;
  int32_t max_len = 0;
  for (const auto& [p, s] : pieces) max_len = std::max<int32_t>(max_len, int32_t(p.size()));
  append_raw(out, &max_len, 4);
  for (const auto& [p, s] : pieces) {
    const int32_t len = int32_t(p.size());
    append_raw(out, &s, 4);
    append_raw(out, &len, 4);
    out += p;
  }
  return out;
}

std::string synthetic_sentencepiece_model() {
  std::string model;
  pb_bytes(model, 1, sp_piece("<unk>", 0, kUnknown));
  pb_bytes(model, 1, sp_piece("<s>", 0, kControl));
  pb_bytes(model, 1, sp_piece("</s>", 0, kControl));
  for (int b = 0; b < 256; ++b) pb_bytes(model, 1, sp_piece(byte_piece(b), 0, kByte));
  for (char c : std::string(" etaoinshrdlucmfwypvbgkjqxz"))
    pb_bytes(model, 1, sp_piece(sp_spelling(std::string(1, c)), -1e3f, kNormal));
  float score = -1;
  for (const auto& [a, b] : merges()) {
    // SentencePiece pieces must be valid UTF-8: the é merge joins two bytes, so it is skipped.
    if (a == "\xC3") continue;
    pb_bytes(model, 1, sp_piece(sp_spelling(a + b), score--, kNormal));
  }
  std::string trainer;
  pb_varint(trainer, 3, 2);   // model_type: BPE
  pb_varint(trainer, 35, 1);  // byte_fallback
  pb_bytes(model, 2, trainer);
  // Llama 2's normalizer: no Unicode normalization, spaces kept, a dummy prefix added.
  std::string normalizer;
  pb_bytes(normalizer, 1, "identity");
  pb_varint(normalizer, 3, 1);  // add_dummy_prefix
  pb_varint(normalizer, 4, 0);  // remove_extra_whitespaces
  pb_bytes(model, 3, normalizer);
  return model;
}

const tokenizers::GPT2Tokenizer& synthetic_gpt2() {
  static const tokenizers::GPT2Tokenizer tok(
      write_scratch("synthetic_encoder.json", synthetic_gpt2_encoder_json()),
      write_scratch("synthetic_vocab.bpe", synthetic_gpt2_vocab_bpe()));
  return tok;
}

const tokenizers::Llama2cTokenizer& synthetic_llama2c() {
  return load_once<tokenizers::Llama2cTokenizer>("synthetic_tokenizer.bin",
                                                 synthetic_llama2c_tokenizer_bin());
}

const tokenizers::SentencePieceTokenizer& synthetic_sentencepiece() {
  return load_once<tokenizers::SentencePieceTokenizer>("synthetic_sp.model",
                                                       synthetic_sentencepiece_model());
}

}  // namespace tessera::fuzz
