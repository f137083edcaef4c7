"""PyTorch peer of `engine_bench` (--device cuda or cpu): a GPT-2 124M-shaped model (random
weights, tied embeddings, GELU-tanh) decoding greedily, eager float32, with a static KV cache
(preallocated [B, H, max_len, D] per layer, written in place, as Hugging Face's StaticCache).
Single-stream decode, then batched decode of B streams started together; each stream prefills
its prompt in one forward and generates --new-tokens tokens. Every step's tokens are read back
to the host (as a server streaming them would), as the Tessera engine does with its logits.
Prints markdown rows in engine_bench's format.

    python3 torch_decode.py [--device cuda|cpu] [--prompt-len 16] [--new-tokens 64] [--reps 3]
                            [--streams 1 4 16 32 64]

PyTorch 1.13 (this machine's CPU peer) has no scaled_dot_product_attention: attention is then
the math Hugging Face's eager GPT-2 runs (q k^T / sqrt(D), a causal mask for the prefill,
softmax, times v).
"""
import argparse
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def attention(q, keys, values, causal):
    """softmax(q k^T / sqrt(D)) v over [B, H, T, D], the mask aligned bottom-right."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, keys, values, is_causal=causal)
    s = (q @ keys.transpose(-1, -2)) * (q.shape[-1] ** -0.5)
    if causal:
        T, L = q.shape[-2], keys.shape[-2]
        mask = torch.ones(T, L, dtype=torch.bool, device=q.device).tril(L - T)
        s = s.masked_fill(~mask, float("-inf"))
    return torch.softmax(s, -1) @ values


class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.c_attn, self.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.c_fc, self.mlp_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x, k_cache, v_cache, pos):
        # x [B, T, C]; the new keys/values go to cache positions pos..pos+T-1, then the queries
        # attend over positions 0..pos+T-1 (causal within the new tokens).
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.h, C // self.h).transpose(1, 2) for t in (q, k, v))
        k_cache[:, :, pos : pos + T] = k
        v_cache[:, :, pos : pos + T] = v
        keys, values = k_cache[:, :, : pos + T], v_cache[:, :, : pos + T]
        y = attention(q, keys, values, causal=T > 1)  # T > 1: the prefill from position 0
        x = x + self.c_proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab=50257, seq=1024, d=768, layers=12, heads=12):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.h = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.heads, self.d = heads, d

    def new_cache(self, B, max_len, device):
        shape = (B, self.heads, max_len, self.d // self.heads)
        return [(torch.empty(shape, device=device), torch.empty(shape, device=device))
                for _ in self.h]

    def forward(self, idx, cache, pos):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(pos, pos + T, device=idx.device))
        for block, (kc, vc) in zip(self.h, cache):
            x = block(x, kc, vc, pos)
        return self.ln_f(x[:, -1]) @ self.wte.weight.t()  # last position's logits [B, V]


@torch.no_grad()
def generate(model, prompts, n):
    """Greedy: prefill, then n - 1 decode steps; the tokens of each step come back to the host."""
    B, P = prompts.shape
    cache = model.new_cache(B, P + n, prompts.device)
    tok = model(prompts, cache, 0).argmax(-1, keepdim=True)
    out = [tok.cpu()]
    for i in range(1, n):
        tok = model(tok, cache, P + i - 1).argmax(-1, keepdim=True)
        out.append(tok.cpu())
    return torch.cat(out, 1)


def prompts_of(B, P, vocab, device):
    # engine_bench's prompt_of: token 1, then spread ids salted by the stream.
    rows = [[1] + [3 + (i * 97 + s * 31) % (vocab - 3) for i in range(1, P)] for s in range(B)]
    return torch.tensor(rows, device=device)


def tokens_per_s(model, B, P, n, reps, vocab, device):
    prompts = prompts_of(B, P, vocab, device)
    rates = []
    for r in range(reps + 1):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = generate(model, prompts, n)
        dt = time.perf_counter() - t0
        if r > 0:  # the first run warms up
            rates.append(out.numel() / dt)
    return statistics.median(rates)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompt-len", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--streams", type=int, nargs="*", default=None,
                    help="default: 1 4 16 32 64 on a GPU, 1 4 16 32 on the CPU (engine_bench's)")
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    device = torch.device(a.device)
    if a.streams is None:
        a.streams = [1, 4, 16, 32, 64] if device.type == "cuda" else [1, 4, 16, 32]
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 GEMMs, as Tessera's default
    torch.manual_seed(0)
    vocab = 50257
    model = GPT(vocab).to(device).eval()
    where = torch.cuda.get_device_name() if device.type == "cuda" else \
        f"the CPU, {torch.get_num_threads()} threads"
    print(f"torch {torch.__version__} on {where}", flush=True)
    print("| model | mode | tokens per stream | tokens/s | vs single |\n|---|---|---|---|---|")
    single = tokens_per_s(model, 1, a.prompt_len, a.new_tokens, 3 * a.reps, vocab, device)
    print(f"| GPT-2 124M (torch eager fp32) | single stream (static cache) | {a.new_tokens} | "
          f"{single:.0f} | |", flush=True)
    for B in a.streams:
        rate = tokens_per_s(model, B, a.prompt_len, a.new_tokens, a.reps, vocab, device)
        print(f"| GPT-2 124M (torch eager fp32) | {B} streams (static batch) | {a.new_tokens} | "
              f"{rate:.0f} | {rate / single:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
