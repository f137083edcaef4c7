#pragma once
// The pythonic tool-call format's parser (tool_call_parser.cpp): a Python list of calls with
// keyword arguments whose values are literals, [get_weather(city="Paris", days=[1, 2]), now()].
#include <cstddef>
#include <optional>
#include <string_view>
#include <vector>

#include "tessera/serve/tool_call_parser.h"

namespace tessera::serve::detail {

// Where the list starting at text[begin] ('[') closes (one past its ']'), skipping brackets in
// string literals; npos while it is still open.
size_t python_list_end(std::string_view text, size_t begin);

// The calls of a closed list (text[begin, end) from python_list_end), each one's arguments as a
// JSON object (strings, numbers, True/False/None, lists, tuples and dicts with string keys);
// nullopt when it is not such a list (positional arguments, expressions, other keys).
std::optional<std::vector<ParsedToolCall>> parse_python_call_list(std::string_view list);

}  // namespace tessera::serve::detail
