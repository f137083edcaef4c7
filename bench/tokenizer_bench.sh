#!/usr/bin/env bash
# Encoding throughput of Hugging Face tokenizer.json vocabularies: Tessera's HuggingFaceTokenizer
# (bench/tokenizer_bench) against tokenizers.js (@huggingface/tokenizers, bench/tokenizer_bench.mjs)
# on tinyshakespeare (1.1 MB), both on one thread, alternating for ROUNDS rounds; each run
# encodes the text 3 times on fresh tokenizers (empty caches) and reports its median MB/s and
# the token count (which must agree). The vocabularies come from
# tests/reference/fetch_hf_tokenizers.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
REF=${REF:-build/reference/hf-tokenizers}
TEXT=${TEXT:-../shared/data/tinyshakespeare.txt}
BIN=${BIN:-build/release/bench/tokenizer_bench}
tests/reference/fetch_hf_tokenizers.sh "$REF" >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
stats() {  # "median (min-max)" of column $2 of file $1, as a ratio when $3 is set
  /usr/bin/python3 -c "
import statistics, sys
v = [float(l.split()[int(sys.argv[2])]) for l in open(sys.argv[1])]
f = '{:.1f}x' if len(sys.argv) > 3 else '{:.2f}'
print(f'{f.format(statistics.median(v))} ({f.format(min(v))}-{f.format(max(v))})')" "$@"
}
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); node $(node --version); commit $(git rev-parse --short HEAD)"
echo
echo "| vocabulary | tokens | Tessera MB/s | tokenizers.js MB/s | Tessera / tokenizers.js | load ms, Tessera / js |"
echo "|---|---|---|---|---|---|"
for model in gpt2 llama2 llama3_1 qwen2_5 mistral_nemo; do
  rm -f "$tmp"/{t,j,r}
  for _ in $(seq "$ROUNDS"); do
    OMP_NUM_THREADS=1 "$BIN" "$REF/$model/tokenizer.json" "$TEXT" 3 >> "$tmp/t"
    node bench/tokenizer_bench.mjs "$REF/tokenizers" "$REF/$model" "$TEXT" 3 >> "$tmp/j"
    echo "$(tail -1 "$tmp/t" | cut -d' ' -f3) $(tail -1 "$tmp/j" | cut -d' ' -f3)" |
      awk '{print 0, 0, $1 / $2}' >> "$tmp/r"
  done
  tokens_t=$(cut -d' ' -f2 "$tmp/t" | sort -u | tr '\n' ' ')
  tokens_j=$(cut -d' ' -f2 "$tmp/j" | sort -u | tr '\n' ' ')
  [ "$tokens_t" = "$tokens_j" ] || echo "WARNING: $model token counts differ: $tokens_t vs $tokens_j" >&2
  echo "| $model | $tokens_t| $(stats "$tmp/t" 2) | $(stats "$tmp/j" 2) | $(stats "$tmp/r" 2 x) | $(stats "$tmp/t" 0) / $(stats "$tmp/j" 0) |"
done
