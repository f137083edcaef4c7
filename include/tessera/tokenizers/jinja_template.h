#pragma once
// A small Jinja2 renderer for Hugging Face chat templates (tokenizer_config.json's
// "chat_template"): the subset those templates use, with HF's environment settings
// (trim_blocks and lstrip_blocks on).
//   statements  {% for x in xs %}...{% else %}...{% endfor %} (loop.index0, index, first, last,
//               length), {% if %}/{% elif %}/{% else %}/{% endif %}, {% set name = expr %},
//               {# comments #}, and "-" whitespace control on any tag
//   expressions string / number / true / false / none literals, lists, names, x.attr, x['key'],
//               x[i], x[a:b], + - * / // % ~, == != < > <= >= in, not in, and / or / not,
//               a if c else b, is [not] defined / none / string, filters | trim | length |
//               upper | lower | tojson | string, string methods strip lstrip rstrip upper lower
//               startswith endswith, dict .get, and raise_exception(msg) (a ValueError)
// Values are JSON (nlohmann::json); undefined names are undefined (falsy, render as "").
//
//   tokenizers::JinjaTemplate t(config["chat_template"]);
//   std::string prompt = t.render({{"messages", messages}, {"bos_token", "<s>"},
//                                  {"add_generation_prompt", true}});
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace tessera::tokenizers {

class JinjaTemplate {
 public:
  // Parses source; ValueError "[jinja] expected ..." naming the construct it cannot parse.
  explicit JinjaTemplate(const std::string& source);
  ~JinjaTemplate();
  JinjaTemplate(JinjaTemplate&&) noexcept;
  JinjaTemplate& operator=(JinjaTemplate&&) noexcept;

  // The text for variables (a JSON object). ValueError for raise_exception and for
  // expressions that fail (e.g. adding a string to a number).
  std::string render(const nlohmann::json& variables) const;

  struct Node;

 private:
  std::unique_ptr<Node> root_;
};

}  // namespace tessera::tokenizers
