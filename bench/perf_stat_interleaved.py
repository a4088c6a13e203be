#!/usr/bin/python3
"""`perf stat` of `sluice run` configurations, interleaved, pinned: each
configuration is a label, a sluice binary, a spec, the records it makes and
optionally environment variables; every repeat runs each configuration once
in turn (so a burst of load from other processes spreads over all of them),
on CPU 0 with `--threads 1`, and the table gives per record the median CPU
microseconds (perf's task-clock, every run listed), context switches and
page faults, and the records/s. For the specs of `bench/remote_latency.py
--serve-only` (whose servers must be running: it prints the specs' paths);
the bench's S3 keys are set.

Usage: perf_stat_interleaved.py REPEATS LABEL=BINARY@SPEC@RECORDS[@K=V,K=V] ...
e.g.   perf_stat_interleaved.py 5 before=/main/build/bin/sluice@ima_8.yaml@4000 \\
           after=build/bin/sluice@ima_8.yaml@4000 \\
           off=build/bin/sluice@ima_8.yaml@4000@SLUICE_REMOTE_WAITER_DRIVES=1
Prints a Markdown table and the load average before and after.
"""
import os
import re
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "tests", "python"))
import remote_servers  # noqa: E402

EVENTS = ("task-clock", "context-switches", "page-faults")


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    reps = int(sys.argv[1])
    cfgs = []
    for arg in sys.argv[2:]:
        label, rest = arg.split("=", 1)
        parts = rest.split("@")
        env = dict(os.environ, AWS_ACCESS_KEY_ID=remote_servers.ACCESS_KEY,
                   AWS_SECRET_ACCESS_KEY=remote_servers.SECRET_KEY)
        if len(parts) > 3:
            for kv in filter(None, parts[3].split(",")):
                k, v = kv.split("=", 1)
                env[k] = v
        cfgs.append((label, parts[0], parts[1], int(parts[2]), env))
    res = {c[0]: [] for c in cfgs}
    load0 = os.getloadavg()
    for _ in range(reps):
        for label, binary, spec, records, env in cfgs:
            r = subprocess.run(
                ["perf", "stat", "-x,", "-e", ",".join(EVENTS), "taskset",
                 "-c", "0", binary, "run", spec, "--sink", "null",
                 "--threads", "1"], capture_output=True, text=True, env=env)
            vals = {}
            for line in r.stderr.splitlines():
                p = line.split(",")
                if len(p) > 3 and p[2] in EVENTS:
                    vals[p[2]] = float(p[0])
            m = re.search(r"([\d.]+)(k?) records/s", r.stdout + r.stderr)
            if r.returncode != 0 or len(vals) < 3 or not m:
                sys.exit("%s failed:\n%s" % (label, r.stderr[-2000:]))
            rate = float(m.group(1)) * (1000 if m.group(2) else 1)
            res[label].append((vals["task-clock"] * 1000 / records,
                               vals["context-switches"] / records,
                               vals["page-faults"] / records, rate))
    load1 = os.getloadavg()
    print("load average %.2f %.2f %.2f before, %.2f %.2f %.2f after; %d "
          "interleaved repeats\n" % (load0 + load1 + (reps,)))
    print("| configuration | CPU µs/record (median; runs) | switches/record "
          "| faults/record | records/s (median; runs) |")
    print("|---|---:|---:|---:|---:|")
    for c in cfgs:
        xs = res[c[0]]
        print("| %s | %.1f (%s) | %.2f | %.2f | %.0f (%s) |" % (
            c[0], statistics.median(x[0] for x in xs),
            ", ".join("%.0f" % x[0] for x in xs),
            statistics.median(x[1] for x in xs),
            statistics.median(x[2] for x in xs),
            statistics.median(x[3] for x in xs),
            ", ".join("%.0f" % x[3] for x in xs)))


if __name__ == "__main__":
    main()
