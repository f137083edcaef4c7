#pragma once
// A Jinja2 renderer for Hugging Face chat templates (tokenizer_config.json's "chat_template"):
// the subset those templates use, with HF's environment settings (trim_blocks and lstrip_blocks
// on); checked against @huggingface/jinja on the templates of Llama 3.1 / 3.2, Qwen2.5 / Qwen3,
// Mistral NeMo, DeepSeek V3 and Gemma 3 (tests/e2e/test_chat_template_vs_js.cpp).
//   statements  {% for x in xs %} / {% for k, v in d.items() if cond %}...{% else %}...
//               {% endfor %} (loop.index0, index, first, last, length, revindex0, revindex),
//               {% if %}/{% elif %}/{% else %}/{% endif %}, {% set name = expr %},
//               {% set ns.name = expr %}, {# comments #}, and "-" whitespace control on any tag
//   expressions string / number / true / false / none literals, lists, dicts, names, x.attr,
//               x['key'], x[i], x[a:b:step], + - * / // % ~, == != < > <= >= in, not in,
//               and / or / not, a if c else b, namespace(k=v, ...), range(...),
//               strftime_now(format), raise_exception(msg) (a ValueError)
//   tests       is [not] defined / undefined / none / string / number / integer / float /
//               boolean / true / false / mapping / sequence / iterable / equalto(x) / odd / even
//   filters     trim length count upper lower capitalize title string safe tojson(indent)
//               list items first last reverse join(sep) default(value, boolean) replace int
//               abs select / reject(test, arg) selectattr / rejectattr(attr, test, arg)
//               map(attribute=... | filter)
//   methods     strings: strip lstrip rstrip (chars) split replace title capitalize upper lower
//               startswith endswith join; dicts: get items keys values
// Values are JSON (nlohmann::json, so dicts iterate and dump in key order, where Python keeps
// insertion order); undefined names are undefined (falsy, render as ""). tojson writes as
// Python's json.dumps (", " and ": ", or indent).
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
