#!/usr/bin/env python3
"""Starts a program on N local ranks the way torchrun does, without MPI.

Usage: launch_torchrun.py [--timeout S] [--torch] N PROGRAM [ARGS...]

Each of the N processes gets RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1 and MASTER_PORT (a free port), as
`torchrun --standalone` gives its workers on one machine. When a process
fails the others are ended, as torchrun ends them; the exit status is the
first failure's (128 + N for a signal N), 124 when the ranks take longer
than the timeout (default 120 s), else 0.

With --torch the ranks are started by torchrun itself (python3 -m
torch.distributed.run --standalone --no-python), mfsdp on a free
MFSDP_MASTER_PORT (torchrun's store holds MASTER_PORT); exits with 77
(ctest's SKIP_RETURN_CODE) when torch does not import.
"""
import os
import socket
import subprocess
import sys
import time


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def status(code):
    return 128 - code if code < 0 else code


def end(procs):
    for p in procs:
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + 5
    for p in procs:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def main(argv):
    timeout, torch = 120.0, False
    while argv and argv[0].startswith("--"):
        if argv[0] == "--timeout":
            timeout = float(argv[1])
            argv = argv[2:]
        elif argv[0] == "--torch":
            torch = True
            argv = argv[1:]
        else:
            break
    if len(argv) < 2:
        sys.stderr.write(__doc__)
        return 2
    n, command = int(argv[0]), argv[1:]

    if torch:
        try:
            import torch.distributed.run  # noqa: F401
        except ImportError as e:
            print(f"launch_torchrun: skipped, torch does not import ({e})")
            return 77
        env = dict(os.environ, MFSDP_MASTER_PORT=str(free_port()))
        run = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc-per-node={n}", "--no-python"] + command
        try:
            return status(subprocess.run(run, env=env, timeout=timeout).returncode)
        except subprocess.TimeoutExpired:
            sys.stderr.write(f"launch_torchrun: torchrun took more than {timeout} s\n")
            return 124

    port = str(free_port())
    procs = []
    for rank in range(n):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(n), LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        env.pop("MFSDP_MASTER_PORT", None)
        procs.append(subprocess.Popen(command, env=env))
    deadline = time.monotonic() + timeout
    while True:
        codes = [p.poll() for p in procs]
        failed = [c for c in codes if c not in (None, 0)]
        if failed:
            rank = codes.index(failed[0])
            sys.stderr.write(f"launch_torchrun: rank {rank} exited with "
                             f"{status(failed[0])}; ending the others\n")
            end(procs)
            return status(failed[0])
        if all(c == 0 for c in codes):
            return 0
        if time.monotonic() > deadline:
            sys.stderr.write(f"launch_torchrun: the ranks took more than {timeout} s\n")
            end(procs)
            return 124
        time.sleep(0.05)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
