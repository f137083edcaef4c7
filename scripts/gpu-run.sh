#!/usr/bin/env bash
# Runs on a lent GPU machine, in the repository root, with build/gpu-bundle.tar.xz carried from
# scripts/gpu-bundle.sh. Each phase writes its logs to $OUT (the device tool brings them back)
# and fits one device call (10 minutes):
#   test    machine facts, then the whole CUDA test suite (gtest XML too)
#   train   GPT-2 124M bf16 and float32 against PyTorch eager (alternated), torch.compile,
#           batches 16 and 32, LLaMA
#   ops     GEMM / norm / softmax / copy and flash attention against PyTorch
#   serve   decode and batched serving against PyTorch
#   profile GPT-2 bf16 training steps under the profiler with GPU times (op table by self GPU
#           time, Chrome trace in $OUT), then the same with CUDA_LAUNCH_BLOCKING=1 (host times
#           then include each kernel's; compare the two to see launch and dispatch overhead)
#   cli     `tessera train --device cuda` (GPT-2 BPE, bf16 and float32), then `tessera generate`
#           and `tessera serve` with --device cuda from the trained run
#   scripts/gpu-run.sh test train
# ROUNDS (default 3) sets the alternated training rounds; the cli phase takes CLI_DEVICE (cuda)
# and CLI_STEPS (200), so it can be tried on a CPU machine.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-out/gpu}"
ROUNDS="${ROUNDS:-3}"
mkdir -p "$OUT"

bundle=/tmp/tessera-gpu/gpu-bundle
if [ ! -x "$bundle/bin/cuda_tests" ]; then
  mkdir -p /tmp/tessera-gpu
  tar -C /tmp/tessera-gpu -xJf build/gpu-bundle.tar.xz || { echo "gpu-run: no bundle"; exit 2; }
fi
bin="$bundle/bin"
data="$bundle/data"
export LD_LIBRARY_PATH="$bundle/lib:${LD_LIBRARY_PATH:-}"
export TESSERA_SHARED_DATA="$data"
python=$(command -v python3)

# Runs a command, its output to the terminal and to $OUT/NAME.log; notes failures, goes on.
status=0
step() {
  local name=$1
  shift
  echo "== $name: $*"
  "$@" 2>&1 | tee "$OUT/$name.log"
  local rc=${PIPESTATUS[0]}
  if [ "$rc" -ne 0 ]; then
    echo "== $name failed with $rc"
    status=1
  fi
}

facts() {
  {
    date -u +"%Y-%m-%d %H:%M UTC"
    echo "bundle commit: $(tr '\n' ' ' < "$bundle/commit")"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
    nvcc --version | tail -1
    "$python" -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'
    lscpu | grep -E 'Model name|^CPU\(s\)'
  } 2>&1 | tee "$OUT/machine.txt"
}

phase_test() {
  step cuda_tests "$bin/cuda_tests" --gtest_output="xml:$OUT/cuda_tests.xml"
}

phase_train() {
  local text="$data/tinyshakespeare.txt"
  for r in $(seq "$ROUNDS"); do
    step "train_gpt2_bf16_tessera_$r" "$bin/cuda_train_bench" --data "$text" --dtype bfloat16
    step "train_gpt2_bf16_torch_$r" "$python" bench/torch_cuda_train.py --data "$text" \
      --dtype bfloat16
  done
  step train_gpt2_fp32_tessera "$bin/cuda_train_bench" --data "$text"
  step train_gpt2_fp32_torch "$python" bench/torch_cuda_train.py --data "$text"
  step train_gpt2_bf16_torch_compile "$python" bench/torch_cuda_train.py --data "$text" \
    --dtype bfloat16 --compile
  # Larger batches amortise launch overhead: the MFU at sequence 1024 for both sides.
  for b in 16 32; do
    step "train_gpt2_bf16_b${b}_tessera" "$bin/cuda_train_bench" --data "$text" --dtype bfloat16 \
      --batch "$b" --steps 30
    step "train_gpt2_bf16_b${b}_torch" "$python" bench/torch_cuda_train.py --data "$text" \
      --dtype bfloat16 --batch "$b" --steps 30
  done
  step train_llama_bf16_tessera "$bin/cuda_train_bench" --data "$text" --model llama \
    --preset stories110M --dtype bfloat16
  step train_llama_fp32_tessera "$bin/cuda_train_bench" --data "$text" --model llama \
    --preset stories110M
}

phase_ops() {
  step ops_tessera "$bin/cuda_ops_bench"
  step ops_torch "$python" bench/torch_cuda_ops.py
  step attention_tessera "$bin/cuda_attention_bench"
  step attention_torch "$python" bench/torch_cuda_attention.py
  step attention_torch_flash "$python" bench/torch_cuda_attention.py --backend flash
}

phase_serve() {
  step serve_tessera "$bin/engine_bench" --device cuda --only gpt2 --reps 2
  step serve_torch "$python" bench/torch_decode.py --reps 2
}

phase_profile() {
  step profile_gpt2_bf16 "$bin/cuda_train_bench" --data "$data/tinyshakespeare.txt" \
    --dtype bfloat16 --steps 5 --profile 2 --trace "$OUT/trace_gpt2_bf16.json"
  CUDA_LAUNCH_BLOCKING=1 step profile_gpt2_bf16_blocking "$bin/cuda_train_bench" \
    --data "$data/tinyshakespeare.txt" --dtype bfloat16 --steps 5 --profile 2
}

phase_cli() {
  local tessera="$bin/tessera" runs=/tmp/tessera-gpu/runs device="${CLI_DEVICE:-cuda}"
  rm -rf "$runs"
  for dtype in bfloat16 float32; do
    step "cli_train_$dtype" "$tessera" train --data "$data/tinyshakespeare.txt" --tokenizer gpt2 \
      --data-dir "$data" --n-layer 6 --n-head 6 --n-embd 384 --seq-len 256 --batch-size 16 \
      --max-steps "${CLI_STEPS:-200}" --warmup-steps 20 --lr 6e-4 --min-lr 6e-5 --eval-every 100 \
      --eval-steps 20 --sample-tokens 64 --device "$device" --dtype "$dtype" --out "$runs/$dtype"
  done
  step cli_generate "$tessera" generate --model "$runs/bfloat16" --device "$device" --prompt "ROMEO:" \
    --max-new-tokens 64 --temperature 0
  "$tessera" serve --model "$runs/bfloat16" --device "$device" --port 8391 \
    --served-model-name tessera > "$OUT/cli_serve.log" 2>&1 &
  local server=$!
  for _ in $(seq 60); do
    curl -sf http://127.0.0.1:8391/v1/models > /dev/null 2>&1 && break
    sleep 1
  done
  step cli_serve_completion curl -sf http://127.0.0.1:8391/v1/completions \
    -H 'Content-Type: application/json' \
    -d '{"model": "tessera", "prompt": "ROMEO:", "max_tokens": 32, "temperature": 0}'
  kill "$server"
  wait "$server" 2> /dev/null
}

facts
[ $# -gt 0 ] || set -- test
for phase in "$@"; do
  case "$phase" in
    test | train | ops | serve | profile | cli) "phase_$phase" ;;
    *) echo "gpu-run: unknown phase $phase (test, train, ops, serve, profile, cli)"; exit 2 ;;
  esac
done
exit "$status"
