#!/usr/bin/env python3
"""What the GPU planner's datasheet roofline should assume, read from `dlperf profile` tables.

`dlperf plan` predicts a CNN step on a GPU (src/plan/targets.cpp, cnn_step_s) as, for every pass
of every layer, max(FLOPs / (gemm_share x peak), bytes / (bandwidth_share x DRAM bandwidth))
plus one launch (launch_s). This script reads the per-op tables that `dlperf profile --device
cuda` writes (its .json, not the .trace.json) and says how far each kind of pass is from those
assumptions, each profile against its own ceilings (the datasheet's, or the ones `dlperf bench
all` measured where its machine profile was there):

  - convolutions and linear layers, fp32 apart from the tensor-core types (tf32, bf16, fp16):
    their achieved share of the peak, and the fill time per kernel that, added to
    FLOPs at gemm_share of peak, fits them best (the median |log(predicted / measured)|);
  - every other pass (batchnorm, pooling, relu, dropout, loss, optimizer, copies): its achieved
    share of the DRAM bandwidth, and its time beyond that share at bandwidth_share.

It needs no GPU: it runs here, on the profiles a GPU session brought back (scripts/gpu/check.sh
layouts and profile write them; the layouts stage also prints this summary of its own):

  python3 scripts/gpu/fit_plan.py out/profile-*.json            # the summary
  python3 scripts/gpu/fit_plan.py --rows out/profile-*.json     # and each pass, predicted vs measured
  python3 scripts/gpu/fit_plan.py --self-test                   # the fit on made-up passes (ctest runs it)

A span's time includes what recording it costs (docs/profile.md, "Overhead"); --stamp-us takes
that much off each row's time per kernel (0 by default; 2.4 us was an event record's cost in a
CUDA graph on an H200).
"""
import argparse
import json
import math
import os
import re
import signal
import statistics
import sys
import tempfile

# The plan's assumptions for datasheet targets (src/plan/targets.h, JobSpec).
GEMM_SHARE, BANDWIDTH_SHARE, LAUNCH_S = 0.6, 0.8, 5e-6
PRECISIONS = ("fp32", "tf32", "bf16", "fp16")


def precision_of(path, ceilings):
    """The run's precision: from the ceilings' source ("... datasheet, bf16 (catalog entry h200)"), else the file name."""
    for text in (ceilings.get("source", ""), os.path.basename(path)):
        m = re.search(r"\b(" + "|".join(PRECISIONS) + r")\b", text.replace("-", " "))
        if m:
            return m.group(1)
    return None


def passes(path):
    """Every timed pass in one profile, a dict each: kind, precision, name, phase, t (seconds a call), flops, bytes,
    kernels, peak, bw (the profile's ceilings) and file."""
    try:
        with open(path) as f:
            prof = json.load(f)
    except (OSError, ValueError) as e:  # a profile that did not finish, or a glob that matched nothing
        print(f"{path}: cannot read it ({e}); skipped", file=sys.stderr)
        return []
    if not isinstance(prof, dict) or "rows" not in prof:
        return []  # a trace, not a table
    c = prof.get("ceilings", {})
    peak, bw = c.get("peak_gflops", 0) * 1e9, c.get("dram_gbps", 0) * 1e9
    precision = precision_of(path, c)
    if not peak or not bw or precision is None:
        print(f"{path}: no ceilings or precision in it; skipped", file=sys.stderr)
        return []
    rows = prof["rows"]
    # Profiles made since the split time a layer's backward-data and backward-weight as rows of
    # their own (one kernel each) inside its backward row, whose self time is then only glue.
    split = {r["name"] for r in rows if r["phase"] in ("backward-data", "backward-weight")}
    out = []
    for r in rows:
        if r["phase"] in ("step", "data") or r["calls"] == 0 or (r["phase"] == "backward" and r["name"] in split):
            continue
        flops, nbytes = r["flops"] / r["calls"], r["bytes"] / r["calls"]
        if flops == 0 and nbytes == 0:
            continue
        gemm = r["op"] in ("conv2d", "linear")
        kernels = 2 if gemm and r["phase"] == "backward" else 1  # an unsplit backward: data and weight
        if gemm:
            kind = ("conv " if r["op"] == "conv2d" else "linear ") + ("fp32" if precision == "fp32" else "tensor-core")
        else:
            kind = "streaming"
        out.append(dict(kind=kind, precision=precision, name=r["name"], phase=r["phase"], t=r["self_s"] / r["calls"],
                        flops=flops, bytes=nbytes, kernels=kernels, peak=peak, bw=bw, file=os.path.basename(path),
                        ceilings=c.get("source", "?")))
    return out


def predicted(p, fill):
    """The plan's time for a pass, with `fill` per kernel in place of the launch."""
    return max(p["flops"] / (GEMM_SHARE * p["peak"]), p["bytes"] / (BANDWIDTH_SHARE * p["bw"])) + p["kernels"] * fill


def log_errors(ps, fill):
    return [math.log(predicted(p, fill) / p["t"]) for p in ps]


def best_fill(ps):
    """The fill per kernel (0 to 100 us, in 0.5 us steps) with the smallest median |log error|."""
    fills = [i * 0.5e-6 for i in range(201)]
    return min(fills, key=lambda f: statistics.median(abs(e) for e in log_errors(ps, f)))


