#!/usr/bin/env python3
"""dlperf vs PyTorch (CPU) training throughput, side by side in one run.

For each (model, batch size) it builds the same network in PyTorch from
`dlperf models show NAME --json`, trains one epoch of the same data in both, and prints
images/s and the ratio dlperf / PyTorch. Runs alternate (dlperf, torch, dlperf, ...) so drift
on a shared machine hits both; each figure is the median of --repeats runs.

Fairness: same cores (torch.set_num_threads = dlperf --threads), same network, batch size,
optimizer (SGD, momentum 0.9, Nesterov, weight decay 5e-4), data already in memory as float
tensors for PyTorch and loaded in the training thread for dlperf (--workers 0), no
augmentation for either; evaluation is excluded from both. The last partial batch is dropped
in both. Both flush denormal floats to zero (dlperf's default; torch.set_flush_denormal(True)
for PyTorch, which keeps them otherwise). PyTorch runs in whichever memory format is faster for it: for the conv models each
row's first repeat times it in NCHW and in channels_last (which PyTorch recommends for oneDNN
on CPUs: up to 1.5x faster here), and the other repeats use the faster (the row says which).

--precisions fp32,bf16 adds bf16 rows where the CPU has AVX512-BF16: dlperf --precision bf16
against PyTorch's own recipe for it, torch.autocast("cpu", dtype=torch.bfloat16) around the
forward pass and the loss (fp32 master weights and optimizer in both).

Needs Debian's python3-torch (PyTorch 1.13, CPU) and a built dlperf:
  /usr/bin/python3 scripts/bench_vs_pytorch.py                    # the full table
  /usr/bin/python3 scripts/bench_vs_pytorch.py --models medium --batches 64 --repeats 3
  /usr/bin/python3 scripts/bench_vs_pytorch.py --models medium --batches 64 --precisions fp32,bf16
"""
import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

FMNIST = "/usr/share/datasets/fashion-mnist"


def load_idx(path):
    with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
        data = f.read()
    magic = int.from_bytes(data[0:4], "big")
    if magic == 0x803:
        n, h, w = (int.from_bytes(data[i:i + 4], "big") for i in (4, 8, 12))
        return np.frombuffer(data, np.uint8, offset=16).reshape(n, 1, h, w)
    n = int.from_bytes(data[4:8], "big")
    return np.frombuffer(data, np.uint8, offset=8)[:n]


class SpecNet(nn.Module):
    """The network a resolved dlperf spec describes, layer for layer."""

    def __init__(self, spec):
        super().__init__()
        self.layers = spec["layers"]
        self.mods = nn.ModuleDict()
        for l in self.layers:
            t, key = l["type"], l["name"].replace(".", "_")
            if t == "conv2d":
                m = nn.Conv2d(l["in_channels"], l["out_channels"], l["kernel"], l["stride"], l["padding"], bias=l["bias"])
            elif t == "batchnorm2d":
                m = nn.BatchNorm2d(l["num_features"], eps=l["eps"], momentum=l["momentum"])
            elif t == "relu":
                m = nn.ReLU()
            elif t == "maxpool2d":
                m = nn.MaxPool2d(l["kernel"], l["stride"], l["padding"])
            elif t == "avgpool2d":
                m = nn.AvgPool2d(l["kernel"], l["stride"], l["padding"])
            elif t == "global_avgpool":
                m = nn.AdaptiveAvgPool2d(1)
            elif t == "flatten":
                m = nn.Flatten()
            elif t == "linear":
                m = nn.Linear(l["in_features"], l["out_features"], bias=l["bias"])
            elif t == "dropout":
                m = nn.Dropout(l["p"])
            elif t == "add":
                m = None
            else:
                raise SystemExit(f"unknown layer type {t}")
            if m is not None:
                self.mods[key] = m

    def forward(self, x):
        out = {"input": x}
        prev = x
        for l in self.layers:
            inp = out[l["input"]]
            if l["type"] == "add":
                prev = inp + out[l["from"]]
            else:
                prev = self.mods[l["name"].replace(".", "_")](inp)
            out[l["name"]] = prev
        return prev


LAYOUTS = ("nchw", "channels_last")


def in_layout(model, x, layout):
    """The model and the images in PyTorch memory format `layout`: nchw or channels_last."""
    if layout == "channels_last":
        return model.to(memory_format=torch.channels_last), x.contiguous(memory_format=torch.channels_last)
    return model, x


def fastest_layout(spec, layouts, rates_in):
    """PyTorch's faster memory format for a row: `rates_in(layout)` (a list of images/s figures)
    is called once per format in `layouts`, NCHW only for a model without convolutions. Returns
    the fastest, its figures and {format: first figure} of all tried."""
    if not any(l["type"] == "conv2d" for l in spec["layers"]):
        layouts = ["nchw"]
    timed = {l: rates_in(l) for l in layouts}
    best = max(timed, key=lambda l: timed[l][0])
    return best, timed[best], {l: r[0] for l, r in timed.items()}


