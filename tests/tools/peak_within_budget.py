#!/usr/bin/env python3
"""Reads `sluice run --stats` output on stdin and checks the final line's
"memory peak P of budget B": prints "peak within budget" when P <= B, else
"peak P over budget B". Usage: sluice run SPEC --stats | peak_within_budget.py"""
import re
import sys

UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
text = sys.stdin.read()
m = re.search(r"memory peak ([0-9.]+) (\w+) of budget ([0-9.]+) (\w+)", text)
if not m:
    print("no memory peak line")
    sys.exit(1)
peak = float(m.group(1)) * UNITS[m.group(2)]
budget = float(m.group(3)) * UNITS[m.group(4)]
print("peak within budget" if peak <= budget else
      "peak %s %s over budget %s %s" % m.groups())
