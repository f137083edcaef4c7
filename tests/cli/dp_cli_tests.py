#!/usr/bin/env python3
"""End-to-end tests of data-parallel `tessera train` under mpirun, one scenario per CTest entry:

    dp_cli_tests.py SCENARIO --tessera BIN --mpirun MPIRUN --work DIR [--shared-data DIR]

Two ranks with one thread each train the tiny model of cli_tests.py; their losses must match one
process accumulating both ranks' micro-batches, only rank 0 prints and writes, and checkpoints
move between data-parallel layouts (ZeRO stages and world sizes). Four ranks split the model
(--tp, --sp, --pp) beside data parallelism and must match one process too, and resume from their
per-rank checkpoints as the uninterrupted run continues.
"""
import argparse
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_tests import TINY, Context, check, fail, losses, metrics  # noqa: E402

# Each rank takes every other batch: --dp 2 with batch 4 sees what one process sees with
# batch 4 and --grad-accum 2.
COMMON = ["--max-steps", 20, "--eval-every", 10, "--eval-steps", 4, "--sample-tokens", 0,
          "--batch-size", 4]


class DataParallelContext(Context):
    def __init__(self, args):
        super().__init__(args)
        self.mpirun = args.mpirun

    def mpi_train(self, ranks, out, *args, ok=True, timeout=120, resume=False, dp=None):
        """`tessera train` on `ranks` ranks (--dp ranks unless dp says): a new tiny run, or with
        resume its --resume."""
        run = ["--resume"] if resume else ["--data", self.text(), *map(str, TINY)]
        cmd = [self.mpirun, "--allow-run-as-root", "--oversubscribe", "-np", str(ranks),
               "-x", "OMP_NUM_THREADS=1", self.tessera, "train", "--out", self.path(out), *run,
               "--dp", str(dp or ranks), *map(str, args)]
        start = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, timeout=timeout)
        out_text, err = proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace")
        if ok != (proc.returncode == 0):
            fail(f"{' '.join(cmd)} exited with {proc.returncode}\n{out_text}\n{err}")
        return out_text, err, time.monotonic() - start


def close(a, b, rel):
    return abs(a - b) <= rel * abs(b)


def check_losses_match(got_folder, want_folder, rel, what):
    for key in ["train_loss", "val_loss"]:
        got, want = losses(metrics(got_folder), key), losses(metrics(want_folder), key)
        check([s for s, _ in got] == [s for s, _ in want], f"{what}: {key} steps {got} vs {want}")
        for (step, x), (_, y) in zip(got, want):
            check(close(x, y, rel), f"{what}: {key} at step {step}: {x} vs {y}")


def dp_matches_accumulation(ctx):
    ctx.train("one", *COMMON, "--grad-accum", 2)
    stdout, _, _ = ctx.mpi_train(2, "two", *COMMON)
    check_losses_match(ctx.path("two"), ctx.path("one"), 1e-5, "--dp 2 vs --grad-accum 2")
    # Rank 0 alone prints and writes.
    check(stdout.count("step    20/20 | train loss") == 1, "expected one step line:\n" + stdout)
    check("data parallel: 2 ranks" in stdout, stdout)
    for name in ["config.json", "loss.svg", "ckpt_000020/model.safetensors"]:
        check(os.path.exists(ctx.path(f"two/{name}")), f"missing {name}")
    check(len(metrics(ctx.path("two"))) == len(metrics(ctx.path("one"))),
          "metrics.jsonl written more than once per step")


def zero_checkpoint_resumes_anywhere(ctx):
    # A ZeRO-2 run's checkpoint at step 10 is the unsharded state: ZeRO-1 on 2 ranks and one
    # process both continue it as the uninterrupted run does.
    ctx.mpi_train(2, "zero2", *COMMON, "--save-every", 10, "--keep", 0, "--zero-stage", 2)
    for out, resume in [("zero1", lambda: ctx.mpi_train(2, "zero1", "--zero-stage", 1, resume=True)),
                        ("single", lambda: ctx.run("train", "--resume", "--out", ctx.path("single"),
                                                   "--threads", 1, "--grad-accum", 2))]:
        os.makedirs(ctx.path(out))
        for name in ["config.json", "tokenizer.chars", "ckpt_000010"]:
            src = ctx.path(f"zero2/{name}")
            (shutil.copytree if os.path.isdir(src) else shutil.copy)(src, ctx.path(f"{out}/{name}"))
        resume()
        want = dict(losses(metrics(ctx.path("zero2")), "train_loss"))
        got = losses(metrics(ctx.path(out)), "train_loss")
        check([s for s, _ in got] == list(range(11, 21)), f"{out}: resumed steps {got}")
        for step, loss in got:
            check(close(loss, want[step], 1e-5), f"{out}: step {step}: {loss} vs {want[step]}")


# Two layers (a pipeline needs one per stage), 4 micro-batches of 4 rows per step in every layout.
SPLIT = [*COMMON, "--n-layer", 2]


def model_parallel_matches_one_process(ctx):
    ctx.train("one", *SPLIT, "--grad-accum", 4)
    for out, dp, args in [("dp2_tp2_sp", 2, ["--tp", 2, "--sp", "--grad-accum", 2]),
                          ("tp2_pp2", 1, ["--tp", 2, "--pp", 2, "--grad-accum", 4]),
                          ("dp2_pp2", 2, ["--pp", 2, "--pp-schedule", "gpipe", "--grad-accum", 2])]:
        stdout, _, _ = ctx.mpi_train(4, out, *SPLIT, *args, dp=dp)
        check_losses_match(ctx.path(out), ctx.path("one"), 1e-5, out)
        check(stdout.count("step    20/20 | train loss") == 1, "expected one step line:\n" + stdout)
        check("model parallel: tp" in stdout, stdout)
        for rank in range(4):
            check(os.path.isdir(ctx.path(f"{out}/rank_{rank:05d}/ckpt_000020")),
                  f"{out}: rank {rank} wrote no checkpoint")


