// Writes the seed corpora under <dir>/<target>/ (run from the repository root:
// build/fuzz/fuzz/make_corpus fuzz/corpus). Seeds are tiny valid inputs made by the library's
// own writers (safetensors, checkpoints, llm.c) or by hand (llama2.c files, tokenizer files,
// requests), so the fuzzer starts past the magic numbers and checksums. Files other than seed-*
// (crash regressions) are left alone.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>

#include "fuzz_util.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/io/checkpoint.h"
#include "tessera/io/importers.h"
#include "tessera/io/lora_adapter.h"
#include "tessera/io/safetensors.h"
#include "tessera/models/gpt2.h"
#include "tessera/ops/creation.h"

namespace {

using namespace tessera;
namespace fs = std::filesystem;
using fuzz::kPartSeparator;

fs::path root;

void seed(const std::string& target, const std::string& name, std::string_view bytes) {
  const fs::path dir = root / target;
  fs::create_directories(dir);
  std::ofstream(dir / ("seed-" + name), std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::string join(std::initializer_list<std::string_view> parts) {
  std::string out;
  for (const std::string_view* p = parts.begin(); p != parts.end(); ++p) {
    if (p != parts.begin()) out += kPartSeparator;
    out += *p;
  }
  return out;
}

template <class T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(v));
}

nn::TensorDict some_tensors() {
  nn::TensorDict t;
  t.insert("w", arange(12, kFloat32).reshape({3, 4}));
  t.insert("ids", arange(5, kInt64));
  t.insert("half", arange(4, kFloat32).to(kFloat16));
  t.insert("bf", arange(3, kFloat32).to(kBFloat16));
  t.insert("mask", ones({2}, TensorOptions(kBool)));
  t.insert("bytes", arange(3, kUInt8));
  t.insert("empty", zeros({0, 2}));
  return t;
}

void safetensors_seeds() {
  seed("fuzz_safetensors", "tensors", io::serialize_safetensors(some_tensors(), {}));
  io::Metadata meta;
  meta.insert("format", "pt");
  seed("fuzz_safetensors", "metadata", io::serialize_safetensors(some_tensors(), meta));
  seed("fuzz_safetensors", "empty", io::serialize_safetensors({}, {}));
  // A tied state dict: the alias table in __metadata__.
  nn::TensorDict tied;
  const Tensor w = arange(6, kFloat32).reshape({2, 3});
  tied.insert("wte.weight", w);
  tied.insert("lm_head.weight", w);
  const std::string path = fuzz::write_scratch("tied.safetensors", "");
  io::save_state_dict(path, tied);
  seed("fuzz_safetensors", "aliases", read(path));
}

void checkpoint_seeds() {
  io::Checkpoint ckpt;
  ckpt.step = 1;
  ckpt.model.insert("w", arange(4, kFloat32));
  ckpt.optimizer.tensors.insert("state.0.exp_avg", zeros({4}));
  ckpt.optimizer.scalars.insert("step", 1);
  ckpt.optimizer.scalars.insert("group.0.lr", 0.001);
  ckpt.scheduler.scalars.insert("last_epoch", 1);
  ckpt.config = R"({"model": "gpt2", "lr": 0.001})";
  const fs::path dir = io::save_checkpoint(fuzz::scratch_dir() + "/ckpts", ckpt, 0);
  const std::string model = read(dir / "model.safetensors");
  const std::string optimizer = read(dir / "optimizer.safetensors");
  const std::string state = read(dir / "state.json");
  seed("fuzz_checkpoint", "verified", join({model, optimizer, state}));
  // The same with "auto" checksums, which the harness fills in: mutations reach the parsers.
  nlohmann::json doc = nlohmann::json::parse(state);
  doc["crc32c"] = "auto";
  for (auto& [name, record] : doc["files"].items())
    record = {{"bytes", "auto"}, {"crc32c", "auto"}};
  seed("fuzz_checkpoint", "auto", join({model, optimizer, doc.dump(2)}));
}

void llmc_seeds() {
  models::GPT2Config c;
  c.vocab_size = 7;
  c.block_size = 4;
  c.n_layer = 1;
  c.n_head = 2;
  c.n_embd = 4;
  models::GPT2 model(c);
  const std::string path = fuzz::write_scratch("gpt2.bin", "");
  io::save_llmc_gpt2(path, model, 8);
  const std::string fp32 = read(path);
  seed("fuzz_llmc", "fp32", fp32);
  // Version 5: the same parameters as bf16 (the upper half of each float32).
  std::string bf16 = fp32.substr(0, 1024);
  const int32_t v5 = 5;
  std::memcpy(bf16.data() + 4, &v5, 4);
  for (size_t i = 1024; i + 4 <= fp32.size(); i += 4) bf16.append(fp32, i + 2, 2);
  seed("fuzz_llmc", "bf16", bf16);
}

// A llama2.c model with small weights: the legacy 7-int header (negative vocab: untied wcls) or
// the "ak42" version 1 header (norms first).
std::string llama2c_model(bool v1, bool tied) {
  const int32_t dim = 8, hidden = 12, L = 1, H = 2, KV = 1, V = 6, seq = 4, D = dim / H;
  std::string out;
  if (v1) {
    put<uint32_t>(out, 0x616b3432);
    put<int32_t>(out, 1);
  }
  for (int32_t v : {dim, hidden, L, H, KV, (v1 || tied) ? V : -V, seq}) put(out, v);
  if (v1) {
    out += char(tied ? 1 : 0);
    out.resize(256, '\0');
  }
  const auto floats = [&](int64_t n) {
    for (int64_t i = 0; i < n; ++i) put<float>(out, 0.01f * float(i % 7));
  };
  const int64_t kv = KV * D;
  const int64_t emb = V * dim, att = L * dim, wq = L * dim * dim, wk = L * kv * dim,
                wo = L * dim * dim, ffn = L * dim, w1 = L * hidden * dim, fin = dim;
  if (v1) {
    for (int64_t n : {att, ffn, fin, emb, wq, wk, wk, wo, w1, w1, w1}) floats(n);
  } else {
    for (int64_t n : {emb, att, wq, wk, wk, wo, ffn, w1, w1, w1, fin}) floats(n);
    floats(2 * int64_t(seq) * (D / 2));  // freq_cis_real, freq_cis_imag
  }
  if (!tied) floats(emb);
  return out;
}

void llama2c_seeds() {
  seed("fuzz_llama2c", "legacy_tied", llama2c_model(false, true));
  seed("fuzz_llama2c", "legacy_untied", llama2c_model(false, false));
  seed("fuzz_llama2c", "v1_tied", llama2c_model(true, true));
  seed("fuzz_llama2c", "v1_untied", llama2c_model(true, false));
}

const std::vector<std::string>& texts() {
  static const std::vector<std::string> t = {
      "Hello the world, the thing is in the air",
      "  leading spaces\tand\ttabs\n\nnewlines  ",
      "caf\xC3\xA9 na\xC3\xAFve \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x91\x8B <0x41> <s>",
      "I'm they'll 123 4567.89",
      std::string("bytes \xFF\xFE\x80 nul \0 end", 19),  // 19: past the NUL
  };
  return t;
}

void tokenizer_seeds() {
  const std::string enc = fuzz::synthetic_gpt2_encoder_json(),
                    bpe = fuzz::synthetic_gpt2_vocab_bpe();
  const std::string bin = fuzz::synthetic_llama2c_tokenizer_bin();
  const std::string model = fuzz::synthetic_sentencepiece_model();
  for (size_t i = 0; i < texts().size(); ++i) {
    const std::string n = "text" + std::to_string(i);
    seed("fuzz_gpt2_tokenizer", n, join({enc, bpe, texts()[i]}));
    seed("fuzz_llama2c_tokenizer", n, join({bin, texts()[i]}));
    seed("fuzz_sentencepiece_tokenizer", n, join({model, texts()[i]}));
    seed("fuzz_tokenizer_roundtrip", n, texts()[i]);
  }
}

// tokenizer.json files: GPT-2's synthetic vocabulary as Llama 3 spells it (a Split regex, then
// ByteLevel; an added token), and a SentencePiece-style one with byte fallback (Llama 2's).
void hf_tokenizer_seeds() {
  nlohmann::json vocab = nlohmann::json::parse(fuzz::synthetic_gpt2_encoder_json());
  nlohmann::json merges = nlohmann::json::array();
  std::istringstream bpe(fuzz::synthetic_gpt2_vocab_bpe());
  for (std::string line; std::getline(bpe, line);)
    if (!line.empty() && !line.starts_with("#version")) merges.push_back(line);
  const int next_id = static_cast<int>(vocab.size());
  const nlohmann::json byte_level = {
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}, {"ignore_merges", true}}},
      {"added_tokens", {{{"id", next_id}, {"content", "<|end|>"}, {"special", true}}}},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern",
            {{"Regex",
              R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}}},
           {"behavior", "Isolated"}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
      {"decoder", {{"type", "ByteLevel"}}}};
  nlohmann::json pieces = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}, {"\u2581", 3},
                           {"h", 4},     {"i", 5},   {"hi", 6},   {"\u2581hi", 7}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    pieces[name] = 8 + b;
  }
  const nlohmann::json metaspace = {
      {"model",
       {{"type", "BPE"},
        {"vocab", pieces},
        {"merges", {"h i", "\u2581 hi"}},
        {"byte_fallback", true},
        {"unk_token", "<unk>"}}},
      {"added_tokens", {{{"id", 1}, {"content", "<s>"}, {"special", true}, {"rstrip", true}}}},
      {"pre_tokenizer",
       {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", {{{"SpecialToken", {{"id", "<s>"}}}}, {{"Sequence", {{"id", "A"}}}}}}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
          {{"type", "ByteFallback"}},
          {{"type", "Fuse"}},
          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}}};
  for (size_t i = 0; i < texts().size(); ++i) {
    const std::string n = "text" + std::to_string(i);
    seed("fuzz_hf_tokenizer", "byte_level_" + n, join({byte_level.dump(), texts()[i]}));
    seed("fuzz_hf_tokenizer", "metaspace_" + n, join({metaspace.dump(), texts()[i]}));
  }
}

