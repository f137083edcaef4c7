"""PyTorch peer of cuda_train_bench: the same GPT-2 (nanoGPT layout, tied embeddings, GELU-tanh)
trained with AdamW, clipping and optional bf16 autocast on byte tokens of a text file, eager or
torch.compile. Prints the median step time, tokens/s and MFU (nanoGPT's FLOPs estimate).

    python3 torch_cuda_train.py --data input.txt [--dtype bfloat16] [--compile]
"""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.c_attn, self.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.c_fc, self.mlp_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.h, C // self.h).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab=50257, seq=1024, d=768, layers=12, heads=12):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.h = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.layers, self.d = layers, d
        # GPT-2's initialisation (as Tessera's model): N(0, 0.02), zero biases, residual
        # projections scaled by 1/sqrt(2 layers). PyTorch's defaults (N(0, 1) tied embeddings)
        # make the loss diverge.
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() == 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), targets.reshape(-1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--peak-tflops", type=float, default=989.0)
    a = p.parse_args()
    torch.manual_seed(1337)
    dev = "cuda"
    text = torch.tensor(list(open(a.data, "rb").read()), dtype=torch.long, device=dev)
    model = GPT(seq=a.seq).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=True)
    step_fn = torch.compile(model) if a.compile else model
    gen = torch.Generator(device="cpu").manual_seed(7)
    times = []
    for s in range(a.steps):
        starts = torch.randint(0, text.numel() - a.seq - 1, (a.batch,), generator=gen).to(dev)
        rows = text[starts[:, None] + torch.arange(a.seq + 1, device=dev)[None, :]]
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.dtype == "bfloat16"):
            loss = step_fn(rows[:, :-1], rows[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        lv = loss.item()
        dt = time.perf_counter() - t0
        if s >= 3:
            times.append(dt)
        print(f"step {s:3d} loss {lv:.4f} time {dt * 1e3:.1f} ms")
    times.sort()
    med = times[len(times) // 2]
    n = sum(p.numel() for p in model.parameters())
    flops = 6 * n + 12 * model.layers * model.d * a.seq
    tok_s = a.batch * a.seq / med
    mode = "compile" if a.compile else "eager"
    print(f"torch {mode} {a.dtype} batch {a.batch} seq {a.seq}: {n / 1e6:.1f} M params, median "
          f"step {med * 1e3:.1f} ms, {tok_s:.0f} tok/s, MFU {100 * flops * tok_s / (a.peak_tflops * 1e12):.1f}% "
          f"(of {a.peak_tflops:.0f} TFLOP/s), peak memory {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")


if __name__ == "__main__":
    main()
