"""The GPT-2 training step of `tessera train` in PyTorch: same model (tests/reference's nanoGPT-
style GPT2), AdamW (betas 0.9/0.95, weight decay on matrices), gradient clipping at 1.0, random
token batches. With DTYPE bfloat16 the forward and loss run under torch.autocast("cpu",
torch.bfloat16), as `tessera train --dtype bfloat16` runs them under Tessera's autocast. Prints the
median tokens/s over the steps after the first WARMUP (as the Tessera side counts them).

  torch_train_step.py VOCAB N_LAYER N_HEAD N_EMBD SEQ BATCH STEPS THREADS [DTYPE [WARMUP]]
"""
import contextlib
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "reference"))
from model_reference import GPT2  # noqa: E402


def make_model_and_optimizer(vocab, n_layer, n_head, n_embd, seq):
    """The reference GPT-2 (seeded with 0) and its AdamW, as `tessera train` configures them."""
    torch.manual_seed(0)
    model = GPT2(dict(vocab_size=vocab, block_size=seq, n_layer=n_layer, n_head=n_head,
                      n_embd=n_embd, bias=True, layer_norm_eps=1e-5))
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95))
    return model, opt


def train_step(model, opt, batches, vocab, dtype="float32", no_sync=None):
    """One optimizer step over the (x, y) micro-batches: the loss of each is averaged over them
    (gradient accumulation), then clipping at 1.0 and AdamW. no_sync: DDP's context manager, for
    all micro-batches but the last."""
    opt.zero_grad(set_to_none=True)
    for i, (x, y) in enumerate(batches):
        autocast = (torch.autocast("cpu", dtype=torch.bfloat16) if dtype == "bfloat16"
                    else contextlib.nullcontext())
        sync = (no_sync() if no_sync is not None and i + 1 < len(batches)
                else contextlib.nullcontext())
        with sync:
            with autocast:
                logits = model(x)
                loss = F.cross_entropy(logits.view(-1, vocab), y.view(-1)) / len(batches)
            loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()


def main():
    vocab, n_layer, n_head, n_embd, seq, batch, steps, threads = map(int, sys.argv[1:9])
    dtype = sys.argv[9] if len(sys.argv) > 9 else "float32"
    warmup = int(sys.argv[10]) if len(sys.argv) > 10 else 3
    torch.set_num_threads(threads)
    model, opt = make_model_and_optimizer(vocab, n_layer, n_head, n_embd, seq)
    rates = []
    for step in range(steps):
        x = torch.randint(0, vocab, (batch, seq))
        y = torch.randint(0, vocab, (batch, seq))
        start = time.perf_counter()
        train_step(model, opt, [(x, y)], vocab, dtype)
        elapsed = time.perf_counter() - start
        if step >= warmup:
            rates.append(batch * seq / elapsed)
    print(f"{statistics.median(rates):.1f}")


if __name__ == "__main__":
    main()
