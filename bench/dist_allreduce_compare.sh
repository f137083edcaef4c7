#!/usr/bin/env bash
# All-reduce (sum, float32) in Tessera's MPI process group (bench/dist_allreduce_bench) against
# PyTorch's gloo (bench/torch_dist_allreduce.py), both launched by mpirun on this machine. The
# two alternate for ROUNDS rounds at each rank count of NPS; per size, the table gives the median
# over rounds of each round's median time, busbw from that time, and the median (min-max) over
# rounds of PyTorch's time / Tessera's (above 1: Tessera is faster). One OpenMP thread a rank.
set -euo pipefail
cd "$(dirname "$0")/.."
NPS=${NPS:-"2 4"}
ROUNDS=${ROUNDS:-5}
MAX_BYTES=${MAX_BYTES:-268435456}
BIN=${BIN:-build/release/bench/dist_allreduce_bench}
MPIRUN=(mpirun --allow-run-as-root --oversubscribe)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc --all) cores; flags: $(grep -m1 flags /proc/cpuinfo | grep -o -w -E 'avx2|avx512f|avx512_bf16|amx_bf16' | tr '\n' ' ')"
export OMP_NUM_THREADS=1
echo "$(mpirun --version | head -1), torch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)') gloo; $ROUNDS alternating rounds"
for np in $NPS; do
  for round in $(seq "$ROUNDS"); do
    "${MPIRUN[@]}" -np "$np" "$BIN" --max-bytes "$MAX_BYTES" --csv | sed "s/$/,$round/" \
      >> "$tmp/runs.csv"
    # A fresh rendezvous port each run: the last one may still be in TIME_WAIT.
    MASTER_PORT=$((29500 + np * 10 + round)) "${MPIRUN[@]}" -np "$np" /usr/bin/python3 \
      bench/torch_dist_allreduce.py --max-bytes "$MAX_BYTES" --csv | sed "s/$/,$round/" \
      >> "$tmp/runs.csv"
  done
done

/usr/bin/python3 - "$tmp/runs.csv" <<'PY'
import collections, statistics, sys

us = collections.defaultdict(dict)  # (framework, np, bytes) -> {round: microseconds}
for line in open(sys.argv[1]):
    fw, np, nbytes, t, rnd = line.strip().split(",")
    us[(fw, int(np), int(nbytes))][int(rnd)] = float(t)


def size(b):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= scale:
            return f"{b // scale} {unit}"
    return f"{b} B"


for np in sorted({k[1] for k in us}):
    print(f"\n{np} ranks\n")
    print("| size | Tessera us | Tessera busbw GB/s | PyTorch gloo us | PyTorch busbw GB/s "
          "| PyTorch / Tessera time |")
    print("|---|---|---|---|---|---|")
    for b in sorted({k[2] for k in us if k[1] == np}):
        t, p = us[("tessera", np, b)], us[("torch", np, b)]
        ratios = [p[r] / t[r] for r in t if r in p]
        tm, pm = statistics.median(t.values()), statistics.median(p.values())
        bus = lambda m: b / (m * 1e-6) / 1e9 * 2 * (np - 1) / np
        print(f"| {size(b)} | {tm:.1f} | {bus(tm):.3f} | {pm:.1f} | {bus(pm):.3f} | "
              f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) |")
PY
