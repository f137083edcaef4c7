#!/bin/sh
# Runs a job that must fail, and passes when it exits non-zero within LIMIT seconds (wall time)
# with MARKER in its output (so that it failed where intended, not at launch).
# Usage: expect_job_fails.sh LIMIT MARKER command [args...]
limit=$1
marker=$2
shift 2
log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$(date +%s%N)
# A hang guard well past the limit; the measured time decides.
timeout -k 5 $((limit * 3)) "$@" > "$log" 2>&1
rc=$?
end=$(date +%s%N)
ms=$(((end - start) / 1000000))
cat "$log"
echo "[expect_job_fails] exit status $rc after $ms ms (limit $limit s)"
status=0
if [ "$rc" -eq 0 ]; then
  echo "[expect_job_fails] FAIL: expected a non-zero exit status"
  status=1
fi
if [ "$ms" -ge $((limit * 1000)) ]; then
  echo "[expect_job_fails] FAIL: expected the job to end within $limit s"
  status=1
fi
if ! grep -q -- "$marker" "$log"; then
  echo "[expect_job_fails] FAIL: expected '$marker' in the output"
  status=1
fi
exit $status
