#!/usr/bin/env python3
"""Runs a command with MFSDP_TRACE set and checks the files it leaves.

Usage: traced_run.py DIR RANKS COMMAND [ARGS...]
MFSDP_TRACE is DIR/trace-%r.json. The command must succeed, and every rank
must have left a file that is complete JSON (Trace Event Format, a
traceEvents list holding this rank's thread names), whatever errors the
runtime returned on the way.
"""
import json
import os
import subprocess
import sys


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
        print(f"rank {r}: {len(events)} events, complete JSON")
    return 0


if __name__ == "__main__":
    sys.exit(main())