def model_parallel_resumes_its_layout(ctx):
    layout = ["--tp", 2, "--pp", 2, "--grad-accum", 4]
    ctx.mpi_train(4, "full", *SPLIT, *layout, "--save-every", 10, "--keep", 0, dp=1)
    os.makedirs(ctx.path("resumed"))
    for name in ["config.json", "tokenizer.chars"]:
        shutil.copy(ctx.path(f"full/{name}"), ctx.path(f"resumed/{name}"))
    for rank in range(4):
        shutil.copytree(ctx.path(f"full/rank_{rank:05d}/ckpt_000010"),
                        ctx.path(f"resumed/rank_{rank:05d}/ckpt_000010"))
    # A crash midway through step 20's save: ranks 0 and 1 wrote theirs, 2 and 3 did not. The
    # ranks agree on step 10, which all hold (each resuming its own newest would mix steps).
    for rank in [0, 1]:
        shutil.copytree(ctx.path(f"full/rank_{rank:05d}/ckpt_000020"),
                        ctx.path(f"resumed/rank_{rank:05d}/ckpt_000020"))
    _, err, _ = ctx.mpi_train(4, "resumed", *layout, resume=True, dp=1)
    check("not every rank finished saving step 20; resuming from step 10" in err, err)
    want = dict(losses(metrics(ctx.path("full")), "train_loss"))
    got = losses(metrics(ctx.path("resumed")), "train_loss")
    check([s for s, _ in got] == list(range(11, 21)), f"resumed steps {got}")
    for step, loss in got:
        check(close(loss, want[step], 1e-6), f"resumed step {step}: {loss} vs {want[step]}")
    # Another layout cannot read the per-rank parts.
    _, err, _ = ctx.mpi_train(4, "resumed", "--pp", 4, "--grad-accum", 4, resume=True, dp=1,
                              ok=False)
    check("as in the run being resumed" in err, err)
    # Nor may a new run write over them (its checkpoints are in the rank folders).
    _, err, _ = ctx.mpi_train(4, "resumed", *SPLIT, *layout, dp=1, ok=False)
    check("expected an output folder without checkpoints" in err, err)


def lora_dp_matches_accumulation(ctx):
    # LoRA branches on a fresh tiny model: DDP reduces only their gradients (the frozen weights
    # have none), ZeRO-1 shards only their AdamW state.
    lora = ["--lora-rank", 4, "--lora-targets", "c_attn,c_fc"]
    ctx.train("one", *COMMON, *lora, "--grad-accum", 2)
    for name, extra in [("two", []), ("zero", ["--zero-stage", 1])]:
        stdout, _, _ = ctx.mpi_train(2, name, *COMMON, *lora, *extra)
        check("LoRA: rank 4" in stdout, stdout)
        check_losses_match(ctx.path(name), ctx.path("one"), 1e-5, f"LoRA --dp 2 {extra}")
        check(os.path.exists(ctx.path(f"{name}/adapter/adapter_model.safetensors")),
              "no adapter written")
    _, err, _ = ctx.mpi_train(2, "lora_tp", "--max-steps", 2, "--tp", 2, *lora, dp=1, ok=False)
    check("expected --lora-rank without --tp or --pp" in err, err)


def mixtral_dp_matches_accumulation(ctx):
    # A mixture of experts with its load-balancing loss: each rank's loss carries its own
    # micro-batch's balance term, as each accumulated micro-batch does.
    moe = ["--model", "llama", "--n-head", 4, "--n-experts", 4, "--router-aux-loss-coef", 0.01]
    ctx.train("one", *COMMON, *moe, "--grad-accum", 2)
    for name, extra in [("two", []), ("zero", ["--zero-stage", 1])]:
        ctx.mpi_train(2, name, *COMMON, *moe, *extra)
        check_losses_match(ctx.path(name), ctx.path("one"), 1e-5, f"Mixtral --dp 2 {extra}")
    _, err, _ = ctx.mpi_train(2, "moe_tp", "--max-steps", 2, "--tp", 2, *moe, dp=1, ok=False)
    check("expected --n-experts without --tp or --pp" in err, err)


def bad_layouts_fail_clearly(ctx):
    _, err, seconds = ctx.mpi_train(2, "bad", "--max-steps", 2, "--dp", 3, ok=False)
    check("expected 3 processes for --dp 3" in err, err)
    check(seconds < 60, f"took {seconds:.0f} s to fail")
    _, err = ctx.train("zero", "--max-steps", 2, "--zero-stage", 1, ok=False)
    check("expected --zero-stage with --dp > 1" in err, err)
    _, err, _ = ctx.mpi_train(2, "zero_tp", "--max-steps", 2, "--tp", 2, "--zero-stage", 1, dp=1,
                              ok=False)
    check("expected --zero-stage 0 with --tp or --pp > 1" in err, err)


SCENARIOS = {f.__name__: f for f in [dp_matches_accumulation, zero_checkpoint_resumes_anywhere,
                                     model_parallel_matches_one_process,
                                     model_parallel_resumes_its_layout, bad_layouts_fail_clearly,
                                     lora_dp_matches_accumulation,
                                     mixtral_dp_matches_accumulation]}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", choices=sorted(SCENARIOS))
    parser.add_argument("--tessera", required=True)
    parser.add_argument("--mpirun", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--shared-data")
    args = parser.parse_args()
    ctx = DataParallelContext(args)
    SCENARIOS[args.scenario](ctx)
    shutil.rmtree(ctx.work, ignore_errors=True)
    print("ok")


if __name__ == "__main__":
    main()