// Chat templates with the variables serving hands them (messages, tools, special tokens).
void chat_template_seeds() {
  const nlohmann::json variables = nlohmann::json::parse(R"({"bos_token": "<s>",
      "eos_token": "</s>", "add_generation_prompt": true, "tools": [{"type": "function",
      "function": {"name": "add", "parameters": {"type": "object", "properties": {"x":
      {"type": "integer"}}}}}], "messages": [{"role": "system", "content": "Be brief."},
      {"role": "user", "content": "hi"}, {"role": "assistant", "content": null, "tool_calls":
      [{"id": "c1", "type": "function", "function": {"name": "add", "arguments": {"x": 1}}}]},
      {"role": "tool", "content": "2", "tool_call_id": "c1"}]})");
  const std::vector<std::pair<std::string, std::string>> templates = {
      {"chatml",
       "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + "
       "(message['content'] or '') + '<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt "
       "%}{{ '<|im_start|>assistant\n' }}{% endif %}"},
      {"namespace",
       "{%- set ns = namespace(system='', n=0) %}{%- for m in messages if m.role != 'tool' %}"
       "{%- if m.role == 'system' %}{% set ns.system = m.content %}{% endif %}{% set ns.n = "
       "ns.n + 1 %}{% endfor %}{{ bos_token }}{{ ns.system | trim }}|{{ ns.n }}|{{ messages | "
       "selectattr('role', 'equalto', 'user') | map(attribute='content') | join(', ') }}"},
      {"tools",
       "{%- if tools %}{% for t in tools %}{{ t.function | tojson(indent=2) }}{% endfor %}"
       "{% endif %}{%- for m in messages %}{% for k, v in m.items() %}{{ k }}={{ v }};{% endfor "
       "%}{% for c in m.tool_calls or [] %}[{{ c.function.name }}({{ c.function.arguments | "
       "tojson }})]{% endfor %}{% endfor %}{{ messages[::-1][0].content.split('x')[-1] }}"
       "{{ strftime_now('%Y') | length }}{{ raise_exception('no') if false }}"},
  };
  for (const auto& [name, source] : templates)
    seed("fuzz_chat_template", name, join({source, variables.dump()}));
}

