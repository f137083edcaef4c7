#!/usr/bin/env bash
# Installs the openai npm package at the version tests/openai_client/package-lock.json pins
# into build/openai_client/node_modules (outside the source tree), for the ctest openai_client
# suite. Needs npm (Node 20+); without it, says so and exits 0: that suite then skips.
# Idempotent: does nothing when the installed lock file matches.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
src=$root/tests/openai_client
dest=$root/build/openai_client
if ! command -v npm >/dev/null; then
  echo "install-openai-client: npm not found; the openai client tests will be skipped"
  exit 0
fi
if [ -f "$dest/node_modules/.package-lock.json" ] && cmp -s "$src/package-lock.json" "$dest/package-lock.json"; then
  exit 0
fi
mkdir -p "$dest"
cp "$src/package.json" "$src/package-lock.json" "$dest/"
npm ci --prefix "$dest" --ignore-scripts --no-audit --no-fund --loglevel=error
