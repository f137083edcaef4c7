#!/usr/bin/env bash
# Tokens/s of GPT-2 training on the machine's two cores, two ways: one process with two threads
# against two data-parallel ranks with one thread each, in Tessera (`tessera train`, `mpirun -np 2
# tessera train --dp 2`) and in PyTorch (bench/torch_ddp_train.py: DistributedDataParallel over
# gloo under mpirun). The global batch is the same: the single process accumulates 2 micro-batches
# per step (--grad-accum 2), each rank takes 1; every micro-batch is BATCH x SEQ tokens. tok/s
# counts all ranks' tokens. The four programs alternate for ROUNDS rounds; the table gives medians
# (min-max) of each round's median step rate (steps 4..STEPS), and ratios within each round. Other
# people's processes share the machine: each round waits (up to 2 minutes) for a quiet second, and
# each run records how many cores other processes kept busy meanwhile (machine busy time from
# /proc/stat minus the run's own CPU time, over its wall time).
# Configs as `tessera bench train`: tiny (vocab 65, 4 layers, 4 heads, 128 embd, seq 128, batch 16)
# and small (vocab 50257, 6 layers, 6 heads, 384 embd, seq 256, batch 4); float32.
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-20}
ROUNDS=${ROUNDS:-5}
CONFIGS=${CONFIGS:-"tiny small"}
BIN=${BIN:-build/release/bin/tessera}
DATA=${DATA:-../shared/data}
MPIRUN=(mpirun --allow-run-as-root --oversubscribe -np 2 -x OMP_NUM_THREADS=1)
PORT=${PORT:-29600}  # PyTorch's rendezvous: a fresh port each run (the last may be in TIME_WAIT)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

stats() {  # the median and range of the numbers in a file: "median (min-max)"
  /usr/bin/python3 -c "
import statistics, sys
v = [float(l) for l in open(sys.argv[1])]
f = {'ratio': '{:.2f}x', 'load': '{:.2f}'}.get(sys.argv[2], '{:,.0f}')
print(f'{f.format(statistics.median(v))} ({f.format(min(v))}-{f.format(max(v))})')" "$1" "$2"
}

# tessera_run out np threads accum tokenizer layers heads embd seq batch: prints the median tok/s.
tessera_run() {
  local out=$1 np=$2 threads=$3 accum=$4
  shift 4
  local args=(train --data "$DATA/tinyshakespeare.txt" --tokenizer "$1" --data-dir "$DATA"
    --n-layer "$2" --n-head "$3" --n-embd "$4" --seq-len "$5" --batch-size "$6"
    --grad-accum "$accum" --max-steps "$STEPS" --warmup-steps 1 --eval-every 0 --eval-steps 1
    --sample-tokens 0 --threads "$threads" --out "$out")
  rm -rf "$out"
  if [ "$np" = 1 ]; then
    OMP_NUM_THREADS=$threads measured "$BIN" "${args[@]}" > "$tmp/log" 2>&1
  else
    measured "${MPIRUN[@]}" "$BIN" "${args[@]}" --dp "$np" > "$tmp/log" 2>&1
  fi || { cat "$tmp/log" >&2; return 1; }
  /usr/bin/python3 -c "
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if 'tok_per_s' in l]
print(f\"{statistics.median(r['tok_per_s'] for r in rows[3:]):.1f}\")" "$out/metrics.jsonl"
}

# torch_run np threads accum vocab layers heads embd seq batch: prints the median tok/s.
torch_run() {
  local np=$1 threads=$2 accum=$3
  shift 3
  local args=(bench/torch_ddp_train.py "$@" "$STEPS" "$threads" "$accum")
  if [ "$np" = 1 ]; then
    OMP_NUM_THREADS=$threads measured /usr/bin/python3 "${args[@]}"
  else
    PORT=$((PORT + 1))
    MASTER_PORT=$PORT measured "${MPIRUN[@]}" -x MASTER_PORT /usr/bin/python3 "${args[@]}"
  fi
}

busy_jiffies() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8 + $9}' /proc/stat; }

