#!/usr/bin/env python3
"""Damaged input files against dlperf: every file it reads, mutated many ways, must end in one
clear message and a non-zero exit (or be read fine), never in a crash, a hang, a sanitizer report,
an internal message or a machine-sized allocation.

    scripts/fuzz_inputs.py                        # build/dlperf, 60 cases per input kind
    scripts/fuzz_inputs.py --dlperf build-asan/dlperf --cases 200 --only spec,checkpoint

build-asan/ (scripts/sanitize.sh makes it) finds what the plain build cannot: reads past a buffer,
undefined behaviour. Give it --timeout 600: where the machine profile is damaged, plan measures the
ceilings on the spot, a second in the plain build and minutes under ASan, which read as hangs.
The inputs, each made here from scratch (but for the H100's records), and the command that reads it:

    idx         a directory of IDX files (raw)          train --data DIR
    idx-gz      the same, gzip-compressed               train --data DIR
    cifar       CIFAR-10 binary batches                 train --data DIR
    spec        a model spec (.json)                    plan -m FILE (also --layers on GPU targets), models show FILE
    checkpoint  a checkpoint (binary header + JSON)     train --checkpoint DIR --resume (any damage must be refused)
    record      a run record                            plan --against FILE
    gpu-record  a GPU run's record (data/gpu-fit)       plan --against FILE
    profile     runs/machine-profile.json               plan
    catalog     a hardware catalog (data/hardware.json) plan --catalog FILE
    lab         a lab's lab.json and run records        lab --resume
    redraw      a lab's lab.json                        lab --redraw

Mutations: the file cut short, emptied or removed; bytes flipped, inserted, deleted; a 4-byte
field set to 0, -1, 2^31 or a random count; and for JSON (the checkpoint's header too) a value
replaced by another type or an extreme number, a key removed, an array element dropped or doubled.
Findings are listed with the command and kept with their input under --out; exit 1 if any.
It found a count field that made the IDX reader allocate 15 GB (fixed in 484a37c). A message that
quotes the damaged bytes raw (not UTF-8) is a finding too, as is a damaged checkpoint that resumes
(until 2026-11-28 a changed letter or digit in the header's JSON did), and a value of the wrong
type refused without its field's name (nlohmann's bare "type must be number, but is string"; the
last of those, in lab.json's rows and a checkpoint's history, were named on 2026-11-29).
"""
import argparse
import collections
import copy
import gzip
import json
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A message that is an exception's own text, not dlperf's: the input reached code that trusted it.
INTERNAL = re.compile(r"json\.exception|\bsto[ildf]\b|std::|basic_string|vector::|bad_alloc|bad_optional|"
                      r"out of memory|terminate called|what\(\)|Assertion|filesystem error")
CRASH = re.compile(r"AddressSanitizer|LeakSanitizer|runtime error:|Segmentation fault|Aborted")


def names_the_field(out):
    """Whether every wrong-typed JSON value in the message comes with its field, as dlperf's
    readers say it ("data: type must be string, but is number"; core/json_error.h), not as
    nlohmann's bare "type must be number, but is string" (after "is damaged: ", say)."""
    for m in re.finditer(r"type must be|cannot use", out):
        key = re.search(r"([\w.\[\]]+): $", out[:m.start()])
        if not key or key.group(1) in ("damaged", "header", "record", "profile", "catalog", "spec"):
            return False
    return True


def idx_images(n, h, w, rng):
    return struct.pack(">IIII", 0x803, n, h, w) + bytes(rng.randrange(256) for _ in range(n * h * w))


def idx_labels(n, rng):
    return struct.pack(">II", 0x801, n) + bytes(rng.randrange(10) for _ in range(n))


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


# ---- mutations -------------------------------------------------------------------------------

