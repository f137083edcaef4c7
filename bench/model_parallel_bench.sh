#!/usr/bin/env bash
# The model-parallel tables of BENCHMARKS.md, from bench/model_parallel_bench (see its comment
# for what it measures and the formulas):
#   1. Pipeline bubble: the executor running the schedules with stages that sleep instead of
#      computing (forward FWD_MS, backward BWD_MS per micro-batch), so 2 and 4 stages measure
#      the schedule and the executor on two cores; measured against (p - 1) / (v m) and against
#      the schedule simulated with the same times.
#   2. GPT-2 training per layout: tokens/s, the bubble with real compute, and the bytes each
#      group moves per step (bus bytes, summed over ranks) with whether every rank's calls and
#      bytes equal the formulas. Four ranks share two cores (oversubscribed): their tokens/s and
#      bubble are the machine's, not the layout's.
# Runs alternate in ROUNDS rounds; the tables give medians (min-max) over rounds.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
TABLES=${TABLES:-"bubble train"}  # which tables to measure
BIN=${BIN:-build/release/bench/model_parallel_bench}
FWD_MS=${FWD_MS:-40}
BWD_MS=${BWD_MS:-80}
MODEL=${MODEL:-"--layers 8 --embd 128 --heads 4 --seq 128 --batch 4 --vocab 4096 --micro-batches 8"}
MPIRUN=(mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1)
out=$(mktemp)
trap 'rm -f "$out"' EXIT

run() {  # run NP ARGS...: appends the run's JSON line to $out
  local np=$1
  shift
  if [ "$np" = 1 ]; then  # outside mpirun: under it one process's two threads shared a core
    "$BIN" "$@" 2> /dev/null | grep '^{' >> "$out"
  else
    "${MPIRUN[@]}" -np "$np" "$BIN" "$@" 2> /dev/null | grep '^{' >> "$out"
  fi
}

bubble_runs=(
  "2 --pp 2 --schedule gpipe --micro-batches 4" "2 --pp 2 --micro-batches 4"
  "2 --pp 2 --vpp 2 --micro-batches 4" "2 --pp 2 --micro-batches 8"
  "2 --pp 2 --vpp 2 --micro-batches 8" "4 --pp 4 --schedule gpipe --micro-batches 8"
  "4 --pp 4 --micro-batches 8" "4 --pp 4 --vpp 2 --micro-batches 8"
  "4 --pp 4 --micro-batches 16" "4 --pp 4 --vpp 2 --micro-batches 16")
train_runs=(
  "1 --threads 2" "1 --threads 1" "2" "2 --tp 2" "2 --tp 2 --sp" "2 --pp 2 --schedule gpipe"
  "2 --pp 2" "2 --pp 2 --pp-layers 5,3" "2 --pp 2 --vpp 2" "2 --pp 2 --vpp 2 --pp-layers 3,2,2,1"
  "4 --tp 2" "4 --tp 2 --sp" "4 --pp 2 --tp 2"
  "4 --pp 2 --tp 2 --sp" "4 --pp 4" "4 --pp 4 --vpp 2")

# TRAIN_RUNS="2 --tp 2;4 --pp 4": another list of training runs (ranks, then flags).
if [ -n "${TRAIN_RUNS:-}" ]; then IFS=';' read -r -a train_runs <<< "$TRAIN_RUNS"; fi
[[ " $TABLES " == *" bubble "* ]] || bubble_runs=()
[[ " $TABLES " == *" train "* ]] || train_runs=()
echo "model_parallel_bench: $ROUNDS rounds of ${#bubble_runs[@]} pipeline and ${#train_runs[@]} training runs" >&2
for round in $(seq "$ROUNDS"); do
  for r in "${bubble_runs[@]}"; do
    read -r np args <<< "$r"
    # shellcheck disable=SC2086
    run "$np" $args --synthetic "$FWD_MS,$BWD_MS" --steps 4 --warmup 1
  done
  for r in "${train_runs[@]}"; do
    read -r np args <<< "$r"
    # shellcheck disable=SC2086
    run "$np" $args $MODEL --steps 3 --warmup 1
  done
  echo "  round $round done" >&2
