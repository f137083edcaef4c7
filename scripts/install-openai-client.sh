#!/usr/bin/env bash
# Installs the openai npm package at the version tests/openai_client/package-lock.json pins
# into build/openai_client/node_modules (outside the source tree), for the ctest openai_client
# suite (skipped without npm).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
exec "$root/scripts/install-npm-lock.sh" install-openai-client "$root/tests/openai_client" \
  "$root/build/openai_client"
