#!/usr/bin/python3
"""What the per-stage counters cost: `sluice run` with them on vs off.

Usage: counter_overhead.py [--sluice BIN] [--repeats N] [--threads T]
                           [--callgrind] SPEC...

The per-stage timing and byte counters (the `cpu s`, `wall s` and bytes
columns of --stats, which the autotuner reads) are on by default;
SLUICE_NO_STAGE_TIMING=1 turns them off (record counts and the memory
accounting stay). For each spec this runs `sluice run SPEC --sink null` with
the counters on and off, interleaved (on, off, off, on, ...) so that load
from other processes spreads over both, and prints the medians of the
child's CPU seconds (user + system, from wait4) and wall seconds and their
ratio. CPU time is the figure to read on a shared machine: it does not count
time spent waiting for a core.

--callgrind also counts instructions with valgrind's callgrind at one thread
(exact, unaffected by load; slow), on and off, over whole runs of 1 and 2
epochs (--epochs): the difference is one epoch of steady state, without the
start-up (decompressing a source, JIT cache lookups, threads), which the
counters do not touch.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time


def run_once(cmd, env):
    t0 = time.monotonic()
    child = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
    _, status, ru = os.wait4(child.pid, 0)
    wall = time.monotonic() - t0
    err = child.stderr.read().decode(errors="replace")
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        sys.exit("counter_overhead.py: %s exited %d:\n%s" %
                 (" ".join(cmd), code, err))
    return ru.ru_utime + ru.ru_stime, wall


def callgrind(cmd, env, epochs):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "cg.out")
        full = ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out,
                ] + cmd + ["--epochs", str(epochs)]
        r = subprocess.run(full, env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            sys.exit("counter_overhead.py: callgrind failed:\n" + r.stderr)
        m = re.search(r"Collected\s*:\s*(\d+)", r.stderr)
        if not m:
            sys.exit("counter_overhead.py: no instruction count in:\n" +
                     r.stderr)
        return int(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sluice", default="build/bin/sluice")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=0,
                    help="--threads for sluice run (0: the spec's budget)")
    ap.add_argument("--callgrind", action="store_true",
                    help="also count instructions (1 vs 2 epochs)")
    ap.add_argument("specs", nargs="+")
    a = ap.parse_args()

    base = dict(os.environ)
    base.pop("SLUICE_NO_STAGE_TIMING", None)
    off = dict(base, SLUICE_NO_STAGE_TIMING="1")
    print("load average at start: %.2f %.2f %.2f" % os.getloadavg())
    print("| spec | CPU s on | CPU s off | CPU on/off | wall s on | "
          "wall s off | wall on/off |%s" %
          (" instr./epoch on | instr./epoch off | steady on/off | whole "
           "2-epoch run on/off |" if a.callgrind else ""))
    print("|---|---:|---:|---:|---:|---:|---:|%s" %
          ("---:|---:|---:|---:|" if a.callgrind else ""))
    for spec in a.specs:
        cmd = [a.sluice, "run", spec, "--sink", "null", "--quiet"]
        if a.threads:
            cmd += ["--threads", str(a.threads)]
        on_cpu, off_cpu, on_wall, off_wall = [], [], [], []
        for i in range(a.repeats):
            order = [(base, on_cpu, on_wall), (off, off_cpu, off_wall)]
            if i % 2:
                order.reverse()
            for env, cpu, wall in order:
                c, w = run_once(cmd, env)
                cpu.append(c)
                wall.append(w)
        mc_on, mc_off = statistics.median(on_cpu), statistics.median(off_cpu)
        mw_on, mw_off = statistics.median(on_wall), statistics.median(off_wall)
        row = "| %s | %.3f | %.3f | %.4f | %.3f | %.3f | %.4f |" % (
            os.path.basename(spec), mc_on, mc_off, mc_on / mc_off, mw_on,
            mw_off, mw_on / mw_off)
        if a.callgrind:
            one = cmd + ["--threads", "1"] if not a.threads else cmd
            on1, on2 = callgrind(one, base, 1), callgrind(one, base, 2)
            off1, off2 = callgrind(one, off, 1), callgrind(one, off, 2)
            per_on, per_off = on2 - on1, off2 - off1
            row += " %.0f | %.0f | %.4f | %.4f |" % (
                per_on, per_off, per_on / per_off, on2 / off2)
        print(row, flush=True)
    print("medians of %d interleaved runs each; load average at end: "
          "%.2f %.2f %.2f" % ((a.repeats,) + os.getloadavg()))


if __name__ == "__main__":
    main()
