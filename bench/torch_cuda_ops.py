"""PyTorch peer of cuda_ops_bench: the same cases, timed the same way (CUDA events, ~50 ms per
timing, median of 5), printed in the same format.

    python3 torch_cuda_ops.py [--only gemm|norm]
"""
import argparse

import torch
import torch.nn.functional as F

GPU = torch.device("cuda")


def time_ms(fn):
    with torch.no_grad():
        for _ in range(3):
            fn()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        reps = min(max(int(50.0 / max(start.elapsed_time(stop), 1e-3)), 1), 1000)
        per_call = []
        for _ in range(5):
            start.record()
            for _ in range(reps):
                fn()
            stop.record()
            stop.synchronize()
            per_call.append(start.elapsed_time(stop) / reps)
    return sorted(per_call)[len(per_call) // 2]


def name_of(dtype, tf32):
    return "bf16" if dtype == torch.bfloat16 else ("tf32" if tf32 else "fp32")


def gemm_cases():
    shapes = [(1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192),
              (8192, 2304, 768), (8192, 768, 768), (8192, 3072, 768), (8192, 768, 3072),
              (8192, 50304, 768)]
    for dtype, tf32 in [(torch.float32, False), (torch.float32, True), (torch.bfloat16, False)]:
        torch.backends.cuda.matmul.allow_tf32 = tf32
        for m, n, k in shapes:
            a = torch.randn(m, k, device=GPU).to(dtype)
            b = torch.randn(k, n, device=GPU).to(dtype)
            ms = time_ms(lambda: torch.matmul(a, b))
            print(f"matmul {name_of(dtype, tf32)} {m}x{n}x{k}: {2 * m * n * k / (ms * 1e9):.1f} TFLOP/s")
    torch.backends.cuda.matmul.allow_tf32 = False
    for m, n, k in [(8192, 2304, 768), (8192, 3072, 768), (8192, 768, 3072)]:
        x = torch.randn(m, k, device=GPU).bfloat16()
        w = torch.randn(n, k, device=GPU).bfloat16()
        bias = torch.randn(n, device=GPU).bfloat16()
        ms = time_ms(lambda: F.linear(x, w, bias))
        print(f"linear bf16 {m}x{n}x{k}: {2 * m * n * k / (ms * 1e9):.1f} TFLOP/s")


def bandwidth_case(op, dtype, rows, cols, fn):
    x = torch.randn(rows, cols, device=GPU).to(dtype)
    ms = time_ms(lambda: fn(x))
    print(f"{op} {name_of(dtype, False)} {rows}x{cols}: {2 * x.numel() * x.element_size() / (ms * 1e6):.0f} GB/s")


def norm_cases():
    for dtype in [torch.float32, torch.bfloat16]:
        for rows, cols in [(8192, 768), (8192, 4096), (32768, 1024)]:
            w = torch.ones(cols, device=GPU, dtype=dtype)
            b = torch.zeros(cols, device=GPU, dtype=dtype)
            bandwidth_case("copy", dtype, rows, cols, lambda x: x.clone())
            bandwidth_case("layer_norm", dtype, rows, cols, lambda x: F.layer_norm(x, (cols,), w, b))
            bandwidth_case("rms_norm", dtype, rows, cols, lambda x: F.rms_norm(x, (cols,), w, 1e-6))
            bandwidth_case("softmax", dtype, rows, cols, lambda x: torch.softmax(x, -1))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", choices=["gemm", "norm"])
    args = parser.parse_args()
    if args.only in (None, "gemm"):
        gemm_cases()
    if args.only in (None, "norm"):
        norm_cases()