def mutate_bytes(data, rng):
    """One damage to a byte string, and its description."""
    kind = rng.choice(["cut", "cut", "flip", "flip", "field", "field", "insert", "delete", "empty"])
    n = len(data)
    if kind == "empty" or n == 0:
        return b"", "emptied"
    if kind == "cut":
        at = rng.choice([rng.randrange(n), rng.randrange(min(n, 64)), n - 1])
        return data[:at], f"cut to {at} bytes"
    if kind == "flip":
        b = bytearray(data)
        spots = [rng.randrange(min(n, 64)) if rng.random() < 0.5 else rng.randrange(n) for _ in range(rng.randint(1, 8))]
        for i in spots:
            b[i] ^= 1 << rng.randrange(8)
        return bytes(b), f"bits flipped at {sorted(spots)}"
    if kind == "field":
        at = rng.randrange(0, max(1, min(n - 4, 32)), 4) if rng.random() < 0.7 else rng.randrange(max(1, n - 4))
        value = rng.choice([0, 0xFFFFFFFF, 0x7FFFFFFF, 0x80000000, 1, rng.randrange(1 << 32), rng.randrange(1 << 16)])
        b = bytearray(data)
        b[at:at + 4] = struct.pack(">I", value)[: len(b[at:at + 4])]
        return bytes(b), f"4 bytes at {at} set to {value:#x}"
    if kind == "insert":
        at = rng.randrange(n)
        extra = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        return data[:at] + extra + data[at:], f"{len(extra)} bytes inserted at {at}"
    at = rng.randrange(n)
    k = rng.randint(1, 16)
    return data[:at] + data[at + k:], f"{k} bytes deleted at {at}"


ODD_VALUES = [None, True, -1, 0, 1, 2**31, 2**63, -(2**63), 1e308, -1e308, 1e-308, 0.5, "", "x", "nan",
              [], {}, [1, 2, 3], {"a": 1}]


def json_paths(v, path=()):
    yield path
    if isinstance(v, dict):
        for k, x in v.items():
            yield from json_paths(x, path + (k,))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            yield from json_paths(x, path + (i,))


def mutate_json(doc, rng):
    """One damage to a parsed JSON document (a copy), and its description."""
    doc = copy.deepcopy(doc)
    paths = [p for p in json_paths(doc) if p]
    if not paths:
        return rng.choice(ODD_VALUES), "the whole document replaced"
    path = rng.choice(paths)
    parent = doc
    for k in path[:-1]:
        parent = parent[k]
    key = path[-1]
    kind = rng.choice(["value", "value", "value", "scale", "remove", "double"])
    where = "/".join(str(k) for k in path)
    if kind == "scale" and isinstance(parent[key], (int, float)) and not isinstance(parent[key], bool):
        factor = rng.choice([-1, 0, 1000, 10**9, 10**15])
        parent[key] = parent[key] * factor if isinstance(parent[key], int) else parent[key] * float(factor)
        return doc, f"{where} times {factor}"
    if kind == "remove":
        del parent[key]
        return doc, f"{where} removed"
    if kind == "double" and isinstance(parent, list):
        parent.insert(key, copy.deepcopy(parent[key]))
        return doc, f"{where} doubled"
    value = rng.choice(ODD_VALUES)
    parent[key] = value
    return doc, f"{where} = {json.dumps(value)}"


def mutate_json_text(text, rng):
    if rng.random() < 0.8:
        doc, how = mutate_json(json.loads(text), rng)
        return json.dumps(doc, indent=1).encode(), how
    return mutate_bytes(text.encode(), rng)


