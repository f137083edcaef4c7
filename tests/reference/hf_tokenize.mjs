// The Hugging Face tokenizer.json reference for tests/e2e/test_hf_tokenizer_vs_js.cpp:
// tokenizers.js (@huggingface/tokenizers) encoding each line of INPUT (hex-encoded UTF-8, "-"
// for the empty string) with the tokenizer of TOKENIZER_JSON and its tokenizer_config.json,
// without the post-processor's special tokens; prints one line of ids per input line.
//
//   node hf_tokenize.mjs TOKENIZERS_PACKAGE_DIR TOKENIZER_JSON TOKENIZER_CONFIG_JSON INPUT
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [pkg, tokenizerPath, configPath, inputPath] = process.argv.slice(2);
const { Tokenizer } = await import(pathToFileURL(join(pkg, "dist", "tokenizers.mjs")).href);
const tokenizer = new Tokenizer(JSON.parse(readFileSync(tokenizerPath, "utf8")),
                                JSON.parse(readFileSync(configPath, "utf8")));
const decoder = new TextDecoder("utf-8");
const lines = readFileSync(inputPath, "utf8").split("\n").filter((l) => l.length > 0);
const out = [];
for (const hex of lines) {
  const bytes = hex === "-" ? new Uint8Array() : Uint8Array.from(hex.match(/../g), (h) => parseInt(h, 16));
  out.push(tokenizer.encode(decoder.decode(bytes), { add_special_tokens: false }).ids.join(" "));
}
process.stdout.write(out.join("\n") + "\n");
