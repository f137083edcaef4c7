// GPT-2 BPE files and text: input = encoder.json, vocab.bpe and a text, separated by
// fuzz::kPartSeparator. Any vocabulary that loads maps each id to its bytes and each merge to
// its concatenation, so decode(encode(text)) == text must hold for every byte string.
#include "fuzz_tokenizer_check.h"
#include "tessera/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  const std::string_view input = fuzz::bytes(data, size);
  const auto parts = fuzz::split_parts(input, 3);
  try {
    const tokenizers::GPT2Tokenizer tok(fuzz::write_scratch("encoder.json", parts[0]),
                                        fuzz::write_scratch("vocab.bpe", parts[1]));
    const std::vector<int32_t> ids = fuzz::check_encode_decode(tok, parts[2], input);
    if (tok.decode(ids) != parts[2]) fuzz::fail("GPT-2 decode(encode(text)) != text", input);
  } catch (const Error& e) {
    fuzz::rejected(e);
  }
  return 0;
}
