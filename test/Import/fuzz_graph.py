#!/usr/bin/env python3
"""Mutates a valid graph many ways and feeds each to the importer.

Every run must end with status 0 (the mutation happened to be valid) or 1
with an `error:` line; a crash, a hang or any other status fails the test.
Mutations: truncation at random offsets, byte flips, deleted and duplicated
lines, and typed edits of JSON values (numbers made negative, zero, huge or
fractional; strings emptied; arrays emptied; fields removed).
Usage: fuzz_graph.py TRANSLATE INPUT.json WORKDIR COUNT SEED
"""
import json
import os
import random
import subprocess
import sys

tool, src, work, count, seed = sys.argv[1:6]
count, rng = int(count), random.Random(int(seed))
text = open(src).read()
doc = json.loads(text)
os.makedirs(work, exist_ok=True)


def paths(v, prefix=()):
    yield prefix
    if isinstance(v, dict):
        for k, x in v.items():
            yield from paths(x, prefix + (k,))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            yield from paths(x, prefix + (i,))


all_paths = list(paths(doc))


def edit_value(d):
    p = rng.choice(all_paths[1:])
    parent = d
    for k in p[:-1]:
        parent = parent[k]
    v = parent[p[-1]]
    choices = [None, -1, 0, 2**63, 1.5, "", [], {}, "bf17", True]
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        choices += [-v, v * 1000003, 0]
    if rng.random() < 0.2 and isinstance(parent, dict):
        del parent[p[-1]]
    else:
        parent[p[-1]] = rng.choice(choices)
    return json.dumps(d, indent=1)


def mutate():
    kind = rng.randrange(5)
    if kind == 0:
        return text[: rng.randrange(len(text))]
    if kind == 1:
        b = bytearray(text.encode())
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b).decode("utf-8", errors="replace")
    lines = text.split("\n")
    if kind == 2:
        del lines[rng.randrange(len(lines))]
        return "\n".join(lines)
    if kind == 3:
        i = rng.randrange(len(lines))
        lines.insert(i, lines[i])
        return "\n".join(lines)
    return edit_value(json.loads(text))


failures, errors = 0, 0
for i in range(count):
    path = os.path.join(work, f"m{i}.json")
    with open(path, "w") as f:
        f.write(mutate())
    try:
        r = subprocess.run([tool, "--import-mfsdp-graph", path, "-o", os.devnull],
                           capture_output=True, text=True, errors="replace",
                           timeout=20)
    except subprocess.TimeoutExpired:
        print(f"{path}: hang")
        failures += 1
        continue
    if r.returncode == 1 and "error:" in r.stderr:
        errors += 1
    elif r.returncode != 0:
        if failures < 5:
            print(f"{path}: status {r.returncode}\n{r.stderr[-1500:]}")
        failures += 1
print(f"{count} mutations: {errors} rejected with an error, "
      f"{count - errors - failures} accepted, {failures} crashed or hung")
sys.exit(1 if failures else 0)
