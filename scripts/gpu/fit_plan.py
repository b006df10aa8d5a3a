#!/usr/bin/env python3
"""The GPU planner's model of dlperf's kernels, against `dlperf profile` tables, and its refit.

`dlperf plan` predicts dlperf's GPU step pass by pass (src/plan/gpu_step.h): a pass takes

    fill + max(FLOPs / (share x peak), bytes / (bandwidth_share x DRAM bandwidth))

with the share and fill by what runs it (cuDNN's convolutions, cuBLASLt's GEMMs, dlperf's own
streaming kernels, whose FLOPs are not their limit) and, for the first two, whether the precision
runs on tensor cores. Its constants are GpuEngineModel's in src/plan/gpu_step.h, which this script
reads. It reads the per-op tables `dlperf profile --device cuda --json` writes (the .json, not the
.trace.json), each pass against its profile's own ceilings, and needs no GPU: it runs here, on the
profiles a GPU session brought back (scripts/gpu/check.sh layouts and profile write them).

  python3 scripts/gpu/fit_plan.py out/profile-*.json          # the model against them: per kind, per profile
  python3 scripts/gpu/fit_plan.py --rows out/profile-*.json   # and each pass, predicted vs measured
  python3 scripts/gpu/fit_plan.py --fit out/profile-*.json    # refit: GpuEngineModel's constants for these tables
  python3 scripts/gpu/fit_plan.py --check-model --stamp-us 0.79 data/gpu-fit/h100-2026-11-28/profile-*.json
                                                               # the header's constants are that fit's (ctest runs it)
  python3 scripts/gpu/fit_plan.py --self-test                 # the fit on made-up profiles (ctest runs it)

Give it profiles in each precision's default layout (--layout auto: NCHW in fp32 and tf32, NHWC in
bf16 and fp16), as the plan predicts those. A span's time includes what recording it costs
(docs/profile.md, "Overhead"); --stamp-us takes that much off each pass (0.79 us for the stamps
in line of profiles made before 2026-11-28's forked stamps, on an H100).

The fit minimizes the mean squared log error of each profile's step (the sum of its passes) plus
LAMBDA times the mean |log error| of a single pass, by coordinate descent over fixed grids from a
fixed start: deterministic, so --check-model can ask the header to hold exactly its result.
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

HERE = os.path.dirname(os.path.abspath(__file__))
HEADER = os.path.join(HERE, "..", "..", "src", "plan", "gpu_step.h")
PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
LAMBDA = 0.3
# GpuEngineModel's fields, as this script names them, and the grid each is fitted over.
SHARES = [round(0.05 * i, 2) for i in range(1, 31)]
FILLS = [round(0.5 * i, 1) * 1e-6 for i in range(0, 81)]
GRID = {"conv_share_fp32": SHARES, "conv_share_tensor_cores": SHARES, "gemm_share_fp32": SHARES,
        "gemm_share_tensor_cores": SHARES, "bandwidth_share": [round(0.05 * i, 2) for i in range(2, 21)],
        "conv_fill_fp32_s": FILLS, "conv_fill_tensor_cores_s": FILLS, "gemm_fill_s": FILLS, "streaming_fill_s": FILLS}
START = {"conv_share_fp32": 0.6, "conv_share_tensor_cores": 0.6, "gemm_share_fp32": 0.6, "gemm_share_tensor_cores": 0.6,
         "bandwidth_share": 0.8, "conv_fill_fp32_s": 5e-6, "conv_fill_tensor_cores_s": 5e-6, "gemm_fill_s": 5e-6,
         "streaming_fill_s": 5e-6}


def header_model(path=HEADER):
    """GpuEngineModel's constants, read from the header (name = value pairs inside the struct)."""
    with open(path) as f:
        text = f.read()
    body = re.search(r"struct GpuEngineModel \{(.*?)\};", text, re.S)
    assert body, f"{path} has no struct GpuEngineModel"
    model = {m.group(1): float(m.group(2)) for m in re.finditer(r"(\w+) = ([0-9.e-]+)", body.group(1))}
    missing = set(GRID) - set(model)
    assert not missing, f"{path}'s GpuEngineModel lacks {sorted(missing)}"
    return {k: model[k] for k in GRID}


def precision_of(path, ceilings):
    """The run's precision: from the ceilings' source ("... datasheet, bf16 (catalog entry h200)"), else the file name."""
    for text in (ceilings.get("source", ""), os.path.basename(path)):
        m = re.search(r"\b(" + "|".join(PRECISIONS) + r")\b", text.replace("-", " "))
        if m:
            return m.group(1)
    return None