wait_quiet() {  # until other processes used under 0.2 cores for a second (at most 120 tries)
  for _ in $(seq 120); do
    local b0; b0=$(busy_jiffies)
    sleep 1
    [ $(( $(busy_jiffies) - b0 )) -lt $(( $(getconf CLK_TCK) / 5 )) ] && return
  done
}

# measured cmd...: runs cmd (its output passes through) and appends to $tmp/foreign the cores
# other processes kept busy during it.
measured() {
  local b0; b0=$(busy_jiffies)
  /usr/bin/time -f "%e %U %S" -o "$tmp/time" "$@"
  local b1; b1=$(busy_jiffies)
  /usr/bin/python3 -c "
import sys
wall, user, system = map(float, open(sys.argv[1]).read().split()[-3:])
machine = (int(sys.argv[3]) - int(sys.argv[2])) / int(sys.argv[4])
print(f'{max(0.0, machine - user - system) / wall:.2f}')" \
    "$tmp/time" "$b0" "$b1" "$(getconf CLK_TCK)" >> "$tmp/foreign"
}

ratio() { echo "$(tail -1 "$1") / $(tail -1 "$2")" | bc -l >> "$3"; }

run() {  # name vocab tokenizer layers heads embd seq batch
  local name=$1 vocab=$2 tok=$3 model=("$4" "$5" "$6" "$7" "$8")
  rm -f "$tmp"/{t1,t2,p1,p2,rt,rp,rtp}
  for round in $(seq "$ROUNDS"); do
    wait_quiet
    : > "$tmp/foreign"
    tessera_run "$tmp/run" 1 2 2 "$tok" "${model[@]}" >> "$tmp/t1"
    tessera_run "$tmp/run" 2 1 1 "$tok" "${model[@]}" >> "$tmp/t2"
    torch_run 1 2 2 "$vocab" "${model[@]}" >> "$tmp/p1"
    torch_run 2 1 1 "$vocab" "${model[@]}" >> "$tmp/p2"
    ratio "$tmp/t2" "$tmp/t1" "$tmp/rt"
    ratio "$tmp/p2" "$tmp/p1" "$tmp/rp"
    ratio "$tmp/t2" "$tmp/p2" "$tmp/rtp"
    echo "$name round $round: tessera $(tail -1 "$tmp/t1") / $(tail -1 "$tmp/t2"), torch" \
      "$(tail -1 "$tmp/p1") / $(tail -1 "$tmp/p2") tok/s (1x2 / 2x1); cores busy with other" \
      "processes during each: $(tr '\n' ' ' < "$tmp/foreign")" >&2
    cat "$tmp/foreign" >> "$tmp/foreign_all"
  done
  printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n" "$name" "$(stats "$tmp/t1" n)" \
    "$(stats "$tmp/t2" n)" "$(stats "$tmp/rt" ratio)" "$(stats "$tmp/p1" n)" \
    "$(stats "$tmp/p2" n)" "$(stats "$tmp/rp" ratio)" "$(stats "$tmp/rtp" ratio)"
}

echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; flags: $(grep -m1 flags /proc/cpuinfo | grep -o -w -E 'avx2|avx512f|avx512_bf16|amx_bf16' | tr '\n' ' ')"
echo "$(mpirun --version | head -1), torch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)') gloo; commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src include apps || echo ' + uncommitted src/include/apps changes')"
echo "$ROUNDS alternating rounds, $STEPS steps each; float32; tok/s of all ranks, median (min-max); 1x2 = 1 process x 2 threads, 2 micro-batches a step; 2x1 = 2 ranks x 1 thread, 1 micro-batch each"
echo
echo "| config | Tessera 1x2 | Tessera 2x1 | Tessera 2x1 / 1x2 | PyTorch 1x2 | PyTorch 2x1 (DDP, gloo) | PyTorch 2x1 / 1x2 | Tessera / PyTorch, 2x1 |"
echo "|---|---|---|---|---|---|---|---|"
for config in $CONFIGS; do
  case $config in
    tiny) run tiny 65 char 4 4 128 128 16 ;;
    small) run small 50257 gpt2 6 6 384 256 4 ;;
  esac
done
echo
echo "Cores kept busy by other processes during a run: median (min-max) $(stats "$tmp/foreign_all" load)"
