// The Jinja2 subset renderer for Hugging Face chat templates (tokenizers/jinja_template.h): the
// real chat_template strings of Llama-2-chat, Qwen2 (ChatML) and Zephyr as their
// tokenizer_config.json files hold them, rendered to what transformers' apply_chat_template
// gives, plus the expression and statement features one by one and the errors.
#include <gtest/gtest.h>

#include "tessera/core/error.h"
#include "tessera/tokenizers/jinja_template.h"

namespace tessera::tokenizers {
namespace {

using Json = nlohmann::json;

// meta-llama/Llama-2-7b-chat-hf
const char* kLlama2 =
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set "
    "system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set "
    "system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] "
    "== 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
    "user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != "
    "false %}{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + "
    "message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if "
    "message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% "
    "elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif "
    "%}{% endfor %}";

// Qwen/Qwen2-7B-Instruct (ChatML with a default system message)
const char* kQwen2 =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
    "'<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}{{'<|im_start|>' "
    "+ message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if "
    "add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

// HuggingFaceH4/zephyr-7b-beta
const char* kZephyr =
    "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + "
    "message['content'] + eos_token }}\n{% elif message['role'] == 'system' %}\n{{ "
    "'<|system|>\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'assistant' "
    "%}\n{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n{% endif %}\n{% if loop.last "
    "and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}";

Json chat(std::initializer_list<std::pair<const char*, const char*>> turns) {
  Json m = Json::array();
  for (const auto& [role, content] : turns) m.push_back({{"role", role}, {"content", content}});
  return m;
}

Json vars(const Json& messages, bool generation_prompt = true) {
  return {{"messages", messages},
          {"bos_token", "<s>"},
          {"eos_token", "</s>"},
          {"add_generation_prompt", generation_prompt}};
}

TEST(JinjaTemplate, Llama2Chat) {
  const JinjaTemplate t(kLlama2);
  EXPECT_EQ(
      t.render(vars(chat(
          {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", "Bye"}}))),
      "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello. </s><s>[INST] Bye [/INST]");
  EXPECT_EQ(t.render(vars(chat({{"user", " Hi "}}))), "<s>[INST] Hi [/INST]");
  // Roles out of order reach raise_exception.
  EXPECT_THROW(t.render(vars(chat({{"assistant", "x"}}))), ValueError);
}

TEST(JinjaTemplate, Qwen2ChatML) {
  const JinjaTemplate t(kQwen2);
  EXPECT_EQ(t.render(vars(chat({{"user", "hi"}}))),
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(t.render(vars(chat({{"system", "S"}, {"user", "u"}}), false)),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nu<|im_end|>\n");
}

TEST(JinjaTemplate, Zephyr) {
  const JinjaTemplate t(kZephyr);
  EXPECT_EQ(t.render(vars(chat({{"system", "S"}, {"user", "U"}}))),
            "<|system|>\nS</s>\n<|user|>\nU</s>\n<|assistant|>\n");
  EXPECT_EQ(t.render(vars(chat({{"user", "U"}}), false)), "<|user|>\nU</s>\n");
}

std::string render(const std::string& src, const Json& v = Json::object()) {
  return JinjaTemplate(src).render(v);
}

TEST(JinjaTemplate, ExpressionsAndStatements) {
  EXPECT_EQ(render("{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ -7 % 3 }} {{ 'a' ~ 1 }}"), "7 3 2 a1");
  EXPECT_EQ(render("{{ x if x is defined else 'none' }}"), "none");
  EXPECT_EQ(render("{{ 'b' in 'abc' }} {{ 3 not in [1, 2] }} {{ not true or false }}"),
            "True True False");
  EXPECT_EQ(render("{{ xs[1:] | length }} {{ xs[-1] }} {{ d.k }} {{ d.get('z', 'dflt') }}",
                   {{"xs", {1, 2, 3}}, {"d", {{"k", "v"}}}}),
            "2 3 v dflt");
  EXPECT_EQ(render("{{ '  x ' | trim | upper }}{{ 'Ab'.lower() }}{{ 'abc'.startswith('ab') }}"),
            "XabTrue");
  EXPECT_EQ(render("{% for x in xs %}{{ loop.index }}{% if not loop.last %},{% endif %}"
                   "{% else %}empty{% endfor %}",
                   {{"xs", {5, 6, 7}}}),
            "1,2,3");
  EXPECT_EQ(render("{% for x in [] %}a{% else %}empty{% endfor %}"), "empty");
  // A loop filter (it rendered every item: `xs if cond` was read as a conditional expression);
  // loop.* counts the kept items, and an `if` inside a string is no filter.
  const Json messages = Json::array({{{"role", "system"}, {"c", "S"}},
                                     {{"role", "user"}, {"c", "U"}},
                                     {{"role", "assistant"}, {"c", "A"}}});
  EXPECT_EQ(render("{% for m in ms if m.role != 'system' %}{{ m.c }}{{ loop.index }}/"
                   "{{ loop.length }}{% if not loop.last %},{% endif %}{% endfor %}|"
                   "{% for x in [1, 2] if x > 5 %}a{% else %}none{% endfor %}{{ x is defined }}|"
                   "{% for s in ['a if b'] if s %}{{ s }}{% endfor %}",
                   {{"ms", messages}}),
            "U1/2,A2/2|noneFalse|a if b");
  EXPECT_EQ(
      render("{% set n = 2 %}{% if n == 1 %}one{% elif n == 2 %}two{% else %}many{% endif %}"),
      "two");
  // Whitespace control, trim_blocks and lstrip_blocks, comments.
  EXPECT_EQ(render("a  {{- 'b' -}}  c"), "abc");
  EXPECT_EQ(render("{# note #}x\n  {% if true %}\ny\n  {% endif %}\nz"), "x\ny\nz");
  EXPECT_EQ(render("{{ undefined_name }}|{{ none }}"), "|None");
  // lstrip_blocks strips only back to a line start, not back to the tag before.
  EXPECT_EQ(render("{{ 'a' }}  {% if true %}b{% endif %}"), "a  b");
  // Undefined equals only undefined (u != 'x' was False).
  EXPECT_EQ(render("{{ u != 'x' }} {{ u == 'x' }} {{ u == v }} {{ u == none }}"),
            "True False True False");
  // Python's integer floor division and modulo, to the ends of int64.
  EXPECT_EQ(render("{{ -7 // 2 }} {{ 7 // -2 }} {{ 7 % -3 }} {{ -7 % 3 }} {{ 7 / 2 }}"),
            "-4 -4 -2 2 3.5");
  EXPECT_EQ(render("{{ -9223372036854775807 - 1 }} {{ (-9223372036854775807 - 1) % -1 }}"),
            "-9223372036854775808 0");
}

// What the templates of Mistral NeMo, DeepSeek V3, Qwen3 and Llama 3.x use (checked whole against
// @huggingface/jinja in test_chat_template_vs_js.cpp; here one by one, without node).
TEST(JinjaTemplate, NamespacesFiltersAndUnpacking) {
  EXPECT_EQ(render("{% set ns = namespace(n=0, s='') %}{% for x in [1, 2, 3] %}"
                   "{% set ns.n = ns.n + x %}{% endfor %}{{ ns.n }}"),
            "6");
  const Json ms = Json::array({{{"role", "user"}, {"c", "a"}},
                               {{"role", "tool"}, {"c", "b"}},
                               {{"role", "user"}, {"c", "d"}, {"tool_calls", {1}}}});
  EXPECT_EQ(render("{{ ms | selectattr('role', 'equalto', 'user') | map(attribute='c') | join(',') "
                   "}}|{{ ms | rejectattr('role', 'equalto', 'user') | list | length }}|"
                   "{{ ms | selectattr('tool_calls', 'undefined') | length }}|{{ ms | first | "
                   "tojson }}",
                   {{"ms", ms}}),
            "a,d|1|2|{\"c\": \"a\", \"role\": \"user\"}");
  EXPECT_EQ(render("{% for k, v in d.items() if k != 'b' %}{{ k }}={{ v }};{% endfor %}",
                   {{"d", {{"a", 1}, {"b", 2}, {"c", 3}}}}),
            "a=1;c=3;");
  EXPECT_EQ(render("{{ xs[::-1] }}{{ 'abc'[::-1] }}{{ xs[::2] | tojson }}", {{"xs", {1, 2, 3}}}),
            "[3,2,1]cba[1, 3]");
  EXPECT_EQ(render("{{ {'a': [1, {'b': 2}]} | tojson(indent=2) }}"),
            "{\n  \"a\": [\n    1,\n    {\n      \"b\": 2\n    }\n  ]\n}");
  EXPECT_EQ(
      render("{{ '<think>x</think>y'.split('</think>')[-1].lstrip('\\n') }}|"
             "{{ 'a-b'.replace('-', '+') }}|{{ x | default('d') }}|{{ 0 | default(1, true) }}|"
             "{{ 'hi there' | title }}|{{ range(3) | list | join }}|{{ 3 is odd }}"),
      "y|a+b|d|1|Hi There|012|True");
  // "}}" inside a string literal does not close the tag.
  EXPECT_EQ(render("{{- \"}}\" }}{% if '%}' %}ok{% endif %}"), "}}ok");
  EXPECT_EQ(render("{{ strftime_now is defined }}{{ strftime_now('%Y') | length }}"), "True4");
  // Found by fuzz_chat_template: "{%-%}" popped the trailing "-" off an empty tag (a crash).
  EXPECT_THROW(render("a{%-%}b"), ValueError);
  EXPECT_THROW(render("{{ [1] | int | join }}"), ValueError)
      << "join of a number (was a type_error)";
}

TEST(JinjaTemplate, OperandsAJinjaTemplateWouldNotEvaluateRaiseNothing) {
  // and / or stop at the operand that decides; a ternary evaluates only the branch it takes.
  EXPECT_EQ(render("{{ x is defined and x.startswith('a') }}"), "False");
  EXPECT_EQ(render("{{ true or raise_exception('no') }}"), "True");
  EXPECT_EQ(render("{{ raise_exception('no') if false else 'ok' }}"), "ok");
  EXPECT_EQ(render("{{ 'yes' if true else 'a' + 1 }}"), "yes");
  EXPECT_EQ(render("[{{ 'a' + 1 if false }}]"), "[]");
  EXPECT_EQ(render("{{ (false and 1 // 0) or 'fine' }}"), "fine");
  // Taken, they raise; a syntax error raises wherever it is.
  EXPECT_THROW(render("{{ raise_exception('bad') if true }}"), ValueError);
  EXPECT_THROW(render("{{ false or 'a' + 1 }}"), ValueError);
  EXPECT_THROW(render("{{ 0 if false else (raise_exception('x') if true) }}"), ValueError);
  EXPECT_THROW(render("{{ true or (1 + }}"), ValueError);
}

TEST(JinjaTemplate, ErrorsAreValueErrors) {
  EXPECT_THROW(JinjaTemplate("{% if x %}no end"), ValueError);
  EXPECT_THROW(JinjaTemplate("{% while x %}{% endwhile %}"), ValueError);
  EXPECT_THROW(JinjaTemplate("{{ 'unclosed }}"), ValueError);
  EXPECT_THROW(render("{{ 'a' + 1 }}"), ValueError);
  EXPECT_THROW(render("{{ raise_exception('bad') }}"), ValueError);
  EXPECT_THROW(render("{{ x | nofilter }}"), ValueError);
  // Integer overflow and out-of-range literals (they were undefined behaviour, SIGFPE, or
  // std::out_of_range escaping).
  EXPECT_THROW(render("{{ 9223372036854775807 + 1 }}"), ValueError);
  EXPECT_THROW(render("{{ (-9223372036854775807 - 1) // -1 }}"), ValueError);
  EXPECT_THROW(render("{{ 4294967296 * 4294967296 }}"), ValueError);
  EXPECT_THROW(render("{{ 99999999999999999999 }}"), ValueError);
}

}  // namespace
}  // namespace tessera::tokenizers