def torch_epoch(spec, x, y, batch, lr, layout="nchw", precision="fp32"):
    torch.manual_seed(0)
    model, x = in_layout(SpecNet(spec), x, layout)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, nesterov=True, weight_decay=5e-4)
    n = (len(x) // batch) * batch
    perm = torch.randperm(len(x))
    start = time.perf_counter()
    for i in range(0, n, batch):
        idx = perm[i:i + batch]
        xb, yb = x[idx], y[idx]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return n / (time.perf_counter() - start)


def dlperf_epoch(dlperf, model, batch, limit, threads, lr, precision="fp32"):
    with tempfile.TemporaryDirectory() as runs:
        cmd = [dlperf, "train", "--model", model, "--batch-size", str(batch), "--epochs", "1", "--no-augment",
               "--workers", "0", "--threads", str(threads), "--lr", str(lr), "--schedule", "constant",
               "--train-limit", str(limit), "--test-limit", "1000", "--runs-dir", runs, "--no-progress",
               "--precision", precision]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        record = json.load(open(os.path.join(runs, os.listdir(runs)[0])))
        return record["epochs"][0]["images_per_s"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dlperf", default=os.path.join(os.path.dirname(__file__), "..", "build", "dlperf"))
    ap.add_argument("--models", default="small,medium,large")
    ap.add_argument("--batches", default="16,64,256,1024")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--limit", type=int, default=0, help="training images (0 = all 60,000; large uses --large-limit)")
    ap.add_argument("--large-limit", type=int, default=10000)
    ap.add_argument("--torch-layouts", default=",".join(LAYOUTS),
                    help="memory formats to try for PyTorch's conv models; the faster is kept per row")
    ap.add_argument("--precisions", default="fp32", help="fp32 and/or bf16 (bf16 needs AVX512-BF16)")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    layouts = args.torch_layouts.split(",")
    if any(l not in LAYOUTS for l in layouts):
        ap.error(f"--torch-layouts: each of {args.torch_layouts} must be one of {', '.join(LAYOUTS)}")
    precisions = args.precisions.split(",")
    if any(p not in ("fp32", "bf16") for p in precisions):
        ap.error(f"--precisions: each of {args.precisions} must be fp32 or bf16")
    if "bf16" in precisions and "avx512_bf16" not in open("/proc/cpuinfo").read():
        ap.error("--precisions bf16: this CPU has no AVX512-BF16, so dlperf refuses bf16 training on it")

    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)  # as dlperf computes by default (its --keep-denormals would match PyTorch's default)
    xs = load_idx(f"{FMNIST}/train-images-idx3-ubyte.gz")
    ys = load_idx(f"{FMNIST}/train-labels-idx1-ubyte.gz")
    x_all = torch.from_numpy(xs.astype(np.float32) / 255.0)
    x_all = (x_all - x_all.mean()) / x_all.std()
    y_all = torch.from_numpy(ys.astype(np.int64))
    print(f"PyTorch {torch.__version__} ({torch.get_num_threads()} threads) vs dlperf, one epoch of Fashion-MNIST, "
          f"median of {args.repeats} run(s)\n", flush=True)
    header = f"{'model':8} {'batch':>5} {'prec':>4} {'images':>6} {'dlperf img/s':>12} {'torch img/s':>11} {'torch layout':>13} {'ratio':>6}"
    print(header + "\n" + "-" * len(header), flush=True)
    rows = []
    for model in args.models.split(","):
        spec = json.loads(subprocess.run([args.dlperf, "models", "show", model, "--json", "--input", "1x28x28"],
                                         check=True, capture_output=True, text=True).stdout)
        limit = args.large_limit if model in ("large", "resnet18") else (args.limit or len(x_all))
        x, y = x_all[:limit], y_all[:limit]
        for batch, precision in ((int(b), p) for b in args.batches.split(",") for p in precisions):
            lr = 0.01
            ours, theirs = [], []
            for rep in range(args.repeats):
                ours.append(dlperf_epoch(args.dlperf, model, batch, limit, args.threads, lr, precision))
                if rep == 0:
                    layout, rates, tried = fastest_layout(
                        spec, layouts, lambda l: [torch_epoch(spec, x, y, batch, lr, l, precision)])
                    theirs += rates
                else:
                    theirs.append(torch_epoch(spec, x, y, batch, lr, layout, precision))
            a, b = statistics.median(ours), statistics.median(theirs)
            rows.append({"model": model, "batch": batch, "precision": precision, "images": limit,
                         "dlperf_images_per_s": a, "torch_images_per_s": b, "torch_layout": layout,
                         "torch_layouts_tried": tried, "ratio": a / b, "dlperf_runs": ours, "torch_runs": theirs})
            print(f"{model:8} {batch:5d} {precision:>4} {limit:6d} {a:12.0f} {b:11.0f} {layout:>13} {a / b:5.2f}x", flush=True)
    if args.json:
        json.dump({"torch": torch.__version__, "threads": args.threads, "rows": rows}, open(args.json, "w"), indent=2)


if __name__ == "__main__":
    sys.exit(main())
