#!/usr/bin/env python3
"""Compiler scaling benchmark (issue 12, point 7).

Every case is one mfsdp-opt process running --mfsdp-pipeline (assign
layouts, build the step, bucket, overlap with the optimizer order chosen
by the simulator, plan memory, verify) and printing the result, so the
figures include parsing and printing. For each case: wall time, peak
memory (max RSS of the process), the size of the printed IR, and the
scaling ratio t(2N) / t(N) against the case with half the size (1.0:
constant, 2.0: linear, 4.0: quadratic).

1. Ranks: DeepSeek-V3 imported from its config.json without EP ownership
   (45,337 tensors), at dp_shard = 256, 512, 1024, with the graph's policy
   (AdamW, ZeRO-3) and with mixed_muon_adamw (Muon owners on every rank).
   Targets at dp_shard = 1024: < 5 s and < 2 GiB.
2. Units: llama-shaped graphs from mfsdp-graphgen (hidden 64, 9 tensors a
   layer, one unit a layer plus the embedding and the head) of N units, at
   dp_shard = 64, with the graph's policy and with mixed_muon_adamw.
   Target: 100k units in < 30 s and < 2 GiB (run with --units-max 100000;
   the default stops at 10k units; --units N,M,... runs those sizes only).

--format bytecode runs every case on MLIR bytecode instead of text: the
input is converted once beforehand (not timed; `mfsdp-opt in.mlir
--emit-bytecode`), and the pipeline reads bytecode and writes it
(`--emit-bytecode`), so the IR column is the bytecode's size; --format both
runs each case in both forms, one row each.

Besides the wall time, each case reports the CPU time of the process (user
plus system), which other work on the machine inflates less than the wall
time. --timeout S stops a case after S seconds of wall time and reports it
as stopped, with the peak RSS it had reached.

--repeat N runs every case N times, one after the other: the table gives
the median wall and CPU time and the largest peak RSS, then each run's
wall time, and a target is met when the median is under it (on a machine
whose speed drifts, one run decides nothing about a case near its target).

Usage: bench-compile.py [BIN_DIR] [--units-max N] [--units N,M,...]
                        [--skip-deepseek] [--policies graph,mixed_muon_adamw]
                        [--format text|bytecode|both] [--timeout S]
                        [--repeat N]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GIB = 1024 * 1024 * 1024


def run(cmd):
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


TIMEOUT = None


def timed_rss(cmd):
    """Wall seconds, CPU seconds, peak RSS (bytes) of one process, and
    whether it was stopped at the timeout."""
    start = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stopped = False
    while True:
        pid, status, usage = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        if TIMEOUT and time.perf_counter() - start > TIMEOUT:
            p.kill()
            _, status, usage = os.wait4(p.pid, 0)
            stopped = True
            break
        time.sleep(0.05)
    elapsed = time.perf_counter() - start
    err = p.stderr.read().decode()
    p.stderr.close()
    if status != 0 and not stopped:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{err}")
    cpu = usage.ru_utime + usage.ru_stime
    return elapsed, cpu, usage.ru_maxrss * 1024, stopped


REPEAT = 1


def measured(cmd):
    """timed_rss over REPEAT runs: the median wall and CPU seconds, the
    largest peak RSS, whether any run was stopped, and each run's wall."""
    runs = [timed_rss(cmd) for _ in range(REPEAT)]
    walls = [r[0] for r in runs]
    return (statistics.median(walls), statistics.median(r[1] for r in runs),
            max(r[2] for r in runs), any(r[3] for r in runs), walls)


def pipeline(opt, mlir, out, mesh, policy, form="text"):
    options = f"mesh={mesh}" + (f" policy={policy}" if policy else "")
    cmd = [opt, mlir, f"--mfsdp-pipeline={options}", "-o", out]
    return cmd + (["--emit-bytecode"] if form == "bytecode" else [])


def inputs(opt, mlir, forms):
    """The input of each form: the text file, or its bytecode."""
    out = {}
    for form in forms:
        if form == "bytecode":
            bc = mlir + "bc"
            run([opt, mlir, "--emit-bytecode", "-o", bc])
            out[form] = bc
        else:
            out[form] = mlir
    return out


def label(policy, form):
    name = policy or "graph (adamw)"
    return name if form == "text" else f"{name}, bc"


