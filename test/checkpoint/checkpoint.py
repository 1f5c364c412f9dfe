#!/usr/bin/env python3
"""Sharded checkpoints on disk, as a trainer meets them.

  checkpoint.py MPIRUN MFSDP_COMPILE TRAINER MODEL_JSON WORKDIR

Builds step libraries of the example model (examples/trainer) for several
meshes, policies and ZeRO levels, and runs the example trainer under
mpirun with --save / --load (mfsdp_save / mfsdp_load):

  resume      3 steps, save, load, 3 steps: the losses of steps 4-6 equal
              an uninterrupted 6-step run's (exactly, as printed);
  reshard     saved on dp_shard=4 (ZeRO-3), loaded on HSDP 2x2 and on
              ZeRO-1: the same losses; on 2 ranks from 4 and 4 from 2 it
              loads and trains;
  model       a Muon checkpoint into an AdamW plan: an error listing the
              differences, exit non-zero;
  damaged     one byte of a rank's file flipped: an error naming the piece
              and its file (checksum);
  disagree    the two ranks given different checkpoints (MPMD mpirun):
              an error on both, never a mix;
  exists      saving over an existing directory is refused;
  export      the checkpoint converted to HF safetensors (--steps 0
              --export-hf) on 2 and on 4 ranks: the same file;
  crash       the save killed (SIGKILL) after the rank files, after the
              index and after the rename: the previous checkpoint still
              loads, and the new directory is either absent or complete
              (it loads and resumes exactly).
"""
import json
import os
import re
import shutil
import struct
import subprocess
import sys

MPIRUN, COMPILE, TRAINER, MODEL, WORK = sys.argv[1:6]
FAILURES = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        FAILURES.append(what)


def library(name, mesh, policy, zero=None):
    out = os.path.join(WORK, name + ".so")
    cmd = [COMPILE, MODEL, "--mesh=" + mesh, "--policy=" + policy, "-o", out]
    if zero:
        cmd.append("--zero=%d" % zero)
    subprocess.run(cmd, check=True, capture_output=True)
    return out


def train(np_, lib, steps, extra=(), env=None):
    cmd = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", str(np_),
           TRAINER, lib, "--steps", str(steps)] + list(extra)
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, **(env or {})))
    losses = re.findall(r"step (\d+): loss ([0-9.]+)", run.stdout)
    return run.returncode, losses, run.stdout + run.stderr


def path(name):
    return os.path.join(WORK, name)


