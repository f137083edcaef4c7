#!/usr/bin/env bash
# Installs the studio front end's npm packages (Vite, Vue, ant-design-vue, Vitest,
# playwright-core) at the versions web/studio/package-lock.json pins into
# build/studio_web/node_modules, where the CMake build and the studio's web tests find them.
# Without npm the studio is built with a page saying its front end was not built.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
exec "$root/scripts/install-npm-lock.sh" install-studio-web "$root/web/studio" \
  "$root/build/studio_web"