done

/usr/bin/python3 - "$out" "$FWD_MS" "$BWD_MS" "$MODEL" << 'EOF'
import collections, json, statistics, subprocess, sys

rows = [json.loads(l) for l in open(sys.argv[1])]
fwd, bwd, model = sys.argv[2], sys.argv[3], sys.argv[4]

def key(r):
    l = r["layout"]
    return (r["synthetic"], l["dp"], l["tp"], l["pp"], l["vpp"], l["sp"], l["schedule"],
            r["micro_batches"], r["threads"], r["pp_layers"])

runs = collections.OrderedDict()
for r in rows:
    runs.setdefault(key(r), []).append(r)

def stat(values, fmt):
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}-{fmt.format(max(values))})"

def layout_name(l):
    parts = [f"{a.upper()}{l[a]}" for a in ("dp", "tp", "pp") if l[a] > 1]
    name = " x ".join(parts) or "1 process"
    if l["sp"]: name += " +SP"
    if l["pp"] > 1: name += f" {l['schedule']}" + (f" v={l['vpp']}" if l["vpp"] > 1 else "")
    return name

cpu = subprocess.run("lscpu | sed -n 's/^Model name: *//p'", shell=True, capture_output=True,
                     text=True).stdout.strip()
flags = subprocess.run("grep -o -w -E 'avx2|avx512f|avx512_bf16|amx_bf16' /proc/cpuinfo | sort -u",
                       shell=True, capture_output=True, text=True).stdout.split()
rounds = max(len(rs) for rs in runs.values())
print(f"Machine: {cpu}, {' '.join(flags)}; {rounds} rounds.\n")
synthetic = any(k[0] for k in runs)
if synthetic:
    print(f"Pipeline bubble, stages sleeping {fwd} ms forward and {bwd} ms backward per micro-batch:\n")
    print("| stages | schedule | m | measured bubble | (p-1)/(v m) | simulated |")
    print("|---|---|---|---|---|---|")
for k, rs in runs.items():
    if not k[0]: continue
    l = rs[0]["layout"]
    sched = l["schedule"] + (f" v={l['vpp']}" if l["vpp"] > 1 else "")
    print(f"| {l['pp']} | {sched} | {rs[0]['micro_batches']} | "
          f"{stat([r['bubble'] for r in rs], '{:.3f}')} | {rs[0]['bubble_theory']:.3f} | "
          f"{rs[0]['bubble_simulated']:.3f} |")

if not all(k[0] for k in runs):
    print(f"\nGPT-2 training ({model}), float32, global batch the same for every layout:\n")
    print("| ranks | layout | tokens/s | bubble | theory | TP bus MB/step | DP bus MB/step "
          "| PP bus MB/step | tied-embedding MB/step | = formulas |")
    print("|---|---|---|---|---|---|---|---|---|---|")
for k, rs in runs.items():
    if k[0]: continue
    r0, l = rs[0], rs[0]["layout"]
    bus = collections.defaultdict(float)
    for c in r0["comm"]:
        bus[c["group"]] += c["bus_bytes"] / 1e6
    ranks = l["dp"] * l["tp"] * l["pp"]
    bubble = stat([r["bubble"] for r in rs], "{:.2f}") if l["pp"] > 1 else "-"
    theory = f"{r0['bubble_theory']:.3f}" if l["pp"] > 1 else "-"
    cell = lambda g: f"{bus[g]:.2f}" if g in bus else "-"
    matches = all(r["comm_matches"] for r in rs)
    name = layout_name(l) + (f", {r0['threads']} threads" if r0["threads"] > 1 else "")
    name += f", layers {r0['pp_layers']}" if r0["pp_layers"] else ""
    print(f"| {ranks} | {name} | {stat([r['tokens_per_s'] for r in rs], '{:,.0f}')} | "
          f"{bubble} | {theory} | {cell('tp')} | {cell('dp')} | {cell('pp')} | "
          f"{cell('embedding')} | {'yes' if matches else 'NO'} |")
EOF
