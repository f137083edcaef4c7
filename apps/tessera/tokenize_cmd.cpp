// `tessera tokenize`: prints the token ids of a text space-separated on one line, or with
// --decode turns ids back into text.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>

#include "commands.h"
#include "tessera/core/error.h"
#include "tessera/tokenizers/tokenizer.h"

namespace tessera::cli {

namespace {

std::string read_all(const std::string& path) {
  if (path.empty() || path == "-") {
    return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  }
  std::ifstream in(path, std::ios::binary);
  TESSERA_CHECK(in.good(), ValueError, "[tokenize] expected a readable file, got '", path, "'");
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::istringstream in(text);
  std::string word;
  while (in >> word) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    TESSERA_CHECK(used == word.size() && v >= INT32_MIN && v <= INT32_MAX, ValueError,
                  "[tokenize] expected integer token ids, got '", word, "'");
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

}  // namespace

Command add_tokenize_command(CLI::App& app) {
  struct Options {
    std::string tokenizer = "gpt2", file, corpus, data_dir;
    bool decode = false, bos = false;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Print the token ids of a text (or decode ids)");
  cmd->add_option("--tokenizer", o->tokenizer,
                  "char, gpt2, or a path (llama2.c .bin, SentencePiece .model, GPT-2 folder, "
                  "Hugging Face tokenizer.json or a folder holding one, .chars)")
      ->capture_default_str();
  cmd->add_option("file", o->file, "Input file (default: standard input)");
  cmd->add_flag("--decode", o->decode, "Read token ids and print the text they encode");
  cmd->add_flag("--bos", o->bos, "Prepend the tokenizer's BOS token when encoding");
  cmd->add_option("--corpus", o->corpus,
                  "For --tokenizer char: the text whose characters form the vocabulary "
                  "(default: the input)");
  cmd->add_option("--data-dir", o->data_dir,
                  "Folder holding gpt2/encoder.json and gpt2/vocab.bpe (default: "
                  "$TESSERA_DATA_DIR)");
  return {cmd, [o]() {
            std::string input = read_all(o->file);
            tokenizers::TokenizerOptions topt;
            topt.data_dir = o->data_dir;
            if (o->tokenizer == "char")
              topt.char_corpus = o->corpus.empty() ? input : read_all(o->corpus);
            auto tok = tokenizers::make_tokenizer(o->tokenizer, topt);
            if (o->decode) {
              std::string text = tok->decode(parse_ids(input));
              std::fwrite(text.data(), 1, text.size(), stdout);
              return 0;
            }
            std::vector<int32_t> ids = tok->encode(input, o->bos);
            std::string line;
            for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
            std::printf("%s\n", line.c_str());
            return 0;
          }};
}

}  // namespace tessera::cli
