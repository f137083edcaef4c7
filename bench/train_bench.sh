#!/usr/bin/env bash
# Tokens/s and peak memory of the same GPT-2 training step in Tessera (`tessera train`) and in
# PyTorch (bench/torch_train_step.py), same config, batch, dtype and thread count. The two
# programs alternate for ROUNDS rounds; the table gives medians (and min-max) of each round's
# median step rate, with the CPU's model and flags. Configs: tiny (vocab 65, 4 layers, 4 heads,
# 128 embd, seq 128, batch 16) and small (vocab 50257, 6 layers, 6 heads, 384 embd, seq 256,
# batch 4); DTYPES float32 and/or bfloat16 (autocast in both frameworks).
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${THREADS:-2}
STEPS=${STEPS:-20}
ROUNDS=${ROUNDS:-5}
CONFIGS=${CONFIGS:-"tiny small"}
DTYPES=${DTYPES:-"float32 bfloat16"}
BIN=${BIN:-build/release/bin/tessera}
DATA=${DATA:-../shared/data}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

stats() {  # the median and range of the numbers in a file: "median (min-max)"
  /usr/bin/python3 -c "
import statistics, sys
v = [float(l) for l in open(sys.argv[1])]
print(f'{statistics.median(v):.0f} ({min(v):.0f}-{max(v):.0f})')" "$1"
}

tessera_run() {  # out vocab tokenizer layers heads embd seq batch dtype
  rm -rf "$1"
  /usr/bin/time -f "%M" -o "$tmp/tessera.rss" "$BIN" train --data "$DATA/tinyshakespeare.txt" \
    --tokenizer "$3" --data-dir "$DATA" --n-layer "$4" --n-head "$5" --n-embd "$6" \
    --seq-len "$7" --batch-size "$8" --dtype "$9" --max-steps "$STEPS" --warmup-steps 1 \
    --eval-every 0 --eval-steps 1 --sample-tokens 0 --threads "$THREADS" --out "$1" \
    > /dev/null 2>&1
  /usr/bin/python3 -c "
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if 'tok_per_s' in l]
print(f\"{statistics.median(r['tok_per_s'] for r in rows[3:]):.1f}\")" "$1/metrics.jsonl"
}

run() {  # name vocab tokenizer layers heads embd seq batch dtype
  local name=$1 vocab=$2 tok=$3 L=$4 H=$5 C=$6 T=$7 B=$8 dtype=$9
  : > "$tmp/t"; : > "$tmp/p"
  for _ in $(seq "$ROUNDS"); do
    tessera_run "$tmp/run" "$vocab" "$tok" "$L" "$H" "$C" "$T" "$B" "$dtype" >> "$tmp/t"
    OMP_NUM_THREADS=$THREADS /usr/bin/time -f "%M" -o "$tmp/torch.rss" /usr/bin/python3 \
      bench/torch_train_step.py "$vocab" "$L" "$H" "$C" "$T" "$B" "$STEPS" "$THREADS" "$dtype" \
      >> "$tmp/p"
    echo "$(tail -1 "$tmp/t") / $(tail -1 "$tmp/p")" | bc -l >> "$tmp/r"
  done
  printf "| %s | %s | %s | %s | %s | %d | %d |\n" "$name" "$dtype" "$(stats "$tmp/t")" \
    "$(stats "$tmp/p")" "$(/usr/bin/python3 -c "
import statistics, sys
v = [float(l) for l in open(sys.argv[1])]
print(f'{statistics.median(v):.2f}x ({min(v):.2f}-{max(v):.2f})')" "$tmp/r")" \
    "$(( $(cat "$tmp/tessera.rss") / 1024 ))" "$(( $(cat "$tmp/torch.rss") / 1024 ))"
  rm -f "$tmp/r"
}

echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); flags: $(grep -m1 flags /proc/cpuinfo | grep -o -w -E 'avx2|avx512f|avx512_bf16|amx_bf16' | tr '\n' ' ')"
echo "$ROUNDS alternating rounds, $STEPS steps each, $THREADS threads; tok/s median (min-max)"
echo
echo "| config | dtype | Tessera tok/s | PyTorch tok/s | Tessera / PyTorch | Tessera peak RSS MiB | PyTorch peak RSS MiB |"
echo "|---|---|---|---|---|---|---|"
for dtype in $DTYPES; do
  for config in $CONFIGS; do
    case $config in
      tiny) run tiny 65 char 4 4 128 128 16 "$dtype" ;;
      small) run small 50257 gpt2 6 6 384 256 4 "$dtype" ;;
    esac
  done
done
