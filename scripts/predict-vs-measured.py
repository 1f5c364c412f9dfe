#!/usr/bin/env python3
"""Compares the cost model's predictions with measured training steps
(scripts/gpu-step-measure.py's JSON): for each measured model, imports its
Hugging Face config at the measured sequence length (activation
checkpointing when the run used it), simulates one step at world size 1
with AdamW on the given profile (mfsdp-sim), and prints predicted against
measured per phase and for peak memory, with the per-op kernels and, for
comparison, without them (the unit's FLOPs priced as one).

    python3 scripts/predict-vs-measured.py MEASURED.json [--profile h100]
        [--bin build/bin] [--precision bf16-params]

Every predicted figure is the model's; the measured ones are the JSON's.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile


def simulate(bindir, config, seq, tokens, recompute, profile, flat):
    with tempfile.TemporaryDirectory() as tmp:
        mlir = os.path.join(tmp, "g.mlir")
        cmd = [os.path.join(bindir, "mfsdp-translate"), "--import-hf-config", config,
               f"--hf-seq-len={seq}", "-o", mlir]
        if recompute:
            cmd.insert(3, "--hf-recompute")
        subprocess.run(cmd, check=True)
        if flat:
            lines = []
            for line in open(mlir):
                i = line.find(", kernels = [")
                lines.append(line[:i] + ">\n" if i >= 0 else line)
            open(mlir, "w").writelines(lines)
        out = subprocess.run([os.path.join(bindir, "mfsdp-sim"), mlir, f"--profile={profile}",
                              f"--pipeline=mesh=dp_shard=1 policy=adamw tokens={tokens}"],
                             check=True, capture_output=True, text=True).stdout
    m = re.search(r"fwd\s+([0-9.]+) bwd\s+([0-9.]+) opt\s+([0-9.]+) ms.*peak memory\s+([0-9.]+) GiB"
                  r" \(reserved\s+([0-9.]+)\)", out)
    if not m:
        sys.exit("predict-vs-measured: cannot read mfsdp-sim's summary line:\n" + out)
    return [float(x) for x in m.groups()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("measured")
    ap.add_argument("--profile", default="h100")
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--precision", default="bf16-params")
    args = ap.parse_args()
    every = json.load(open(args.measured))
    rows = [r for r in every if r.get("precision", "autocast") == args.precision]
    print(f"predicted ({args.profile} profile, mfsdp-sim at world size 1, AdamW) against measured "
          f"({args.precision}); error = predicted / measured - 1")
    print("| model | tokens | ckpt | phase | measured | per-op kernels | error | "
          "flat (FLOPs as one) | error |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    reserved = []
    for r in rows:
        name = os.path.basename(r["config"]).removesuffix(".json")
        k = simulate(args.bin, r["config"], r["seq"], r["tokens"], r["checkpoint"], args.profile,
                     False)
        f = simulate(args.bin, r["config"], r["seq"], r["tokens"], r["checkpoint"], args.profile,
                     True)
        measured = [r["forward_s"] * 1e3, r["backward_s"] * 1e3, r["optimizer_s"] * 1e3,
                    r["peak_allocated_bytes"] / 2**30]
        phases = ["forward (ms)", "backward (ms)", "optimizer (ms)", "peak allocated (GiB)"]
        for i, ph in enumerate(phases):
            print(f"| {name} | {r['tokens']} | {'yes' if r['checkpoint'] else 'no'} | {ph} | "
                  f"{measured[i]:.1f} | {k[i]:.1f} | {k[i] / measured[i] - 1:+.0%} | "
                  f"{f[i]:.1f} | {f[i] / measured[i] - 1:+.0%} |")
        reserved.append((name, r, k))
    # The caching allocator's reserve: the profile's factor (fitted on all the
    # measured runs) and, left one out, the mean ratio of the others.
    ratios = [(id(r), r["peak_reserved_bytes"] / r["peak_allocated_bytes"]) for r in every
              if r.get("peak_reserved_bytes") and r.get("peak_allocated_bytes")]
    print()
    print("| model | tokens | ckpt | measured reserved (GiB) | predicted (profile's factor) | "
          "error | factor of the others | predicted (left out) | error |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    worst = 0.0
    for name, r, k in reserved:
        if not r.get("peak_reserved_bytes"):
            continue
        others = [x for i, x in ratios if i != id(r)]
        factor = sum(others) / len(others)
        measured = r["peak_reserved_bytes"] / 2**30
        left_out = k[3] * factor
        worst = max(worst, abs(left_out / measured - 1))
        print(f"| {name} | {r['tokens']} | {'yes' if r['checkpoint'] else 'no'} | "
              f"{measured:.2f} | {k[4]:.2f} | {k[4] / measured - 1:+.0%} | {factor:.3f} | "
              f"{left_out:.2f} | {left_out / measured - 1:+.1%} |")
    print(f"\nleft-out reserved peaks: worst error {worst:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
