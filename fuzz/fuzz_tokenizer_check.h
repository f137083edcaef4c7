#pragma once
// What every tokenizer owes its callers whatever its vocabulary file said: encode gives ids in
// [0, vocab_size), each of them prints, and decode accepts them; bad files are typed errors.
#include "fuzz_util.h"
#include "tessera/core/error.h"
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

// Input = a tokenizer file and a text separated by kPartSeparator: load Tok from the file (saved
// as file_name), then check_encode_decode the text and print every token.
template <class Tok>
void check_tokenizer_file(std::string_view input, const char* file_name) {
  const auto parts = split_parts(input, 2);
  try {
    const Tok tok(write_scratch(file_name, parts[0]));
    check_encode_decode(tok, parts[1], input);
    for (int32_t id = 0; id < tok.vocab_size(); ++id) tok.token_to_string(id, 1);
  } catch (const Error& e) {
    rejected(e);
  }
}

}  // namespace tessera::fuzz
