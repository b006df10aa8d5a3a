#!/usr/bin/env python3
"""Fits the plan's AMX figures (plan::EngineModel::amx_*) to scripts/amx_sweep/sweep.cpp's CSV and
prints how far the plan's pass times are from the measured ones.

A bf16 conv or linear pass on AMX is planned as the plan plans every pass: the longer of its
FLOPs at efficiency x the AMX peak x K / (K + short) x outputs / outputs rounded up to 16, and its
bytes at the bandwidth of the level they fit in, plus a call. K is the pass's reduction
(forward: in x 9 or in; backward-data: out x 9 or out; backward-weights: the batch's pixels).

  python3 scripts/amx_sweep/fit.py sweep.csv --peak-gflops 5991 [--threads 2] [--fit]

--peak-gflops is `dlperf bench flops`'s AMX bf16 peak at the sweep's threads; the bandwidths and
the call's cost are this Xeon VM's (2026-11-29, dlperf plan's ceilings), which --l2-gbps,
--l3-gbps, --l2-mib and --call-us change. Without --fit it checks the figures below, which are
the plan's for linear layers; the plan's convolutions take them over IN_TRAINING.
"""
import argparse, csv, itertools, math, statistics

# The sweep's fit, alone; plan::EngineModel's (src/plan/step_time.h) are these, for convolutions
# over IN_TRAINING: in a training step their passes took longer than alone (step_time.h says how).
EFFICIENCY = {('conv', 'forward'): 0.48, ('conv', 'backward_data'): 0.32, ('conv', 'backward_weights'): 0.18,
              ('linear', 'forward'): 0.25, ('linear', 'backward_data'): 0.3, ('linear', 'backward_weights'): 0.16}
IN_TRAINING = {'forward': 1.39, 'backward_data': 1.71, 'backward_weights': 1.71}
SHORT = 64
BLOCK = 16


def reduction(r, p):
    kk = 9 if r['kind'] == 'conv' else 1
    if p == 'forward':
        return r['in'] * kk
    if p == 'backward_data':
        return r['out'] * kk
    return r['n'] * r['h'] * r['h']


def planned_ms(r, eff, short, a):
    p = r['pass']
    outputs = r['in'] if p == 'backward_data' else r['out']
    k = reduction(r, p)
    share = outputs / (math.ceil(outputs / BLOCK) * BLOCK)
    compute = r['gflop'] * 1e9 / (a.peak_gflops * 1e9 * eff * k / (k + short) * share)
    pixels = r['n'] * r['h'] * r['h']
    weights = r['in'] * r['out'] * (9 if r['kind'] == 'conv' else 1)
    nbytes = 2 * pixels * (r['in'] + r['out']) + (4 if p == 'backward_weights' else 2) * weights
    bw = a.l2_gbps if nbytes <= a.l2_mib * 2**20 else a.l3_gbps
    return max(compute, nbytes / (bw * 1e9)) * 1e3 + a.call_us / 1e3


def errors(rows, eff, short, a):
    return [math.log(planned_ms(r, eff[(r['kind'], r['pass'])], short, a) / r['ms']) for r in rows]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('csv')
    ap.add_argument('--peak-gflops', type=float, required=True)
    ap.add_argument('--l2-gbps', type=float, default=242)
    ap.add_argument('--l3-gbps', type=float, default=55)
    ap.add_argument('--l2-mib', type=float, default=4)
    ap.add_argument('--call-us', type=float, default=1.8)
    ap.add_argument('--fit', action='store_true', help='fit the efficiencies and the short reduction')
    a = ap.parse_args()
    rows = []
    for r in csv.DictReader(open(a.csv)):
        if 'amx' not in r['impl']:
            continue
        rows.append({'kind': r['kind'], 'pass': r['pass'], 'n': int(r['n']), 'in': int(r['in']), 'out': int(r['out']),
                     'h': int(r['h']), 'gflop': float(r['gflop']), 'ms': float(r['ms'])})
    eff, short = dict(EFFICIENCY), SHORT
    if a.fit:  # each pass kind on its own, the median |log error| over a grid, for each short reduction
        best = None
        for s in (0, 16, 32, 64, 128, 256):
            trial, total = {}, 0
            for key in EFFICIENCY:
                sel = [r for r in rows if (r['kind'], r['pass']) == key]
                cost = lambda e: statistics.median(abs(x) for x in errors(sel, {key: e}, s, a))
                e = min((x / 100 for x in range(2, 81)), key=cost)
                trial[key] = e
                total += cost(e) * len(sel)
            if best is None or total < best[0]:
                best = (total, s, trial)
        _, short, eff = best
        print('fitted: short reduction', short, ', efficiencies', {f'{k[0]} {k[1]}': v for k, v in eff.items()})
    for key in EFFICIENCY:
        sel = [r for r in rows if (r['kind'], r['pass']) == key]
        e = errors(sel, eff, short, a)
        print(f'{key[0]:6} {key[1]:16} {len(sel):3} passes at {eff[key]:.2f}: planned / measured a median {math.exp(statistics.median(e)):.2f}, '
              f'median |error| {100 * (math.exp(statistics.median(abs(x) for x in e)) - 1):.0f}%, '
              f'range {math.exp(min(e)):.2f}-{math.exp(max(e)):.2f}')


if __name__ == '__main__':
    main()
