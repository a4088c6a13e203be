#!/usr/bin/python3
"""Runs a command and writes what the kernel counted for it as JSON.

Usage: rusage.py OUT.json COMMAND [ARGS...]

The child's getrusage (os.wait4): peak RSS, user and system CPU seconds,
minor and major page faults, context switches, plus wall seconds and the exit
code. The child's stdout and stderr pass through; rusage.py exits with the
child's code. bench/run.sh wraps every `sluice bench` in it so that the
results table can show peak RSS, the system time share and page faults per
image beside images/s.
"""
import json
import os
import subprocess
import sys
import time


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: rusage.py OUT.json COMMAND [ARGS...]")
    out, cmd = sys.argv[1], sys.argv[2:]
    t0 = time.monotonic()
    try:
        child = subprocess.Popen(cmd)
    except OSError as e:
        sys.exit("rusage.py: cannot run %s: %s" % (cmd[0], e))
    _, status, ru = os.wait4(child.pid, 0)
    wall = time.monotonic() - t0
    code = os.waitstatus_to_exitcode(status)
    with open(out, "w") as f:
        json.dump({"command": cmd, "exit_code": code, "wall_seconds": wall,
                   "max_rss_kib": ru.ru_maxrss, "user_seconds": ru.ru_utime,
                   "system_seconds": ru.ru_stime, "minor_faults": ru.ru_minflt,
                   "major_faults": ru.ru_majflt,
                   "voluntary_switches": ru.ru_nvcsw,
                   "involuntary_switches": ru.ru_nivcsw}, f, indent=2)
    sys.exit(code if code >= 0 else 128 - code)


if __name__ == "__main__":
    main()
