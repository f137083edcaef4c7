#!/usr/bin/env bash
# Runs the `tessera bench` suites on this machine, keeps their JSON results in bench/results/ and
# their charts in docs/bench/, and regenerates BENCHMARKS.md from them (bench/report/intro.md,
# then `tessera bench report` of each result, then bench/report/dedicated.md: figures of the GPU
# and distributed-training programs that the suites do not cover yet).
#
#   scripts/bench.sh                 every suite (about 30 minutes on 2 cores), then the report
#   SUITES="hardware ops" scripts/bench.sh
#   REPORT_ONLY=1 scripts/bench.sh   BENCHMARKS.md from the results already there
#
# The machine should be otherwise idle: suites alternate Tessera and PyTorch round by round, but
# a busy machine still widens every figure's spread.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/release/bin/tessera}
DATA=${DATA:-../shared/data}
SUITES=${SUITES:-hardware ops comm train serve}
OUT=bench/results
CHARTS=docs/bench
mkdir -p "$OUT" "$CHARTS"

run() {  # suite, then its arguments
  local suite=$1
  shift
  echo "bench: $suite" >&2
  "$BIN" bench "$suite" --json "$OUT/$suite.json" --svg "$CHARTS" "$@" > /dev/null
}

# Peaks (the ops suite's roofline, the train suite's MFU) come from this run's hardware suite;
# without it in SUITES, those suites measure their own rather than read an older session's.
hardware=()
if [[ " $SUITES " == *" hardware "* ]]; then hardware=(--hardware "$OUT/hardware.json"); fi

if [ -z "${REPORT_ONLY:-}" ]; then
  for suite in $SUITES; do
    case $suite in
      hardware) run hardware ;;
      ops) run ops "${hardware[@]}" ;;
      comm) run comm --ranks 2,4 --max-bytes 16777216 ;;
      train)
        # PyTorch's bf16 CPU GEMM without avx512_bf16 is a reference loop: minutes per step.
        dtypes=float32
        if grep -qw avx512_bf16 /proc/cpuinfo; then dtypes=float32,bfloat16; fi
        run train "${hardware[@]}" --rounds 5 --steps 10 --dtypes "$dtypes" ;;
      serve)
        if [ -f "$DATA/stories260K.bin" ]; then
          run serve --model "$DATA/stories260K.bin" --tokenizer "$DATA/stories260K_idtok.bin" \
            --rates 20,80,inf --goodput ttft:100 tpot:20
        else
          echo "bench: $DATA/stories260K.bin not found; skipping serve" >&2
        fi ;;
      *) echo "bench: unknown suite $suite" >&2; exit 2 ;;
    esac
  done
fi

tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
cat bench/report/intro.md > "$tmp"
for suite in hardware ops comm train serve; do
  if [ -f "$OUT/$suite.json" ]; then
    "$BIN" bench report "$OUT/$suite.json" >> "$tmp"
  fi
done
cat bench/report/dedicated.md >> "$tmp"
mv "$tmp" BENCHMARKS.md
trap - EXIT
echo "bench: wrote BENCHMARKS.md" >&2
