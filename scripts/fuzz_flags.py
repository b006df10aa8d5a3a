#!/usr/bin/env python3
"""Extreme flag values against dlperf: every number a command takes, set to 0, -1, 2^31, 2^63 - 1,
1e308, nan, inf and the like, alone or two and three at a time, must end in one clear message and
a non-zero exit, or in a result whose every number is a number: never a crash, a hang, an internal
message, or "nan" / "inf" printed as a figure.

    scripts/fuzz_flags.py                         # build/dlperf, 80 cases per command
    scripts/fuzz_flags.py --only plan-transformer --cases 300 --seed 7
    scripts/fuzz_flags.py --dlperf build-asan/dlperf --timeout 300   # UBSan reports a signed overflow

The numeric flags come from each command's --help (INT, UINT and FLOAT options), so a new flag is
fuzzed without editing this file. The commands, each on a small job so a case takes seconds:

    plan-cnn          plan -m MODEL --targets cpu,h100-sxm,tpu-v4 (shapes: --input)
    plan-transformer  plan --transformer SIZE --targets a100-80gb,h100-sxm, tpu-v4 first or t4 (sizes: L,H,A,S,V)
    train             train on 64 synthetic 1x8x8 images, one epoch
    profile           profile on the same, a few steps
    lab               lab workers on the same, one worker

Flags that set how much work a run does (epochs, images, steps) take small or invalid values
only in train, profile and lab: a valid huge one is a long run, not a fault. Findings are listed with
their command; exit 1 if any. Its first runs (2026-11-29) found --tokens inf and 1e308, --pue 1e308
planned as jobs of inf years or inf kWh, and --epochs 2^63 - 1 wrapping a run's step count
negative; the int64 overflows of --dp x --micro-batch (to 0: a crash on % 0) and --pp x
--virtual-stages (to a divisor of the layers: a 6e8-year plan), found by hand while writing it,
are among its cases.
"""
import argparse
import collections
import itertools
import os
import random
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fuzz_inputs import ROOT, run, verdict  # noqa: E402  (one verdict for both fuzzers)

EXTREMES = ["0", "-1", "1", "2", "3", "7", "0.5", "-0.5", "1e-300", "2147483647", "2147483648", "4294967297",
            "9007199254740993", "4611686018427387904", "9223372036854775807", "9223372036854775808",
            "1e308", "-1e308", "inf", "-inf", "nan", "abc", ""]
SMALL = ["0", "-1", "1", "2", "abc", "", "9223372036854775808", "nan"]  # for the flags that set how much work a run does
WORK = {"--epochs", "-e", "--train-limit", "--test-limit", "--max-workers", "--batches", "--skip", "--steps", "--profile-skip", "--profile-steps",
        "--eval-every", "--every", "--profile-every", "--warmup-epochs", "--step-epochs", "--workers", "-j", "--threads",
        "--seed", "--scaling"}
SHAPES = ["1x1x1", "1x28x28", "3x32x32", "0x28x28", "1x0x28", "1x-1x28", "1x2147483648x1", "65536x65536x65536",
          "3x224x224", "1x1x100000000", "x", "1x28", "1x28x28x28", "1.5x28x28"]
SIZES = ["1,1,1,1,1", "2,64,2,8,100", "12,768,12,1024,50257", "96,12288,96,2048,50257", "0,768,12,1024,50257",
         "12,768,0,1024,50257", "12,2147483648,2,1024,50257", "9223372036854775807,1,1,1,1", "12,768,12,1024",
         "1,1,1,9223372036854775807,1", "128,25600,160,2048,51200", "a,b,c,d,e"]
NONFINITE = re.compile(r"(?<![\w-])-?(nan|inf)(?![\w-])", re.IGNORECASE)
# In a plan (no --against, whose error columns are signed): a share below zero or a step of no
# time is a target planned from nothing (plan --devices once listed every layout of a target
# without the job's precision at 0.00 us and -100% MFU).
IMPOSSIBLE_IN_PLAN = re.compile(r"(?<![\w.+-])-\d+(\.\d+)?%|\s0\.00 us\s")


