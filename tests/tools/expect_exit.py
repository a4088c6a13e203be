#!/usr/bin/env python3
"""Runs a command and fails unless it exits with the given code.

Usage: expect_exit.py CODE CMD [ARGS...]. The command's stdout/stderr pass
through, so lit tests can pipe them into FileCheck and also check the exit
code (lit's `not` accepts any non-zero code).
"""
import subprocess
import sys

want = int(sys.argv[1])
try:
    got = subprocess.call(sys.argv[2:], timeout=120)
except subprocess.TimeoutExpired:
    sys.stderr.write("expect_exit: command timed out after 120 s: %s\n" % " ".join(sys.argv[2:]))
    sys.exit(1)
if got != want:
    sys.stderr.write("expect_exit: exit code %d, expected %d\n" % (got, want))
    sys.exit(1)
