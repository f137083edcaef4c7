#!/usr/bin/env bash
# run_web.sh unit|e2e STAGE TESSERA [SCREENSHOTS]: the studio front end's Vitest unit tests, or
# its end-to-end test (web/studio/e2e/studio.e2e.mjs) in Debian's headless Chromium driven by
# playwright-core against the tessera binary, on the copy of web/studio the build staged in
# STAGE beside its node_modules. Exits 77 (ctest: skipped) with the reason when Node 20+, the
# npm packages (scripts/install-studio-web.sh), /usr/bin/chromium or the shared data is missing.
set -euo pipefail
mode=$1 stage=$2 bin=$(realpath "$3") shots=${4:+$(realpath -m "$4")}
here=$(cd "$(dirname "$0")" && pwd)
skip() { echo "studio web $mode: skipped: $*"; exit 77; }
command -v node >/dev/null || skip "node is not installed (Node 20+ needed)"
major=$(node -p 'process.versions.node.split(".")[0]')
[ "$major" -ge 20 ] || skip "node $major found, Node 20+ needed"
[ -f "$stage/node_modules/vitest/package.json" ] ||
  skip "npm packages missing in $stage/node_modules: run scripts/install-studio-web.sh and rebuild"
cd "$stage"
if [ "$mode" = unit ]; then
  exec node node_modules/vitest/vitest.mjs run
fi
[ -x /usr/bin/chromium ] || skip "/usr/bin/chromium missing (apt-get install chromium)"
[ -f dist/index.html ] || skip "the front end was not built into $bin"
data=${TESSERA_SHARED_DATA:-$here/../../../shared/data}
for f in stories260K.bin stories260K_idtok.bin tinyshakespeare.txt; do
  [ -f "$data/$f" ] || skip "shared data missing: $data/$f"
done
TESSERA_BIN=$bin TESSERA_SHARED_DATA=$data STUDIO_SCREENSHOTS=${shots:-$stage/screenshots} \
  STUDIO_FIXTURES=$here/fixtures exec node e2e/studio.e2e.mjs
