// llama2.c model files (legacy and "ak42" version 1 headers, tied and untied classifiers). A file
// that loads must give a model that runs: one forward of token 0 yields [1, 1, vocab_size].
#include "fuzz_util.h"
#include "tessera/core/error.h"
#include "tessera/io/importers.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  const std::string_view input = fuzz::bytes(data, size);
  try {
    fuzz::check_model_runs(*io::load_llama2c(fuzz::write_scratch("model.bin", input)), input);
  } catch (const Error& e) {
    fuzz::rejected(e);
  }
  return 0;
}
