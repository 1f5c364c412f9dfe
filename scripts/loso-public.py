#!/usr/bin/env python3
"""Leave-one-source-out validation of the cost model on public measurements
(docs/data/public-steps.json, transcribed in docs/public-measurements.md).

    python3 scripts/loso-public.py [--bin build/bin] [--data docs/data/public-steps.json]

Each row is imported from its Hugging Face config at its sequence length
(every block checkpointed when the run checkpointed) and simulated with
mfsdp-sim (FSDP2-style per-parameter row shards, AdamW, the row's mesh,
tokens per GPU and reduce dtype) on its profile. Two scales of the profile
are fitted (mfsdp-sim --profile-set): computeScale (every compute rate) and
commScale (the NCCL bus bandwidths), on a grid. For every source in turn
the scales that minimise the mean squared log error over the OTHER sources'
rows predict the left-out source's rows; the table gives each prediction's
error. The public sources give whole steps only (no phases) and peak memory
for one source. Every predicted time is the model's.
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile

COMPUTE = [0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.4]
COMM = [0.35, 0.5, 0.7, 1.0, 1.4, 2.0, 2.8, 4.0, 5.6, 8.0, 11.2, 16.0]


def imported(bindir, row, cache):
    key = (row["config"], row["seq"], row["recompute"])
    if key not in cache:
        fd, path = tempfile.mkstemp(suffix=".mlir")
        os.close(fd)
        cmd = [os.path.join(bindir, "mfsdp-translate"), "--import-hf-config", row["config"],
               f"--hf-seq-len={row['seq']}", "-o", path]
        if row["recompute"]:
            cmd.insert(3, "--hf-recompute")
        subprocess.run(cmd, check=True)
        cache[key] = path
    return cache[key]


def simulate(bindir, row, compute, comm, cache):
    mlir = imported(bindir, row, cache)
    pipeline = (f"mesh={row['mesh']} policy=adamw tokens={row['tokens']} "
                f"reduce-dtype={row['reduce']} row-layout=per_param")
    out = subprocess.run([os.path.join(bindir, "mfsdp-sim"), mlir, f"--profile={row['profile']}",
                          f"--profile-set=computeScale={compute},commScale={comm}",
                          f"--pipeline={pipeline}"], check=True, capture_output=True,
                         text=True).stdout
    m = re.search(r"total\s+([0-9.]+) ms .*peak memory\s+([0-9.]+) GiB", out)
    if not m:
        sys.exit("loso-public: cannot read mfsdp-sim's summary:\n" + out)
    return float(m.group(1)) / 1e3, float(m.group(2))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--data", default="docs/data/public-steps.json")
    args = ap.parse_args()
    rows = json.load(open(args.data))["rows"]
    cache = {}
    grid = {}
    for c in COMPUTE:
        for b in COMM:
            grid[(c, b)] = [simulate(args.bin, r, c, b, cache) for r in rows]
    for path in cache.values():
        os.remove(path)
    sources = sorted(set(r["source"] for r in rows))

    def loss(point, keep):
        return sum(math.log(grid[point][i][0] / rows[i]["step_s"]) ** 2 for i in keep)

    print(f"leave-one-source-out on {len(rows)} public rows from {len(sources)} sources; "
          f"grid computeScale {COMPUTE}, commScale {COMM}; every time predicted")
    print("| left out | fitted on | computeScale | commScale | row | measured (s) | predicted (s) "
          "| error | unfitted (scales 1) | error |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    errors = []
    for s in sources:
        keep = [i for i, r in enumerate(rows) if r["source"] != s]
        best = min(grid, key=lambda p: loss(p, keep))
        for i, r in enumerate(rows):
            if r["source"] != s:
                continue
            pred = grid[best][i][0]
            base = grid[(1.0, 1.0)][i][0]
            e = pred / r["step_s"] - 1
            errors.append(abs(e))
            name = os.path.basename(r["config"]).removesuffix(".json")
            label = f"{name} {r['profile']} {r['mesh']} {'full AC' if r['recompute'] else 'no AC'}"
            if r.get("note"):
                label += f" ({r['note']})"
            print(f"| {s} | the other {len(sources) - 1} | {best[0]} | {best[1]} | {label} | "
                  f"{r['step_s']:.3f} | {pred:.3f} | {e:+.0%} | {base:.3f} | "
                  f"{base / r['step_s'] - 1:+.0%} |")
    print(f"left-out step errors: mean {sum(errors) / len(errors):.1%}, worst {max(errors):.1%}")
    for i, r in enumerate(rows):
        if "peak_active_gib" in r:
            peak = grid[(1.0, 1.0)][i][1]
            print(f"peak memory, {r['source']} {os.path.basename(r['config'])} "
                  f"{r.get('note', 'FSDP2')}: measured (peak active) {r['peak_active_gib']:.2f} GiB, "
                  f"predicted (allocated) {peak:.2f} GiB ({peak / r['peak_active_gib'] - 1:+.0%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
