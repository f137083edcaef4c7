// llama2.c tokenizer.bin files and text: input = the file and a text, separated by
// fuzz::kPartSeparator.
#include "fuzz_tokenizer_check.h"
#include "tessera/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  const std::string_view input = fuzz::bytes(data, size);
  const auto parts = fuzz::split_parts(input, 2);
  try {
    const tokenizers::Llama2cTokenizer tok(fuzz::write_scratch("tokenizer.bin", parts[0]));
    fuzz::check_encode_decode(tok, parts[1], input);
    for (int32_t id = 0; id < tok.vocab_size(); ++id) tok.token_to_string(id, 1);
  } catch (const Error& e) {
    fuzz::rejected(e);
  }
  return 0;
}
