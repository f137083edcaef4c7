#!/usr/bin/env bash
# Runs bench/ops_bench (Tessera) and bench/torch_ops.py (PyTorch) with the same thread count,
# alternating ROUNDS times, and prints a markdown table of medians and ratios.
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-3}
BIN=${BIN:-build/release/bench/ops_bench}
tmp=$(mktemp -d)
for r in $(seq "$ROUNDS"); do
  OMP_NUM_THREADS=$THREADS "$BIN" > "$tmp/tessera.$r" 2>/dev/null
  OMP_NUM_THREADS=$THREADS /usr/bin/python3 bench/torch_ops.py "$THREADS" > "$tmp/torch.$r"
done
/usr/bin/python3 - "$tmp" "$ROUNDS" "$THREADS" <<'PY'
import statistics, sys, collections
tmp, rounds, threads = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def load(kind):
    d = collections.defaultdict(list)
    for r in range(1, rounds + 1):
        for line in open(f"{tmp}/{kind}.{r}"):
            name, ms = line.split()
            d[name].append(float(ms))
    return {k: statistics.median(v) for k, v in d.items()}
t, p = load("tessera"), load("torch")
print(f"| workload ({threads} threads) | Tessera ms | PyTorch ms | PyTorch / Tessera |")
print("|---|---|---|---|")
for name in t:
    if name in p:
        print(f"| {name} | {t[name]:.3f} | {p[name]:.3f} | {p[name] / t[name]:.2f}x |")
PY
rm -rf "$tmp"