def mutate_checkpoint(data, rng):
    """"DLPERFCK" | u64 header length | JSON header | data | u32 CRC-32 of the header: the header's
    JSON (half the time with its CRC-32 made anew, as if dlperf had written the damaged fields,
    which the checks behind the CRC must then name), or the bytes."""
    if data[:8] == b"DLPERFCK" and rng.random() < 0.6:
        (length,) = struct.unpack("<Q", data[8:16])
        header = json.loads(data[16:16 + length])
        doc, how = mutate_json(header, rng)
        body = json.dumps(doc).encode()
        tensors, crc = data[16 + length:-4], data[-4:]
        if rng.random() < 0.5:
            crc, how = struct.pack("<I", zlib.crc32(body)), how + " (its CRC-32 made anew)"
        return b"DLPERFCK" + struct.pack("<Q", len(body)) + body + tensors + crc, "header: " + how
    return mutate_bytes(data, rng)


def checkpoint_must_be_refused(before, after, how):
    """Every changed byte of a checkpoint is caught by one of its two CRC-32s, unless the damage
    made the header's anew."""
    return after != before and "made anew" not in how


# ---- the inputs -------------------------------------------------------------------------------

class Input:
    """A kind of input: the folder its seed files lie in (copied for each case), which of them to
    damage, how, and the command that reads the damaged copy (given the copy's folder and the
    file damaged) with the folder it runs in."""

    def __init__(self, name, folder, files, mutate, command, must_refuse=None):
        self.name, self.folder, self.files, self.mutate, self.command = name, folder, files, mutate, command
        self.must_refuse = must_refuse  # (bytes before, bytes after, how) -> True where reading it fine is a finding


def run(cmd, cwd, timeout):
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:exitcode=86",
               UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:exitcode=86", OMP_NUM_THREADS="1")
    try:
        p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, errors="replace", timeout=timeout)
        return p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"") + (e.stderr or b"")
        return None, out.decode(errors="replace") if isinstance(out, bytes) else out


