#!/usr/bin/env bash
# Runs the openai client suite (client.test.mjs) against the tessera binary given as $1, with
# the shared data folder $2 and the node_modules scripts/install-openai-client.sh made, $3.
# Exits 77 (ctest: skipped) with the reason when node 20+, the package or the data is missing.
set -euo pipefail
bin=$1 data=$2 modules=$3
skip() { echo "openai_client: skipped: $*"; exit 77; }
command -v node >/dev/null || skip "node is not installed (Node 20+ needed)"
major=$(node -p 'process.versions.node.split(".")[0]')
[ "$major" -ge 20 ] || skip "node $major found, Node 20+ needed"
[ -f "$modules/openai/package.json" ] || skip "$modules/openai missing: run scripts/install-openai-client.sh"
[ -f "$data/stories260K.bin" ] && [ -f "$data/stories260K_idtok.bin" ] ||
  skip "shared data missing: $data/stories260K.bin / _idtok.bin"
here=$(cd "$(dirname "$0")" && pwd)
TESSERA_BIN=$bin TESSERA_SHARED_DATA=$data OPENAI_NODE_MODULES=$modules \
  exec node --test --test-reporter=spec "$here/client.test.mjs"
