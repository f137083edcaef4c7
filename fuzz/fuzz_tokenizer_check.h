#pragma once
// What every tokenizer owes its callers whatever its vocabulary file said: encode gives ids in
// [0, vocab_size), each of them prints, and decode accepts them.
#include "fuzz_util.h"
#include "tessera/tokenizers/tokenizer.h"

namespace tessera::fuzz {

inline std::vector<int32_t> check_encode_decode(const tokenizers::Tokenizer& tok,
                                                std::string_view text, std::string_view input) {
  const std::vector<int32_t> ids = tok.encode(text);
  int32_t prev = -1;
  for (int32_t id : ids) {
    if (id < 0 || id >= tok.vocab_size()) fail("encode gave an id outside the vocabulary", input);
    tok.token_to_string(id, prev);
    prev = id;
  }
  tok.decode(ids);
  return ids;
}

}  // namespace tessera::fuzz
