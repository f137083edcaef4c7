#!/usr/bin/env bash
# `make demo`: trains a character-level GPT on Tiny Shakespeare on the CPU for two to three
# minutes, printing the loss as it falls and samples as the model learns, then samples from the
# saved checkpoint with `tessera generate`. Everything lands in out/demo: the checkpoint,
# config.json, tokenizer.chars, metrics.jsonl and loss.svg.
#
# Environment: DEMO_SECONDS (training time budget, default 240), DEMO_STEPS (the length of the
# learning-rate schedule, default 1500; the run stops earlier when the budget is spent),
# THREADS (default: all cores), DEMO_OUT (default out/demo).
set -euo pipefail
cd "$(dirname "$0")/.."

TESSERA=build/release/bin/tessera
OUT=${DEMO_OUT:-out/demo}
SECONDS_BUDGET=${DEMO_SECONDS:-240}
STEPS=${DEMO_STEPS:-1500}
THREADS=${THREADS:-$(nproc)}
URL=https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt

# The text: the shared copy beside the repository when there is one, else a download (cached).
DATA=../shared/data/tinyshakespeare.txt
if [ ! -f "$DATA" ]; then
  DATA=out/tinyshakespeare.txt
  if [ ! -f "$DATA" ]; then
    echo "demo: downloading Tiny Shakespeare (1.1 MB) from $URL"
    mkdir -p out
    if command -v curl > /dev/null; then
      curl -fsSL -o "$DATA.part" "$URL"
    elif command -v wget > /dev/null; then
      wget -q -O "$DATA.part" "$URL"
    else
      /usr/bin/python3 -c "import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])" "$URL" "$DATA.part"
    fi
    mv "$DATA.part" "$DATA"
  fi
fi

# A fresh run each time (train refuses a folder that already holds checkpoints).
rm -rf "$OUT"
echo "demo: training a 4-layer character-level GPT on $DATA for up to ${SECONDS_BUDGET} s on $THREADS threads"
"$TESSERA" train --data "$DATA" --tokenizer char \
  --n-layer 4 --n-head 4 --n-embd 128 --seq-len 128 --batch-size 16 \
  --max-steps "$STEPS" --warmup-steps 100 --lr 4e-3 --min-lr 4e-4 --weight-decay 0.1 \
  --eval-every 100 --eval-steps 10 --sample-every 400 --sample-tokens 200 \
  --save-every 400 --keep 2 --time-limit "$SECONDS_BUDGET" --threads "$THREADS" --out "$OUT"

echo
echo "demo: a sample from the saved model (tessera generate --model $OUT --prompt 'ROMEO:' ...):"
"$TESSERA" generate --model "$OUT" --prompt "ROMEO:" --max-new-tokens 400 --temperature 0.8 \
  --top-k 40 --seed 1 --threads "$THREADS"
echo
echo "demo: done. In $OUT: the checkpoint (ckpt_*), loss.svg (train/val loss curves),"
echo "metrics.jsonl, config.json and tokenizer.chars. Sample more with"
echo "  $TESSERA generate --model $OUT --prompt 'JULIET:' --temperature 0.8 --top-k 40"
echo "or continue training with"
echo "  $TESSERA train --resume --out $OUT --max-steps 2000"
