"""The workloads of `tessera bench ops` (src/bench/ops.cpp) in PyTorch, printed as "name
milliseconds" lines.

  torch_ops.py [THREADS [FILTER [REPEATS]]]   REPEATS overrides every workload's timed calls
"""
import statistics
import sys
import time

import torch
import torch.nn.functional as F


def median_ms(fn, repeats):
    for _ in range(2):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)  # the mean of the middle two for an even count, as Tessera


def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    flt = sys.argv[2] if len(sys.argv) > 2 else ""
    repeats_override = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    torch.set_num_threads(threads)
    torch.manual_seed(0)

    def run(name, fn, repeats=15):
        if flt in name:
            print(f"{name} {median_ms(fn, repeats_override or repeats):.4f}", flush=True)

    with torch.no_grad():
        a, b = torch.randn(1 << 20), torch.randn(1 << 20)
        run("add_1m", lambda: a + b)
        run("exp_1m", lambda: torch.exp(a))
        run("gelu_tanh_1m", lambda: F.gelu(a, approximate="tanh"))
        m, row = torch.randn(1024, 1024), torch.randn(1024)
        run("mul_broadcast_1024x1024", lambda: m * row)
        run("sum_lastdim_1024x1024", lambda: m.sum(1))
        run("sum_dim0_1024x1024", lambda: m.sum(0))
        big = torch.randn(2048, 2048)
        run("transpose_contiguous_2048", lambda: big.t().contiguous())
        s = torch.randn(4096, 1024)
        run("softmax_4096x1024", lambda: torch.softmax(s, -1))
        ln, w, bias = torch.randn(4096, 768), torch.randn(768), torch.randn(768)
        run("layer_norm_4096x768", lambda: F.layer_norm(ln, (768,), w, bias))
        # torch 1.13 has no fused RMSNorm: the composite is what users run.
        run("rms_norm_4096x768", lambda: ln * torch.rsqrt(ln.pow(2).mean(-1, keepdim=True) + 1e-6) * w)
        logits, target = torch.randn(1024, 8192), torch.randint(0, 8192, (1024,))
        run("cross_entropy_1024x8192", lambda: F.cross_entropy(logits, target))
        x, y = torch.randn(1024, 1024), torch.randn(1024, 1024)
        run("matmul_f32_1024", lambda: x @ y, 9)
        run("matmul_f32_1024_nt", lambda: x @ y.t(), 9)
        xb, yb = x.bfloat16(), y.bfloat16()
        run("matmul_bf16_1024", lambda: xb @ yb, 9)
        q, k, v = (torch.randn(4, 12, 256, 64) for _ in range(3))
        run("sdpa_causal_4x12x256x64",
            lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)
            if hasattr(F, "scaled_dot_product_attention") else
            torch.softmax((q @ k.transpose(-1, -2) / 8.0).masked_fill(
                torch.ones(256, 256, dtype=torch.bool).triu(1), float("-inf")), -1) @ v, 9)

    inp = torch.randn(2048, 768, requires_grad=True)
    weight = (torch.randn(3072, 768) * 0.02).requires_grad_()
    lb = torch.zeros(3072, requires_grad=True)

    def lin():
        F.linear(inp, weight, lb).sum().backward()
    run("linear_fwd_bwd_2048x768x3072", lin, 7)


if __name__ == "__main__":
    main()
