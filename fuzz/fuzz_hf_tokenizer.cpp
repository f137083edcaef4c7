// Hugging Face tokenizer.json files and text: input = a tokenizer.json and a text separated by
// fuzz::kPartSeparator. Whatever the file says, loading is a typed error or a tokenizer whose
// encode gives ids in its vocabulary, each printable and decodable.
#include "fuzz_tokenizer_check.h"
#include "tessera/tokenizers/hf_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tessera::fuzz::check_tokenizer_file<tessera::tokenizers::HuggingFaceTokenizer>(
      tessera::fuzz::bytes(data, size), "tokenizer.json");
  return 0;
}
