// llama2.c tokenizer.bin files and text: input = the file and a text, separated by
// fuzz::kPartSeparator.
#include "fuzz_tokenizer_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tessera::fuzz::check_tokenizer_file<tessera::tokenizers::Llama2cTokenizer>(
      tessera::fuzz::bytes(data, size), "tokenizer.bin");
  return 0;
}
