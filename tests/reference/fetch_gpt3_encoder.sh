#!/usr/bin/env bash
# Fetches the gpt-3-encoder npm package (the JavaScript GPT-2 BPE reference) into DEST/package,
# outside the source tree (default: build/reference/gpt-3-encoder). Needs npm and the registry.
set -euo pipefail
DEST="${1:-$(dirname "$0")/../../build/reference/gpt-3-encoder}"
VERSION="1.1.4"
mkdir -p "$DEST"
cd "$DEST"
if [ -f package/Encoder.js ]; then exit 0; fi
npm pack --silent "gpt-3-encoder@${VERSION}" >/dev/null
tar xzf "gpt-3-encoder-${VERSION}.tgz"
rm -f "gpt-3-encoder-${VERSION}.tgz"
test -f package/Encoder.js
