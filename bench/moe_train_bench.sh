#!/usr/bin/env bash
# Tokens/s of Mixtral training on the CPU: `tessera train --model llama --n-experts E` against
# bench/torch_moe_train.py (the same model in PyTorch, Hugging Face's per-expert loop), both with
# the load-balancing loss, AdamW and clipping, float32 on THREADS threads. The two alternate for
# ROUNDS rounds; the table gives medians (min-max) of each run's median step rate (steps 4..STEPS)
# and of the ratio within each round. The same LLaMA with one dense MLP runs beside them in
# Tessera (a token through 2 experts does twice its MLP work). Experts have `tessera train`'s
# hidden size for the width (llama2.c's rule: 2/3 of 4 x dim, rounded up to 32).
#   bench/moe_train_bench.sh [CONFIG...]   configs: small (4 layers, dim 256, 8 experts, top 2,
#                                         seq 128, batch 8), tiny (2 layers, dim 128, 4 experts,
#                                         top 2, seq 128, batch 8)
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-15}
ROUNDS=${ROUNDS:-5}
THREADS=${THREADS:-2}
BIN=${BIN:-build/release/bin/tessera}
DATA=${DATA:-../shared/data}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

stats() {  # "median (min-max)" of the numbers in a file
  /usr/bin/python3 -c "
import statistics, sys
v = [float(l) for l in open(sys.argv[1])]
f = '{:.2f}x' if sys.argv[2] == 'ratio' else '{:,.0f}'
print(f'{f.format(statistics.median(v))} ({f.format(min(v))}-{f.format(max(v))})')" "$1" "$2"
}

# tessera_run layers heads dim experts top_k seq batch: the median tok/s of steps 4..
tessera_run() {
  local moe=()
  [ "$4" -gt 0 ] && moe=(--n-experts "$4" --experts-per-token "$5")
  rm -rf "$tmp/run"
  OMP_NUM_THREADS=$THREADS "$BIN" train --data "$DATA/tinyshakespeare.txt" --model llama \
    --n-layer "$1" --n-head "$2" --n-embd "$3" --seq-len "$6" --batch-size "$7" "${moe[@]}" \
    --max-steps "$STEPS" --warmup-steps 1 --eval-every 0 --eval-steps 1 --sample-tokens 0 \
    --threads "$THREADS" --out "$tmp/run" > "$tmp/log" 2>&1 || { cat "$tmp/log" >&2; return 1; }
  /usr/bin/python3 -c "
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if 'tok_per_s' in l]
print(f\"{statistics.median(r['tok_per_s'] for r in rows[3:]):.1f}\")" "$tmp/run/metrics.jsonl"
}

run() {  # name layers heads dim experts top_k seq batch
  local name=$1
  shift
  local hidden=$(( (2 * 4 * $3 / 3 + 31) / 32 * 32 ))
  rm -f "$tmp"/{t,p,d,r,rd}
  for round in $(seq "$ROUNDS"); do
    tessera_run "$@" >> "$tmp/t"
    OMP_NUM_THREADS=$THREADS /usr/bin/python3 bench/torch_moe_train.py 65 "$1" "$2" "$3" \
      "$hidden" "$4" "$5" "$6" "$7" "$STEPS" "$THREADS" >> "$tmp/p"
    tessera_run "$1" "$2" "$3" 0 0 "$6" "$7" >> "$tmp/d"
    echo "$(tail -1 "$tmp/t") / $(tail -1 "$tmp/p")" | bc -l >> "$tmp/r"
    echo "$(tail -1 "$tmp/t") / $(tail -1 "$tmp/d")" | bc -l >> "$tmp/rd"
    echo "$name round $round: tessera $(tail -1 "$tmp/t"), torch $(tail -1 "$tmp/p")," \
      "tessera dense $(tail -1 "$tmp/d") tok/s" >&2
  done
  printf "| %s | %s | %s | %s | %s | %s |\n" "$name" "$(stats "$tmp/t" n)" "$(stats "$tmp/p" n)" \
    "$(stats "$tmp/r" ratio)" "$(stats "$tmp/d" n)" "$(stats "$tmp/rd" ratio)"
}

echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; flags: $(grep -m1 flags /proc/cpuinfo | grep -o -w -E 'avx2|avx512f|avx512_bf16|amx_bf16' | tr '\n' ' ')"
echo "torch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)'); commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src include apps || echo ' + uncommitted src/include/apps changes')"
echo "$ROUNDS alternating rounds, $STEPS steps each, $THREADS threads, float32; tok/s, median (min-max)"
echo
echo "| config | Tessera | PyTorch | Tessera / PyTorch | Tessera dense LLaMA | Mixtral / dense |"
echo "|---|---|---|---|---|---|"
for config in "${@:-small}"; do
  case $config in
    tiny) run tiny 2 4 128 4 2 128 8 ;;
    small) run small 4 8 256 8 2 128 8 ;;
  esac
done