def verdict(rc, out, must_refuse=False):
    if rc is None:
        return "hang"
    if rc < 0 or rc >= 128 or rc == 86 or CRASH.search(out):
        return "crash"
    if INTERNAL.search(out):
        return "internal message"
    if "\ufffd" in out:  # bytes that are not UTF-8 (run() decodes with errors="replace"): the file's, quoted raw
        return "raw bytes in the message"
    if rc != 0 and "error" not in out.lower():
        return "no message"
    if rc != 0 and not names_the_field(out):
        return "field not named"
    if rc == 0 and must_refuse:
        return "damage read as good"
    return "ok" if rc == 0 else "refused"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dlperf", default=os.path.join(ROOT, "build", "dlperf"))
    ap.add_argument("--cases", type=int, default=60, help="damaged files per input kind")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", default="", help="comma-separated input kinds")
    ap.add_argument("--timeout", type=float, default=60, help="seconds before a run counts as a hang")
    ap.add_argument("--out", default="", help="where findings are kept (default: a new temporary folder)")
    ap.add_argument("--messages", action="store_true",
                    help="also list the distinct messages the damaged files got, to read them as a user would")
    args = ap.parse_args()
    dlperf = os.path.abspath(args.dlperf)
    if not os.access(dlperf, os.X_OK):
        sys.exit(f"fuzz_inputs: {dlperf} is not there; build it first (scripts/setup.sh, or scripts/sanitize.sh for build-asan/)")
    rng = random.Random(args.seed)
    work = tempfile.mkdtemp(prefix="dlperf-fuzz-")
    out_dir = args.out or tempfile.mkdtemp(prefix="dlperf-fuzz-findings-")
    os.makedirs(out_dir, exist_ok=True)
    seeds = os.path.join(work, "seeds")
    os.makedirs(seeds)
    quiet = ["--no-progress"]

    # Seeds, made here: small sets, so each damaged run takes a fraction of a second.
    idx = os.path.join(seeds, "idx")
    os.makedirs(idx)
    write(f"{idx}/train-images-idx3-ubyte", idx_images(64, 28, 28, rng))
    write(f"{idx}/train-labels-idx1-ubyte", idx_labels(64, rng))
    write(f"{idx}/t10k-images-idx3-ubyte", idx_images(16, 28, 28, rng))
    write(f"{idx}/t10k-labels-idx1-ubyte", idx_labels(16, rng))
    idx_gz = os.path.join(seeds, "idx-gz")
    os.makedirs(idx_gz)
    for f in os.listdir(idx):
        with open(os.path.join(idx, f), "rb") as src:
            write(os.path.join(idx_gz, f + ".gz"), gzip.compress(src.read()))
    cifar = os.path.join(seeds, "cifar")
    os.makedirs(cifar)
    for f in [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]:
        write(os.path.join(cifar, f), b"".join(bytes([rng.randrange(10)]) + bytes(rng.randrange(256) for _ in range(3072))
                                              for _ in range(4)))
    spec = os.path.join(seeds, "spec")
    os.makedirs(spec)
    for m in ("small", "mlp", "resnet18"):
        shutil.copy(os.path.join(ROOT, "models", m + ".json"), spec)
    catalog = os.path.join(seeds, "catalog")  # the built-in catalog as a --catalog file: without its notes on CPUs
    os.makedirs(catalog)
    with open(os.path.join(ROOT, "data", "hardware.json")) as f:
        builtin = json.load(f)
    builtin.pop("cpus_about", None)
    write(os.path.join(catalog, "hardware.json"), json.dumps(builtin, indent=1).encode())
    # A checkpoint, a run record and a machine profile, made by dlperf itself.
    state = os.path.join(seeds, "state")
    os.makedirs(state)
    def train(data):
        return [dlperf, "train", "-m", "mlp", "-d", data, "-b", "16", "-e", "1", *quiet]
    for cmd in (train(idx) + ["--checkpoint", "ck"], [dlperf, "bench", "all", "--quick", "--threads", "1"]):
        rc, text = run(cmd, state, 600)
        if rc != 0:
            sys.exit(f"fuzz_inputs: making the seeds failed: {' '.join(cmd)}\n{text}")
    records = [f for f in os.listdir(os.path.join(state, "runs")) if "-train-" in f]
    shutil.copy(os.path.join(state, "runs", records[0]), os.path.join(state, "record.json"))

    # A lab of 2 small runs, to resume from its damaged run records.
    lab = [dlperf, "lab", "workers", "-d", "synthetic:1x12x12:300", "-m", "mlp", "-b", "16", "--max-workers", "1", *quiet]
    rc, text = run(lab + ["-o", "lab"], state, 600)
    if rc != 0:
        sys.exit(f"fuzz_inputs: making the seeds failed: {' '.join(lab)}\n{text}")
    profile_cwd = os.path.join(work, "profile")

    def with_profile(d, f):  # runs/machine-profile.json, where plan looks for it
        shutil.rmtree(profile_cwd, ignore_errors=True)
        shutil.copytree(d, os.path.join(profile_cwd, "runs"))
        return [dlperf, "plan", "-m", "small"], profile_cwd

    gpu_runs = os.path.join(ROOT, "data", "gpu-fit", "h100-2026-11-28", "runs")  # records an H100 wrote (GPU rows of --against)
    json_damage = lambda b, r: mutate_json_text(b.decode(errors="replace"), r)
    inputs = [Input(name, folder, sorted(os.listdir(folder)), mutate_bytes, lambda d, f: (train(d) + ["--runs-dir", ""], state))
              for name, folder in (("idx", idx), ("idx-gz", idx_gz), ("cifar", cifar))]
    inputs += [
        Input("spec", spec, sorted(os.listdir(spec)), json_damage,
              lambda d, f: (rng.choice([[dlperf, "plan", "-m", f], [dlperf, "models", "show", f],
                                        [dlperf, "plan", "-m", f, "--layers", "--targets", "h100-sxm,t4", "--precision", "fp16"]]), state)),
        Input("checkpoint", os.path.join(state, "ck"), ["checkpoint.dlperf"], mutate_checkpoint,
              lambda d, f: (train(idx)[:-3] + ["-e", "2", "--checkpoint", d, "--resume", "--runs-dir", "", *quiet], state),
              checkpoint_must_be_refused),
        Input("record", state, ["record.json"], json_damage, lambda d, f: ([dlperf, "plan", "--against", f], state)),
        Input("gpu-record", gpu_runs, sorted(os.listdir(gpu_runs))[:2], json_damage, lambda d, f: ([dlperf, "plan", "--against", f], state)),
        Input("profile", os.path.join(state, "runs"), ["machine-profile.json"], json_damage, with_profile),
        Input("catalog", catalog, ["hardware.json"], json_damage,
              lambda d, f: ([dlperf, "plan", "-m", "small", "--catalog", f], state)),
        Input("lab", os.path.join(state, "lab"), ["lab.json"] + [f"runs/{r}" for r in sorted(os.listdir(os.path.join(state, "lab", "runs")))],
              json_damage, lambda d, f: (lab + ["-o", d, "--resume"], state)),
        Input("redraw", os.path.join(state, "lab"), ["lab.json"], json_damage,
              lambda d, f: ([dlperf, "lab", "--redraw", "-o", d], state)),
    ]
    only = set(filter(None, args.only.split(",")))
    unknown = only - {i.name for i in inputs}
    if unknown:
        sys.exit(f"fuzz_inputs: no input kind {', '.join(sorted(unknown))}; the kinds: {', '.join(i.name for i in inputs)}")

    tally = collections.defaultdict(collections.Counter)
    messages = collections.defaultdict(collections.Counter)
    findings = []
    for inp in inputs:
        if only and inp.name not in only:
            continue
        for case in range(args.cases):
            case_dir = os.path.join(work, "case")
            shutil.rmtree(case_dir, ignore_errors=True)
            shutil.copytree(inp.folder, case_dir)
            victim = rng.choice(inp.files)
            path = os.path.join(case_dir, victim)
            must_refuse = False
            if rng.random() < 0.03:
                os.remove(path)
                how = "removed"
            else:
                with open(path, "rb") as f:
                    before = f.read()
                data, how = inp.mutate(before, rng)
                write(path, data)
                must_refuse = bool(inp.must_refuse and inp.must_refuse(before, data, how))
            cmd, cwd = inp.command(case_dir, path)
            rc, text = run(cmd, cwd, args.timeout)
            v = verdict(rc, text, must_refuse)
            tally[inp.name][v] += 1
            for line in text.splitlines():  # the messages, with what varies from case to case (places, numbers) taken out
                if re.match(r"\s*(dlperf: error|skipped|note: ignoring)", line):
                    messages[inp.name][re.sub(r"\d+", "N", line.strip().replace(case_dir, "DIR"))] += 1
            if v in ("ok", "refused"):
                continue
            keep = os.path.join(out_dir, f"{inp.name}-{case}")
            shutil.copytree(case_dir, keep)
            last = [l for l in text.strip().splitlines() if l.strip()][-3:]
            findings.append((inp.name, v, f"{victim}: {how}", " ".join(cmd).replace(case_dir, keep), last))
        counts = ", ".join(f"{n} {k}" for k, n in sorted(tally[inp.name].items()))
        print(f"{inp.name:<11} {args.cases} cases: {counts}", flush=True)
    shutil.rmtree(work, ignore_errors=True)
    if args.messages:
        for name, said in messages.items():
            print(f"\n{name}: the messages ({len(said)} distinct)")
            for text, n in said.most_common():
                print(f"  {n:4d}  {text}")
    if not findings:
        print("no findings")
        shutil.rmtree(out_dir, ignore_errors=True) if not args.out else None
        return 0
    print(f"\n{len(findings)} findings (inputs kept in {out_dir}):")
    for name, v, how, cmd, last in findings:
        print(f"- {name}, {v}: {how}\n  {cmd}")
        for line in last:
            print(f"    {line}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
