#!/usr/bin/env python3
"""PyTorch reference for tests/e2e/test_rope_swiglu_vs_torch.cpp.

Usage: rope_swiglu_reference.py DIR. Reads DIR/inputs.safetensors (float32: x [B, T, H, D], cos
and sin [T, D/2], w_rope [B, H, T, D], gate, up and w_swiglu [N, F]) and writes DIR/ref.safetensors
with, for each dtype in (float32, bfloat16) and style in (half_split, interleaved):
  rope_<style>_<dtype>, rope_<style>_<dtype>_dx   rope of x viewed as [B, H, T, D] and the
                                                  gradient of sum(out * w_rope) w.r.t. x
and swiglu_<dtype>, swiglu_<dtype>_dgate, swiglu_<dtype>_dup for sum(silu(gate) up w_swiglu).
Inputs are rounded to the dtype first; tables are cast to it (as tessera's rope does).
"""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
import safetensors_io  # noqa: E402


def rope(x, cos, sin, interleaved):
    if interleaved:  # pairs (x[2i], x[2i+1])
        a, b = x[..., 0::2], x[..., 1::2]
        return torch.stack((a * cos - b * sin, b * cos + a * sin), dim=-1).flatten(-2)
    half = x.shape[-1] // 2  # Hugging Face rotate_half: pairs (x[i], x[i + D/2])
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * torch.cat((cos, cos), -1) + rotated * torch.cat((sin, sin), -1)


def main():
    folder = sys.argv[1]
    t, _ = safetensors_io.load(os.path.join(folder, "inputs.safetensors"))
    out = {}
    for dtype, name in ((torch.float32, "float32"), (torch.bfloat16, "bfloat16")):
        cos, sin = t["cos"].to(dtype), t["sin"].to(dtype)
        for interleaved, style in ((False, "half_split"), (True, "interleaved")):
            x = t["x"].to(dtype).detach().requires_grad_()
            y = rope(x.transpose(1, 2), cos, sin, interleaved)
            (y.float() * t["w_rope"]).sum().backward()
            out[f"rope_{style}_{name}"] = y.detach()
            out[f"rope_{style}_{name}_dx"] = x.grad
        gate = t["gate"].to(dtype).detach().requires_grad_()
        up = t["up"].to(dtype).detach().requires_grad_()
        y = F.silu(gate) * up
        (y.float() * t["w_swiglu"]).sum().backward()
        out[f"swiglu_{name}"] = y.detach()
        out[f"swiglu_{name}_dgate"] = gate.grad
        out[f"swiglu_{name}_dup"] = up.grad
    safetensors_io.save(os.path.join(folder, "ref.safetensors"), out)


if __name__ == "__main__":
    main()