def in_default_layout(path, precision):
    """Whether a profile ran as the plan predicts, as far as its file name says: in its precision's
    default layout (NCHW for fp32 and tf32, NHWC for bf16 and fp16; "profile-medium-b64-bf16-nchw.json":
    no) and with the default small convolutions (check.sh's "-cudnn" suffix for --small-conv cudnn: no).
    True where the name says neither."""
    name = os.path.basename(path).replace(".", "-").split("-")
    default = "nhwc" if precision in ("bf16", "fp16") else "nchw"
    other = "nchw" if default == "nhwc" else "nhwc"
    return other not in name and "cudnn" not in name


def passes(path):
    """Every timed kernel pass in one profile, a dict each: family (conv, gemm, streaming), tensor_cores, name, phase,
    t (seconds a call), flops, bytes, kernels, peak, bw (the profile's ceilings) and file."""
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
        if r["phase"] in ("step", "data", "copy") or r["calls"] == 0 or (r["phase"] == "backward" and r["name"] in split):
            continue
        gemm = r["op"] in ("conv2d", "linear")
        # A row of no FLOPs or bytes is still a kernel's time (an NHWC flatten's transpose, which
        # tables before 2026-11-28 counted as a view): the model gives it its fill.
        out.append(dict(family={"conv2d": "conv", "linear": "gemm"}.get(r["op"], "streaming"), tensor_cores=precision != "fp32",
                        precision=precision, name=r["name"], phase=r["phase"], t=r["self_s"] / r["calls"],
                        flops=r["flops"] / r["calls"], bytes=r["bytes"] / r["calls"],
                        kernels=2 if gemm and r["phase"] == "backward" else 1,  # an unsplit backward: data and weight
                        peak=peak, bw=bw, file=os.path.basename(path), path=path, ceilings=c.get("source", "?"),
                        default_layout=in_default_layout(path, precision)))
    return out


def predicted(p, m):
    """The model's time for a pass (src/plan/gpu_step.cpp, gpu_pass_s)."""
    if p["family"] == "conv":
        share = m["conv_share_tensor_cores"] if p["tensor_cores"] else m["conv_share_fp32"]
        fill = m["conv_fill_tensor_cores_s"] if p["tensor_cores"] else m["conv_fill_fp32_s"]
    elif p["family"] == "gemm":
        share, fill = (m["gemm_share_tensor_cores"] if p["tensor_cores"] else m["gemm_share_fp32"]), m["gemm_fill_s"]
    else:
        share, fill = 0, m["streaming_fill_s"]
    compute = p["flops"] / (share * p["peak"]) if share else 0
    # (At least a picosecond: a pass of no cost with no fill would take no time, and its log error no value.)
    return max(p["kernels"] * fill + max(compute, p["bytes"] / (m["bandwidth_share"] * p["bw"])), 1e-12)


def by_profile(ps):
    groups = {}
    for p in ps:
        groups.setdefault(p["path"], []).append(p)
    return groups


def objective(ps, groups, m):
    steps = sum(math.log(sum(predicted(p, m) for p in g) / sum(p["t"] for p in g)) ** 2 for g in groups.values()) / len(groups)
    single = sum(abs(math.log(predicted(p, m) / p["t"])) for p in ps) / len(ps)
    return steps + LAMBDA * single


def fit(ps):
    """GpuEngineModel's constants for these passes: coordinate descent over GRID from START, until a round changes nothing."""
    groups = by_profile(ps)
    m = dict(START)
    for _ in range(20):
        before = dict(m)
        for name, values in GRID.items():
            m = min(({**m, name: v} for v in values), key=lambda c: objective(ps, groups, c))
        if m == before:
            break
    return m


def log_err(pred, meas):
    return math.log(pred / meas)


def as_percent(e):
    """A log error as a signed percentage: +100% is a factor of 2 over, -50% one of 2 under."""
    return f"{math.exp(e) - 1:+.0%}"


def size(e):
    """An |log error| as a percentage: 100% is a factor of 2 either way."""
    return f"{math.exp(e) - 1:.0%}"


