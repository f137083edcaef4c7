// The tool-call formats of tool_call_parser.h. Each split reads the whole text so far: outputs
// are short next to a model step, and a stateless split cannot drift from the final one.
#include "tessera/serve/tool_call_parser.h"

#include <cctype>
#include <nlohmann/json.hpp>

#include "serve/output_markers.h"
#include "serve/python_call_list.h"
#include "tessera/core/error.h"

namespace tessera::serve {

namespace {

using OrderedJson = nlohmann::ordered_json;
using detail::marker_start_held;
using detail::skip_space;
constexpr size_t npos = std::string_view::npos;

bool blank(std::string_view s) { return skip_space(s, 0) == s.size(); }

// Where the JSON object or array starting at s[begin] closes (one past it); npos while open.
// Brackets are counted, not matched: the JSON parser judges the text once it has closed.
size_t json_end(std::string_view s, size_t begin) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = begin; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if ((c == '}' || c == ']') && --depth == 0) {
      return i + 1;
    }
  }
  return npos;
}

// {"name": ..., "arguments" (or "parameters"): {...}} as a call; arguments written as a string
// holding a JSON object are that object, absent ones {}.
std::optional<ParsedToolCall> call_from_json(const OrderedJson& v) {
  if (!v.is_object() || !v.contains("name") || !v["name"].is_string() ||
      v["name"].get<std::string>().empty())
    return std::nullopt;
  OrderedJson args = OrderedJson::object();
  for (const char* key : {"arguments", "parameters"})
    if (v.contains(key)) {
      args = v[key];
      break;
    }
  if (args.is_string())
    args = OrderedJson::parse(args.get<std::string>(), nullptr, /*allow_exceptions=*/false);
  if (args.is_null()) args = OrderedJson::object();
  if (!args.is_object()) return std::nullopt;
  return ParsedToolCall{v["name"].get<std::string>(), args.dump()};
}

std::optional<ParsedToolCall> call_from_text(std::string_view text) {
  return call_from_json(OrderedJson::parse(text, nullptr, /*allow_exceptions=*/false));
}

// Builds a split: content before the first call, then what finishes it. Pieces that are not
// calls (malformed blocks, text between or after calls) join the content once the text is
// finished; with no call at all, the whole text is the content.
class SplitBuilder {
 public:
  SplitBuilder(std::string_view text, bool finished) : text_(text), finished_(finished) {}

  // No call can start before `end`: content to there, or to the finished text's end.
  ToolCallSplit content_only(size_t end) {
    out_.content = text_.substr(0, finished_ ? text_.size() : end);
    return std::move(out_);
  }
  // No marker yet: content to where one may be starting.
  ToolCallSplit before_marker(std::string_view marker) {
    return content_only(text_.size() - marker_start_held(text_, marker));
  }
  void set_head(size_t end) { out_.content = text_.substr(0, end); }
  void call(ParsedToolCall c) { out_.calls.push_back(std::move(c)); }
  // text[begin, end) is not a call: content once finished, unless blank.
  void leftover(size_t begin, size_t end) {
    const std::string_view piece = text_.substr(begin, end - begin);
    if (!blank(piece)) leftover_ += piece;
  }
  void leftover_from(size_t begin) {
    if (finished_) leftover(begin, text_.size());
  }
  ToolCallSplit done() {
    if (!finished_) return std::move(out_);
    if (out_.calls.empty()) return content_only(text_.size());
    out_.content += leftover_;
    return std::move(out_);
  }

 private:
  std::string_view text_;
  bool finished_;
  ToolCallSplit out_;
  std::string leftover_;
};

// <tool_call>{...}</tool_call> blocks; the last may lack its close when the text has ended.
ToolCallSplit split_hermes(std::string_view text, bool finished) {
  constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>";
  SplitBuilder b(text, finished);
  const size_t first = text.find(kOpen);
  if (first == npos) return b.before_marker(kOpen);
  b.set_head(first);
  for (size_t pos = first; pos < text.size();) {
    const size_t open = text.find(kOpen, pos);
    if (open == npos) {
      b.leftover_from(pos);
      break;
    }
    b.leftover(pos, open);
    const size_t body = open + kOpen.size();
    const size_t close = text.find(kClose, body);
    if (close == npos) {
      if (!finished) break;
      if (auto c = call_from_text(text.substr(body)))
        b.call(std::move(*c));
      else
        b.leftover(open, text.size());
      break;
    }
    if (auto c = call_from_text(text.substr(body, close - body)))
      b.call(std::move(*c));
    else
      b.leftover(open, close + kClose.size());
    pos = close + kClose.size();
  }
  return b.done();
}

// Calls only when the output starts with <|python_tag|> or '{': then JSON objects separated by
// ';' or spaces.
ToolCallSplit split_llama3_json(std::string_view text, bool finished) {
  constexpr std::string_view kTag = "<|python_tag|>";
  SplitBuilder b(text, finished);
  size_t pos = skip_space(text, 0);
  const std::string_view rest = text.substr(pos);
  if (rest.empty() || (!rest.starts_with('{') && !rest.starts_with(kTag))) {
    // Still undecided while only spaces or a part of the tag have come.
    const bool undecided = rest.empty() || kTag.starts_with(rest);
    return b.content_only(undecided ? 0 : text.size());
  }
  b.set_head(0);
  while (true) {
    const size_t gap = pos;  // separators, or the start of what follows the calls
    pos = skip_space(text, pos);
    if (text.substr(pos).starts_with(kTag)) {
      pos += kTag.size();
      continue;
    }
    if (pos < text.size() && text[pos] == ';') {
      ++pos;
      continue;
    }
    if (pos == text.size()) break;
    const size_t end = text[pos] == '{' ? json_end(text, pos) : npos;
    if (end == npos) {
      b.leftover_from(gap);
      break;
    }
    if (auto c = call_from_text(text.substr(pos, end - pos)))
      b.call(std::move(*c));
    else
      b.leftover(pos, end);
    pos = end;
  }
  return b.done();
}