def self_test():
    """Reads a made-up profile table in dlperf's schema and fits passes made from the model itself."""
    row = lambda name, op, phase, t, flops, nbytes: dict(name=name, op=op, phase=phase, calls=10, self_s=10 * t,
                                                         flops=10 * flops, bytes=10 * nbytes)
    table = {"ceilings": {"peak_gflops": 989400.0, "dram_gbps": 4800.0,
                          "source": "NVIDIA H200 SXM 141 GB datasheet, bf16 (catalog entry h200)"},
             "rows": [row("(step: loop overhead)", "", "step", 1e-5, 0, 0),
                      row("conv2", "conv2d", "backward", 1e-6, 2e9, 1e7),          # glue: its passes follow
                      row("conv2", "conv2d", "backward-data", 30e-6, 1e9, 5e6),
                      row("conv2", "conv2d", "backward-weight", 31e-6, 1e9, 5e6),
                      row("conv3", "conv2d", "backward", 60e-6, 2e9, 1e7),         # unsplit: two kernels
                      row("bn1+relu1", "batchnorm2d", "forward", 20e-6, 1e7, 4e7)]}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(table, f)
    try:
        ps = passes(f.name)
    finally:
        os.unlink(f.name)
    got = [(p["name"], p["phase"], p["kind"], p["kernels"], p["precision"]) for p in ps]
    want = [("conv2", "backward-data", "conv tensor-core", 1, "bf16"), ("conv2", "backward-weight", "conv tensor-core", 1, "bf16"),
            ("conv3", "backward", "conv tensor-core", 2, "bf16"), ("bn1+relu1", "forward", "streaming", 1, "bf16")]
    assert got == want, got
    assert math.isclose(ps[0]["t"], 30e-6) and math.isclose(ps[0]["flops"], 1e9), ps[0]
    # Passes timed exactly as the plan would with a 13 us fill: the fit finds it, and the error is nil.
    made = [dict(p, t=0) for p in ps[:3]]
    for p in made:
        p["t"] = predicted(p, 13e-6)
    assert math.isclose(best_fill(made), 13e-6), best_fill(made)
    assert max(abs(e) for e in log_errors(made, 13e-6)) < 1e-12
    assert precision_of("x/profile-medium-b64-fp16-nhwc.json", {"source": "measured"}) == "fp16"
    assert passes(os.path.join(tempfile.gettempdir(), "no-such-dir", "profile.json")) == []  # skipped, said on stderr
    # The assumptions above are the plan's own.
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src", "plan", "targets.h")) as f:
        header = f.read()
    for name, value in (("gemm_share", GEMM_SHARE), ("bandwidth_share", BANDWIDTH_SHARE), ("launch_s", LAUNCH_S)):
        m = re.search(r"double " + name + r" = ([0-9.e-]+);", header)
        assert m and float(m.group(1)) == value, f"src/plan/targets.h's {name} is not this script's {value}"
    print("fit_plan.py self-test passed")


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet under `| head`
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("profiles", nargs="+", help="dlperf profile --json tables (.trace.json files are skipped)")
    ap.add_argument("--stamp-us", type=float, default=0, help="recording cost to take off each kernel's time (us)")
    ap.add_argument("--rows", action="store_true", help="also list every pass, predicted vs measured")
    args = ap.parse_args()
    ps = [p for path in args.profiles for p in passes(path)]
    for p in ps:
        p["t"] = max(p["t"] - p["kernels"] * args.stamp_us * 1e-6, 1e-9)
    if not ps:
        sys.exit("no profile tables with ceilings among the files given")

    print(f"{len(ps)} passes from {len({p['file'] for p in ps})} profiles; the plan assumes {GEMM_SHARE:.0%} of peak for "
          f"convolutions and GEMMs, {BANDWIDTH_SHARE:.0%} of DRAM bandwidth, {LAUNCH_S * 1e6:.0f} us a kernel")
    # Each profile's own ceilings: the datasheet's, or those `dlperf bench all` measured where its machine profile was.
    print("ceilings: " + "; ".join(sorted({p["ceilings"] for p in ps})) + "\n")
    print(f"{'kind':<20} {'passes':>6} {'share of peak or bandwidth (median, range)':>44} {'plan now: median err':>21} "
          f"{'fill that fits':>15} {'then: median err':>17}")
    for kind in sorted({p["kind"] for p in ps}):
        group = [p for p in ps if p["kind"] == kind]
        if kind == "streaming":
            shares = [p["bytes"] / p["t"] / p["bw"] for p in group]
        else:
            shares = [p["flops"] / p["t"] / p["peak"] for p in group]
        now = statistics.median(abs(e) for e in log_errors(group, LAUNCH_S))
        fill = best_fill(group)
        then = statistics.median(abs(e) for e in log_errors(group, fill))
        what = "of bandwidth" if kind == "streaming" else "of peak"
        share = f"{statistics.median(shares):.1%} {what} ({min(shares):.1%}-{max(shares):.1%})"
        print(f"{kind:<20} {len(group):>6} {share:>44} {math.exp(now) - 1:>+20.0%} "
              f"{fill * 1e6:>12.1f} us {math.exp(then) - 1:>+16.0%}")
    print("\n(errors as exp(median |log(predicted / measured)|) - 1: +100% is a factor of 2 either way; the fill is per\n"
          " kernel, counted as the plan counts them, one a pass and two in an unsplit convolution's or GEMM's backward)")

    if args.rows:
        print(f"\n{'profile':<40} {'layer':<12} {'phase':<16} {'kind':<18} {'us':>8} {'plan us':>8} {'ratio':>6}")
        for p in sorted(ps, key=lambda p: (p["file"], -p["t"])):
            plan = predicted(p, LAUNCH_S)
            print(f"{p['file'][:40]:<40} {p['name'][:12]:<12} {p['phase']:<16} {p['kind']:<18} {p['t'] * 1e6:>8.1f} "
                  f"{plan * 1e6:>8.1f} {p['t'] / plan:>6.2f}")


if __name__ == "__main__":
    main()
