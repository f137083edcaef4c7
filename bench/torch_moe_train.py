"""The Mixtral training step of `tessera train --model llama --n-experts E` in PyTorch: the same
model (tests/reference's Llama with MixtralSparseMoe, Hugging Face's MixtralSparseMoeBlock written
out), its load-balancing loss at coefficient 0.001, AdamW (betas 0.9/0.95, weight decay on
matrices), clipping at 1.0, random token batches. Prints the median tokens/s over the steps after
the first 3 (as the Tessera side counts them).

  torch_moe_train.py VOCAB LAYERS HEADS DIM HIDDEN EXPERTS TOP_K SEQ BATCH STEPS THREADS
"""
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "reference"))
from model_reference import Llama, train_loss  # noqa: E402


def main():
    vocab, layers, heads, dim, hidden, experts, top_k, seq, batch, steps, threads = map(
        int, sys.argv[1:12])
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = Llama(dict(vocab_size=vocab, dim=dim, n_layers=layers, n_heads=heads,
                       n_kv_heads=heads, hidden_dim=hidden, max_seq_len=seq, norm_eps=1e-5,
                       rope_theta=10000.0, rope_scaling=None, tie_embeddings=True,
                       n_experts=experts, n_experts_per_token=top_k,
                       router_aux_loss_coef=0.001))
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}], lr=1e-3,
                            betas=(0.9, 0.95))
    rates = []
    for step in range(steps):
        x = torch.randint(0, vocab, (batch, seq))
        y = torch.randint(0, vocab, (batch, seq))
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        train_loss(model, x, y)[1].backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step >= 3:
            rates.append(batch * seq / (time.perf_counter() - start))
    print(f"{statistics.median(rates):.1f}")


if __name__ == "__main__":
    main()
