// llm.c GPT-2 checkpoints (header, sizes, parameter blob). A file that loads must give a model
// that runs: one forward of token 0 yields [1, 1, vocab_size] logits.
#include "fuzz_util.h"
#include "tessera/core/error.h"
#include "tessera/io/importers.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  const std::string_view input = fuzz::bytes(data, size);
  try {
    fuzz::check_model_runs(*io::load_llmc_gpt2(fuzz::write_scratch("gpt2.bin", input)), input);
  } catch (const Error& e) {
    fuzz::rejected(e);
  }
  return 0;
}
