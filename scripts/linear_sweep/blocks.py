#!/usr/bin/env python3
"""What 10 outputs cost against 16 and 16 against 32, pass by pass, in a CSV from sweep.cpp:
the medians over every batch from 16 and every input width. 10 costing what 16 does (about 1x)
is a kernel that computes outputs in blocks of 16 (plan::EngineModel::output_block); 16 costing
half of 32 is one that does not waste the padding.

  python3 scripts/linear_sweep/blocks.py scripts/linear_sweep/xeon-2026-11-28-1thread.csv
"""
import csv
import statistics
import sys

rows = {(int(r["mb"]), int(r["ic"]), int(r["oc"])): r for r in csv.DictReader(open(sys.argv[1]))}
keys = [(mb, ic) for (mb, ic, oc) in rows if oc == 10 and mb >= 16 and (mb, ic, 16) in rows and (mb, ic, 32) in rows]
print(f"{len(keys)} shapes (batch >= 16)")
for name, col in (("forward", "fwd_us"), ("backward-weights", "bww_us"), ("backward-data", "bwd_us")):
    r10 = [float(rows[(mb, ic, 10)][col]) / float(rows[(mb, ic, 16)][col]) for mb, ic in keys]
    r16 = [float(rows[(mb, ic, 16)][col]) / float(rows[(mb, ic, 32)][col]) for mb, ic in keys]
    print(f"{name:17s} 10/16 outputs: median {statistics.median(r10):.2f}x ({min(r10):.2f}-{max(r10):.2f});"
          f"  16/32: median {statistics.median(r16):.2f}x")
