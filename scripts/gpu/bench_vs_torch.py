#!/usr/bin/env python3
"""dlperf vs PyTorch on one GPU: training images/s side by side in one run, with the ratio table
issue 3's targets are checked against.

For each (model, batch size, precision) both train the same network (built in PyTorch from
`dlperf models show NAME --json`) on the same Fashion-MNIST images, and the second of two epochs
is timed (the first pays for cuDNN's algorithm choice, graph capture, torch.compile). Runs
alternate (dlperf, torch, dlperf, ...) so drift on the machine hits both; each figure is the
median of --repeats runs.

Fairness, as the issue states it:
  - same network, batch size, optimizer (SGD, momentum 0.9, Nesterov, weight decay 5e-4), lr,
    no augmentation, the last partial batch dropped, evaluation excluded from the timing;
  - data already on the GPU for both: dlperf --data-on-device; PyTorch indexes a normalized
    float tensor held on the GPU;
  - PyTorch eager with cudnn.benchmark, in whichever memory format is faster for it: for the conv
    models each row's first repeat times PyTorch in every format of --torch-layouts (NCHW and
    channels_last) and the other repeats use the faster, so the peer is never timed in
    a format that slows it (the row says which it got);
  - PyTorch's fused SGD on the GPU where it has one (the versions line says "torch_sgd fused"),
    the one-kernel update dlperf has too;
  - fp32 means fp32 for both (TF32 off), tf32 turns it on for both, bf16/fp16 use torch.autocast
    (fp16 with a GradScaler) and dlperf --precision;
  - with --compile, also torch.compile(mode="max-autotune") where it runs: compiled once per row
    (autotuning takes minutes), warmed up for an epoch, then timed over --repeats epochs.

Run on the GPU machine after scripts/gpu/build.sh:
  python3 scripts/gpu/bench_vs_torch.py --data .deb/fashion-mnist --markdown $OUT/vs-torch.md --json $OUT/vs-torch.json
  python3 scripts/gpu/bench_vs_torch.py --models small --batches 64 --precisions fp32 --repeats 1   # a smoke run
It also runs on a CPU-only PyTorch (--device cpu) to test the script itself.
"""
import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from bench_vs_pytorch import LAYOUTS, SpecNet, fastest_layout, in_layout, load_idx  # noqa: E402  (one definition of each)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def target_ratio(model, batch):
    """Issue 3's bar: >= 3x for small and medium at batch 16 and 64, >= 1.3x at 256 and 1024, >= 1x otherwise."""
    if model in ("small", "medium"):
        return 3.0 if batch <= 64 else 1.3
    return 1.0


def set_tf32(on):
    """Lets cuBLAS and cuDNN use TF32 for fp32 work, or forbids it. PyTorch 2.9 and later have a
    per-library `fp32_precision` ("tf32" or "ieee"): their old `allow_tf32` flags warn there, and
    once both kinds were set, code that reads the new one (torch.compile's inductor) raises
    "you have used mix of the legacy and new APIs". So only the new one is set where it exists."""
    matmul, conv = torch.backends.cuda.matmul, getattr(torch.backends.cudnn, "conv", None)
    try:  # an older PyTorch's matmul object raises AssertionError, not AttributeError, for a name it lacks
        new_api = conv is not None and hasattr(conv, "fp32_precision") and hasattr(matmul, "fp32_precision")
    except AssertionError:
        new_api = False
    if new_api:
        matmul.fp32_precision = conv.fp32_precision = "tf32" if on else "ieee"
    else:
        matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = on


@functools.lru_cache(maxsize=None)
def sgd_kind(device):
    """"fused" where this PyTorch has a fused SGD for `device` (one kernel updates every
    parameter, as dlperf's update does: the strongest eager peer), else "default" (its foreach
    or per-tensor loop)."""
    if device != "cuda":
        return "default"
    try:
        torch.optim.SGD([torch.zeros(1, device=device, requires_grad=True)], lr=0.1, momentum=0.9, fused=True)
        return "fused"
    except (TypeError, RuntimeError, ValueError):
        return "default"


