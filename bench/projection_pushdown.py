#!/usr/bin/python3
"""Projection pushdown on a CSV that keeps 4 of 40 columns.

Usage: bench/projection_pushdown.py [--rows N] [--repeats R] [--sluice PATH]

Writes a 40-column CSV (1 i64 label, 30 f32, 9 hex32 ids; Criteo-like
values) to $SLUICE_BENCH_DATA (default /tmp/sluice-bench-data), and a spec
that reads label plus three f32 columns and batches them. Runs `sluice run
--sink null` with all passes on and with --disable-pass
sluice-push-projections, interleaved, R rounds, and prints the medians of
wall time, rows/s and the ratio, with the load average; also checks that
both write the same bytes (npy sink, once).
"""
import argparse
import os
import random
import resource
import statistics
import subprocess
import sys
import time


def make_data(path, rows):
    rng = random.Random(42)
    with open(path, "w") as f:
        for i in range(rows):
            cells = [str(rng.randint(0, 1))]
            cells += ["%.4g" % (rng.random() * 10 ** rng.randint(0, 4)) if rng.random() > 0.05 else ""
                      for _ in range(30)]
            cells += ["%08x" % rng.getrandbits(32) for _ in range(9)]
            f.write(",".join(cells) + "\n")


SPEC = """pipeline: projection_bench
source:
  csv:
    files: wide.csv
    columns:
      - {name: label, type: i64}
      - {name: f0, type: f32}
      - {name: f1, type: f32}
      - {name: f2, type: f32}
      - {name: dense, type: f32, count: 27}
      - {name: cat, type: hex32, count: 9}
steps:
  - select: [label, f0, f1, f2]
  - batch: {size: 4096}
"""


def run(sluice, spec, extra, sink="null"):
    """(wall seconds, CPU seconds user+sys) of one run."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run([sluice, "run", spec, "--quiet", "--sink", sink] + extra,
                       capture_output=True, text=True)
    dt = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        sys.exit(p.stderr)
    return dt, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=400000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--sluice", default=os.path.join(os.path.dirname(__file__), "..", "build", "bin", "sluice"))
    a = ap.parse_args()
    d = os.environ.get("SLUICE_BENCH_DATA", "/tmp/sluice-bench-data")
    os.makedirs(d, exist_ok=True)
    data = os.path.join(d, "wide.csv")
    if not os.path.exists(data) or os.path.getsize(data) == 0 or \
            sum(1 for _ in open(data)) != a.rows:
        make_data(data, a.rows)
    spec = os.path.join(d, "projection_bench.yaml")
    with open(spec, "w") as f:
        f.write(SPEC)
    off = ["--disable-pass", "sluice-push-projections"]
    # Same bytes both ways.
    for name, extra in (("on", []), ("off", off)):
        out = os.path.join(d, "proj-" + name)
        subprocess.run(["rm", "-rf", out])
        run(a.sluice, spec, extra, "npy:" + out)
    same = subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__), "..", "tests", "tools", "same_outputs.py"),
                           os.path.join(d, "proj-on"), os.path.join(d, "proj-off")], capture_output=True, text=True)
    if same.returncode != 0:
        sys.exit("outputs differ: " + same.stderr)
    run(a.sluice, spec, [])  # warm the page cache
    on, offt = [], []
    for _ in range(a.repeats):
        on.append(run(a.sluice, spec, []))
        offt.append(run(a.sluice, spec, off))
    size = os.path.getsize(data) / 1e6
    print("projection pushdown, %d rows x 40 columns (%.0f MB), keep 4 columns; "
          "median of %d interleaved runs, load average %s" % (
              a.rows, size, a.repeats, " ".join("%.2f" % x for x in os.getloadavg())))
    for k, what in ((0, "wall"), (1, "CPU (user+sys)")):
        mon = statistics.median(x[k] for x in on)
        moff = statistics.median(x[k] for x in offt)
        print("  %-15s pass on %.3f s (%.2f M rows/s), off %.3f s (%.2f M rows/s): %.2fx" % (
            what, mon, a.rows / mon / 1e6, moff, a.rows / moff / 1e6, moff / mon))
    print("  (target: >= 2x)")


if __name__ == "__main__":
    main()
