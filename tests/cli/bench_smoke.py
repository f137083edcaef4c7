"""CI's smoke run of one `tessera bench` suite: runs it with --quick, then checks what it wrote
(the tessera-bench/1 JSON schema, finite samples, parseable SVG charts), that `bench report`
renders it and that comparing it with itself finds no change. No timing is asserted.

  bench_smoke.py SUITE --tessera BIN --work DIR [--with-model] [-- extra suite arguments]

--with-model first trains a tiny character-level GPT for two steps (no data files needed) and
passes its run folder as --model (the serve suite starts its server from it).
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET


def check(cond, what):
    if not cond:
        sys.exit(f"bench_smoke: {what}")


def check_result(path, suite):
    with open(path) as f:
        r = json.load(f)
    check(r.get("format") == "tessera-bench/1", f"format is {r.get('format')!r}")
    check(r["suite"] == suite, f"suite is {r['suite']!r}, expected {suite!r}")
    m = r["machine"]
    check(m["cpu_model"] and m["cores"] > 0 and isinstance(m["cpu_flags"], list), f"machine {m}")
    check(len(r["commit"]) >= 7 and r["date"].endswith("Z"), "commit and date")
    check(r["command"].startswith("tessera bench " + suite), f"command {r['command']!r}")
    check(r["figures"], "no figures")
    for fig in r["figures"]:
        s = fig["samples"]
        check(s and all(math.isfinite(x) for x in s), f"samples of {fig['name']}: {s}")
        check(min(s) == fig["min"] and max(s) == fig["max"] and fig["min"] <= fig["median"] <= fig["max"],
              f"summary of {fig['name']}")
        check(fig["better"] in ("higher", "lower") and fig["unit"] is not None, f"{fig}")
    return r


def train_tiny_model(tessera, work):
    text = os.path.join(work, "text.txt")
    with open(text, "w") as f:
        f.write("the quick brown fox jumps over the lazy dog. " * 200)
    run = os.path.join(work, "model")
    cmd = [tessera, "train", "--data", text, "--n-layer", "1", "--n-head", "2", "--n-embd", "32",
           "--seq-len", "96", "--batch-size", "2", "--max-steps", "2", "--eval-every", "0",
           "--eval-steps", "1", "--sample-tokens", "0", "--threads", "1", "--out", run]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    check(p.returncode == 0, f"training the tiny model failed:\n{p.stdout}\n{p.stderr}")
    return run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("suite")
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--expect-pytorch", action="store_true",
                    help="fail unless PyTorch figures are present (when torch imports)")
    ap.add_argument("--with-model", action="store_true")
    ap.add_argument("extra", nargs="*")
    a = ap.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    out = os.path.join(a.work, "result.json")
    svg = os.path.join(a.work, "svg")
    extra = list(a.extra)
    if a.with_model:
        extra += ["--model", train_tiny_model(a.tessera, a.work)]
    cmd = [a.tessera, "bench", a.suite, "--quick", "--json", out, "--svg", svg] + extra
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    check(p.returncode == 0, f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    r = check_result(out, a.suite)
    check("## " + a.suite in p.stdout, "the table was not printed")
    for name in os.listdir(svg) if os.path.isdir(svg) else []:
        root = ET.parse(os.path.join(svg, name)).getroot()
        check(root.tag.endswith("svg") and root.find(".//{*}path") is not None, f"chart {name}")
    if a.expect_pytorch and subprocess.run(["/usr/bin/python3", "-c", "import torch"]).returncode == 0:
        frameworks = {f["params"].get("framework") for f in r["figures"]}
        check("pytorch" in frameworks, "torch imports but no PyTorch figure was measured")
    rep = subprocess.run([a.tessera, "bench", "report", out], capture_output=True, text=True)
    check(rep.returncode == 0 and "| " in rep.stdout, f"bench report failed: {rep.stderr}")
    # Compared with itself, every figure matches and none changed.
    cmp = subprocess.run([a.tessera, "bench", "compare", out, out], capture_output=True, text=True)
    # (figures whose median is 0, such as a count of failed requests, have no ratio to compare)
    check(cmp.returncode == 0 and " figures compared, 0 regressions" in cmp.stdout,
          f"bench compare: {cmp.stdout[-500:]} {cmp.stderr}")
    print(f"bench_smoke: {a.suite}: {len(r['figures'])} figures OK")


if __name__ == "__main__":
    main()
