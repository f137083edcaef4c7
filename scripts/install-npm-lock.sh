#!/usr/bin/env bash
# install-npm-lock.sh LABEL SRC DEST: installs the npm packages SRC/package-lock.json pins into
# DEST/node_modules (outside the source tree). Needs npm (Node 20+); without it, says so and
# exits 0 (the callers' tests then skip). Idempotent: does nothing when the lock file installed
# last is SRC's. No install scripts run (playwright-core then downloads no browser).
set -euo pipefail
label=$1 src=$2 dest=$3
if ! command -v npm >/dev/null; then
  echo "$label: npm not found; the tests that need its packages will be skipped"
  exit 0
fi
if [ -d "$dest/node_modules" ] && cmp -s "$src/package-lock.json" "$dest/installed.lock"; then
  exit 0
fi
mkdir -p "$dest"
rm -f "$dest/installed.lock"
cp "$src/package.json" "$src/package-lock.json" "$dest/"
flags=(--prefix "$dest" --ignore-scripts --no-audit --no-fund --loglevel=error)
# npm ci refuses a lock that lists only this platform's optional packages (npm writes its locks
# so: rollup's and esbuild's native binaries); npm install then keeps every locked version and
# fills in the rest.
npm ci "${flags[@]}" 2>/dev/null || npm install "${flags[@]}"
cp "$src/package-lock.json" "$dest/installed.lock"