def report(ps, m, rows=False):
    print(f"{len(ps)} passes from {len(by_profile(ps))} profiles; the model: " + ", ".join(
        f"{k} {v * 1e6:g} us" if k.endswith("_s") else f"{k} {v:g}" for k, v in m.items()))
    print("ceilings: " + "; ".join(sorted({p["ceilings"] for p in ps})) + "\n")
    print(f"{'kind':<22} {'passes':>6} {'achieved share of peak or bandwidth (median, range)':>52} {'pass error (median |.|)':>24} "
          f"{'sum of passes':>14}")
    kinds = {}
    for p in ps:
        kinds.setdefault(f"{p['family']} " + ("tensor-core" if p["tensor_cores"] else "fp32") if p["family"] != "streaming"
                         else "streaming", []).append(p)
    for kind, group in sorted(kinds.items()):
        if kind == "streaming":
            shares, what = [p["bytes"] / p["t"] / p["bw"] for p in group], "of bandwidth"
        else:
            shares, what = [p["flops"] / p["t"] / p["peak"] for p in group], "of peak"
        share = f"{statistics.median(shares):.1%} {what} ({min(shares):.1%}-{max(shares):.1%})"
        single = statistics.median(abs(log_err(predicted(p, m), p["t"])) for p in group)
        total = log_err(sum(predicted(p, m) for p in group), sum(p["t"] for p in group))
        print(f"{kind:<22} {len(group):>6} {share:>52} {size(single):>24} {as_percent(total):>14}")
    print(f"\n{'profile':<48} {'step: passes measured':>22} {'model':>10} {'error':>7}")
    errors, others = [], 0
    for path, group in by_profile(ps).items():
        meas, pred = sum(p["t"] for p in group), sum(predicted(p, m) for p in group)
        mark = "" if group[0]["default_layout"] else " *"
        if mark:
            others += 1
        else:
            errors.append(abs(log_err(pred, meas)))
        print(f"{os.path.basename(path)[:48]:<48} {meas * 1e6:>19.0f} us {pred * 1e6:>7.0f} us {as_percent(log_err(pred, meas)):>7}{mark}")
    if errors:
        print(f"\nstep: median |error| {size(statistics.median(errors))}, worst {size(max(errors))}   "
              "(a pass's own error is larger: cuDNN's timed search picks kernels run by run)")
    if others:
        print(f"* not its precision's default layout (or not the default --small-conv), which the plan predicts and the fit reads: "
              "left out of the summary above")
    if rows:
        print(f"\n{'profile':<40} {'layer':<12} {'phase':<16} {'family':<10} {'us':>8} {'model us':>9} {'ratio':>6}")
        for p in sorted(ps, key=lambda p: (p["file"], -p["t"])):
            pred = predicted(p, m)
            print(f"{p['file'][:40]:<40} {p['name'][:12]:<12} {p['phase']:<16} {p['family']:<10} {p['t'] * 1e6:>8.1f} "
                  f"{pred * 1e6:>9.1f} {p['t'] / pred:>6.2f}")


def header_text(m):
    """The constants as src/plan/gpu_step.h writes them."""
    us = lambda s: f"{s * 1e6:g}e-6"
    return (f"  double conv_share_fp32 = {m['conv_share_fp32']:g}, conv_share_tensor_cores = {m['conv_share_tensor_cores']:g};\n"
            f"  double gemm_share_fp32 = {m['gemm_share_fp32']:g}, gemm_share_tensor_cores = {m['gemm_share_tensor_cores']:g};\n"
            f"  double bandwidth_share = {m['bandwidth_share']:g};\n"
            f"  double conv_fill_fp32_s = {us(m['conv_fill_fp32_s'])}, conv_fill_tensor_cores_s = {us(m['conv_fill_tensor_cores_s'])};\n"
            f"  double gemm_fill_s = {us(m['gemm_fill_s'])}, streaming_fill_s = {us(m['streaming_fill_s'])};")