def torch_run(spec, x, y, batch, lr, precision, device, compiled, timed_epochs=1, layout="nchw"):
    """Images/s of each of `timed_epochs` epochs over (x, y), which are already on `device`, after
    one warm-up epoch; a list, one figure an epoch. `layout`: nchw or channels_last (the model's
    and the images' memory format)."""
    torch.manual_seed(0)
    if device == "cuda":  # fp32 means fp32 (PyTorch lets cuDNN use TF32 by default); tf32 allows it in both libraries
        set_tf32(precision == "tf32")
    model, x = in_layout(SpecNet(spec).to(device), x, layout)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, nesterov=True, weight_decay=5e-4,
                          **({"fused": True} if sgd_kind(device) == "fused" else {}))
    step_model = torch.compile(model, mode="max-autotune") if compiled else model
    amp = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    scaler = torch.amp.GradScaler(device) if precision == "fp16" else None
    n = (len(x) // batch) * batch

    def epoch(seed):
        g = torch.Generator(device=device).manual_seed(seed)
        perm = torch.randperm(len(x), device=device, generator=g)
        for i in range(0, n, batch):
            idx = perm[i:i + batch]
            xb, yb = x[idx], y[idx]
            with torch.autocast(device_type=device, dtype=amp, enabled=amp is not None):
                loss = F.cross_entropy(step_model(xb), yb)
            opt.zero_grad(set_to_none=True)
            if scaler:
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            else:
                loss.backward()
                opt.step()

    epoch(1)  # warm-up: cudnn.benchmark's search, torch.compile's autotuning
    rates = []
    for e in range(timed_epochs):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        epoch(2 + e)
        if device == "cuda":
            torch.cuda.synchronize()
        rates.append(n / (time.perf_counter() - start))
    return rates


def dlperf_run(dlperf, data, model, batch, images, lr, precision, device, extra=()):
    """Images/s of dlperf's second epoch, from its run record; None and the reason when it refuses."""
    with tempfile.TemporaryDirectory() as runs:
        cmd = [dlperf, "train", "--model", model, "--data", data, "--batch-size", str(batch), "--epochs", "2",
               "--no-augment", "--lr", str(lr), "--schedule", "constant", "--precision", precision,
               "--train-limit", str(images), "--test-limit", "1000", "--runs-dir", runs, "--no-progress",
               "--device", device]
        cmd += ["--data-on-device"] if device == "cuda" else ["--workers", "0"]
        cmd += list(extra)
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            lines = [l for l in r.stderr.splitlines() if "error" in l] or r.stderr.splitlines() or ["failed"]
            return None, lines[0].replace("dlperf: error: ", "")
        record = json.load(open(os.path.join(runs, os.listdir(runs)[0])))
        return record["epochs"][1]["images_per_s"], record.get("gpu_step", {})


def bf16_speedups(rows):
    """dlperf's bf16 over fp32 images/s on `large`, per batch size (issue 3: at least 1.5x)."""
    speedups = []
    for r in rows:
        if r["model"] == "large" and r["precision"] == "bf16" and r["dlperf_images_per_s"]:
            base = [q for q in rows if q["model"] == "large" and q["precision"] == "fp32" and q["batch"] == r["batch"]]
            if base and base[0]["dlperf_images_per_s"]:
                speedups.append((r["batch"], r["dlperf_images_per_s"] / base[0]["dlperf_images_per_s"]))
    return speedups


def write_results(args, info, images, rows):
    """The JSON and markdown so far: written after every row, so a run cut short keeps what it measured."""
    speedups = bf16_speedups(rows)
    if args.json:
        json.dump({"versions": info, "images": images, "repeats": args.repeats, "rows": rows,
                   "bf16_speedup_large": speedups}, open(args.json, "w"), indent=2)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(f"Training images/s, second epoch of {images} Fashion-MNIST images, median of {args.repeats}; "
                    + ", ".join(f"{k} {v}" for k, v in info.items()) + ".\n\n")
            f.write("| model | batch | precision | dlperf img/s | PyTorch eager img/s | PyTorch layout | ratio | target | met |"
                    + (" torch.compile img/s | ratio |" if args.compile else "") + "\n")
            f.write("|---|---:|---|---:|---:|---|---:|---:|---|" + ("---:|---:|" if args.compile else "") + "\n")
            for r in rows:
                a = f"{r['dlperf_images_per_s']:.0f}" if r["dlperf_images_per_s"] else r["note"] or "-"
                ratio = f"{r['ratio']:.2f}x" if r["ratio"] else "-"
                line = (f"| {r['model']} | {r['batch']} | {r['precision']} | {a} | {r['torch_images_per_s']:.0f} "
                        f"| {r['torch_layout']} | {ratio} "
                        f"| {r['target']:.1f}x | {meets(r)} |")
                if args.compile:
                    c = r["torch_compile_images_per_s"]
                    line += f" {c:.0f} |" if c else " - |"
                    line += f" {r['ratio_vs_compile']:.2f}x |" if r["ratio_vs_compile"] else " - |"
                f.write(line + "\n")
            if speedups:
                f.write("\ndlperf bf16 vs fp32 on large: " + ", ".join(f"batch {b}: {x:.2f}x" for b, x in speedups) + "\n")


def meets(row):
    """Whether a row meets its target, from the unrounded ratio (a printed 3.00x may be 2.996)."""
    return "-" if row["ratio"] is None else "yes" if row["ratio"] >= row["target"] else "no"


def versions(device):
    v = {"torch": torch.__version__}
    if device == "cuda":
        v["gpu"] = torch.cuda.get_device_name(0)
        v["cuda"] = torch.version.cuda
        v["cudnn"] = torch.backends.cudnn.version()
        v["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                     capture_output=True, text=True).stdout.strip()
    try:
        v["dlperf"] = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                                     text=True).stdout.strip()
    except OSError:
        pass
    return v


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dlperf", default=os.path.join(ROOT, "build-gpu", "dlperf"))
    ap.add_argument("--data", default=os.path.join(ROOT, ".deb", "fashion-mnist"), help="directory of Fashion-MNIST IDX files")
    ap.add_argument("--models", default="small,medium,large,resnet18")
    ap.add_argument("--batches", default="16,64,256,1024")
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--images", type=int, default=20000, help="training images per timed epoch")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--compile", action="store_true", help="also time torch.compile(mode='max-autotune')")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--torch-layouts", help="memory formats to try for PyTorch's conv models, the faster kept per row "
                    f"(default: {','.join(LAYOUTS)})")
    ap.add_argument("--dlperf-arg", action="append", default=[],
                    help="an extra dlperf train argument, repeatable (e.g. --dlperf-arg=--layout --dlperf-arg=nchw)")
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--markdown", help="write the table (with versions) here, for docs/")
    args = ap.parse_args()

    if args.device == "cuda":
        torch.backends.cudnn.benchmark = True
    layouts = (args.torch_layouts or ",".join(LAYOUTS)).split(",")
    if any(l not in LAYOUTS for l in layouts):
        ap.error(f"--torch-layouts: each of {args.torch_layouts} must be one of {', '.join(LAYOUTS)}")
    xs = load_idx(os.path.join(args.data, "train-images-idx3-ubyte.gz"))[:args.images]
    ys = load_idx(os.path.join(args.data, "train-labels-idx1-ubyte.gz"))[:args.images]
    x = torch.from_numpy(xs.astype(np.float32) / 255.0)
    x = ((x - x.mean()) / x.std()).to(args.device)
    y = torch.from_numpy(ys.astype(np.int64)).to(args.device)
    info = versions(args.device)
    info["torch_sgd"] = sgd_kind(args.device)
    if args.dlperf_arg:
        info["dlperf_args"] = " ".join(args.dlperf_arg)
    print("dlperf vs PyTorch, training images/s (second epoch of %d images, median of %d): %s\n"
          % (len(x), args.repeats, ", ".join(f"{k} {v}" for k, v in info.items())), flush=True)
    cols = f"{'model':8} {'batch':>5} {'prec':>4} {'dlperf':>9} {'torch':>9} {'layout':>13} {'ratio':>6} {'target':>6} {'met':>3}"
    if args.compile:
        cols += f" {'compiled':>9} {'ratio':>6}"
    print(cols + "  note\n" + "-" * (len(cols) + 6), flush=True)
    rows = []
    for model in args.models.split(","):
        spec = json.loads(subprocess.run([args.dlperf, "models", "show", model, "--json", "--input", "1x28x28"],
                                         check=True, capture_output=True, text=True).stdout)
        for precision in args.precisions.split(","):
            for batch in (int(b) for b in args.batches.split(",")):
                ours, theirs, compiled, note = [], [], [], ""
                layout, tried = "nchw", {}
                for rep in range(args.repeats):
                    r, extra = dlperf_run(args.dlperf, args.data, model, batch, len(x), args.lr, precision, args.device,
                                          args.dlperf_arg)
                    if r is None:
                        note = extra
                    else:
                        ours.append(r)
                        if isinstance(extra, dict) and extra and not extra.get("cuda_graph", True):
                            note = "eager steps: " + extra.get("why_not_graph", "")
                    if rep == 0:
                        layout, rates, tried = fastest_layout(
                            spec, layouts, lambda l: torch_run(spec, x, y, batch, args.lr, precision, args.device, False,
                                                               layout=l))
                        theirs += rates
                    else:
                        theirs += torch_run(spec, x, y, batch, args.lr, precision, args.device, False, layout=layout)
                if args.compile:  # compiled once (max-autotune takes minutes), then timed over --repeats epochs
                    try:
                        compiled = torch_run(spec, x, y, batch, args.lr, precision, args.device, True, args.repeats,
                                             layout=layout)
                    except Exception as e:  # noqa: BLE001  (compile fails on some set-ups; say so)
                        note = f"torch.compile failed: {type(e).__name__}"
                a = statistics.median(ours) if ours else None
                b = statistics.median(theirs)
                c = statistics.median(compiled) if compiled else None
                row = {"model": model, "batch": batch, "precision": precision, "dlperf_images_per_s": a,
                       "torch_images_per_s": b, "torch_layout": layout, "torch_layouts_tried": tried,
                       "ratio": a / b if a else None, "target": target_ratio(model, batch),
                       "torch_compile_images_per_s": c, "ratio_vs_compile": a / c if a and c else None,
                       "dlperf_runs": ours, "torch_runs": theirs, "compile_runs": compiled, "note": note}
                rows.append(row)
                fa = f"{a:9.0f}" if a else f"{'-':>9}"
                fr = f"{a / b:5.2f}x" if a else f"{'-':>6}"
                line = f"{model:8} {batch:5d} {precision:>4} {fa} {b:9.0f} {layout:>13} {fr} {row['target']:5.1f}x {meets(row):>3}"
                if args.compile:
                    line += f" {c:9.0f} {a / c:5.2f}x" if a and c else f" {'-':>9} {'-':>6}"
                print(line + ("  " + note if note else ""), flush=True)
                write_results(args, info, len(x), rows)
    speedups = bf16_speedups(rows)
    if speedups:
        print("\ndlperf bf16 vs fp32 on large: " + ", ".join(f"batch {b}: {s:.2f}x" for b, s in speedups))
    met = [r for r in rows if r["ratio"] is not None]
    print(f"\n{sum(r['ratio'] >= r['target'] for r in met)} of {len(rows)} rows meet their target "
          f"({len(rows) - len(met)} without a dlperf figure)")
    write_results(args, info, len(x), rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