// After each [TOOL_CALLS]: a JSON array of calls, or name[ARGS]{...} (name{...} too).
ToolCallSplit split_mistral(std::string_view text, bool finished) {
  constexpr std::string_view kMarker = "[TOOL_CALLS]", kArgs = "[ARGS]";
  SplitBuilder b(text, finished);
  size_t marker = text.find(kMarker);
  if (marker == npos) return b.before_marker(kMarker);
  b.set_head(marker);
  while (marker != npos) {
    size_t pos = skip_space(text, marker + kMarker.size());
    size_t json = npos;
    std::string name;
    if (pos < text.size() && text[pos] == '[') {
      json = pos;
    } else {
      const size_t name_begin = pos;
      while (pos < text.size() && (std::isalnum(static_cast<unsigned char>(text[pos])) ||
                                   text[pos] == '_' || text[pos] == '-' || text[pos] == '.'))
        ++pos;
      name = text.substr(name_begin, pos - name_begin);
      if (text.substr(pos).starts_with(kArgs)) pos = skip_space(text, pos + kArgs.size());
      if (!name.empty() && pos < text.size() && text[pos] == '{') json = pos;
    }
    const size_t end = json == npos ? npos : json_end(text, json);
    if (end == npos) {
      // Not a call (up to the next marker), or one still being written.
      const size_t next = text.find(kMarker, marker + kMarker.size());
      if (!finished && (json != npos || next == npos)) break;
      b.leftover(marker, json != npos || next == npos ? text.size() : next);
      if (json != npos) break;
      marker = next;
      continue;
    }
    const OrderedJson v = OrderedJson::parse(text.substr(json, end - json), nullptr, false);
    std::vector<ParsedToolCall> calls;
    if (name.empty() && v.is_array() && !v.empty()) {
      for (const OrderedJson& item : v)
        if (auto c = call_from_json(item)) calls.push_back(std::move(*c));
      if (calls.size() != v.size()) calls.clear();
    } else if (!name.empty() && v.is_object()) {
      calls.push_back({name, v.dump()});
    }
    if (calls.empty()) b.leftover(marker, end);
    for (ParsedToolCall& c : calls) b.call(std::move(c));
    marker = text.find(kMarker, end);
    b.leftover(end, marker == npos ? text.size() : marker);
  }
  return b.done();
}

// A Python list of calls, only when the output is one (optionally between <|python_start|> and
// <|python_end|>).
ToolCallSplit split_pythonic(std::string_view text, bool finished) {
  constexpr std::string_view kStart = "<|python_start|>", kEnd = "<|python_end|>";
  SplitBuilder b(text, finished);
  size_t pos = skip_space(text, 0);
  if (text.substr(pos).starts_with(kStart)) pos = skip_space(text, pos + kStart.size());
  const std::string_view rest = text.substr(pos);
  if (rest.empty() || rest[0] != '[') {
    const bool undecided = rest.empty() || kStart.starts_with(rest);
    return b.content_only(undecided ? 0 : text.size());
  }
  const size_t end = detail::python_list_end(text, pos);
  if (end == npos) return b.content_only(0);
  auto calls = detail::parse_python_call_list(text.substr(pos, end - pos));
  if (!calls || calls->empty()) return b.content_only(text.size());
  b.set_head(0);
  for (ParsedToolCall& c : *calls) b.call(std::move(c));
  size_t after = skip_space(text, end);
  if (text.substr(after).starts_with(kEnd)) after += kEnd.size();
  b.leftover_from(after);
  return b.done();
}

struct FormatName {
  ToolCallFormat format;
  std::string_view name;
};
constexpr FormatName kFormats[] = {{ToolCallFormat::Hermes, "hermes"},
                                   {ToolCallFormat::Llama3Json, "llama3_json"},
                                   {ToolCallFormat::Mistral, "mistral"},
                                   {ToolCallFormat::Pythonic, "pythonic"}};

}  // namespace

ToolCallFormat tool_call_format(std::string_view name) {
  std::string known;
  for (const FormatName& f : kFormats) {
    if (f.name == name) return f.format;
    known += (known.empty() ? "" : ", ") + std::string(f.name);
  }
  throw ValueError(
      tessera::detail::str("unknown tool-call parser '", name, "' (known: ", known, ")"));
}

std::string_view tool_call_format_name(ToolCallFormat format) {
  for (const FormatName& f : kFormats)
    if (f.format == format) return f.name;
  return "?";
}

ToolCallSplit split_tool_calls(ToolCallFormat format, std::string_view text, bool finished) {
  switch (format) {
    case ToolCallFormat::Hermes:
      return split_hermes(text, finished);
    case ToolCallFormat::Llama3Json:
      return split_llama3_json(text, finished);
    case ToolCallFormat::Mistral:
      return split_mistral(text, finished);
    case ToolCallFormat::Pythonic:
      return split_pythonic(text, finished);
  }
  return {std::string(text), {}};
}

}  // namespace tessera::serve
