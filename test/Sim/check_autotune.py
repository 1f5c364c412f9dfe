"""Checks an autotune table (mfsdp-sim --autotune, mfsdp-compile --autotune)
read on stdin: the defaults come first, the row marked best has the shortest
predicted steady step of the rows that were planned and fit the memory cap,
and the stated gain is the defaults' steady step over the best's. Prints
what it checked; exits 1 on the first violation."""
import re
import sys

rows, best, gain, defaults = [], None, None, None
row = re.compile(r"^  (\S+)\s+(\d+)\s+(\d+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)(.*)$")
for line in sys.stdin:
    m = row.match(line.rstrip("\n"))
    if m:
        r = {"mesh": m[1], "bucket": int(m[2]), "prefetch": int(m[3]),
             "steady": float(m[5]), "fits": "over the cap" not in m[7]}
        rows.append(r)
        if "<- best" in m[7]:
            best = r
        if "(defaults)" in m[7]:
            defaults = r
        continue
    g = re.search(r"predicted gain of the best over the defaults: ([0-9.]+)x", line)
    if g:
        gain = float(g[1])


def fail(why):
    print("FAILED:", why)
    sys.exit(1)


if not rows or best is None or defaults is None:
    fail("no table, best or defaults row")
if rows[0] is not defaults:
    fail("the defaults are not the first row")
fitting = [r for r in rows if r["fits"]]
if min(r["steady"] for r in fitting) != best["steady"] or not best["fits"]:
    fail("the best row is not the shortest steady step that fits")
if gain is not None and abs(gain - defaults["steady"] / best["steady"]) > 0.01 * gain + 0.002:
    fail(f"gain {gain} is not {defaults['steady']} / {best['steady']}")
over = sum(1 for r in rows if not r["fits"])
print(f"{len(rows)} candidates, {over} over the cap, best {best['mesh']} "
      f"bucket-mb={best['bucket']} prefetch={best['prefetch']}, checked")
