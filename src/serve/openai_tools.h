#pragma once
// Chat tool calling's request side (openai_tools.cpp); the response side is in openai.h.
#include <string>

#include "serve/openai_json.h"
#include "tessera/serve/openai.h"

namespace tessera::serve {

// tools, tool_choice and parallel_tool_calls of a chat request into r.params.json_grammar,
// r.tool_choice, r.tool_name and r.tool_format; a 400 naming the field for bad values, and for
// "auto" when limits has no tool-call parser.
void parse_tools(const detail::Fields& f, const ModelLimits& limits, CompletionRequest& r);
// An assistant message's earlier tool_calls as the JSON text a model writes them in
// ([{"name", "parameters"}]), for the plain chat template.
std::string assistant_tool_calls_text(const detail::Json& tool_calls);

}  // namespace tessera::serve
