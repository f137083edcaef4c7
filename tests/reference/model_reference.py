#!/usr/bin/env python3
"""PyTorch reference models for tests/e2e/test_models_vs_torch.cpp, written for the tests in
plain torch 1.13 (no transformers, no F.scaled_dot_product_attention).

  model_reference.py gpt2 DIR | model_reference.py llama DIR
    DIR holds config.json (the model config as tessera writes it; a LLaMA config with n_experts
    is a Mixtral, whose training loss adds the router's load-balancing loss), train.json (AdamW, schedule
    and clipping settings), init.safetensors (initial weights under tessera's names) and
    batches.safetensors (x, y: int64 [S, B, T]). Writes DIR/ref.safetensors with the logits and
    loss of batch 0, grad.<name> of every parameter after backward on that loss, and losses [S]:
    the loss of each of S AdamW steps with warmup + cosine and gradient clipping.
  model_reference.py llama2c MODEL.bin DIR
    reads DIR/tokens.safetensors (idx [1, T]) and writes DIR/ref.safetensors with the logits of
    the llama2.c model computed the way llama2.c does (raw weights from the file, interleaved
    RoPE), independently of tessera's importer.
"""
import json
import math
import os
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402


def causal_attention(q, k, v):
    """softmax(q k^T / sqrt(D), causal) v for q [B, Hq, T, D], k/v [B, Hkv, T, D] (GQA)."""
    rep = q.size(1) // k.size(1)
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    att = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))
    T = q.size(2)
    keep = torch.ones(T, T, dtype=torch.bool).tril()
    return att.masked_fill(~keep, float("-inf")).softmax(-1) @ v


def heads(x, n):  # [B, T, n * D] -> [B, n, T, D]
    B, T, C = x.shape
    return x.view(B, T, n, C // n).transpose(1, 2)


def merge(y):  # [B, H, T, D] -> [B, T, H * D]
    B, H, T, D = y.shape
    return y.transpose(1, 2).reshape(B, T, H * D)


# ---- GPT-2 (nanoGPT's structure and names) ----

class GPT2Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.n_head = c["n_head"]
        self.c_attn = nn.Linear(c["n_embd"], 3 * c["n_embd"], bias=c["bias"])
        self.c_proj = nn.Linear(c["n_embd"], c["n_embd"], bias=c["bias"])

    def forward(self, x):
        q, k, v = self.c_attn(x).split(x.size(-1), dim=2)
        y = causal_attention(heads(q, self.n_head), heads(k, self.n_head), heads(v, self.n_head))
        return self.c_proj(merge(y))


class GPT2MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = nn.Linear(c["n_embd"], 4 * c["n_embd"], bias=c["bias"])
        self.c_proj = nn.Linear(4 * c["n_embd"], c["n_embd"], bias=c["bias"])

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class GPT2Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c["n_embd"], eps=c["layer_norm_eps"])
        self.attn = GPT2Attention(c)
        self.ln_2 = nn.LayerNorm(c["n_embd"], eps=c["layer_norm_eps"])
        self.mlp = GPT2MLP(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    def __init__(self, c):
        super().__init__()
        assert c["bias"], "torch 1.13's LayerNorm always has a bias"
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(c["vocab_size"], c["n_embd"]),
            wpe=nn.Embedding(c["block_size"], c["n_embd"]),
            h=nn.ModuleList([GPT2Block(c) for _ in range(c["n_layer"])]),
            ln_f=nn.LayerNorm(c["n_embd"], eps=c["layer_norm_eps"])))
        self.lm_head = nn.Linear(c["n_embd"], c["vocab_size"], bias=False)
        self.lm_head.weight = self.transformer.wte.weight

    def forward(self, idx):
        t = self.transformer
        x = t.wte(idx) + t.wpe(torch.arange(idx.size(1)))
        for block in t.h:
            x = block(x)
        return self.lm_head(t.ln_f(x))


# ---- LLaMA (Hugging Face's structure and names, half-split RoPE) ----

