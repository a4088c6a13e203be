#!/usr/bin/python3
"""A compiled executable (`sluice compile`) against `sluice run`, same spec.

For each spec (default: bench/specs/*.yaml with the data directory of
$SLUICE_BENCH_DATA), compiles it once, then runs REPEATS rounds; a round runs
`sluice run SPEC` and `EXE` once each, in alternating order, with the same
flags (--sink null --quiet, plus --epochs/--threads when given). Reported per
spec, medians over the rounds:

  pipeline s   the runtime's own "N outputs in X s" figure (the pipeline,
               without process start-up or `sluice run`'s spec compile)
  process s    wall time of the whole process
  cpu s        user + system CPU time of the whole process (getrusage)
  exe/run      ratio of the medians (1.00 = the same speed)

The executable must write the same outputs: the first round of each spec also
compares `--sink npy:DIR` of both, byte for byte.

Usage: bench/compile_vs_run.py [--repeats N] [--epochs N] [--threads N]
                               [--sluice PATH] [SPEC...]
"""
import argparse
import filecmp
import glob
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu_children():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(cmd):
    c = cpu_children()
    t = time.monotonic()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wall = time.monotonic() - t
    cpu = cpu_children() - c
    if p.returncode != 0:
        sys.exit("failed (%d): %s\n%s" % (p.returncode, " ".join(cmd), p.stderr))
    m = re.search(r"(\d+) outputs in ([0-9.]+) s", p.stdout)
    if not m:
        sys.exit("no timing line in the output of %s:\n%s" % (" ".join(cmd), p.stdout))
    return float(m.group(2)), wall, cpu


def same_tree(a, b):
    cmp = filecmp.dircmp(a, b)
    if cmp.left_only or cmp.right_only:
        return False
    _, mismatch, errors = filecmp.cmpfiles(a, b, cmp.common_files, shallow=False)
    return not mismatch and not errors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("specs", nargs="*")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--epochs", type=int)
    ap.add_argument("--threads", type=int)
    ap.add_argument("--sluice", default=os.path.join(ROOT, "build", "bin", "sluice"))
    args = ap.parse_args()
    data = os.environ.get("SLUICE_BENCH_DATA", "/tmp/sluice-bench-data")
    work = tempfile.mkdtemp(prefix="sluice-compile-bench-")
    specs = args.specs
    if not specs:
        # The bench specs name /tmp/sluice-bench-data: point them at $SLUICE_BENCH_DATA.
        specs = []
        for s in sorted(glob.glob(os.path.join(ROOT, "bench", "specs", "*.yaml"))):
            out = os.path.join(work, os.path.basename(s))
            with open(s) as f, open(out, "w") as g:
                g.write(f.read().replace("/tmp/sluice-bench-data", data))
            specs.append(out)
    flags = ["--sink", "null", "--quiet"]
    if args.epochs:
        flags += ["--epochs", str(args.epochs)]
    if args.threads:
        flags += ["--threads", str(args.threads)]
    load = os.getloadavg()
    print("load average before: %.2f %.2f %.2f; %d rounds; flags: %s"
          % (load[0], load[1], load[2], args.repeats, " ".join(flags)))
    print("| spec | run pipeline s | exe pipeline s | exe/run | run process s | exe process s | exe/run | run cpu s | exe cpu s | exe/run |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for spec in specs:
        name = os.path.splitext(os.path.basename(spec))[0]
        exe = os.path.join(work, name)
        subprocess.run([args.sluice, "compile", "-q", spec, "-o", exe], check=True)
        run_cmd = [args.sluice, "run", spec]
        # Same bytes first.
        a, b = os.path.join(work, name + ".run"), os.path.join(work, name + ".exe")
        check = flags[:]
        i = check.index("--sink")
        subprocess.run(run_cmd + check[:i] + ["--sink", "npy:" + a] + check[i + 2:],
                       check=True, stdout=subprocess.DEVNULL)
        subprocess.run([exe] + check[:i] + ["--sink", "npy:" + b] + check[i + 2:],
                       check=True, stdout=subprocess.DEVNULL)
        if not same_tree(a, b):
            sys.exit("%s: the executable's outputs differ from sluice run's" % name)
        shutil.rmtree(a)
        shutil.rmtree(b)
        runs, exes = [], []
        for r in range(args.repeats):
            order = [("run", run_cmd), ("exe", [exe])]
            if r % 2:
                order.reverse()
            for kind, cmd in order:
                (runs if kind == "run" else exes).append(timed(cmd + flags))
        rp = statistics.median(x[0] for x in runs)
        ep = statistics.median(x[0] for x in exes)
        rw = statistics.median(x[1] for x in runs)
        ew = statistics.median(x[1] for x in exes)
        rc = statistics.median(x[2] for x in runs)
        ec = statistics.median(x[2] for x in exes)
        print("| %s | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f |"
              % (name, rp, ep, ep / rp, rw, ew, ew / rw, rc, ec, ec / rc))
        sys.stdout.flush()
    load = os.getloadavg()
    print("load average after: %.2f %.2f %.2f" % load)
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