def main():
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    s2 = library("s2", "dp_shard=2", "mixed_muon_adamw")
    s4 = library("s4", "dp_shard=4", "mixed_muon_adamw")
    h4 = library("h4", "dp_replicate=2,dp_shard=2", "mixed_muon_adamw")
    z1 = library("z1", "dp_shard=4", "mixed_muon_adamw", zero=1)
    a2 = library("a2", "dp_shard=2", "adamw")
    s1 = library("s1", "dp_shard=1", "mixed_muon_adamw")

    # resume: exactly the uninterrupted run.
    rc, whole, out = train(2, s2, 6)
    check(rc == 0 and len(whole) == 6, "6 uninterrupted steps on 2 ranks")
    rc, first, out = train(2, s2, 3, ["--save", path("ck2")])
    check(rc == 0 and os.path.exists(path("ck2/index.json")),
          "3 steps and a save on 2 ranks")
    rc, rest, out = train(2, s2, 3, ["--load", path("ck2")])
    check(rc == 0 and rest == whole[3:],
          "resumed steps 4-6 equal the uninterrupted run's: %s vs %s" % (rest, whole[3:]))

    # reshard: dp_shard=4 ZeRO-3 into HSDP 2x2 and into ZeRO-1.
    rc, whole4, out = train(4, s4, 6)
    check(rc == 0 and len(whole4) == 6, "6 uninterrupted steps on 4 ranks")
    rc, _, out = train(4, s4, 3, ["--save", path("ck4")])
    check(rc == 0, "a save on 4 ranks (dp_shard=4)")
    for lib, label in ((h4, "HSDP dp_replicate=2,dp_shard=2"), (z1, "ZeRO-1 dp_shard=4")):
        rc, rest, out = train(4, lib, 3, ["--load", path("ck4")])
        check(rc == 0 and rest == whole4[3:],
              "a dp_shard=4 ZeRO-3 checkpoint resumed on %s: %s vs %s"
              % (label, rest, whole4[3:]))
    rc, rest, out = train(2, s2, 1, ["--load", path("ck4")])
    check(rc == 0 and len(rest) == 1 and rest[0][0] == "4",
          "a 4-rank checkpoint loads on 2 ranks and trains step 4")
    rc, rest, out = train(4, s4, 1, ["--load", path("ck2")])
    check(rc == 0 and len(rest) == 1, "a 2-rank checkpoint loads on 4 ranks")

    # export: a checkpoint converted to HF safetensors (--steps 0) on 2 and
    # on 4 ranks is the same file, byte for byte, whatever the layout; its
    # header names every parameter of the table with its shape, in F32.
    for np_, lib in ((2, s2), (4, s4)):
        rc, _, out = train(np_, lib, 0, ["--load", path("ck2"), "--export-hf",
                                         path("hf%d" % np_)])
        check(rc == 0 and "exported" in out,
              "--load ck2 --steps 0 --export-hf on %d ranks" % np_)
    one = path("hf2/model.safetensors")
    same = os.path.exists(one) and os.path.exists(path("hf4/model.safetensors")) and \
        open(one, "rb").read() == open(path("hf4/model.safetensors"), "rb").read()
    check(same, "the HF export from 2 and from 4 ranks is the same file")
    if os.path.exists(one):
        import json
        import struct
        with open(one, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
        header.pop("__metadata__", None)
        dtypes = {t["dtype"] for t in header.values()}
        ranks = sorted({len(t["shape"]) for t in header.values()})
        check(len(header) > 0 and dtypes == {"F32"} and ranks == [1, 2],
              "the export holds %d F32 tensors, 1-D and 2-D (%s)" % (len(header), ranks))
    rc, _, out = train(2, s2, 0, ["--load", path("ck2"), "--export-hf", path("hf2")])
    check(rc != 0 and "exists" in out, "--export-hf into an existing directory is refused")

    # model: Muon state into an AdamW plan.
    rc, _, out = train(2, a2, 1, ["--load", path("ck2")])
    check(rc != 0 and "is of another model" in out and "exp_avg_sq" in out,
          "a Muon checkpoint into an AdamW plan lists the differences")

    # damaged: flip one byte of rank 1's data.
    shutil.copytree(path("ck2"), path("ck2-damaged"))
    f = path("ck2-damaged/rank-00001.safetensors")
    data = bytearray(open(f, "rb").read())
    data[-5] ^= 0x40
    open(f, "wb").write(bytes(data))
    rc, _, out = train(2, s2, 1, ["--load", path("ck2-damaged")])
    check(rc != 0 and "does not match its checksum" in out
          and "rank-00001.safetensors" in out,
          "a damaged file is an error naming the piece and the file")

    # overlap: rank 1's piece of a row-shard tensor relabelled as rank 0's
    # rows (same size, its checksum still right): one rank loading both has
    # as many elements as it needs, half of them twice and half never; the
    # old check (a sum of areas) took it, leaving those rows stale.
    rc, rest, out = train(1, s1, 1, ["--load", path("ck2")])
    check(rc == 0 and len(rest) == 1, "a 2-rank checkpoint loads on 1 rank")
    shutil.copytree(path("ck2"), path("ck2-overlap"))
    f = path("ck2-overlap/rank-00001.safetensors")
    data = open(f, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    moved = None
    for key, text in header["__metadata__"].items():
        if not text.startswith("{"):
            continue
        meta = json.loads(text)
        r0, r1 = meta["rows"]
        if r0 > 0 and r1 - r0 == r0:
            meta["rows"] = [0, r0]
            header["__metadata__"][key] = json.dumps(meta, separators=(",", ":"))
            moved = meta["param"]
            break
    text = json.dumps(header, separators=(",", ":")).encode()
    check(moved is not None and len(text) <= n, "a piece to relabel (%s)" % moved)
    open(f, "wb").write(data[:8] + text + b" " * (n - len(text)) + data[8 + n:])
    rc, _, out = train(1, s1, 1, ["--load", path("ck2-overlap")])
    check(rc != 0 and "overlap" in out and str(moved) in out,
          "pieces that overlap are refused, naming the tensor")

    # disagree: the ranks given different checkpoints.
    rc, _, out = train(2, s2, 1, ["--save", path("ck2-other"), "--load", path("ck2")])
    check(rc == 0, "a second checkpoint, one step later")
    cmd = [MPIRUN, "--allow-run-as-root", "--oversubscribe",
           "-np", "1", TRAINER, s2, "--steps", "1", "--load", path("ck2"), ":",
           "-np", "1", TRAINER, s2, "--steps", "1", "--load", path("ck2-other")]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    check(run.returncode != 0 and "read different checkpoints" in run.stdout + run.stderr,
          "ranks loading different checkpoints get an error")

    # exists: no overwrite.
    rc, _, out = train(2, s2, 1, ["--save", path("ck2")])
    check(rc != 0 and "exists" in out, "saving over an existing checkpoint is refused")

    # crash: killed at three points of a save.
    for stage in ("files", "index", "rename"):
        target = path("ck-crash-" + stage)
        rc, _, out = train(2, s2, 3, ["--load", path("ck2"), "--save", target],
                           env={"MFSDP_CHECKPOINT_KILL": stage})
        check(rc != 0, "the save killed after the %s" % stage)
        rc, rest, out = train(2, s2, 3, ["--load", path("ck2")])
        check(rc == 0 and rest == whole[3:],
              "after a kill after the %s the previous checkpoint still resumes exactly"
              % stage)
        if os.path.exists(target):
            # Renamed before the kill: complete, and it resumes step 7 on.
            rc, more, out = train(2, s2, 1, ["--load", target])
            check(rc == 0 and len(more) == 1 and more[0][0] == "7",
                  "the directory a kill after the %s left is complete" % stage)
        else:
            check(stage != "rename",
                  "a kill after the %s leaves no directory of that name" % stage)

    if FAILURES:
        print("%d checks failed" % len(FAILURES))
        return 1
    print("all checkpoint checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