void openai_seeds() {
  // Selector byte: '0' completions + GPT-2, '1' chat + GPT-2, '2' completions + llama2.c, '3'
  // chat + llama2.c.
  const std::vector<std::pair<std::string, std::string>> bodies = {
      {"prompt", R"({"model": "m", "prompt": "Hello the world", "max_tokens": 8})"},
      {"ids", R"({"prompt": [1, 2, 3], "temperature": 0.5, "top_p": 0.9, "top_k": 4, "seed": 7})"},
      {"nested", R"({"prompt": [[5, 6]], "stop": ["\n", "the"], "stop_token_ids": [1]})"},
      {"stream",
       R"({"prompt": ["hi"], "stream": true, "stream_options": {"include_usage": true}, "n": 1})"},
      {"penalties",
       R"({"prompt": "x", "min_p": 0.1, "repetition_penalty": 1.2, "presence_penalty": 0.5, "frequency_penalty": -0.5, "ignore_eos": true, "logprobs": false, "echo": false, "user": "u"})"},
  };
  for (const auto& [name, body] : bodies) {
    seed("fuzz_openai_request", name, "0" + body);
    seed("fuzz_openai_request", name + "_llama2c", "2" + body);
  }
  const std::vector<std::pair<std::string, std::string>> chats = {
      {"chat",
       R"({"model": "m", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}], "max_completion_tokens": 4})"},
      {"chat_parts",
       R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}], "stop": "x", "stream": false})"},
  };
  for (const auto& [name, body] : chats) {
    seed("fuzz_openai_request", name, "1" + body);
    seed("fuzz_openai_request", name + "_llama2c", "3" + body);
  }
}

