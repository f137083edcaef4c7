"""Data-parallel GPT-2 training steps in PyTorch, the peer of `tessera train --dp N`
(bench/ddp_train_bench.sh): bench/torch_train_step.py's model, optimizer and step, wrapped in
torch.nn.parallel.DistributedDataParallel over gloo when launched by mpirun with several ranks
(rank and world size from OMPI_COMM_WORLD_RANK/SIZE; rendezvous at MASTER_ADDR, default
127.0.0.1, and MASTER_PORT, default 29600). A single process trains without DDP, as
`tessera train` does without --dp. Each step accumulates ACCUM micro-batches of random tokens
(DDP's no_sync on all but the last) on every rank. Rank 0 prints the median tokens/s of all
ranks together (world x ACCUM x BATCH x SEQ per step) over steps 4.., timed on rank 0.

  [mpirun -np N] torch_ddp_train.py VOCAB N_LAYER N_HEAD N_EMBD SEQ BATCH STEPS THREADS ACCUM
"""
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_train_step import make_model_and_optimizer, train_step  # noqa: E402


def main():
    vocab, n_layer, n_head, n_embd, seq, batch, steps, threads, accum = map(int, sys.argv[1:10])
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
    torch.set_num_threads(threads)
    model, opt = make_model_and_optimizer(vocab, n_layer, n_head, n_embd, seq)
    no_sync = None
    if world > 1:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29600")
        dist.init_process_group("gloo", rank=rank, world_size=world)
        model = torch.nn.parallel.DistributedDataParallel(model)
        no_sync = model.no_sync
    gen = torch.Generator().manual_seed(1 + rank)  # each rank its own batches
    rates = []
    for step in range(steps):
        batches = [(torch.randint(0, vocab, (batch, seq), generator=gen),
                    torch.randint(0, vocab, (batch, seq), generator=gen)) for _ in range(accum)]
        start = time.perf_counter()
        train_step(model, opt, batches, vocab, no_sync=no_sync)
        elapsed = time.perf_counter() - start
        if step >= 3:
            rates.append(world * accum * batch * seq / elapsed)
    if rank == 0:
        print(f"{statistics.median(rates):.1f}")
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