def self_test():
    """Made-up profile tables in dlperf's schema, timed by a known model: they parse, and the fit gets every step right."""
    row = lambda name, op, phase, t, flops, nbytes: dict(name=name, op=op, phase=phase, calls=10, self_s=10 * t,
                                                         flops=10 * flops, bytes=10 * nbytes)
    truth = {"conv_share_fp32": 1.1, "conv_share_tensor_cores": 0.7, "gemm_share_fp32": 0.5, "gemm_share_tensor_cores": 0.2,
             "bandwidth_share": 0.6, "conv_fill_fp32_s": 20e-6, "conv_fill_tensor_cores_s": 10e-6, "gemm_fill_s": 7e-6,
             "streaming_fill_s": 3e-6}
    tables = []
    for precision, peak in (("fp32", 67000.0), ("bf16", 989400.0)):
        for scale in (1, 4, 16):
            shapes = [("conv1", "conv2d", "forward", 3e8, 4e6), ("conv2", "conv2d", "backward-data", 9e9, 2e7),
                      ("conv2", "conv2d", "backward-weight", 9e9, 2e7), ("fc", "linear", "forward", 2e8, 1e6),
                      ("fc", "linear", "backward-weight", 2e8, 1e6), ("bn1+relu1", "batchnorm2d", "forward", 1e7, 4e7),
                      ("pool1", "maxpool2d", "backward", 1e6, 2e7), ("flatten", "flatten", "forward", 0, 0)]
            table = {"ceilings": {"peak_gflops": peak, "dram_gbps": 3350.0,
                                  "source": f"NVIDIA H100 SXM5 80 GB datasheet, {precision} (catalog entry h100-sxm)"},
                     "rows": [row("(step: loop overhead)", "", "step", 1e-5, 0, 0),
                              row("conv2", "conv2d", "backward", 1e-6, 0, 0)]}  # glue: its passes follow
            for name, op, phase, flops, nbytes in shapes:
                p = dict(family={"conv2d": "conv", "linear": "gemm"}.get(op, "streaming"), tensor_cores=precision != "fp32",
                         flops=flops * scale, bytes=nbytes * scale, kernels=1, peak=peak * 1e9, bw=3350e9)
                table["rows"].append(row(name, op, phase, predicted(p, truth), p["flops"], p["bytes"]))
            tables.append(table)
    paths = []
    try:
        for i, table in enumerate(tables):
            with tempfile.NamedTemporaryFile("w", suffix=f"-{i}.json", delete=False) as f:
                json.dump(table, f)
            paths.append(f.name)
        ps = [p for path in paths for p in passes(path)]
    finally:
        for path in paths:
            os.unlink(path)
    assert len(ps) == 6 * 8, len(ps)  # the step row and the split backward's glue are not passes
    first = ps[0]
    assert (first["name"], first["family"], first["tensor_cores"], first["precision"]) == ("conv1", "conv", False, "fp32"), first
    assert ps[-1]["family"] == "streaming" and ps[-1]["bytes"] == 0  # a kernel with no cost counted still counts
    assert all(math.isclose(predicted(p, truth), p["t"]) for p in ps)
    got = fit(ps)
    for group in by_profile(ps).values():
        pred, meas = sum(predicted(p, got) for p in group), sum(p["t"] for p in group)
        assert abs(pred / meas - 1) < 0.02, (pred, meas, got)
    assert precision_of("x/profile-medium-b64-fp16-nhwc.json", {"source": "measured"}) == "fp16"
    assert in_default_layout("x/profile-medium-b64-fp16-nhwc.json", "fp16")
    assert not in_default_layout("x/profile-medium-b64-bf16-nchw.json", "bf16")
    assert not in_default_layout("x/profile-large-b1024-fp32-nhwc.json", "fp32")
    assert in_default_layout("x/profile-medium.json", "fp32")
    assert not in_default_layout("x/profile-fmnist93-b256-bf16-nhwc-cudnn.json", "bf16")
    assert passes(os.path.join(tempfile.gettempdir(), "no-such-dir", "profile.json")) == []  # skipped, said on stderr
    # The header's constants parse, and the text --fit prints for them reads back as the same.
    m = header_model()
    with tempfile.NamedTemporaryFile("w", suffix=".h", delete=False) as f:
        f.write("struct GpuEngineModel {\n" + header_text(m) + "\n};\n")
    try:
        assert header_model(f.name) == m, (header_model(f.name), m)
    finally:
        os.unlink(f.name)
    print("fit_plan.py self-test passed")


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet under `| head`
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("profiles", nargs="+", help="dlperf profile --json tables (.trace.json files are skipped)")
    ap.add_argument("--stamp-us", type=float, default=0, help="recording cost to take off each kernel's time (us)")
    ap.add_argument("--rows", action="store_true", help="also list every pass, predicted vs measured")
    what = ap.add_mutually_exclusive_group()
    what.add_argument("--fit", action="store_true", help="refit the model to these tables and print its constants")
    what.add_argument("--check-model", action="store_true", help="exit 1 unless src/plan/gpu_step.h holds the fit of these tables")
    args = ap.parse_args()
    ps = [p for path in args.profiles for p in passes(path)]
    if args.fit or args.check_model:  # the plan predicts the default layouts: the fit reads only those
        for path in sorted({p["path"] for p in ps if not p["default_layout"]}):
            print(f"{path}: not its precision's default layout or --small-conv; left out of the fit", file=sys.stderr)
        ps = [p for p in ps if p["default_layout"]]
    if not ps:
        sys.exit("no profile tables with ceilings among the files given")
    for p in ps:
        p["t"] = max(p["t"] - p["kernels"] * args.stamp_us * 1e-6, 1e-9)
    if args.check_model:
        got, have = fit(ps), header_model()
        if any(not math.isclose(got[k], have[k], rel_tol=1e-9) for k in GRID):
            sys.exit(f"src/plan/gpu_step.h's GpuEngineModel is not the fit of these tables; the fit is:\n{header_text(got)}")
        print(f"src/plan/gpu_step.h's GpuEngineModel is the fit of these {len(by_profile(ps))} tables")
        return
    if args.fit:
        m = fit(ps)
        report(ps, m, args.rows)
        print("\nsrc/plan/gpu_step.h, struct GpuEngineModel:\n" + header_text(m))
        return
    report(ps, header_model(), args.rows)


if __name__ == "__main__":
    main()
