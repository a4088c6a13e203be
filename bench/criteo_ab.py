#!/usr/bin/python3
"""The whole Criteo-style pipeline: two sluice binaries (or two settings of one), interleaved.

Compares a baseline build (e.g. the last main commit before the JIT) with the
current one on bench/specs/criteo_bench.yaml (csv/tsv source, filter,
fill_missing, the log map, hash_bucket, batch 4096). The spec's
`schedule: auto` is dropped, so both binaries run the same fixed schedule
(older builds do not know `schedule: auto`) and no probing is timed. A round
runs every variant once, in alternating order, so load from other work on
the machine falls on all of them; figures are medians over the rounds:

  rows/s (bench)   `sluice bench --seconds S`, its `source records/s` line
                   (steady state after its own warm-up)
  cpu us/row       user + system CPU time of `sluice run --sink null` over
                   one whole epoch (getrusage of the child), per row; on a
                   shared machine this counted figure is the steadier one
  wall s (run)     wall time of that whole run

A variant is `NAME=BINARY[,ENV=VALUE...]` (e.g. `new-nosimd=build/bin/sluice,
SLUICE_NO_FAST_CSV=1`). First, every variant of the same binary is checked
to write the same bytes as the first one (`--sink npy:DIR`).

Usage: bench/criteo_ab.py [--repeats N] [--seconds S] [--threads N]
                          [--spec SPEC] VARIANT VARIANT...
"""
import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from compile_vs_run import same_tree

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu_children():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run(cmd, env):
    c = cpu_children()
    t = time.monotonic()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, env=env)
    wall = time.monotonic() - t
    cpu = cpu_children() - c
    if p.returncode != 0:
        sys.exit("failed (%d): %s\n%s%s" % (p.returncode, " ".join(cmd),
                                            p.stdout, p.stderr))
    return p.stdout + p.stderr, wall, cpu


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("variants", nargs="+")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--spec", default=os.path.join(ROOT, "bench", "specs",
                                                   "criteo_bench.yaml"))
    ap.add_argument("--no-check", action="store_true")
    args = ap.parse_args()
    data = os.environ.get("SLUICE_BENCH_DATA", "/tmp/sluice-bench-data")
    work = tempfile.mkdtemp(prefix="sluice-criteo-ab-")
    spec = os.path.join(work, "criteo.yaml")
    with open(args.spec) as f:
        text = f.read().replace("/tmp/sluice-bench-data", data)
    text = "\n".join(l for l in text.splitlines()
                     if not l.startswith("schedule:")) + "\n"
    with open(spec, "w") as f:
        f.write(text)
    rows = None

    variants = []
    for v in args.variants:
        name, _, rest = v.partition("=")
        parts = rest.split(",")
        env = dict(os.environ)
        for kv in parts[1:]:
            k, _, val = kv.partition("=")
            env[k] = val
        variants.append((name, parts[0], env))

    if not args.no_check:
        dirs = []
        for name, binary, env in variants:
            d = os.path.join(work, "npy-" + name)
            run([binary, "run", spec, "--sink", "npy:" + d, "--quiet",
                 "--threads", str(args.threads)], env)
            dirs.append(d)
        # Builds of different commits may differ (the expression semantics
        # changed with the JIT); settings of one binary must not.
        for i, (name, binary, _) in enumerate(variants):
            j = next(k for k, v in enumerate(variants) if v[1] == binary)
            if j == i:
                continue
            same = same_tree(dirs[j], dirs[i])
            print("output %s vs %s: %s" % (variants[j][0], name,
                                           "identical" if same else "DIFFERENT"))
            if not same:
                sys.exit(1)

    res = {name: {"rate": [], "cpu": [], "wall": []} for name, _, _ in variants}
    load = [os.getloadavg()[0]]
    for r in range(args.repeats):
        order = variants if r % 2 == 0 else list(reversed(variants))
        for name, binary, env in order:
            out, _, _ = run([binary, "bench", spec, "--seconds", str(args.seconds),
                             "--threads", str(args.threads), "--quiet"], env)
            m = re.search(r"source records/s\s+([0-9.]+)", out)
            if not m:
                sys.exit("no rate in:\n" + out)
            res[name]["rate"].append(float(m.group(1)))
            out, wall, cpu = run([binary, "run", spec, "--sink", "null",
                                  "--threads", str(args.threads)], env)
            m = re.search(r"csv\s+read (\d+) =", out)
            if m:
                rows = int(m.group(1))
            res[name]["cpu"].append(cpu)
            res[name]["wall"].append(wall)
        load.append(os.getloadavg()[0])
    nrows = rows
    base = variants[0][0]
    print("%d rounds, --seconds %g, --threads %d; 1-minute load %.1f .. %.1f"
          % (args.repeats, args.seconds, args.threads, min(load), max(load)))
    print("%-14s %12s %8s %12s %8s %10s" % ("variant", "rows/s", "ratio",
                                          "cpu us/row", "ratio", "wall s"))
    b = res[base]
    for name, _, _ in variants:
        v = res[name]
        rate = statistics.median(v["rate"])
        cpu = statistics.median(v["cpu"]) / nrows * 1e6
        print("%-14s %12.0f %8.2f %12.3f %8.2f %10.3f" % (
            name, rate, rate / statistics.median(b["rate"]), cpu,
            statistics.median(b["cpu"]) / statistics.median(v["cpu"]),
            statistics.median(v["wall"])))
        print("   rates: %s" % ", ".join("%.0f" % x for x in v["rate"]))
        print("   cpu s: %s" % ", ".join("%.3f" % x for x in v["cpu"]))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
