#!/usr/bin/env bash
# Installs the Debian 12 packages Tessera needs to build and test. Idempotent: does nothing when
# everything is already installed.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  libdnnl-dev ocl-icd-opencl-dev        # oneDNN GEMM (its CMake config needs OpenCL headers)
  libopenblas-openmp-dev                # float64 GEMM
  libgtest-dev libgmock-dev             # tests
  libcli11-dev                          # the tessera command line
  python3-torch python3-numpy           # PyTorch reference for the optimizer/op parity tests
  pybind11-dev python3-dev python3-pytest  # the tessera Python package and its pytest suites
  nlohmann-json3-dev                    # GPT-2 encoder.json
  libsentencepiece-dev                  # SentencePiece .model tokenizers (pkg-config only)
  libicu-dev                            # Unicode letter/number classes for the GPT-2 pre-tokenizer
  libcpp-httplib-dev                    # the OpenAI-compatible HTTP server (pkg-config only)
  libsqlite3-dev                        # tessera studio's database
  chromium fonts-wqy-microhei           # tessera studio's end-to-end tests (headless, playwright-core; CJK glyphs)
  libopenmpi-dev openmpi-bin            # dist: ProcessGroupMPI and the mpirun test suite
  clang libclang-rt-dev libomp-dev      # the debug build (tests + fuzz): clang, sanitizer + libFuzzer runtimes, OpenMP
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
# The openai npm client for the OpenAI API fidelity tests (needs npm; skipped without).
"$(dirname "$0")/install-openai-client.sh" ||
  echo "install-deps: could not install the openai npm client; its tests will be skipped"
# The studio front end's pinned npm packages (Vite, Vue, ant-design-vue, Vitest, playwright-core);
# without them the studio is built with a page saying the front end was not built.
"$(dirname "$0")/install-studio-web.sh" ||
  echo "install-deps: could not install the studio's npm packages; its front end is not built"
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
