// load_chat_template: a model's Hugging Face chat template from a template file or its
// tokenizer_config.json, with the special tokens it refers to.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/core/json_parse.h"
#include "tessera/serve/openai.h"

namespace tessera::serve {
namespace {

using Json = nlohmann::json;

Json read_json_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  TESSERA_CHECK(in.good(), ValueError, "[load_chat_template] expected a readable file, got ",
                path.string());
  const Json j = parse_json(std::string(std::istreambuf_iterator<char>(in), {}));
  TESSERA_CHECK(!j.is_discarded(), ValueError, "[load_chat_template] expected JSON in ",
                path.string());
  return j;
}

// "chat_template" of a tokenizer_config.json: a string, or [{name, template}] ("default").
std::string config_template(const Json& config, const std::string& file) {
  const Json& t = config.at("chat_template");
  if (t.is_string()) return t.get<std::string>();
  if (t.is_array())
    for (const Json& named : t)
      if (named.is_object() && named.value("name", "") == "default" && named.contains("template") &&
          named["template"].is_string())
        return named["template"].get<std::string>();
  throw ValueError(
      "[load_chat_template] expected chat_template to be a string or a list with a "
      "'default' entry in " +
      file);
}

// A special token as tokenizer_config.json writes it: a string or {"content": ...}.
std::string special_token(const Json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  return "";
}

}  // namespace

std::shared_ptr<const ChatTemplate> load_chat_template(const std::string& template_file,
                                                       const std::string& model_dir) {
  const std::filesystem::path config_path =
      std::filesystem::path(model_dir) / "tokenizer_config.json";
  const Json config = !model_dir.empty() && std::filesystem::exists(config_path)
                          ? read_json_file(config_path)
                          : Json::object();
  std::string source;
  if (!template_file.empty()) {
    std::ifstream in(template_file);
    TESSERA_CHECK(in.good(), ValueError, "[load_chat_template] expected a readable file, got ",
                  template_file);
    source.assign(std::istreambuf_iterator<char>(in), {});
    const Json j = parse_json(source);
    if (j.is_object() && j.contains("chat_template")) source = config_template(j, template_file);
  } else if (config.is_object() && config.contains("chat_template")) {
    source = config_template(config, config_path.string());
  } else {
    return nullptr;
  }
  return std::make_shared<const ChatTemplate>(ChatTemplate{tokenizers::JinjaTemplate(source),
                                                           special_token(config, "bos_token"),
                                                           special_token(config, "eos_token")});
}

}  // namespace tessera::serve
