#!/usr/bin/env python3
"""`tessera train` under faults (#19), one scenario per CTest entry:

    train_faults.py SCENARIO --tessera BIN --work DIR [--shared-data DIR]

sigkill_resume: a run with a checkpoint every step is killed with SIGKILL at random times (half
of them as soon as a checkpoint write has begun) and resumed, again and again until it ends.
After every kill the newest checkpoint must load, no step that was saved may be lost, and the
run must end with the losses and the final weights and optimizer state of an uninterrupted run,
bit for bit.

full_disk: the disk fills during a checkpoint write, on a small tmpfs (root only; skipped
otherwise) and under RLIMIT_FSIZE (a file-size limit: writes fail with EFBIG). The run must
stop with a clear error (exit 1, no signal), leave no temp files, keep its previous checkpoint
loadable and, given room again, resume to the uninterrupted run's result.
"""
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cli"))
import cli_tests  # noqa: E402
from cli_tests import TINY, check, fail, losses, metrics  # noqa: E402

# Kill times and targets: seeded, so a failure reproduces (TESSERA_FAULT_SEED picks another).
RNG = random.Random(int(os.environ.get("TESSERA_FAULT_SEED", "19")))

STEPS = 40
# The SIGKILL run: long enough for about fifty kills (fewer in the sanitizer build, ~10x slower).
KILL_STEPS = int(os.environ.get("TESSERA_FAULT_STEPS", "240"))
RUN = ["--max-steps", STEPS, "--eval-every", 0, "--sample-tokens", 0, "--dropout", 0.1]


def checkpoints(folder):
    if not os.path.isdir(folder):
        return []
    return sorted(d for d in os.listdir(folder) if d.startswith("ckpt_"))


def temp_folders(folder):
    return [d for d in os.listdir(folder) if d.startswith(".ckpt_")] if os.path.isdir(folder) else []


def check_loadable(ctx, folder, why):
    """The newest checkpoint loads (its checksums verified) into a model that generates."""
    proc = subprocess.run([ctx.tessera, "generate", "--model", folder, "--prompt", "T",
                           "--max-new-tokens", "2", "--threads", "1"], capture_output=True,
                          timeout=60)
    check(proc.returncode == 0,
          f"{why}: the newest checkpoint of {folder} ({checkpoints(folder)[-1:]}) does not load:\n"
          + proc.stderr.decode(errors="replace"))


def temp_step(name):
    """The step of a temp folder .ckpt_<step>.tmp-<suffix>."""
    return int(name[len(".ckpt_"):].split(".")[0])


def check_same_as(reference, folder, why, steps=STEPS):
    a = losses(metrics(reference), "train_loss")
    b = losses(metrics(folder), "train_loss")
    check(a == b, f"{why}: losses differ from the uninterrupted run:\n" +
          "\n".join(f"{x} | {y}" for x, y in zip(a, b) if x != y))
    last = f"ckpt_{steps:06d}"
    for name in ["model.safetensors", "optimizer.safetensors"]:
        with open(os.path.join(reference, last, name), "rb") as f:
            x = f.read()
        with open(os.path.join(folder, last, name), "rb") as f:
            y = f.read()
        check(x == y, f"{why}: {last}/{name} differs from the uninterrupted run")


def sigkill_resume(ctx, rng=RNG):
    args = [*RUN, "--max-steps", KILL_STEPS, "--save-every", 1, "--keep", 2]
    t0 = time.monotonic()
    ctx.train("full", *args)
    full_seconds = time.monotonic() - t0
    run = ctx.path("killed")
    kills = during_save = restarts = 0
    saved = -1  # the newest step seen saved: a kill may never take the run back before it
    for iteration in range(300):
        cmd = [ctx.tessera, "train", "--data", ctx.text(), "--out", run, *map(str, TINY + args)]
        if checkpoints(run):
            cmd = [ctx.tessera, "train", "--resume", "--out", run, "--threads", "1"]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        # Odd iterations: as the write of a checkpoint 1-4 steps on begins (its temp folder
        # appears), plus up to 2 ms. Even ones: at a time within the first 6% of a run's
        # length (startup and checkpoint loading included).
        at_save = iteration % 2 == 1
        target = max(saved, 0) + rng.randint(1, 4)
        deadline = time.monotonic() + rng.uniform(0.0, 0.06 * full_seconds)
        while proc.poll() is None:
            if at_save:
                if any(temp_step(t) >= target for t in temp_folders(run)):
                    time.sleep(rng.uniform(0.0, 0.002))
                    break
            elif time.monotonic() >= deadline:
                break
            time.sleep(0.0005)
        if proc.poll() is not None:  # finished before the kill
            _, err = proc.communicate()
            check(proc.returncode == 0, f"iteration {iteration}: exit {proc.returncode}\n"
                  + err.decode(errors="replace"))
            break
        proc.kill()
        proc.communicate()
        kills += 1
        during_save += bool(temp_folders(run))
        ckpts = checkpoints(run)
        if not ckpts:
            check(saved < 0, f"iteration {iteration}: all checkpoints gone after a kill")
            restarts += 1  # killed before its first checkpoint: start afresh
            continue
        step = int(ckpts[-1][5:])
        check(step >= saved, f"iteration {iteration}: newest checkpoint {step} < {saved} seen")
        saved = step
        for c in ckpts:  # every ckpt_ folder is complete: saves and deletions are atomic
            for name in ["model.safetensors", "optimizer.safetensors", "state.json"]:
                check(os.path.exists(os.path.join(run, c, name)), f"{c} lacks {name}")
        check_loadable(ctx, run, f"iteration {iteration}")
    else:
        fail("the killed run never finished")
    check(not temp_folders(run), f"temp folders left after the last run: {temp_folders(run)}")
    check_same_as(ctx.path("full"), run, "after SIGKILLs", KILL_STEPS)
    print(f"sigkill_resume: {kills} SIGKILLs ({during_save} with a checkpoint write or deletion "
          f"in progress, {restarts} before the first checkpoint), every newest checkpoint "
          f"loadable, the resumed run equals the uninterrupted one bit for bit "
          f"({KILL_STEPS} steps, uninterrupted {full_seconds:.2f} s)")