def rope_inv_freq(head_dim, theta, scaling):
    """theta^(-2i/D), rescaled as Hugging Face's rope_type "llama3", "linear" or "yarn" when
    scaling is given."""
    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    if not scaling:
        return inv
    kind, factor = scaling.get("rope_type", "llama3"), scaling["factor"]
    ctx = scaling["original_max_position_embeddings"]
    if kind == "linear":
        return inv / factor
    if kind == "yarn":
        # Dimension index turning n times over the original context (YaRN's correction range).
        def turning(n):
            return head_dim * math.log(ctx / (n * 2 * math.pi)) / (2 * math.log(theta))
        low, high = turning(scaling["beta_fast"]), turning(scaling["beta_slow"])
        if scaling["truncate"]:
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, head_dim - 1)
        if low == high:
            high += 0.001
        ramp = ((torch.arange(head_dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
        return inv / factor * ramp + inv * (1 - ramp)
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > ctx / low, inv / factor, inv)
    smooth = (ctx / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < ctx / high) & ~(wavelen > ctx / low)
    return torch.where(medium, smoothed, scaled)


def rope_attention_factor(scaling):
    """YaRN's multiplier of cos and sin (1 otherwise)."""
    if not scaling or scaling.get("rope_type", "llama3") != "yarn":
        return 1.0
    if scaling["attention_factor"] > 0:
        return scaling["attention_factor"]

    def mscale(m):
        return 1.0 if scaling["factor"] <= 1 else 0.1 * m * math.log(scaling["factor"]) + 1.0
    if scaling["mscale"] > 0 and scaling["mscale_all_dim"] > 0:
        return mscale(scaling["mscale"]) / mscale(scaling["mscale_all_dim"])
    return mscale(1.0)


def rotate_half(x):
    half = x.size(-1) // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def llama_head_dim(c):
    return c.get("head_dim") or c["dim"] // c["n_heads"]


class LlamaAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.h, self.kv = c["n_heads"], c["n_kv_heads"]
        d = llama_head_dim(c)
        qkv_bias = c.get("qkv_bias", False) or c.get("attention_bias", False)
        self.q_proj = nn.Linear(c["dim"], self.h * d, bias=qkv_bias)
        self.k_proj = nn.Linear(c["dim"], self.kv * d, bias=qkv_bias)
        self.v_proj = nn.Linear(c["dim"], self.kv * d, bias=qkv_bias)
        self.o_proj = nn.Linear(self.h * d, c["dim"], bias=c.get("attention_bias", False))
        if c.get("qk_norm", False):  # Qwen3Attention's q_norm / k_norm over each head
            self.q_norm = RMSNorm(d, c["norm_eps"])
            self.k_norm = RMSNorm(d, c["norm_eps"])

    def forward(self, x, cos, sin):
        q, k = heads(self.q_proj(x), self.h), heads(self.k_proj(x), self.kv)
        if hasattr(self, "q_norm"):
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        return self.o_proj(merge(causal_attention(q, k, heads(self.v_proj(x), self.kv))))


class LlamaMLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.gate_proj = nn.Linear(c["dim"], c["hidden_dim"], bias=False)
        self.up_proj = nn.Linear(c["dim"], c["hidden_dim"], bias=False)
        self.down_proj = nn.Linear(c["hidden_dim"], c["dim"], bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


# ---- Mixtral's sparse mixture of experts (Hugging Face's MixtralSparseMoeBlock, written out) ----

class MixtralExpert(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.w1 = nn.Linear(c["dim"], c["hidden_dim"], bias=False)
        self.w2 = nn.Linear(c["hidden_dim"], c["dim"], bias=False)
        self.w3 = nn.Linear(c["dim"], c["hidden_dim"], bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class MixtralSparseMoe(nn.Module):
    """Mixtral's block, or Qwen3MoeSparseMoeBlock (experts named as LlamaMLP; norm_topk_prob)."""

    def __init__(self, c):
        super().__init__()
        self.top_k = c["n_experts_per_token"]
        self.norm_topk_prob = c.get("norm_topk_prob", True)
        self.gate = nn.Linear(c["dim"], c["n_experts"], bias=False)
        expert = LlamaMLP if c.get("qwen_moe", False) else MixtralExpert
        self.experts = nn.ModuleList([expert(c) for _ in range(c["n_experts"])])
        self.router_logits = None

    def forward(self, x):
        flat = x.reshape(-1, x.size(-1))
        self.router_logits = self.gate(flat)
        probs = F.softmax(self.router_logits, dim=1, dtype=torch.float)
        weights, chosen = torch.topk(probs, self.top_k, dim=-1)
        if self.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        weights = weights.to(flat.dtype)
        out = torch.zeros_like(flat)
        mask = F.one_hot(chosen, num_classes=len(self.experts)).permute(2, 1, 0)  # [E, k, N]
        for e, expert in enumerate(self.experts):
            slot, rows = torch.where(mask[e])
            y = expert(flat[rows]) * weights[rows, slot, None]
            out.index_add_(0, rows, y.to(flat.dtype))
        return out.reshape(x.shape)


def load_balancing_loss(router_logits, n_experts, top_k):
    """Hugging Face's load_balancing_loss_func over every layer's router logits."""
    probs = F.softmax(torch.cat(router_logits, dim=0), dim=-1)
    _, chosen = torch.topk(probs, top_k, dim=-1)
    mask = F.one_hot(chosen, n_experts)
    tokens_per_expert = torch.mean(mask.float(), dim=0)
    return torch.sum(tokens_per_expert * torch.mean(probs, dim=0).unsqueeze(0)) * n_experts


class LlamaDecoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self_attn = LlamaAttention(c)
        if c.get("n_experts", 0) > 0 and c.get("qwen_moe", False):
            self.mlp = MixtralSparseMoe(c)
        elif c.get("n_experts", 0) > 0:
            self.block_sparse_moe = MixtralSparseMoe(c)
        else:
            self.mlp = LlamaMLP(c)
        self.input_layernorm = RMSNorm(c["dim"], c["norm_eps"])
        self.post_attention_layernorm = RMSNorm(c["dim"], c["norm_eps"])

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        ff = self.block_sparse_moe if hasattr(self, "block_sparse_moe") else self.mlp
        return x + ff(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["dim"])
        self.layers = nn.ModuleList([LlamaDecoderLayer(c) for _ in range(c["n_layers"])])
        self.norm = RMSNorm(c["dim"], c["norm_eps"])


class Llama(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.model = LlamaModel(c)
        self.lm_head = nn.Linear(c["dim"], c["vocab_size"], bias=False)
        if c["tie_embeddings"]:
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, idx):
        c = self.c
        inv = rope_inv_freq(llama_head_dim(c), c["rope_theta"], c["rope_scaling"])
        angles = torch.outer(torch.arange(idx.size(1), dtype=torch.float64), inv)
        mult = rope_attention_factor(c["rope_scaling"])
        cos = (mult * torch.cat((angles.cos(), angles.cos()), -1)).float()
        sin = (mult * torch.cat((angles.sin(), angles.sin()), -1)).float()
        x = self.model.embed_tokens(idx)
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.model.norm(x))

    def aux_loss(self):
        """The router's load-balancing loss of the last forward, weighted, or 0 (dense)."""
        c = self.c
        if c.get("n_experts", 0) == 0 or c["router_aux_loss_coef"] == 0:
            return 0.0
        moes = [layer.block_sparse_moe if hasattr(layer, "block_sparse_moe") else layer.mlp
                for layer in self.model.layers]
        logits = [moe.router_logits for moe in moes]
        return c["router_aux_loss_coef"] * load_balancing_loss(
            logits, c["n_experts"], c["n_experts_per_token"])


# ---- LoRA (PEFT's layer, written out) ----

class LoraLinear(nn.Module):
    """base(x) + scaling * lora_B(lora_A(x)) with the frozen base's weight and bias, named as PEFT
    names them in adapter files."""

    def __init__(self, base, r, scaling):
        super().__init__()
        self.weight, self.bias = base.weight, base.bias
        self.lora_A = nn.Linear(base.in_features, r, bias=False)
        self.lora_B = nn.Linear(r, base.out_features, bias=False)
        self.scaling = scaling

    def forward(self, x):
        return F.linear(x, self.weight, self.bias) + self.lora_B(self.lora_A(x)) * self.scaling


def apply_lora(model, lora):
    """Freezes model and wraps each Linear whose name ends with a target (PEFT's matching)."""
    for p in model.parameters():
        p.requires_grad_(False)
    scaling = lora["lora_alpha"] / lora["r"]
    for name, module in list(model.named_modules()):
        if isinstance(module, nn.Linear) and any(
                name == t or name.endswith("." + t) for t in lora["target_modules"]):
            parent_name, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent_name), child, LoraLinear(module, lora["r"], scaling))


# ---- training ----

def lm_loss(logits, y):
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1), ignore_index=-1)


