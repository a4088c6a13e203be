"""Checks a `sluice tune` report.json names the stages `sluice run --stats` ran.

usage: same_stages.py REPORT.json RUN_STATS.txt; prints the names when they
agree (the runtime's own /prefetch and /cache stages left out), else fails.
"""
import itertools
import json
import sys

tuned = [s["name"] for s in json.load(open(sys.argv[1]))["steps"]]
lines = open(sys.argv[2]).read().split("\n")
start = next(k for k, l in enumerate(lines) if l.startswith("stage ")) + 1
rows = itertools.takewhile(lambda l: l and not l.startswith("buffer ="),
                           lines[start:])
ran = [r.split()[0] for r in rows if "/" not in r.split()[0]]
assert tuned == ran, f"tune profiled {tuned}, run ran {ran}"
print("same", tuned)
