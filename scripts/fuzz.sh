#!/usr/bin/env bash
# Runs every libFuzzer target of the debug preset (build/debug/fuzz) for SECONDS each, one after
# another. Each starts from its committed seeds (fuzz/corpus/<target>/, read only) plus what
# earlier runs found (build/debug/fuzz/corpus/<target>/, where new entries go); crashing inputs
# land in build/debug/fuzz/crashes/. Prints one markdown row of figures per target and exits
# non-zero if any target crashed.
#   usage: scripts/fuzz.sh [SECONDS] [TARGET...]   (default 600 s, all targets)
set -uo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-600}
shift || true
build=build/debug/fuzz
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for src in fuzz/fuzz_*.cpp; do
    name=$(basename "$src" .cpp)
    [ "$name" = fuzz_util ] || targets+=("$name")
  done
fi
mkdir -p "$build/crashes" "$build/logs"
# One thread: fuzzing runs one input at a time, and idle OpenMP workers spinning beside it only
# slow it (and anything else on the machine) down.
export OMP_NUM_THREADS=1
# The targets' scratch folders: libFuzzer often exits without running atexit handlers.
export TMPDIR="$PWD/$build/tmp"
echo "| target | runs | exec/s | cov | ft | corpus | crashes |"
echo "|---|---|---|---|---|---|---|"
failed=0
for name in "${targets[@]}"; do
  corpus="$build/corpus/$name"
  log="$build/logs/$name.log"
  mkdir -p "$corpus" "$TMPDIR"
  # -timeout: an input slower than 60 s under ASan is a hang worth reporting.
  "$build/$name" -max_total_time="$seconds" -timeout=60 -print_final_stats=1 \
    -artifact_prefix="$build/crashes/$name-" "$corpus" "fuzz/corpus/$name" >"$log" 2>&1
  rc=$?
  rm -rf "$TMPDIR"
  last=$(grep -E '^#[0-9]+' "$log" | tail -1)
  field() { sed -nE "s/.* $1: ([0-9]+).*/\1/p" <<<"$last"; }
  runs=$(sed -nE 's/^stat::number_of_executed_units: ([0-9]+)/\1/p' "$log")
  rate=$(sed -nE 's/^stat::average_exec_per_sec: +([0-9]+)/\1/p' "$log")
  corp=$(sed -nE 's/.* corp: ([0-9]+)\/.*/\1/p' <<<"$last")
  crashes=0
  if [ $rc -ne 0 ]; then
    crashes=1
    failed=1
    echo "fuzz: $name failed (exit $rc); log: $log" >&2
    grep -E 'ERROR|==[0-9]+==|tessera fuzz:|Test unit written' "$log" | head -5 >&2
  fi
  echo "| $name | ${runs:-?} | ${rate:-?} | $(field cov) | $(field ft) | ${corp:-?} | $crashes |"
done
exit $failed
