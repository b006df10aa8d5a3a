#!/usr/bin/env python3
"""Whole training epochs under two settings side by side: `dlperf train` for one epoch with
each, alternating A, B, A, B, ..., and the median epoch time of both with the ratio, for each
job given. For a change whose effect lies outside any one op (how threads, the loader and the
step share the cores), which ab_profile.py's per-op table cannot show.

One build under two environments, for example the CPU engine's small layers on all threads (A)
against on one thread each (B, the default):
  python3 scripts/ab_train.py --env-a DLPERF_CPU_SMALL_LAYERS=all-threads --runs 5 \\
      "-m logreg -b 16" "-m mlp -b 16" "-m medium -b 64 --train-limit 10000 --test-limit 1000"

Two builds: --dlperf-a and --dlperf-b. Each job is a string of `dlperf train` flags; the script
adds --epochs 1 --runs-dir '' --no-progress.
"""
import argparse
import os
import re
import shlex
import statistics
import subprocess
import sys


def epoch_ms(dlperf, flags, env):
    """The epoch's training time in ms, as `dlperf train` reports it."""
    cmd = [dlperf, "train", *flags, "--epochs", "1", "--runs-dir", "", "--no-progress"]
    r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env})
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stderr}")
    m = re.search(r"done: 1 epoch in ([\d.]+) (ms|s) of training", r.stdout)
    if not m:
        sys.exit(f"no epoch time in the output of {' '.join(cmd)}:\n{r.stdout}")
    return float(m.group(1)) * (1e3 if m.group(2) == "s" else 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("jobs", nargs="+", help='`dlperf train` flags of a job, quoted: "-m mlp -b 16"')
    ap.add_argument("--dlperf-a", default="build/dlperf")
    ap.add_argument("--dlperf-b", default="build/dlperf")
    ap.add_argument("--runs", type=int, default=5, help="epochs of each side per job, alternating")
    ap.add_argument("--env-a", action="append", default=[], metavar="KEY=VALUE", help="an environment setting for side A")
    ap.add_argument("--env-b", action="append", default=[], metavar="KEY=VALUE", help="an environment setting for side B")
    args = ap.parse_args()
    env = {side: dict(kv.split("=", 1) for kv in getattr(args, "env_" + side)) for side in ("a", "b")}
    for side in ("a", "b"):
        print(f"{side.upper()}: {getattr(args, 'dlperf_' + side)} {' '.join(getattr(args, 'env_' + side))}")
    print(f"\nmedian epoch of {args.runs} each, ms (range)\n")
    print(f"{'job':44} {'A':>18} {'B':>18} {'B / A':>6}")
    for job in args.jobs:
        flags = shlex.split(job)
        times = {"a": [], "b": []}
        for _ in range(args.runs):
            for side in ("a", "b"):
                times[side].append(epoch_ms(getattr(args, "dlperf_" + side), flags, env[side]))
        med = {s: statistics.median(t) for s, t in times.items()}
        cell = {s: f"{med[s]:.1f} ({min(times[s]):.0f}-{max(times[s]):.0f})" for s in times}
        print(f"{job:44} {cell['a']:>18} {cell['b']:>18} {med['b'] / med['a']:6.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
