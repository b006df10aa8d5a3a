#!/usr/bin/env python3
"""Golden values from PyTorch for tests/test_pytorch_golden.cpp (and the GPU executor's twin).

dlperf's op tests compare each op with dlperf's own float64 reference; this file checks the
semantics themselves against an independent implementation. PyTorch trains two small networks
for three steps from the same weights and batches that dlperf's tests then load:

- "cnn": conv with bias, relu, max pooling, conv without padding, batchnorm + relu, average
  pooling with padding (PyTorch counts the padding), flatten of multi-channel maps (C, H, W
  order), two linear layers; SGD with Nesterov momentum and weight decay.
- "residual": batchnorm'd convs without bias (a bias before batchnorm has a zero gradient, whose
  rounding noise AdamW's first step would turn into a full +-lr step either way), overlapping max pooling with padding (as ResNet's
  stem), a residual add, a strided conv, batchnorm feeding global average pooling; AdamW.

Both use label smoothing 0.1. Recorded: each step's loss, the first step's logits and every
parameter's gradient, the parameters and batchnorm running statistics after the steps, and
eval-mode logits of another batch. Also the learning rate of every step of PyTorch's OneCycleLR,
CosineAnnealingLR and StepLR, which dlperf's --schedule onecycle, cosine and step follow.

The tests need no PyTorch: the values are committed. Regenerate (Debian's python3-torch, CPU)
after changing a case, from the repository root with dlperf built (it resolves the specs):
  /usr/bin/python3 scripts/make_pytorch_golden.py        # writes tests/golden/pytorch_steps.json
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
from bench_vs_pytorch import SpecNet  # noqa: E402  (the network a dlperf spec describes)

INPUT = [3, 10, 10]
CLASSES = 5
BATCH = 6
SMOOTHING = 0.1

CASES = [
    {
        "name": "cnn",
        "spec": {"name": "golden_cnn", "layers": [
            {"type": "conv2d", "name": "conv1", "out_channels": 6, "kernel": 3, "padding": 1, "bias": True},
            {"type": "relu", "name": "relu1"},
            {"type": "maxpool2d", "name": "pool1", "kernel": 2},
            {"type": "conv2d", "name": "conv2", "out_channels": 8, "kernel": 3, "padding": 0, "bias": False},
            {"type": "batchnorm2d", "name": "bn2"},
            {"type": "relu", "name": "relu2"},
            {"type": "avgpool2d", "name": "pool2", "kernel": 3, "stride": 1, "padding": 1},
            {"type": "flatten", "name": "flat"},
            {"type": "linear", "name": "fc1", "out_features": 12},
            {"type": "relu", "name": "relu3"},
            {"type": "linear", "name": "fc2", "out_features": "classes"}]},
        "optimizer": {"name": "sgd", "momentum": 0.9, "nesterov": True, "weight_decay": 5e-4},
        "lrs": [0.1, 0.08, 0.05],
    },
    {
        "name": "residual",
        "spec": {"name": "golden_residual", "layers": [
            {"type": "conv2d", "name": "stem", "out_channels": 8, "kernel": 3, "padding": 1, "bias": False},
            {"type": "batchnorm2d", "name": "bn0"},
            {"type": "relu", "name": "relu0"},
            {"type": "maxpool2d", "name": "pool", "kernel": 3, "stride": 2, "padding": 1},
            {"type": "conv2d", "name": "c1", "out_channels": 8, "kernel": 3, "padding": 1, "bias": False},
            {"type": "batchnorm2d", "name": "bn1"},
            {"type": "relu", "name": "relu1"},
            {"type": "conv2d", "name": "c2", "out_channels": 8, "kernel": 3, "padding": 1, "bias": False},
            {"type": "batchnorm2d", "name": "bn2"},
            {"type": "add", "name": "sum", "from": "pool"},
            {"type": "relu", "name": "relu2"},
            {"type": "conv2d", "name": "down", "out_channels": 16, "kernel": 3, "stride": 2, "padding": 1, "bias": False},
            {"type": "batchnorm2d", "name": "bn3"},
            {"type": "global_avgpool", "name": "gap"},
            {"type": "flatten", "name": "flat"},
            {"type": "linear", "name": "fc", "out_features": "classes"}]},
        "optimizer": {"name": "adamw", "weight_decay": 0.05, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8},
        "lrs": [0.01, 0.008, 0.005],
    },
]


def batch_of_images(gen):
    """Normal values rounded to eighths: exact in float32 and short in the file."""
    return (torch.randn([BATCH] + INPUT, generator=gen) * 8).round().clamp(-24, 24) / 8


def floats(t):
    """A tensor as a flat list of floats, 9 significant digits (enough to round-trip float32)."""
    return [float(f"{v:.9g}") for v in t.detach().reshape(-1).tolist()]


def resolve(dlperf, spec):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(spec, f)
    try:
        out = subprocess.run([dlperf, "models", "show", f.name, "--json", "--input", "x".join(map(str, INPUT)),
                              "--classes", str(CLASSES)], check=True, capture_output=True, text=True).stdout
    finally:
        os.unlink(f.name)
    return json.loads(out)


def run_case(dlperf, case, gen):
    net = SpecNet(resolve(dlperf, case["spec"]))
    with torch.no_grad():  # batchnorm's scale and shift away from 1 and 0, so their gradients matter
        for m in net.mods.values():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.copy_(1 + 0.2 * torch.randn(m.weight.shape, generator=gen))
                m.bias.copy_(0.2 * torch.randn(m.bias.shape, generator=gen))
    params = {name.replace("mods.", "", 1): p for name, p in net.named_parameters()}
    o = case["optimizer"]
    if o["name"] == "sgd":
        opt = torch.optim.SGD(net.parameters(), lr=case["lrs"][0], momentum=o["momentum"], nesterov=o["nesterov"],
                              weight_decay=o["weight_decay"])
    else:
        opt = torch.optim.AdamW(net.parameters(), lr=case["lrs"][0], betas=(o["beta1"], o["beta2"]), eps=o["eps"],
                                weight_decay=o["weight_decay"])
    out = {"name": case["name"], "spec": case["spec"], "optimizer": o,
           "initial_params": {k: floats(p) for k, p in params.items()}, "steps": []}
    net.train()
    for i, lr in enumerate(case["lrs"]):
        x = batch_of_images(gen)
        y = torch.randint(0, CLASSES, (BATCH,), generator=gen)
        for g in opt.param_groups:
            g["lr"] = lr
        logits = net(x)
        loss = F.cross_entropy(logits, y, label_smoothing=SMOOTHING)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        out["steps"].append({"lr": lr, "input": floats(x), "labels": y.tolist(), "loss": float(loss)})
        if i == 0:
            out["first_logits"] = floats(logits)
            out["first_grads"] = {k: floats(p.grad) for k, p in params.items()}
        opt.step()
    out["params_after"] = {k: floats(p) for k, p in params.items()}
    out["running_stats_after"] = {}
    for key, m in net.mods.items():
        if isinstance(m, torch.nn.BatchNorm2d):
            out["running_stats_after"][key + ".running_mean"] = floats(m.running_mean)
            out["running_stats_after"][key + ".running_var"] = floats(m.running_var)
    net.eval()
    x = batch_of_images(gen)
    with torch.no_grad():
        out["eval"] = {"input": floats(x), "logits": floats(net(x))}
    return out


def schedules():
    """Each schedule's learning rate for every step of 4 epochs of 5 steps, as PyTorch sets it."""
    total, per_epoch, lr = 20, 5, 0.1

    def lrs(make):
        opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=lr)
        sched = make(opt)
        got = []
        for _ in range(total):
            got.append(float(f"{opt.param_groups[0]['lr']:.12g}"))
            opt.step()
            sched.step()
        return got

    sch = torch.optim.lr_scheduler
    return [
        {"name": "onecycle", "lr": lr, "total": total, "per_epoch": per_epoch,
         "lrs": lrs(lambda o: sch.OneCycleLR(o, max_lr=lr, total_steps=total, pct_start=0.3, anneal_strategy="cos",
                                             cycle_momentum=False, div_factor=25, final_div_factor=1e4))},
        {"name": "cosine", "lr": lr, "total": total, "per_epoch": per_epoch,
         "lrs": lrs(lambda o: sch.CosineAnnealingLR(o, T_max=total))},
        {"name": "step", "lr": lr, "total": total, "per_epoch": per_epoch, "step_epochs": 2, "gamma": 0.1,
         "lrs": lrs(lambda o: sch.StepLR(o, step_size=2 * per_epoch, gamma=0.1))},
    ]


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dlperf", default=os.path.join(root, "build", "dlperf"))
    ap.add_argument("--out", default=os.path.join(root, "tests", "golden", "pytorch_steps.json"))
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(1234)
    golden = {
        "made_by": "scripts/make_pytorch_golden.py",
        "pytorch": torch.__version__,
        "input": INPUT, "classes": CLASSES, "batch": BATCH, "label_smoothing": SMOOTHING,
        "cases": [run_case(args.dlperf, c, gen) for c in CASES],
        "schedules": schedules(),
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(golden, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {args.out} (PyTorch {torch.__version__})")


if __name__ == "__main__":
    main()
