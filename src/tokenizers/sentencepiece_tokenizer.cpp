#include "tessera/tokenizers/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>

#include "tessera/core/error.h"

namespace tessera::tokenizers {
namespace {

constexpr std::string_view kOp = "SentencePieceTokenizer";
constexpr std::string_view kMetaSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

std::optional<int32_t> defined(int id) {
  return id >= 0 ? std::optional<int32_t>(id) : std::nullopt;
}

}  // namespace

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& model_path)
    : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {
  sentencepiece::util::Status status;
  try {
    status = sp_->Load(model_path);
  } catch (const std::exception& e) {
    // libsentencepiece reports most bad models in its status, but some (an empty piece in a
    // unigram model: its trie builder's Darts exception) escape as exceptions.
    status = sentencepiece::util::Status(sentencepiece::util::StatusCode::kInternal, e.what());
  }
  TESSERA_CHECK(status.ok(), ValueError, "[", kOp, "] expected a SentencePiece model at '",
                model_path, "', got: ", status.ToString());
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

int64_t SentencePieceTokenizer::vocab_size() const { return sp_->GetPieceSize(); }
std::optional<int32_t> SentencePieceTokenizer::bos_id() const { return defined(sp_->bos_id()); }
std::optional<int32_t> SentencePieceTokenizer::eos_id() const { return defined(sp_->eos_id()); }

void SentencePieceTokenizer::encode_into(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<int> ids;
  const auto status = sp_->Encode(text, &ids);
  TESSERA_CHECK(status.ok(), ValueError, "[", kOp,
                ".encode] expected encodable text, got: ", status.ToString());
  out.insert(out.end(), ids.begin(), ids.end());
}

std::string SentencePieceTokenizer::decode(std::span<const int32_t> ids) const {
  for (int32_t id : ids) check_id(id, "decode");
  return sp_->DecodeIds(std::vector<int>(ids.begin(), ids.end()));
}

std::string SentencePieceTokenizer::token_to_string(int32_t id, int32_t prev) const {
  check_id(id, "token_to_string");
  if (sp_->IsControl(id)) return "";
  const std::string& piece = sp_->IdToPiece(id);
  if (sp_->IsByte(id)) {  // "<0xXX>"
    return std::string(1, static_cast<char>(std::stoi(piece.substr(3, 2), nullptr, 16)));
  }
  std::string out;
  for (size_t i = 0; i < piece.size();) {
    if (piece.compare(i, kMetaSpace.size(), kMetaSpace) == 0) {
      out += ' ';
      i += kMetaSpace.size();
    } else {
      out += piece[i++];
    }
  }
  if (prev >= 0 && prev == sp_->bos_id() && out.starts_with(' ')) out.erase(0, 1);
  return out;
}

}  // namespace tessera::tokenizers
