"""bench/dist_allreduce_bench.cpp in PyTorch: all_reduce (sum, float32) over torch.distributed
with the gloo backend, the same sizes, call counts and statistics (median over calls of the
slowest rank's time; algbw = bytes / time, busbw = algbw * 2(n-1)/n).

Launched like the C++ bench, by mpirun (ranks from OMPI_COMM_WORLD_*; rendezvous on
tcp://127.0.0.1:MASTER_PORT, default 29511) or by torchrun (RANK/WORLD_SIZE):
    mpirun -np N /usr/bin/python3 bench/torch_dist_allreduce.py [--min-bytes B] [--max-bytes B] [--csv]
"""
import argparse
import os
import time

import torch
import torch.distributed as dist


def env_int(*names):
    for name in names:
        if name in os.environ:
            return int(os.environ[name])
    raise SystemExit(f"none of {names} is set: launch with mpirun or torchrun")


def timed_calls(nbytes):
    return min(max((1 << 30) // nbytes, 5), 200)


def warmup_calls(nbytes):
    return 2 if nbytes >= (16 << 20) else 5


def median_time(buf, warmup, calls):
    for _ in range(warmup):
        dist.all_reduce(buf)
    times = torch.zeros(calls, dtype=torch.float64)
    dist.barrier()
    for i in range(calls):
        start = time.perf_counter()
        dist.all_reduce(buf)
        times[i] = time.perf_counter() - start
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    return times.sort().values[calls // 2].item()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--min-bytes", type=int, default=4)
    parser.add_argument("--max-bytes", type=int, default=256 << 20)
    parser.add_argument("--csv", action="store_true")
    args = parser.parse_args()
    rank = env_int("OMPI_COMM_WORLD_RANK", "RANK")
    world = env_int("OMPI_COMM_WORLD_SIZE", "WORLD_SIZE")
    if "MASTER_ADDR" in os.environ and "OMPI_COMM_WORLD_RANK" not in os.environ:
        init = "env://"  # torchrun
    else:
        init = f"tcp://127.0.0.1:{os.environ.get('MASTER_PORT', '29511')}"
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    if rank == 0 and not args.csv:
        print(f"all_reduce sum float32 (torch {torch.__version__}, gloo), {world} ranks; "
              "median of the slowest rank's time per call")
        print("| bytes | calls | time us | algbw GB/s | busbw GB/s |\n|---|---|---|---|---|")
    nbytes = args.min_bytes
    while nbytes <= args.max_bytes:
        buf = torch.zeros(nbytes // 4)
        calls = timed_calls(nbytes)
        seconds = median_time(buf, warmup_calls(nbytes), calls)
        algbw = nbytes / seconds / 1e9
        busbw = algbw * 2 * (world - 1) / world
        if rank == 0:
            if args.csv:
                print(f"torch,{world},{nbytes},{seconds * 1e6:.3f}", flush=True)
            else:
                print(f"| {nbytes} | {calls} | {seconds * 1e6:.1f} | {algbw:.3f} | {busbw:.3f} |",
                      flush=True)
        nbytes *= 4
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
