#!/usr/bin/env python3
"""Two dlperf builds side by side, op by op: `dlperf profile` with each, alternating, and the
median self time of every (layer, phase) for both with the ratio. For checking a change to one
op's code: the ops it did not touch show how much the machine drifted between runs.

  git stash && cmake --build build && cp build/dlperf /tmp/dlperf-before && git stash pop && cmake --build build
  python3 scripts/ab_profile.py /tmp/dlperf-before build/dlperf --model small --batch-size 256 --runs 3

It prints a row for each (layer, phase) that takes at least --min-share of the step in either
build, sorted by build A's time, then the step time; with --skip 0 also the first step, which
pays for what a run does once (the first touch of every buffer).

One build under two settings: give the same binary twice and the settings with --env-a/--env-b,
for example oneDNN's AVX2 kernels against its AVX-512 ones on an AVX-512 CPU:
  python3 scripts/ab_profile.py build/dlperf build/dlperf --env-a ONEDNN_MAX_CPU_ISA=AVX2 --batch-size 256
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile


def first_step_ms(trace_path):
    """The first recorded step's ms, from the trace's "step" events."""
    with open(trace_path) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    steps = [e for e in events if e.get("name") == "step" and e.get("ph") == "X"]
    return min(steps, key=lambda e: e["ts"])["dur"] / 1e3


def profile(dlperf, args, env):
    """One `dlperf profile` run: {(layer, phase): ms a step}, the step's ms and the first step's."""
    with tempfile.TemporaryDirectory() as runs:
        cmd = [dlperf, "profile", "--model", args.model, "--batch-size", str(args.batch_size), "--skip", str(args.skip),
               "--steps", str(args.steps), "--train-limit", str(args.batch_size * (args.skip + args.steps + 2)),
               "--test-limit", "500", "--runs-dir", runs, "--no-progress", "--threads", str(args.threads),
               "--precision", args.precision]
        r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env})
        if r.returncode != 0:
            sys.exit(f"{dlperf} failed:\n{r.stderr}")
        path = [p for p in glob.glob(os.path.join(runs, "*-profile-*.json")) if not p.endswith(".trace.json")][0]
        table = json.load(open(path))
        first = first_step_ms(path[:-len(".json")] + ".trace.json")
    steps = table["step"]["steps"]
    ops = {(row["name"], row["phase"]): row["self_s"] / steps * 1e3 for row in table["rows"]}
    return ops, table["step"]["step_s"] * 1e3, first


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a", help="build A's dlperf (the baseline)")
    ap.add_argument("b", help="build B's dlperf")
    ap.add_argument("--model", default="medium")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--runs", type=int, default=3, help="runs of each build, alternating A, B, A, B, ...")
    ap.add_argument("--skip", type=int, default=5)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--threads", type=int, default=0, help="compute threads (0 = all cores)")
    ap.add_argument("--precision", default="fp32", help="fp32, or bf16 on a CPU with AVX512-BF16")
    ap.add_argument("--min-share", type=float, default=0.01, help="leave out rows under this share of the step")
    ap.add_argument("--env-a", action="append", default=[], metavar="KEY=VALUE", help="an environment setting for build A's runs")
    ap.add_argument("--env-b", action="append", default=[], metavar="KEY=VALUE", help="an environment setting for build B's runs")
    args = ap.parse_args()
    env = {side: dict(kv.split("=", 1) for kv in getattr(args, "env_" + side)) for side in ("a", "b")}
    for side in ("a", "b"):
        if env[side]:
            print(f"build {side.upper()}: {getattr(args, side)} with " + " ".join(getattr(args, "env_" + side)))

    runs = {"a": [], "b": []}
    for i in range(args.runs):
        for side in ("a", "b"):
            runs[side].append(profile(getattr(args, side), args, env[side]))
            print(f"run {i + 1}/{args.runs} of build {side.upper()} done", file=sys.stderr, flush=True)

    def median_ms(side, key):
        return statistics.median(ops.get(key, 0.0) for ops, _, _ in runs[side])

    step = {side: statistics.median(s for _, s, _ in runs[side]) for side in runs}
    first = {side: statistics.median(f for _, _, f in runs[side]) for side in runs}
    keys = {k for side in runs for ops, _, _ in runs[side] for k in ops}
    rows = [(k, median_ms("a", k), median_ms("b", k)) for k in keys]
    rows = [r for r in rows if max(r[1] / step["a"], r[2] / step["b"]) >= args.min_share]
    rows.sort(key=lambda r: -r[1])
    print(f"{args.model} at batch {args.batch_size}, {args.precision}: median of {args.runs} profiles each ({args.steps} steps), ms a step\n")
    print(f"{'layer':22} {'phase':16} {'A ms':>8} {'B ms':>8} {'B / A':>6}")
    print("-" * 64)
    for (name, phase), a, b in rows:
        ratio = f"{b / a:6.2f}" if a > 0 else f"{'-':>6}"
        print(f"{name:22} {phase:16} {a:8.3f} {b:8.3f} {ratio}")
    print("-" * 64)
    print(f"{'step':39} {step['a']:8.2f} {step['b']:8.2f} {step['b'] / step['a']:6.2f}")
    if args.skip == 0:
        print(f"{'first step (in the step above)':39} {first['a']:8.2f} {first['b']:8.2f} {first['b'] / first['a']:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