def table(title, rows, key_name):
    print(title)
    # With repeats: the medians, the largest peak, and each run's wall.
    wall_name, cpu_name = ("wall s", "CPU s") if REPEAT == 1 else ("wall med", "CPU med")
    print(f"  {key_name:>8s} {'policy':22s} {wall_name:>8s} {'t(2N)/t(N)':>10s} "
          f"{cpu_name:>8s} {'peak RSS MiB':>12s} {'IR MiB':>8s}"
          + ("  wall s of each run" if REPEAT > 1 else ""))
    prev = {}
    for key, policy, wall, cpu, rss, size, stopped, walls in rows:
        ratio = ""
        if policy in prev and key == 2 * prev[policy][0] and not stopped:
            ratio = f"{wall / prev[policy][1]:.2f}"
        prev[policy] = (key, wall)
        ir = "stopped" if stopped else f"{size / 2**20:8.1f}"
        runs = ("  " + ", ".join(f"{w:.2f}" for w in walls)) if REPEAT > 1 else ""
        print(f"  {key:8d} {policy:22s} {wall:8.2f} {ratio:>10s} "
              f"{cpu:8.2f} {rss / 2**20:12.0f} {ir:>8s}{runs}")
    print()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin", nargs="?", default="build/bin")
    ap.add_argument("--units-max", type=int, default=10000)
    ap.add_argument("--units", default="",
                    help="comma-separated unit counts (instead of the doubling "
                         "series up to --units-max)")
    ap.add_argument("--skip-deepseek", action="store_true")
    ap.add_argument("--policies", default="graph,mixed_muon_adamw",
                    help="comma-separated: graph (the graph's, AdamW) and/or "
                         "mixed_muon_adamw")
    ap.add_argument("--format", choices=["text", "bytecode", "both"],
                    default="text",
                    help="the pipeline's input and output: MLIR text, "
                         "bytecode, or each case in both")
    ap.add_argument("--timeout", type=float, default=0,
                    help="stop a case after this many seconds (0: never)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run every case this many times; report the median")
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error("--repeat must be 1 or more")
    global TIMEOUT, REPEAT
    TIMEOUT = args.timeout or None
    REPEAT = args.repeat
    tool = lambda name: os.path.join(args.bin, name)
    policies = ["" if p == "graph" else p for p in args.policies.split(",") if p]
    forms = ["text", "bytecode"] if args.format == "both" else [args.format]
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.mlir")
        if not args.skip_deepseek:
            ds = os.path.join(tmp, "deepseek-v3.mlir")
            run([tool("mfsdp-translate"), "--import-hf-config",
                 os.path.join(ROOT, "examples/hf/deepseek-v3.json"), "-o", ds])
            ds_in = inputs(tool("mfsdp-opt"), ds, forms)
            rows = []
            for policy in policies:
                for form in forms:
                    for world in (256, 512, 1024):
                        r = measured(pipeline(tool("mfsdp-opt"), ds_in[form],
                                              out, f"dp_shard={world}",
                                              policy, form))
                        rows.append((world, label(policy, form), r[0], r[1],
                                     r[2], os.path.getsize(out), r[3], r[4]))
            table("DeepSeek-V3 without EP ownership (45,337 tensors) through "
                  "--mfsdp-pipeline", rows, "dp_shard")
            for world, policy, wall, _, rss, _, stopped, _ in rows:
                if world == 1024:
                    ok = wall < 5 and rss < 2 * GIB and not stopped
                    print(f"  target dp_shard=1024 {policy}: "
                          f"< 5 s and < 2 GiB: {'met' if ok else 'MISSED'}")
            print()
        rows = []
        sizes = []
        n = 1250
        while n <= args.units_max:
            sizes.append(n)
            n *= 2
        if args.units_max not in sizes and args.units_max > 0:
            sizes.append(args.units_max)
        if args.units:
            sizes = [int(n) for n in args.units.split(",") if n]
        for units in sizes:
            graph = os.path.join(tmp, f"g{units}.json")
            mlir = os.path.join(tmp, f"g{units}.mlir")
            # Units: one a layer, plus the embedding and the head.
            run([tool("mfsdp-graphgen"), "--arch", "llama", "--layers",
                 str(units - 2), "-o", graph])
            run([tool("mfsdp-translate"), "--import-mfsdp-graph", graph, "-o", mlir])
            unit_in = inputs(tool("mfsdp-opt"), mlir, forms)
            for policy in policies:
                for form in forms:
                    r = measured(pipeline(tool("mfsdp-opt"), unit_in[form],
                                          out, "dp_shard=64", policy, form))
                    size = 0 if r[3] else os.path.getsize(out)
                    rows.append((units, label(policy, form), r[0], r[1], r[2],
                                 size, r[3], r[4]))
            os.remove(graph)
            for path in set(unit_in.values()):
                os.remove(path)
        table("Graphs of N units (llama, hidden 64, 9 tensors a layer) at "
              "dp_shard=64", rows, "units")
        for units, policy, wall, _, rss, _, stopped, walls in rows:
            if units == 100000:
                ok = wall < 30 and rss < 2 * GIB and not stopped
                runs = (f" (median of {REPEAT}; {sum(w < 30 for w in walls)} "
                        f"of {REPEAT} runs under 30 s)" if REPEAT > 1 else "")
                print(f"  target 100k units {policy}: "
                      f"< 30 s and < 2 GiB: {'met' if ok else 'MISSED'}{runs}")


if __name__ == "__main__":
    sys.exit(main())