def train_loss(model, x, y):
    """(logits, the cross entropy plus the model's auxiliary loss, as training minimises)."""
    logits = model(x)
    aux = model.aux_loss() if isinstance(model, Llama) else 0.0
    return logits, lm_loss(logits, y) + aux


def warmup_cosine(warmup, max_steps, min_lr, base_lr):
    def factor(step):
        if step < warmup:
            return step / warmup
        if step > max_steps:
            return min_lr / base_lr
        r = (step - warmup) / (max_steps - warmup)
        return (min_lr + (base_lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * r))) / base_lr
    return factor


def run_model(kind, folder):
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    with open(os.path.join(folder, "train.json")) as f:
        train = json.load(f)
    model = GPT2(config) if kind == "gpt2" else Llama(config)
    if "lora" in config:
        apply_lora(model, config["lora"])
    weights, _ = safetensors_io.load(os.path.join(folder, "init.safetensors"))
    model.load_state_dict(weights, strict=True)
    batches, _ = safetensors_io.load(os.path.join(folder, "batches.safetensors"))
    x, y = batches["x"], batches["y"]

    out = {}
    logits, loss = train_loss(model, x[0], y[0])
    loss.backward()
    out["logits"], out["loss"] = logits.detach(), loss.detach()
    for name, p in model.named_parameters():
        if p.requires_grad:  # frozen under LoRA
            out["grad." + name] = p.grad.detach().clone()
    model.zero_grad(set_to_none=True)

    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": train["weight_decay"]},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=train["lr"], betas=(train["beta1"], train["beta2"]),
                            eps=train["eps"])
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, warmup_cosine(train["warmup"], train["max_steps"], train["min_lr"], train["lr"]))
    losses = []
    for s in range(x.size(0)):
        opt.zero_grad(set_to_none=True)
        loss = train_loss(model, x[s], y[s])[1]
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, train["clip"])
        opt.step()
        sched.step()
        losses.append(loss.item())
    out["losses"] = torch.tensor(losses, dtype=torch.float64)
    safetensors_io.save(os.path.join(folder, "ref.safetensors"), out)


