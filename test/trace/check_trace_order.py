#!/usr/bin/env python3
"""The runtime runs its ops in the order the compiled schedule gives them.

For one plan of the example model (mesh, policy, ZeRO level, prefetch; the
collectives bucketed as mfsdp-compile buckets them by default, 25 MiB):
  1. mfsdp-compile builds the step library (and writes the module it was
     lowered from: the planned graph and its scheduled step);
  2. the example trainer runs it under mpirun with MFSDP_TRACE set, so each
     rank writes the runtime's trace;
  3. mfsdp-sim runs the default pipeline (--mfsdp-pipeline) on the planned
     graph with the same options and writes the schedule's trace;
  4. compare_trace.py requires the order of collectives and optimizer
     kernels of every rank and step to be the schedule's.

Usage: check_trace_order.py --compile BIN --sim BIN --trainer BIN --mpiexec
  BIN --model JSON --dir DIR --np N --mesh MESH --policy P --zero Z
  [--prefetch] [--phases forward,backward] [--steps S]
"""
import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run(cmd, env=None):
    print("+ " + " ".join(cmd), flush=True)
    r = subprocess.run(cmd, env=env)
    if r.returncode != 0:
        sys.stderr.write(f"check_trace_order: '{cmd[0]}' exited with "
                         f"{r.returncode}\n")
        sys.exit(2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for name in ("compile", "sim", "trainer", "mpiexec", "model", "dir", "mesh",
                 "policy"):
        ap.add_argument("--" + name, required=True)
    ap.add_argument("--np", type=int, required=True)
    ap.add_argument("--zero", type=int, required=True)
    ap.add_argument("--prefetch", action="store_true")
    ap.add_argument("--prefetch-depth", type=int, default=None)
    ap.add_argument("--phases", default="")
    ap.add_argument("--steps", type=int, default=2)
    o = ap.parse_args()
    os.makedirs(o.dir, exist_ok=True)
    lib = os.path.join(o.dir, "libstep.so")
    graph = os.path.join(o.dir, "graph.mlir")
    sim = os.path.join(o.dir, "sim.json")
    pattern = os.path.join(o.dir, "runtime.rank%r.json")
    for r in range(o.np):
        path = pattern.replace("%r", str(r))
        if os.path.exists(path):
            os.remove(path)

    # The library, and the module it was lowered from: the planned graph and
    # its scheduled, memory-planned step, the program the library carries.
    compile_args = [o.compile, o.model, f"--mesh={o.mesh}", f"--policy={o.policy}",
                    f"--zero={o.zero}"] + (["--prefetch"] if o.prefetch else []) + \
        ([f"--prefetch-depth={o.prefetch_depth}"] if o.prefetch_depth is not None else [])
    run(compile_args + [f"--emit-mlir={graph}", "-o", lib])

    env = dict(os.environ, MFSDP_TRACE=pattern)
    run([o.mpiexec, "--allow-run-as-root", "--oversubscribe", "-n", str(o.np),
         o.trainer, lib, "--steps", str(o.steps)], env=env)

    # The simulator runs that same step.
    run([o.sim, graph, f"--trace={sim}", "--brief"])

    cmd = [sys.executable, os.path.join(HERE, "compare_trace.py"), sim, pattern,
           "--ranks", str(o.np)]
    if o.phases:
        cmd += ["--phases", o.phases]
    print("+ " + " ".join(cmd), flush=True)
    return subprocess.call(cmd)


if __name__ == "__main__":
    sys.exit(main())
