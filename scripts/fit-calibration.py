#!/usr/bin/env python3
"""Fits the per-op rate models to a scripts/gpu-calibrate.py JSON and says
how well they predict rows they were not fitted to.

    python3 scripts/fit-calibration.py docs/data/h100-calibrate-2026-11-26.json

GEMMs (bf16): t = t0 + max((F + F0) / P, bytes / BW), F = 2 m n k, bytes
= 2 (m k + k n + m n), BW the measured copy bandwidth; least squares in log
time over every GEMM, then again with the rows of one M left out in turn
(the errors printed are the left-out rows'). Attention (causal, per head
dim, forward and forward plus backward): rate = R s / (s + s0). Needs
numpy and scipy.
"""
import json
import sys

import numpy as np
from scipy.optimize import least_squares


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    d = json.load(open(sys.argv[1]))
    bw = d["bandwidth"][0]["GBps"] * 1e9
    g = [r for r in d["gemm"] if r["dtype"] == "bfloat16"]
    M = np.array([r["m"] for r in g], float)
    N = np.array([r["n"] for r in g], float)
    K = np.array([r["k"] for r in g], float)
    T = np.array([r["seconds"] for r in g])
    F = 2 * M * N * K
    B = 2 * (M * K + K * N + M * N)

    def res(x, sel):
        P, F0, t0 = np.exp(x)
        return np.log((t0 + np.maximum((F + F0) / P, B / bw))[sel] / T[sel])

    x0 = np.log([750e12, 1e9, 3e-6])
    everything = np.ones(len(g), bool)
    fit = least_squares(lambda x: res(x, everything), x0)
    e = np.exp(fit.fun) - 1
    P, F0, t0 = np.exp(fit.x)
    print(f"GEMM bf16 ({len(g)} shapes): P = {P / 1e12:.0f} TFLOP/s, F0 = {F0:.3g} FLOPs, "
          f"t0 = {t0 * 1e6:.1f} us; in-sample error mean {np.mean(abs(e)):.1%}, "
          f"worst {np.max(abs(e)):.1%}")
    for hold in sorted(set(M)):
        train = M != hold
        f = least_squares(lambda x: res(x, train), x0)
        ee = np.exp(res(f.x, ~train)) - 1
        print(f"  M = {int(hold):5d} left out: mean {np.mean(abs(ee)):.1%}, worst {np.max(abs(ee)):.1%}")
    for hd in sorted(set(a["head_dim"] for a in d["attention"])):
        rows = [a for a in d["attention"] if a["head_dim"] == hd]
        s = np.array([a["seq"] for a in rows], float)
        for name, key in (("forward", "fwd_TFLOPs"), ("forward+backward", "fwdbwd_TFLOPs")):
            y = np.array([a[key] for a in rows])
            f = least_squares(lambda x: np.log(np.exp(x[0]) * s / (s + np.exp(x[1])) / y),
                              np.log([500, 500]))
            ee = np.exp(f.fun) - 1
            R, s0 = np.exp(f.x)
            print(f"attention head dim {hd} {name}: R = {R:.0f} TFLOP/s, s0 = {s0:.0f}; "
                  f"error mean {np.mean(abs(ee)):.1%}, worst {np.max(abs(ee)):.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
