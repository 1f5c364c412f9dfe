#!/usr/bin/env python3
"""The collective watchdog, as a trainer meets it.

  watchdog.py MPIRUN MFSDP_COMPILE TRAINER MODEL_JSON WORKDIR

Runs the example trainer under mpirun with --collective-timeout-s 2 and
breaks one rank in three ways; every time the job must end, with status
non-zero, within the timeout + 5 s of the fault (+ 5 s for mpirun to tear
the job down on a loaded machine), and the error must name the
collective, the unit and the rank that did not arrive:

  stall     rank 1 stops calling mfsdp (it sleeps) before step 3's
            optimizer step: it skips the collectives the others wait in;
  sigstop   rank 1 is stopped (SIGSTOP) while training;
  sigkill   rank 1 is killed (SIGKILL) under mpirun --enable-recovery, so
            that mpirun does not end the job itself;
  checks    the stall again with the call-sequence checks on
            (MFSDP_CHECK_CALLS=1): their exchange is bounded too.

A control run without a fault must still train (the bounded waits change
nothing else). Processes are killed at the end whatever happens.
"""
import os
import re
import signal
import subprocess
import sys
import time

MPIRUN, COMPILE, TRAINER, MODEL, WORK = sys.argv[1:6]
TIMEOUT_S = 2.0
BOUND_S = TIMEOUT_S + 5 + 5
FAILURES = []


def check(ok, what, out=None):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        FAILURES.append(what)
        if out:
            print("  its output ends:\n" + out[-2000:], flush=True)


def start(lib, steps, extra=(), mpirun_extra=(), checks=False):
    cmd = [MPIRUN, "--allow-run-as-root", "--oversubscribe"] + list(mpirun_extra) + [
        "-np", "2", TRAINER, lib, "--steps", str(steps), "--print-pid",
        "--collective-timeout-s", str(TIMEOUT_S)] + list(extra)
    env = dict(os.environ, MFSDP_CHECK_CALLS="1" if checks else "0")
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env, start_new_session=True)


def read_until(proc, pattern, limit_s, seen):
    """Reads lines into `seen` until one matches (its match) or the limit."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        line = proc.stdout.readline()
        if not line:
            return None
        seen.append(line)
        m = re.search(pattern, line)
        if m:
            return m
    return None


def finish(proc, seen, limit_s):
    """Waits for the job to end; (status, seconds it took, output)."""
    t0 = time.monotonic()
    try:
        out, _ = proc.communicate(timeout=limit_s)
        seen.append(out)
        return proc.returncode, time.monotonic() - t0, "".join(seen)
    except subprocess.TimeoutExpired:
        return None, time.monotonic() - t0, "".join(seen)


def kill(proc, pids=()):
    for pid in pids:
        for sig in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.kill(pid, sig)
            except OSError:
                pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    proc.wait()


def pids_of(proc, seen):
    pids = {}
    while len(pids) < 2:
        m = read_until(proc, r"rank (\d+) pid (\d+)", 60, seen)
        if not m:
            break
        pids[int(m.group(1))] = int(m.group(2))
    return pids


def names_the_fault(out, rank):
    return (re.search(r"MFSDP_ERROR_COMM", out) is not None and
            re.search(r"\(during [a-z_]+\(-?\d*\)\)", out) is not None and
            re.search(r"did not complete within %d ms" % int(TIMEOUT_S * 1000), out)
            is not None and
            re.search(r"rank %d did not answer" % rank, out) is not None)


def stall_case(lib, label, checks):
    """Rank 1 stops calling mfsdp before step 3's optimizer step."""
    begun = time.monotonic()
    proc = start(lib, 20, ["--test-stall", "1,3"], checks=checks)
    seen = []
    pids = {}
    try:
        pids = pids_of(proc, seen)
        stalled = read_until(proc, r"rank 1 stalls at step 3", 60, seen)
        t0 = time.monotonic()
        status, _, out = finish(proc, seen, 60)
        took = time.monotonic() - t0
        if stalled is None and "rank 1 did not answer" in out:
            # mpirun can drop rank 1's last line when rank 0 aborts the job
            # (seen on a loaded machine): the bound is then held by the
            # whole job, from its start (three steps of a tiny model).
            took = time.monotonic() - begun
        check(status not in (None, 0) and took < BOUND_S,
              "%s: the job ends with status %s %.1f s after rank 1 stalls (bound %.0f s)"
              % (label, status, took, BOUND_S))
        if checks:
            # The checks' own exchange times out first, bounded the same way.
            check("did not complete within %d ms" % int(TIMEOUT_S * 1000) in out,
                  "%s: the error says the exchange timed out" % label, out)
        else:
            check(names_the_fault(out, 1),
                  "%s: rank 0's error names the collective, the unit and rank 1" % label,
                  out)
    finally:
        kill(proc, pids.values())


def main():
    os.makedirs(WORK, exist_ok=True)
    lib = os.path.join(WORK, "w2.so")
    subprocess.run([COMPILE, MODEL, "--mesh=dp_shard=2", "--policy=adamw", "-o", lib],
                   check=True, capture_output=True)

    # Control: bounded waits, no fault, the job trains.
    proc = start(lib, 5)
    status, took, out = finish(proc, [], 120)
    check(status == 0 and "step 5: loss" in out,
          "no fault: 5 steps train with the watchdog on")

    stall_case(lib, "stall", checks=False)

    # sigstop: rank 1 stopped while training.
    proc = start(lib, 100000)
    seen = []
    pids = {}
    try:
        pids = pids_of(proc, seen)
        time.sleep(1.0)
        t0 = time.monotonic()
        os.kill(pids[1], signal.SIGSTOP)
        status, _, out = finish(proc, seen, 60)
        took = time.monotonic() - t0
        check(status not in (None, 0) and took < BOUND_S,
              "sigstop: the job ends with status %s %.1f s after rank 1 stops (bound %.0f s)"
              % (status, took, BOUND_S))
        check(names_the_fault(out, 1),
              "sigstop: rank 0's error names the collective, the unit and rank 1", out)

    finally:
        kill(proc, pids.values())

    # sigkill under --enable-recovery: mpirun leaves the job to the ranks.
    proc = start(lib, 100000, mpirun_extra=["--enable-recovery"])
    seen = []
    pids = {}
    try:
        pids = pids_of(proc, seen)
        time.sleep(1.0)
        t0 = time.monotonic()
        os.kill(pids[1], signal.SIGKILL)
        status, _, out = finish(proc, seen, 60)
        took = time.monotonic() - t0
        # Under --enable-recovery (OpenMPI 4.1) mpirun's own status is 0 even
        # after a rank's MPI_Abort(1): the job's end is what is checked.
        check(status is not None and took < BOUND_S,
              "sigkill: the job ends %.1f s after rank 1 dies (bound %.0f s)"
              % (took, BOUND_S))
        check(names_the_fault(out, 1),
              "sigkill: rank 0's error names the collective, the unit and rank 1 "
              "(it then calls MPI_Abort(1); mpirun --enable-recovery does not "
              "pass that status on)", out)
    finally:
        kill(proc, pids.values())

    stall_case(lib, "checks on", checks=True)

    if FAILURES:
        print("%d watchdog check(s) failed" % len(FAILURES))
        sys.exit(1)
    print("all watchdog checks passed")


if __name__ == "__main__":
    main()
