// SentencePiece .model files (serialized protobuf, parsed by libsentencepiece) and text through
// our wrapper: input = the model and a text, separated by fuzz::kPartSeparator.
#include "fuzz_tokenizer_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tessera::fuzz::check_tokenizer_file<tessera::tokenizers::SentencePieceTokenizer>(
      tessera::fuzz::bytes(data, size), "tokenizer.model");
  return 0;
}