void json_grammar_seeds() {
  // A schema, then text to feed its matcher ({} stands for json_object).
  const std::vector<std::tuple<std::string, std::string, std::string>> seeds = {
      {"object", "{}", R"({"a": [1, -2.5e3, true, null, "x\u00e9"], "b": {}})"},
      {"person",
       R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 4}, "age": {"type": "integer"}, "tags": {"type": "array", "items": {"enum": ["a", 12, 1]}, "maxItems": 2}}, "required": ["name"]})",
       R"({"age": 12, "name": "J\n", "tags": [1, "a"]})"},
      {"refs",
       R"({"$defs": {"n": {"anyOf": [{"type": "null"}, {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}}}]}}, "$ref": "#/$defs/n"})",
       R"({"next": {"next": null}})"},
      {"pattern",
       R"({"type": "object", "properties": {"zip": {"type": "string", "pattern": "^\\d{5}(-\\d{4})?$"}, "id": {"pattern": "[a-f]+\\n"}}})",
       R"({"zip": "12345-6789", "id": "x-fa\n"})"},
      {"numbers",
       R"({"type": "object", "properties": {"p": {"type": "number", "minimum": -0.5, "exclusiveMaximum": 1, "multipleOf": 0.25}, "n": {"allOf": [{"type": "integer", "multipleOf": 3, "maximum": 30}]}}, "minProperties": 1, "maxProperties": 2})",
       R"({"p": 0.75, "n": 27})"},
      {"tuple",
       R"({"type": "array", "prefixItems": [{"type": "string", "format": "date"}, {"type": "string", "format": "email", "pattern": "@x\.io$", "maxLength": 12}], "items": false})",
       R"(["2024-02-29", "a.b@x.io"])"},
  };
  for (const auto& [name, schema, text] : seeds)
    seed("fuzz_json_grammar", name, join({schema, text}));
}

void regex_seeds() {
  // A pattern, then text to run through it.
  const std::vector<std::tuple<std::string, std::string, std::string>> seeds = {
      {"phone", R"(^\(?\d{3}\)?[ -]?\d{3}-\d{4}$)", "(555) 010-0199"},
      {"classes", R"((?:[^\s"\\]|\\.)+@[\w.-]+\.[a-z]{2,}|caf\u00e9.?)", "caf\xc3\xa9!"},
      {"groups", R"((?P<y>\d{4})-(0[1-9]|1[0-2])*?\x41{1,3}\s*$)", "2026-11A  "},
  };
  for (const auto& [name, pattern, text] : seeds) seed("fuzz_regex", name, join({pattern, text}));
}

