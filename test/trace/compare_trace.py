#!/usr/bin/env python3
"""Compares the order of ops in the runtime's trace with the simulator's.

The runtime's trace (MFSDP_TRACE, one file per rank) records every
collective the runtime issues and every optimizer kernel it runs, with the
hook, phase, bucket and parameters; mfsdp-sim --trace records the ops of the
compiled sched.step in program order, with their parameters. For each rank
this takes, from both, the sequence of
  - collectives: (kind, phase, the set of parameters it carries), in issue
    order (a started collective counts where it starts);
  - optimizer kernels (adamw, sgd, muon): (optimizer, phase, parameter), a
    kernel of the schedule over several parameters (and the runtime's fused
    kernel over a group's tensors) counted as one per parameter in its
    order,
and requires the runtime's sequence of every complete training step (one
optimizer_step each) to equal the simulator's. Ops outside a training
step's calls (create, load, store, clip_grad_norm) are not compared. The
runtime's spans must nest on each of its threads (what Perfetto draws).

Usage:
  compare_trace.py SIM.json RUNTIME_PATTERN --ranks N [--phases forward,backward]
RUNTIME_PATTERN names the runtime's files as MFSDP_TRACE did (with %r, or
".rank<N>.json" appended). Exit 0 when the orders are equal, 1 when they
differ (the first difference of each rank printed), 2 on bad input.
"""
import argparse
import json
import sys

from traced_run import nesting_problem

COLLECTIVES = {"all_gather", "reduce_scatter", "all_reduce", "all_gather_v",
               "reduce_scatter_v", "broadcast"}
OPTIMIZERS = {"adamw", "sgd", "muon"}
STEP_CALLS = {"pre_forward", "post_forward", "end_forward", "pre_backward",
              "post_backward", "optimizer_step"}


def die(message):
    sys.stderr.write(f"compare_trace: error: {message}\n")
    sys.exit(2)


def load(path):
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        die(f"cannot read the trace '{path}': {e}")
    events = data.get("traceEvents") if isinstance(data, dict) else None
    if not isinstance(events, list):
        die(f"'{path}' has no traceEvents list (expected Trace Event Format JSON)")
    return events


def runtime_file(pattern, rank):
    if "%r" in pattern:
        return pattern.replace("%r", str(rank))
    return f"{pattern}.rank{rank}.json"


def show(item):
    kind, phase, params = item
    return f"{kind} [{phase}] {{{', '.join(params)}}}"


def sim_sequence(events, rank, phases):
    """The simulator's ops of `rank` in program order (the file's order)."""
    out = []
    for e in events:
        if e.get("ph") != "X" or e.get("pid") != rank:
            continue
        a = e.get("args", {})
        phase = a.get("phase")
        if phases and phase not in phases:
            continue
        kind = a.get("kind")
        params = a.get("params", [])
        if kind in COLLECTIVES:
            out.append((kind, phase, tuple(sorted(params))))
        elif kind == "optimizer" and a.get("optimizer") in OPTIMIZERS:
            for p in params:
                out.append((a["optimizer"], phase, (p,)))
    return out


def runtime_steps(events, rank, path, phases):
    """The runtime's ops of each complete training step, in issue order."""
    ops = []
    for e in events:
        if e.get("ph") != "X" or e.get("pid") != rank:
            continue
        a = e.get("args", {})
        if a.get("hook") not in STEP_CALLS:
            continue
        cat = e.get("cat")
        if cat == "collective" and a.get("kind") in COLLECTIVES:
            item = (a["kind"], a.get("phase"), tuple(sorted(a.get("params", []))))
        elif cat == "optimizer" and a.get("optimizer") in OPTIMIZERS:
            # A fused kernel (one group's AdamW or SGD tensors) counts as
            # one per parameter in its order, as the simulator's.
            for p in a.get("params", []):
                ops.append((e["ts"], a.get("seq", 0), a["hook"],
                            (a["optimizer"], a.get("phase"), (p,))))
            continue
        else:
            continue
        ops.append((e["ts"], a.get("seq", 0), a["hook"], item))
    ops.sort(key=lambda o: (o[0], o[1]))
    steps, current, in_optimizer = [], [], False
    for _, _, hook, item in ops:
        if hook == "optimizer_step":
            in_optimizer = True
        elif in_optimizer:  # the first op after a step's optimizer_step
            steps.append(current)
            current, in_optimizer = [], False
        current.append(item)
    if in_optimizer:
        steps.append(current)
    if not steps:
        die(f"'{path}' holds no complete training step (no optimizer_step "
            f"with ops in it)")
    return [[i for i in s if not phases or i[1] in phases] for s in steps]


def first_difference(want, got):
    for i, (w, g) in enumerate(zip(want, got)):
        if w != g:
            return i
    return min(len(want), len(got)) if len(want) != len(got) else -1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sim")
    ap.add_argument("runtime")
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--phases", default="",
                    help="compare only these phases (comma-separated)")
    o = ap.parse_args()
    if o.ranks < 1:
        die(f"--ranks is {o.ranks}; expected 1 or more")
    phases = {p for p in o.phases.split(",") if p}
    unknown = phases - {"forward", "backward", "optimizer"}
    if unknown:
        die(f"unknown phase(s) {sorted(unknown)} in --phases; expected forward, "
            f"backward, optimizer")
    sim = load(o.sim)
    equal = True
    for rank in range(o.ranks):
        want = sim_sequence(sim, rank, phases)
        if not want:
            die(f"the simulator's trace '{o.sim}' has no collective or optimizer "
                f"op for rank {rank}")
        path = runtime_file(o.runtime, rank)
        events = load(path)
        problem = nesting_problem(events, rank)
        if problem:
            die(f"'{path}': {problem}")
        steps = runtime_steps(events, rank, path, phases)
        for k, got in enumerate(steps):
            at = first_difference(want, got)
            if at < 0:
                continue
            equal = False
            print(f"rank {rank}, step {k + 1}: the runtime's op {at + 1} differs "
                  f"from the schedule's ({len(got)} ops run, {len(want)} "
                  f"scheduled)")
            for i in range(max(0, at - 2), min(max(len(want), len(got)), at + 4)):
                w = show(want[i]) if i < len(want) else "(nothing)"
                g = show(got[i]) if i < len(got) else "(nothing)"
                mark = "  " if w == g else "!="
                print(f"  {mark} {i + 1:3d} schedule: {w}\n"
                      f"         runtime:  {g}")
            break
        else:
            print(f"rank {rank}: {len(steps)} step(s), {len(want)} ops each, "
                  f"in the schedule's order")
    return 0 if equal else 1


if __name__ == "__main__":
    sys.exit(main())
