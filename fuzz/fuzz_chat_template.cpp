// Chat templates: input = a Jinja template and its variables as JSON, separated by
// fuzz::kPartSeparator (variables that are no JSON object render with none). Parsing and
// rendering either give text or a typed error; nothing else escapes (nlohmann's exceptions,
// undefined behaviour in the evaluator's arithmetic, slicing or string methods).
#include "fuzz_util.h"
#include "tessera/core/error.h"
#include "tessera/tokenizers/jinja_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  const auto parts = fuzz::split_parts(fuzz::bytes(data, size), 2);
  try {
    const tokenizers::JinjaTemplate t{std::string(parts[0])};
    nlohmann::json variables = nlohmann::json::parse(parts[1], nullptr, false);
    if (!variables.is_object()) variables = nlohmann::json::object();
    t.render(variables);
  } catch (const Error& e) {
    fuzz::rejected(e);
  }
  return 0;
}
