#!/usr/bin/env python3
"""Runs a command with MFSDP_TRACE set and checks the files it leaves.

Usage: traced_run.py DIR RANKS COMMAND [ARGS...]
MFSDP_TRACE is DIR/trace-%r.json. The command must succeed, and every rank
must have left a file that is complete JSON (Trace Event Format, a
traceEvents list holding this rank's thread names) whose spans nest on
each thread, whatever errors the runtime returned on the way.
"""
import json
import os
import subprocess
import sys


def nesting_problem(events, rank):
    """The first pair of "X" spans of one thread that overlap without one
    holding the other (Perfetto cannot draw them), or None."""
    threads = {}
    for e in events:
        if e.get("ph") == "X" and e.get("pid") == rank:
            threads.setdefault(e.get("tid"), []).append(e)
    for tid, spans in threads.items():
        spans.sort(key=lambda e: (e["ts"], -e["dur"]))
        open_spans = []
        for e in spans:
            start, end = e["ts"], e["ts"] + e["dur"]
            while open_spans and open_spans[-1][0] <= start:
                open_spans.pop()
            if open_spans and end > open_spans[-1][0]:
                return (f"thread {tid}: '{e['name']}' at {start} overlaps "
                        f"'{open_spans[-1][1]}' without nesting in it")
            open_spans.append((end, e["name"]))
    return None


def main():
    if len(sys.argv) < 4:
        sys.stderr.write(__doc__)
        return 2
    out, ranks, cmd = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    os.makedirs(out, exist_ok=True)
    pattern = os.path.join(out, "trace-%r.json")
    files = [pattern.replace("%r", str(r)) for r in range(ranks)]
    for f in files:
        if os.path.exists(f):
            os.remove(f)
    rc = subprocess.call(cmd, env=dict(os.environ, MFSDP_TRACE=pattern))
    if rc != 0:
        sys.stderr.write(f"traced_run: the command exited with {rc}\n")
        return 1
    for r, f in enumerate(files):
        try:
            with open(f) as fh:
                events = json.load(fh)["traceEvents"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            sys.stderr.write(f"traced_run: rank {r}'s trace '{f}' is not "
                             f"complete Trace Event Format JSON: {e}\n")
            return 1
        names = [e for e in events if e.get("ph") == "M" and e.get("pid") == r]
        if len(names) < 3:
            sys.stderr.write(f"traced_run: rank {r}'s trace '{f}' lacks its "
                             f"process and thread names\n")
            return 1
        problem = nesting_problem(events, r)
        if problem:
            sys.stderr.write(f"traced_run: rank {r}'s trace '{f}': {problem}\n")
            return 1
        print(f"rank {r}: {len(events)} events, complete JSON, spans nested")
    return 0


if __name__ == "__main__":
    sys.exit(main())