# ---- llama2.c ----

def llama2c_logits(path, idx):
    """llama2.c's forward on the weights of a version-0 model file (run.c's layout)."""
    with open(path, "rb") as f:
        data = f.read()
    dim, hidden, L, H, KV, vocab, seq = struct.unpack("7i", data[:28])
    shared, V, D = vocab > 0, abs(vocab), dim // H
    floats = torch.frombuffer(bytearray(data[28:]), dtype=torch.float32)
    offset = 0

    def take(*shape):
        nonlocal offset
        n = math.prod(shape)
        t = floats[offset:offset + n].reshape(shape)
        offset += n
        return t

    emb, rms_att = take(V, dim), take(L, dim)
    wq, wk, wv, wo = take(L, dim, dim), take(L, KV * D, dim), take(L, KV * D, dim), take(L, dim, dim)
    rms_ffn, w1, w2, w3 = take(L, dim), take(L, hidden, dim), take(L, dim, hidden), take(L, hidden, dim)
    rms_final = take(dim)
    take(seq, D // 2)
    take(seq, D // 2)  # freq_cis_real / imag: recomputed below
    wcls = emb if shared else take(V, dim)

    def rmsnorm(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w

    T = idx.size(1)
    freqs = 1.0 / 10000.0 ** (torch.arange(0, D, 2, dtype=torch.float64) / D)
    angles = torch.outer(torch.arange(T, dtype=torch.float64), freqs)
    rot = torch.polar(torch.ones_like(angles), angles).to(torch.complex64)  # [T, D/2]

    def rope(x):  # [B, T, n, D], pairs (x[2i], x[2i+1]) as complex numbers
        xc = torch.view_as_complex(x.reshape(*x.shape[:-1], D // 2, 2).contiguous())
        return torch.view_as_real(xc * rot[None, :, None, :]).flatten(-2)

    x = emb[idx]
    B = x.size(0)
    for l in range(L):
        xb = rmsnorm(x, rms_att[l])
        q = rope((xb @ wq[l].T).view(B, T, H, D)).transpose(1, 2)
        k = rope((xb @ wk[l].T).view(B, T, KV, D)).transpose(1, 2)
        v = (xb @ wv[l].T).view(B, T, KV, D).transpose(1, 2)
        x = x + merge(causal_attention(q, k, v)) @ wo[l].T
        xb = rmsnorm(x, rms_ffn[l])
        x = x + (F.silu(xb @ w1[l].T) * (xb @ w3[l].T)) @ w2[l].T
    return rmsnorm(x, rms_final) @ wcls.T


def main():
    torch.set_grad_enabled(True)
    if sys.argv[1] in ("gpt2", "llama"):
        run_model(sys.argv[1], sys.argv[2])
    elif sys.argv[1] == "llama2c":
        tokens, _ = safetensors_io.load(os.path.join(sys.argv[3], "tokens.safetensors"))
        with torch.no_grad():
            logits = llama2c_logits(sys.argv[2], tokens["idx"])
        safetensors_io.save(os.path.join(sys.argv[3], "ref.safetensors"), {"logits": logits})
    else:
        sys.exit("usage: model_reference.py gpt2|llama DIR | llama2c MODEL.bin DIR")
    print("ok")


if __name__ == "__main__":
    main()