def fill_disk(ctx, run, setup, why):
    """Trains into run until the disk is full; checks how it failed; returns the saved step."""
    args = [*RUN, "--save-every", 2, "--keep", 0]
    cmd = [ctx.tessera, "train", "--data", ctx.text(), "--out", run, *map(str, TINY + args)]
    proc = subprocess.run(cmd, capture_output=True, timeout=120, preexec_fn=setup)
    err = proc.stderr.decode(errors="replace")
    check(proc.returncode == 1, f"{why}: expected exit 1 (a clear error), got {proc.returncode}:\n"
          + err)
    check("tessera: [" in err and ("No space left on device" in err or "File too large" in err),
          f"{why}: no clear error:\n{err}")
    check(not temp_folders(run), f"{why}: temp folders left: {temp_folders(run)}")
    check(checkpoints(run), f"{why}: no checkpoint was saved before the disk filled")
    check_loadable(ctx, run, why)
    message = [line for line in err.splitlines() if line.startswith("tessera: [")][0]
    return int(checkpoints(run)[-1][5:]), message


def resume_to_end(ctx, run, why):
    ctx.run("train", "--resume", "--out", run, "--threads", 1)
    check_same_as(ctx.path("full"), run, why)


def full_disk(ctx):
    ctx.train("full", *RUN, "--save-every", 2, "--keep", 0)
    ckpt_bytes = sum(os.path.getsize(os.path.join(ctx.path("full"), "ckpt_000002", n))
                     for n in os.listdir(os.path.join(ctx.path("full"), "ckpt_000002")))

    # The run as it was at step 4 (a copy of the uninterrupted one), resumed under RLIMIT_FSIZE
    # below one checkpoint file: its next save fails.
    run = ctx.path("fsize")
    os.makedirs(run)
    for name in ["config.json", "tokenizer.chars", "ckpt_000004"]:
        src = os.path.join(ctx.path("full"), name)
        (shutil.copytree if os.path.isdir(src) else shutil.copy)(src, os.path.join(run, name))
    with open(os.path.join(run, "metrics.jsonl"), "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in metrics(ctx.path("full")) if r["step"] <= 4)

    def limit_file_size():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a fatal signal
        resource.setrlimit(resource.RLIMIT_FSIZE, (ckpt_bytes // 4, ckpt_bytes // 4))

    proc = subprocess.run([ctx.tessera, "train", "--resume", "--out", run, "--threads", "1",
                           ], capture_output=True, timeout=120,
                          preexec_fn=limit_file_size)
    err = proc.stderr.decode(errors="replace")
    check(proc.returncode == 1 and "File too large" in err, f"RLIMIT_FSIZE: exit "
          f"{proc.returncode}, want 1 with 'File too large':\n{err}")
    check(checkpoints(run)[-1] == "ckpt_000004", f"RLIMIT_FSIZE: {checkpoints(run)}")
    check(not temp_folders(run), f"RLIMIT_FSIZE: temp folders left: {temp_folders(run)}")
    check_loadable(ctx, run, "RLIMIT_FSIZE")
    fsize_error = [line for line in err.splitlines() if line.startswith("tessera: [")][0]
    resume_to_end(ctx, run, "resumed after RLIMIT_FSIZE")
    print(f"full_disk: RLIMIT_FSIZE {ckpt_bytes // 4} bytes: exit 1 with '{fsize_error}', "
          f"ckpt_000004 loadable, resumed to the uninterrupted result")

    # A tmpfs with room for a few checkpoints.
    mnt = ctx.path("tmpfs")
    os.makedirs(mnt)
    size_kb = (4 * ckpt_bytes + 256 * 1024) // 1024
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", mnt],
                           capture_output=True)
    if mount.returncode != 0:
        print("SKIP tmpfs part: mount -t tmpfs is not permitted here (needs root): "
              + mount.stderr.decode(errors="replace").strip())
        return
    try:
        run = os.path.join(mnt, "run")
        # The tokenizer and data live outside; only the run folder is on the small disk.
        step, message = fill_disk(ctx, run, None, f"tmpfs of {size_kb} KiB")
        subprocess.run(["mount", "-o", "remount,size=64m", mnt], check=True)
        resume_to_end(ctx, run, "resumed after the tmpfs filled")
        print(f"full_disk: tmpfs {size_kb} KiB filled at a checkpoint after step {step}: exit 1 "
              f"with '{message}', ckpt_{step:06d} loadable, resumed to the uninterrupted result")
    finally:
        subprocess.run(["umount", "-l", mnt])


SCENARIOS = {"sigkill_resume": sigkill_resume, "full_disk": full_disk}

if __name__ == "__main__":
    cli_tests.main(SCENARIOS)
