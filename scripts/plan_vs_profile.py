#!/usr/bin/env python3
"""The CPU plan's time for every layer beside what `dlperf profile` measures, for fitting the
engine model (`EngineModel` in src/plan/step_time.h) on a CPU it has no fit for, or checking one.

  python3 scripts/plan_vs_profile.py --model medium --batches 64,256,1024 --runs 3

For each batch size it runs `dlperf plan --layers` once and `dlperf profile` --runs times, and
prints each layer's forward and backward time, planned and measured (the median over the runs),
with measured / planned, then the step. A fused layer (bn1+relu1 in the profile) is compared with
the sum of its parts' plans. Both use the same ceilings where runs/machine-profile.json exists
(`dlperf bench all`); otherwise each measures its own in a second, and they differ a little.
With --json the rows are also written out, for a fit to read.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def plan_layers(dlperf, model, batch, extra):
    """{layer: (forward_s, backward_s)} and the planned step, from `dlperf plan --layers --json`."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "plan.json")
        subprocess.run([dlperf, "plan", "-m", model, "-b", str(batch), "--layers", "--json", out] + extra,
                       check=True, stdout=subprocess.DEVNULL)
        with open(out) as f:
            p = json.load(f)
    return {l["layer"]: (l["forward_s"], l["backward_s"]) for l in p["layers"]}, p["step"]["step_s"]


def profile_layers(dlperf, model, batch, steps, extra):
    """{layer: [forward_s, backward_s]} a step and the step's median, from one `dlperf profile`."""
    with tempfile.TemporaryDirectory() as d:
        cmd = [dlperf, "profile", "-m", model, "-b", str(batch), "--skip", "5", "--steps", str(steps),
               "--train-limit", str(batch * (steps + 8)), "--test-limit", str(batch), "--runs-dir", "",
               "--no-progress", "--out", os.path.join(d, "p")] + extra
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(d, "p.json")) as f:
            p = json.load(f)
    n = p["step"]["steps"]
    layers = {}
    for r in p["rows"]:
        if r["phase"] not in ("forward", "backward", "backward-data", "backward-weight"):
            continue  # data, copies, the loss, the optimizer: the step's, not a layer's
        t = layers.setdefault(r["name"], [0.0, 0.0])
        t[0 if r["phase"] == "forward" else 1] += r["self_s"] / n
    return layers, p["step"]["step_median_s"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dlperf", default="build/dlperf")
    ap.add_argument("--model", default="medium")
    ap.add_argument("--batches", default="64", help="batch sizes, comma-separated")
    ap.add_argument("--runs", type=int, default=3, help="profiles per batch size (medians)")
    ap.add_argument("--steps", type=int, default=30, help="steps each profile records")
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--json", help="write the rows here too")
    args = ap.parse_args()
    extra = ["--precision", args.precision]
    rows = []
    for batch in [int(b) for b in args.batches.split(",")]:
        planned, planned_step = plan_layers(args.dlperf, args.model, batch, extra)
        runs = [profile_layers(args.dlperf, args.model, batch, args.steps, extra) for _ in range(args.runs)]
        print(f"\n{args.model} at batch {batch}, {args.precision}: ms a step, planned and measured (median of {args.runs} profiles)")
        print(f"{'layer':<14} {'fwd plan':>9} {'fwd meas':>9} {'ratio':>6} {'bwd plan':>9} {'bwd meas':>9} {'ratio':>6}")
        for name in runs[0][0]:
            parts = name.split("+")
            if not all(p in planned for p in parts):
                continue
            plan = [sum(planned[p][k] for p in parts) for k in (0, 1)]
            meas = [statistics.median(r[0].get(name, [0, 0])[k] for r in runs) for k in (0, 1)]
            ratio = [m / p if p > 0 else float("nan") for m, p in zip(meas, plan)]
            rows.append({"model": args.model, "batch": batch, "precision": args.precision, "layer": name,
                         "op": "+".join(sorted({planned_op for planned_op in parts})), "planned_s": plan, "measured_s": meas})
            print(f"{name:<14} {plan[0]*1e3:9.3f} {meas[0]*1e3:9.3f} {ratio[0]:6.2f} {plan[1]*1e3:9.3f} {meas[1]*1e3:9.3f} {ratio[1]:6.2f}")
        step = statistics.median(r[1] for r in runs)
        print(f"{'step':<14} {planned_step*1e3:9.3f} {step*1e3:9.3f} {step/planned_step:6.2f}")
        rows.append({"model": args.model, "batch": batch, "precision": args.precision, "layer": "(step)",
                     "planned_s": [planned_step, 0], "measured_s": [step, 0]})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
