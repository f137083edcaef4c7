#!/usr/bin/env bash
# Builds the CUDA preset here and packs what a lent GPU machine needs to run it into
# build/gpu-bundle.tar.xz: the test and benchmark binaries, libtessera, the shared libraries they
# load that a bare machine lacks (the GPU machine has the CUDA toolkit, PyTorch and a C/C++
# runtime, but no Debian dev packages and no network), and the data files the runs read.
# scripts/gpu-run.sh unpacks it on the GPU machine; carry the archive with the device tool:
#   scripts/gpu-bundle.sh
#   run(command="scripts/gpu-run.sh test", carry=["build/gpu-bundle.tar.xz"])
set -euo pipefail
cd "$(dirname "$0")/.."
export CCACHE_BASEDIR="$PWD"
DATA_DIR="${DATA_DIR:-../shared/data}"

TARGETS=(tessera tessera_cli cuda_tests cuda_train_bench cuda_ops_bench cuda_attention_bench
         engine_bench)
cmake --preset cuda > /dev/null
cmake --build --preset cuda -j "$(nproc)" --target "${TARGETS[@]}"

stage=build/gpu-bundle
rm -rf "$stage" build/gpu-bundle.tar.xz
mkdir -p "$stage/bin" "$stage/lib" "$stage/data"
binaries=(build/cuda/bin/tessera build/cuda/tests/cuda_tests build/cuda/bench/cuda_train_bench
          build/cuda/bench/cuda_ops_bench build/cuda/bench/cuda_attention_bench
          build/cuda/bench/engine_bench)
cp "${binaries[@]}" "$stage/bin/"
cp build/cuda/libtessera.so "$stage/lib/"

# Every library the binaries resolve, except the C/C++ runtime (the machine's own must be used)
# and CUDA's (the machine's driver and toolkit).
base='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s)\.so'
ldd "${binaries[@]}" build/cuda/libtessera.so | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' |
  sort -u | while read -r name path; do
    if [[ "$name" =~ $base || "$path" == /usr/local/cuda* || "$name" =~ ^lib(cuda|cublas|nccl) ]]; then
      continue
    fi
    cp -L "$path" "$stage/lib/$name"
  done

for f in tinyshakespeare.txt stories260K.bin stories260K_idtok.bin gpt2/encoder.json gpt2/vocab.bpe; do
  if [ -f "$DATA_DIR/$f" ]; then
    mkdir -p "$stage/data/$(dirname "$f")"
    cp "$DATA_DIR/$f" "$stage/data/$f"
  fi
done
git rev-parse --short HEAD > "$stage/commit"
git diff --quiet HEAD || echo "(uncommitted changes)" >> "$stage/commit"

tar -C build -cJf build/gpu-bundle.tar.xz gpu-bundle
echo "build/gpu-bundle.tar.xz: $(du -h build/gpu-bundle.tar.xz | cut -f1) ($(cat "$stage/commit" | tr '\n' ' '))"
