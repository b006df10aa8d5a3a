#!/usr/bin/env python3
"""Reads scripts/winograd_sweep/sweep.cpp's CSV and checks the CPU engine's Winograd rule on it
(src/backend/cpu/winograd.cpp: which shapes it picks, where it picks the slower kernel and what
that costs) and the plan's Winograd figure (plan::EngineModel::winograd_efficiency): each picked
point's measured time against 2 x 36 x ic x oc x tiles FLOPs a pass at efficiency x peak x
ic / (ic + short) x tiles / (tiles + few), the figures below being the plan's.

  python3 scripts/winograd_sweep/fit.py sweep.csv [--peak-gflops 351]

--peak-gflops is the machine's FMA peak (dlperf bench flops; 351 on the Xeon VM it was fitted on).
"""
import argparse, csv, math, statistics

EFFICIENCY, SHORT_CHANNELS, FEW_TILES = 0.5, 16, 32  # plan::EngineModel's


def rule(r):  # cpu::winograd_pays, for the sweep's shapes (3x3, stride 1, padding 1)
    ic, oc = r['ic'], r['oc']
    if ic % 16 or oc % 16 or ic < 32 or oc < 32:
        return False
    return r['n'] * r['h'] * r['h'] / 16 >= (64 if ic >= 64 else 256)


def planned_s(r, peak):
    tiles = r['n'] * math.ceil(r['h'] / 4) ** 2
    flops = 2 * 36 * r['ic'] * r['oc'] * tiles * 3
    eff = EFFICIENCY * r['ic'] / (r['ic'] + SHORT_CHANNELS) * tiles / (tiles + FEW_TILES)
    return flops / (peak * 1e9 * eff)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('csv')
    ap.add_argument('--peak-gflops', type=float, default=351)
    a = ap.parse_args()
    rows = [{k: float(v) for k, v in r.items()} for r in csv.DictReader(open(a.csv))]
    lost = best = 0.0
    for r in rows:
        picked = rule(r)
        best += min(r['direct_ms'], r['wino_ms'])
        lost += (r['wino_ms'] if picked else r['direct_ms']) - min(r['direct_ms'], r['wino_ms'])
        if picked != (r['ratio'] > 1):
            print(f"missed: batch {r['n']:.0f}, {r['ic']:.0f}->{r['oc']:.0f} on {r['h']:.0f}x{r['h']:.0f}: "
                  f"direct/Winograd {r['ratio']:.2f}, the rule took {'Winograd' if picked else 'direct'}")
    print(f"the rule lost {lost:.1f} ms of the {best:.1f} ms the faster kernel took over {len(rows)} points")
    picked = [r for r in rows if rule(r)]
    off = [planned_s(r, a.peak_gflops) / (r['wino_ms'] / 1e3) for r in picked]
    if off:
        err = sorted(abs(math.log(x)) for x in off)
        print(f"plan / measured over the {len(off)} points run as Winograd: median {statistics.median(off):.2f}, "
              f"{min(off):.2f}-{max(off):.2f}; median error {math.exp(statistics.median(err)) - 1:.0%}, worst {math.exp(err[-1]) - 1:.0%}")


if __name__ == '__main__':
    main()
