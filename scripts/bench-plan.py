#!/usr/bin/env python3
"""Layout-planning benchmark (issue 3 targets), one run.

1. Balance: for the 32-layer hidden-4096 MatrixFSDP model (W = 8, 64) and
   Llama-3-8B (W = 8, 64, 256), policy mixed_muon_adamw, ZeRO-3, the
   optimizer-work and memory max/mean per rank, the ratio of the largest
   optimizer time to its lower bound max(mean, indivisibility bound), and
   the worst per-group owner fan-out, for our balanced owners and for the
   MatrixFSDP (per-unit LPT by elements) and round-robin baselines. All
   figures come from mfsdp-plan-report's JSON; times are predictions of the
   cost model (A100 profile), not measurements.
2. Scale: wall time and peak memory (max RSS) of planning a 405B-shaped
   model (126 layers, hidden 16384) for W = 1024, as one mfsdp-opt process
   (parse, plan, verify, print), best and median of 3.

Usage: bench-plan.py [BIN_DIR]
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

BIN = sys.argv[1] if len(sys.argv) > 1 else "build/bin"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
tool = lambda name: os.path.join(BIN, name)


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


def report(mlir, world, strategy):
    out = run([tool("mfsdp-opt"), mlir, "-o", os.devnull,
               f"--mfsdp-assign-layouts=policy=mixed_muon_adamw zero=3 "
               f"mesh=dp_shard={world} owner-strategy={strategy}",
               "--mfsdp-plan-report=json"])
    return json.loads(out)


def timed_rss(cmd):
    start = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    elapsed = time.perf_counter() - start
    if status != 0:
        raise SystemExit(f"{cmd[0]} failed: {p.stderr.read().decode()}")
    return elapsed, usage.ru_maxrss / 1024.0  # MiB


def main():
    with tempfile.TemporaryDirectory() as tmp:
        models = {}
        for name in ("matrixfsdp-32l", "llama3-8b"):
            path = os.path.join(tmp, name + ".mlir")
            run([tool("mfsdp-translate"), "--import-mfsdp-graph",
                 os.path.join(ROOT, "examples/models", name + ".json"), "-o", path])
            models[name] = path
        cases = [("matrixfsdp-32l", 8), ("matrixfsdp-32l", 64),
                 ("llama3-8b", 8), ("llama3-8b", 64), ("llama3-8b", 256)]
        print("Balance (mixed_muon_adamw, ZeRO-3; optimizer times predicted, A100 profile)")
        print(f"{'model':16s} {'W':>4s} {'strategy':12s} {'opt max/mean':>12s} "
              f"{'opt max/bound':>13s} {'mem max/mean':>12s} {'fan-out max':>11s}  target")
        for model, world in cases:
            for strategy in ("balanced", "matrixfsdp", "round_robin"):
                r = report(models[model], world, strategy)
                opt = r["imbalance"]["optimizer_work"]
                mem = r["imbalance"]["memory"]
                bound = r["optimizer_seconds"]["ratio_to_bound"]
                fan = r["imbalance"]["fanout_max"]
                indivisible = (r["optimizer_seconds"]["indivisibility_bound"] >
                               r["optimizer_seconds"]["mean"] * 1.000001)
                target = ""
                if strategy == "balanced":
                    if model == "matrixfsdp-32l":
                        ok = opt <= 1.02 and mem <= 1.05
                        target = f"opt<=1.02, mem<=1.05: {'met' if ok else 'MISSED'}"
                    elif indivisible:
                        ok = bound <= 1.02
                        target = (f"indivisibility bound above mean; max within "
                                  f"2% of it: {'met' if ok else 'MISSED'}")
                    else:
                        ok = opt <= 1.03
                        target = f"opt<=1.03: {'met' if ok else 'MISSED'}"
                print(f"{model:16s} {world:4d} {strategy:12s} {opt:12.3f} "
                      f"{bound:13.3f} {mem:12.3f} {fan:11.3f}  {target}")

        graph = os.path.join(tmp, "llama-405b.json")
        mlir = os.path.join(tmp, "llama-405b.mlir")
        run([tool("mfsdp-graphgen"), "--arch", "llama", "--name", "llama-405b",
             "--layers", "126", "--hidden", "16384", "--heads", "128",
             "--kv-heads", "8", "--intermediate", "53248", "--vocab", "128256",
             "-o", graph])
        run([tool("mfsdp-translate"), "--import-mfsdp-graph", graph, "-o", mlir])
        cmd = [tool("mfsdp-opt"), mlir, "-o", os.devnull,
               "--mfsdp-assign-layouts=policy=mixed_muon_adamw mesh=dp_shard=1024"]
        runs = [timed_rss(cmd) for _ in range(3)]
        times = [t for t, _ in runs]
        rss = max(m for _, m in runs)
        print()
        print("Scale: plan the 405B-shaped model for W = 1024 (one mfsdp-opt process)")
        print(f"  wall best {min(times):.3f} s, median {statistics.median(times):.3f} s "
              f"(target < 2 s); peak RSS {rss:.0f} MiB (target < 1024 MiB)")
        runs = [timed_rss(cmd[:-1] + [cmd[-1], "--mfsdp-plan-report=json"]) for _ in range(3)]
        print(f"  with the JSON report: median {statistics.median([t for t, _ in runs]):.3f} s, "
              f"peak RSS {max(m for _, m in runs):.0f} MiB")


if __name__ == "__main__":
    main()
