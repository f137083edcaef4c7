#!/usr/bin/env python3
"""Greedy generation references for tests/e2e/test_engine_vs_torch.cpp, on the PyTorch models of
model_reference.py (torch 1.13, no KV cache: every step recomputes the whole sequence).

  engine_reference.py llama2c MODEL.bin DIR N
    greedy N tokens after BOS (id 1) with llama2.c's forward (model_reference.llama2c_logits:
    raw weights from the file, interleaved RoPE).
  engine_reference.py gpt2|llama DIR N
    DIR holds config.json, init.safetensors and prompt.safetensors (idx [1, P] int64); greedy N
    tokens after the prompt.

Both write DIR/ref.safetensors: tokens [N] int64 (the generated ids) and logits [N, V] float32,
row i being the logits token i was chosen from (argmax, first index on ties as torch.argmax).
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model_reference  # noqa: E402
import safetensors_io  # noqa: E402


def greedy(forward, idx, n):
    """Appends n argmax tokens to idx [1, P] using forward(idx) -> logits [1, T, V]."""
    for _ in range(n):
        nxt = forward(idx)[0, -1].argmax()
        idx = torch.cat((idx, nxt.view(1, 1)), dim=1)
    # One teacher-forced pass over the result gives every step's logits (causal model).
    logits = forward(idx[:, :-1])[0, -n:]
    return idx[0, -n:].clone(), logits.contiguous()


def main():
    torch.set_grad_enabled(False)
    kind = sys.argv[1]
    if kind == "llama2c":
        path, folder, n = sys.argv[2], sys.argv[3], int(sys.argv[4])
        tokens, logits = greedy(lambda idx: model_reference.llama2c_logits(path, idx),
                                torch.tensor([[1]]), n)
    elif kind in ("gpt2", "llama"):
        folder, n = sys.argv[2], int(sys.argv[3])
        with open(os.path.join(folder, "config.json")) as f:
            config = json.load(f)
        model = model_reference.GPT2(config) if kind == "gpt2" else model_reference.Llama(config)
        weights, _ = safetensors_io.load(os.path.join(folder, "init.safetensors"))
        model.load_state_dict(weights, strict=True)
        prompt, _ = safetensors_io.load(os.path.join(folder, "prompt.safetensors"))
        tokens, logits = greedy(model, prompt["idx"], n)
    else:
        sys.exit("usage: engine_reference.py llama2c MODEL.bin DIR N | gpt2|llama DIR N")
    safetensors_io.save(os.path.join(folder, "ref.safetensors"),
                        {"tokens": tokens, "logits": logits})
    print("ok")


if __name__ == "__main__":
    main()
