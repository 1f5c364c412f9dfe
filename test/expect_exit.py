#!/usr/bin/env python3
"""Runs a command and succeeds only if it exits with the given status.

Used as %exit1 in lit tests: malformed input must give exit status 1, which
`not` cannot tell apart from a crash's or any other failure's status.
Usage: expect_exit.py STATUS COMMAND [ARGS...]
"""
import subprocess
import sys

want = int(sys.argv[1])
got = subprocess.call(sys.argv[2:])
if got != want:
    sys.stderr.write(f"expect_exit: '{' '.join(sys.argv[2:])}' exited with "
                     f"{got}, expected {want}\n")
    sys.exit(1)
