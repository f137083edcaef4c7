#pragma once
// The grammar a request's output must follow (openai_structured.cpp).
#include <memory>

#include "serve/openai_json.h"
#include "tessera/infer/structured_output.h"

namespace tessera::serve {

// From OpenAI's response_format ({"type": "text" | "json_object" | "json_schema"}) or vLLM's
// structured_outputs ({"json": schema} | {"regex": pattern} | {"grammar": gbnf} |
// {"choice": [...]} | {"json_object": true}) and its older guided_json / guided_regex /
// guided_grammar / guided_choice; null for free text. At most one of them; a 400 naming the
// field for anything the grammar cannot honour.
std::shared_ptr<const infer::JsonGrammar> output_grammar(const detail::Fields& f);

}  // namespace tessera::serve