void lora_adapter_seeds() {
  // What `tessera train --lora-rank` writes, for fuzz::tiny_gpt2's layers.
  auto adapter_folder = [](const nn::LoraConfig& config) {
    std::shared_ptr<models::CausalLM> model = fuzz::tiny_gpt2();
    nn::apply_lora(*model, config);
    nn::TensorDict weights = nn::lora_state_dict(*model);
    autograd::NoGradGuard no_grad;
    for (auto& [name, t] : weights) t.copy_(arange(t.numel(), kFloat32).reshape(t.sizes()) / 64);
    const fs::path dir = fs::path(fuzz::scratch_dir()) / "adapter_seed";
    fs::remove_all(dir);
    io::save_lora_adapter(dir.string(), {config, weights});
    return join({read(dir / "adapter_config.json"), read(dir / "adapter_model.safetensors")});
  };
  const std::string c_attn = adapter_folder({.r = 2, .target_modules = {"c_attn"}});
  seed("fuzz_lora_adapter", "c_attn", c_attn);
  seed("fuzz_lora_adapter", "all_linear_rslora",
       adapter_folder(
           {.r = 4, .lora_alpha = 8, .target_modules = {"all-linear"}, .use_rslora = true}));
  // Refused by its config: DoRA is not applied.
  seed("fuzz_lora_adapter", "dora",
       R"({"peft_type": "LORA", "r": 2, "use_dora": true})" +
           c_attn.substr(c_attn.find(kPartSeparator)));
}

void gbnf_seeds() {
  // A grammar, then text to feed its matcher.
  const std::vector<std::tuple<std::string, std::string, std::string>> seeds = {
      {"arithmetic",
       "root ::= expr\nexpr ::= term ((\"+\" | \"-\") term)*\n"
       "term ::= [0-9]+ | \"(\" expr \")\"  # comment\n",
       "(1+2)-3"},
      {"list",
       "root ::= item rest\nrest ::= (\",\" item rest)?\nitem ::= 'a' [0-9]? | \"\\x62\\u00e9\"",
       "a1,b\xc3\xa9"},
      {"json",
       "root ::= obj\nobj ::= \"{\" (str \":\" val (\",\" str \":\" val)*)? \"}\"\n"
       "val ::= obj | str | [0-9]+ | \"true\"\nstr ::= \"\\\"\" [^\"\\\\]* \"\\\"\"",
       "{\"a\":{\"b\":true},\"c\":12}"},
  };
  for (const auto& [name, grammar, text] : seeds) seed("fuzz_gbnf", name, join({grammar, text}));
}

}  // namespace

void tool_call_seeds() {
  const std::pair<const char*, const char*> seeds[] = {
      {"hermes",
       "Let me check.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
       "{\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>{\"name\": \"b\"}"},
      {"llama3_json",
       "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"k\": [1, "
       "\"}\"]}}; {\"name\": \"b\", \"arguments\": \"{}\"}"},
      {"mistral",
       "Sure[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}][TOOL_CALLS]"
       "get_time[ARGS]{\"tz\": \"UTC\"}"},
      {"pythonic",
       "<|python_start|>[f(a='x\\'y', b=[1, (2, .5)], c={'k': None}, d=True), "
       "m.g()]<|python_end|>"},
  };
  for (const auto& [name, text] : seeds) seed("fuzz_output_parsers", name, text);
  seed(
      "fuzz_output_parsers", "qwen3_thinking",
      "<think>\nThe user wants the weather.\n</think>\n\n<tool_call>{\"name\": \"w\"}</tool_call>");
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus dir>\n", argv[0]);
    return 2;
  }
  root = argv[1];
  safetensors_seeds();
  checkpoint_seeds();
  llmc_seeds();
  llama2c_seeds();
  tokenizer_seeds();
  hf_tokenizer_seeds();
  chat_template_seeds();
  openai_seeds();
  json_grammar_seeds();
  regex_seeds();
  gbnf_seeds();
  lora_adapter_seeds();
  tool_call_seeds();
  return 0;
}
