"""Peer of bench/cuda_attention_bench.cpp: torch.nn.functional.scaled_dot_product_attention on
the same shapes (q, k, v [B, H, T, D] contiguous, B H = --bh), median forward and
forward+backward times and TFLOP/s counted as FlashAttention does (forward 4 B H T^2 D, halved
when causal; backward 2.5 times that). --backend picks torch's kernel (default: its own choice)."""
import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def median_ms(iters, fn):
    for _ in range(2):
        fn()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--bh", type=int, default=128)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--seqs", default="1024,2048,4096")
    p.add_argument("--dims", default="64,128")
    p.add_argument("--backend", default="default", choices=["default", "flash", "cudnn", "efficient"])
    a = p.parse_args()
    dt = getattr(torch, a.dtype)
    B = 8 if a.bh % 8 == 0 else 1
    H = a.bh // B
    backends = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                "efficient": SDPBackend.EFFICIENT_ATTENTION}
    print(f"{'what':<12} {'dtype':<9} {'T':>5} {'D':>4} {'BH':>3} {'mask':<6} {'fwd ms':>9} "
          f"{'TFLOP/s':>8} {'f+b ms':>9} {'TFLOP/s':>8}")
    for D in map(int, a.dims.split(",")):
        for T in map(int, a.seqs.split(",")):
            for causal in (False, True):
                torch.manual_seed(0)
                q, k, v = (torch.randn(B, H, T, D, device="cuda", dtype=dt, requires_grad=True)
                           for _ in range(3))
                dout = torch.randn(B, H, T, D, device="cuda", dtype=dt)

                def fwd():
                    with torch.no_grad():
                        F.scaled_dot_product_attention(q, k, v, is_causal=causal)

                def both():
                    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                    torch.autograd.grad(out, (q, k, v), dout)

                if a.backend == "default":
                    t_f, t_b = median_ms(a.iters, fwd), median_ms(a.iters, both)
                else:
                    with sdpa_kernel(backends[a.backend]):
                        t_f, t_b = median_ms(a.iters, fwd), median_ms(a.iters, both)
                flops = 4.0 * B * H * T * T * D * (0.5 if causal else 1.0)
                print(f"{'torch-' + a.backend:<12} {a.dtype:<9} {T:>5} {D:>4} {B * H:>3} "
                      f"{'causal' if causal else 'full':<6} {t_f:>9.3f} {flops / t_f * 1e-9:>8.1f} "
                      f"{t_b:>9.3f} {3.5 * flops / t_b * 1e-9:>8.1f}", flush=True)


if __name__ == "__main__":
    main()
