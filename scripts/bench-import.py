#!/usr/bin/env python3
"""Import benchmark: how long the importers take on a 405B-shaped model.

Times (wall clock, best and median of N runs, each a fresh process, so the
figures include process start and MLIR context creation):
  1. mfsdp-graphgen writing the 405B graph (126 layers, hidden 16384,
     intermediate 53248, 128 heads, 8 KV heads, vocab 128256),
  2. mfsdp-translate --import-mfsdp-graph of that JSON to plan IR (parse,
     validate, build and verify the IR, print it),
  3. mfsdp-translate --import-hf-config of Llama-3.1-405B's config.json,
  4. the same for DeepSeek-V3 (45337 parameter tensors; no target, for scale),
  5. export of the 405B plan IR back to JSON.
Prints each against the 1 s target.

Usage: bench-import.py [BIN_DIR] [RUNS]
"""
import os
import statistics
import subprocess
import sys
import tempfile
import time

BIN = sys.argv[1] if len(sys.argv) > 1 else "build/bin"
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 5
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET_S = 1.0


def timed(cmd, stdin=None):
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL,
                       stdin=stdin and open(stdin))
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times)


def main():
    tool = lambda name: os.path.join(BIN, name)
    with tempfile.TemporaryDirectory() as tmp:
        graph = os.path.join(tmp, "llama-405b.json")
        mlir = os.path.join(tmp, "llama-405b.mlir")
        gen = [tool("mfsdp-graphgen"), "--arch", "llama", "--name", "llama-405b",
               "--layers", "126", "--hidden", "16384", "--heads", "128",
               "--kv-heads", "8", "--intermediate", "53248", "--vocab", "128256",
               "-o", graph]
        rows = [("graphgen 405B -> JSON", timed(gen))]
        size = os.path.getsize(graph)
        rows.append(("import JSON -> plan IR",
                     timed([tool("mfsdp-translate"), "--import-mfsdp-graph",
                            graph, "-o", mlir])))
        rows.append(("import HF config.json -> plan IR",
                     timed([tool("mfsdp-translate"), "--import-hf-config",
                            os.path.join(ROOT, "examples/hf/llama-3.1-405b.json"),
                            "-o", os.devnull])))
        rows.append(("import HF DeepSeek-V3 (45337 params)",
                     timed([tool("mfsdp-translate"), "--import-hf-config",
                            os.path.join(ROOT, "examples/hf/deepseek-v3.json"),
                            "-o", os.devnull])))
        rows.append(("export plan IR -> JSON",
                     timed([tool("mfsdp-translate"), "--export-mfsdp-graph",
                            mlir, "-o", os.devnull])))
        with open(mlir) as f:
            params = sum(1 for line in f if "plan.param @" in line)
    print(f"405B-shaped graph: {params} parameters, {size / 1024:.0f} KiB of JSON; "
          f"{RUNS} runs each, wall clock per process")
    print(f"{'step':36s} {'best s':>8s} {'median s':>9s} {'median/target':>14s}")
    for name, (best, med) in rows:
        print(f"{name:36s} {best:8.3f} {med:9.3f} {med / TARGET_S:13.3f}x")


if __name__ == "__main__":
    main()
