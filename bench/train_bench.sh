#!/usr/bin/env bash
# Tokens/s and peak memory of the same GPT-2 training step in Tessera (`tessera train`) and in
# PyTorch (bench/torch_train_step.py), same config, batch and thread count. Prints a markdown
# table. Configs: tiny (vocab 65, 4 layers, 4 heads, 128 embd, seq 128, batch 16) and small
# (vocab 50257, 6 layers, 6 heads, 384 embd, seq 256, batch 4).
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${THREADS:-2}
STEPS=${STEPS:-20}
BIN=${BIN:-build/release/bin/tessera}
DATA=${DATA:-../shared/data}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

run() {  # name vocab tokenizer layers heads embd seq batch
  local name=$1 vocab=$2 tok=$3 L=$4 H=$5 C=$6 T=$7 B=$8
  /usr/bin/time -f "%M" -o "$tmp/tessera.rss" "$BIN" train --data "$DATA/tinyshakespeare.txt" \
    --tokenizer "$tok" --data-dir "$DATA" --n-layer "$L" --n-head "$H" --n-embd "$C" \
    --seq-len "$T" --batch-size "$B" --max-steps "$STEPS" --warmup-steps 1 --eval-every 0 \
    --eval-steps 1 --sample-tokens 0 --threads "$THREADS" --out "$tmp/run_$name" > /dev/null 2>&1
  local tess
  tess=$(/usr/bin/python3 -c "
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if 'tok_per_s' in l]
print(f\"{statistics.median(r['tok_per_s'] for r in rows[3:]):.1f}\")" "$tmp/run_$name/metrics.jsonl")
  local torch_rate
  torch_rate=$(OMP_NUM_THREADS=$THREADS /usr/bin/time -f "%M" -o "$tmp/torch.rss" \
    /usr/bin/python3 bench/torch_train_step.py "$vocab" "$L" "$H" "$C" "$T" "$B" "$STEPS" "$THREADS")
  printf "| %s | %s | %s | %.2fx | %d | %d |\n" "$name" "$tess" "$torch_rate" \
    "$(echo "$tess / $torch_rate" | bc -l)" "$(( $(cat "$tmp/tessera.rss") / 1024 ))" \
    "$(( $(cat "$tmp/torch.rss") / 1024 ))"
}

echo "| config ($THREADS threads) | Tessera tok/s | PyTorch tok/s | Tessera / PyTorch | Tessera peak RSS MiB | PyTorch peak RSS MiB |"
echo "|---|---|---|---|---|---|"
run tiny 65 char 4 4 128 128 16
run small 50257 gpt2 6 6 384 256 4