def numeric_flags(dlperf, command):
    """The INT/UINT/FLOAT options --help lists for `command`, by their long name."""
    text = subprocess.run([dlperf, command, "--help"], capture_output=True, text=True).stdout
    flags = []
    for line in text.splitlines():
        m = re.match(r"\s+(?:-\w,)?(--[\w-]+)\s+(INT|UINT|FLOAT)\b", line)
        if m:
            flags.append(m.group(1))
    return flags


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dlperf", default=os.path.join(ROOT, "build", "dlperf"))
    ap.add_argument("--cases", type=int, default=80, help="cases per command")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", default="", help="comma-separated commands (plan-cnn, plan-transformer, train, profile, lab)")
    ap.add_argument("--timeout", type=float, default=60, help="seconds before a run counts as a hang")
    ap.add_argument("--messages", action="store_true", help="also list the distinct refusals, to read them as a user would")
    args = ap.parse_args()
    dlperf = os.path.abspath(args.dlperf)
    if not os.access(dlperf, os.X_OK):
        sys.exit(f"fuzz_flags: {dlperf} is not there; build it first (scripts/setup.sh)")
    rng = random.Random(args.seed)
    work = tempfile.mkdtemp(prefix="dlperf-fuzz-flags-")
    # The machine profile plan reads, measured once: without it each plan measures the ceilings.
    # By the plain build where there is one: measuring the FMA peak under ASan takes minutes.
    plain = os.path.join(ROOT, "build", "dlperf")
    rc, text = run([plain if os.access(plain, os.X_OK) else dlperf, "bench", "all", "--quick", "--threads", "1"], work, 600)
    if rc != 0:
        sys.exit(f"fuzz_flags: measuring the machine failed:\n{text}")
    labs = itertools.count()  # a report folder a lab: one that holds a lab is refused without --resume
    tiny = ["-d", "synthetic:1x8x8:64", "-m", "mlp", "-b", "16", "--test-limit", "32", "--no-progress", "--runs-dir", ""]
    commands = {
        # Some plans with data parallelism overlapped (--grad-overlap: its bucket schedule).
        "plan-cnn": (lambda: ["plan", "-m", rng.choice(["logreg", "small", "medium", "resnet18"]),
                              "--targets", "cpu,h100-sxm,tpu-v4",
                              *rng.choice([[], ["--scaling", "16", "--grad-overlap", rng.choice(["on", "off"])], ["--scaling", "8", "--bucket-mb", "2"]])], "plan", {"--input": SHAPES}),
        "plan-transformer": (lambda: ["plan", "--transformer", rng.choice(["gpt2-small", "gpt3-175b"]), "--targets",
                                      rng.choice(["a100-80gb,h100-sxm", "tpu-v4,h100-sxm", "t4"]),
                                      *rng.choice([[], ["--dp", "2", "--grad-overlap", "on"]])], "plan", {"--transformer": SIZES}),
        "train": (lambda: ["train", *tiny, "-e", "1"], "train", {}),
        "profile": (lambda: ["profile", *tiny, "--skip", "1", "--steps", "2"], "profile", {}),
        "lab": (lambda: ["lab", "workers", "-d", "synthetic:1x8x8:64", "-m", "mlp", "-b", "16", "--max-workers", "1", "--test-limit", "32",
                         "--no-progress", "-o", f"lab{next(labs)}"], "lab", {}),
    }
    only = set(filter(None, args.only.split(",")))
    if only - commands.keys():
        sys.exit(f"fuzz_flags: no command {', '.join(sorted(only - commands.keys()))}; the commands: {', '.join(commands)}")
    findings, tally, messages = [], collections.defaultdict(collections.Counter), collections.Counter()
    for name, (base, command, texts) in commands.items():
        if only and name not in only:
            continue
        flags = numeric_flags(dlperf, command)
        if name.startswith("plan-cnn"):  # the Transformer's flags need --transformer: a refusal, every time
            flags = [f for f in flags if f not in ("--tokens", "--micro-batch", "--dp", "--tp", "--pp", "--virtual-stages", "--zero")]
        if name == "plan-transformer":  # and the CNN run's are refused beside it
            flags = [f for f in flags if f not in ("--classes", "--workers", "--threads", "--dataset-size", "--epochs")]
        choices = flags + list(texts)
        for case in range(args.cases):
            cmd = [dlperf, *base()]
            for flag in rng.sample(choices, min(len(choices), rng.choice([1, 1, 2, 3]))):
                if flag in texts:
                    value = rng.choice(texts[flag])
                elif name in ("train", "profile", "lab") and flag in WORK:
                    value = rng.choice(SMALL)
                else:
                    value = rng.choice(EXTREMES)
                if flag in cmd:  # the base's own value gives way (a flag given twice is refused)
                    i = cmd.index(flag)
                    del cmd[i:i + 2]
                cmd += [flag, value]
            rc, out = run(cmd, work, args.timeout)
            v = verdict(rc, out)
            if v == "ok" and NONFINITE.search(out):
                v = "a figure that is not a number"
            elif v == "ok" and command == "plan" and IMPOSSIBLE_IN_PLAN.search(out):
                v = "an impossible figure"
            tally[name][v] += 1
            for line in out.splitlines():
                if line.startswith("dlperf: error"):
                    messages[line.strip()] += 1
            if v not in ("ok", "refused"):
                last = [l for l in out.strip().splitlines() if l.strip()][-3:]
                findings.append((name, v, " ".join(f"'{c}'" if c == "" else c for c in cmd), last))
        print(f"{name:<17} {args.cases} cases: " + ", ".join(f"{n} {k}" for k, n in sorted(tally[name].items())), flush=True)
    if args.messages:
        print(f"\nthe refusals ({len(messages)} distinct):")
        for text, n in messages.most_common():
            print(f"  {n:4d}  {text}")
    if not findings:
        print("no findings")
        return 0
    print(f"\n{len(findings)} findings:")
    for name, v, cmd, last in findings:
        print(f"- {name}, {v}:\n  {cmd}")
        for line in last:
            print(f"    {line}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
