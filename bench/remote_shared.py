#!/usr/bin/python3
"""Two trainer jobs sharing one `sluice serve` worker's decode
(--share-outputs, docs/distributed.md): the worker's CPU per batch
delivered, with and without sharing, and each job's images/s.

Two trainer processes of the same spec (rank 0 of 1, as a hyperparameter
search over one data set) read the same epochs at once from one worker;
with --share-outputs the worker makes each chunk once, encodes it once and
sends the same bytes to both. The pipeline is bench/_remote_common.py's u8
one (decode, random_resized_crop 224, flip, CHW, batch 128) on
bench/gen_photos.py's real photographs. The trainers run on the worker's
host, so the worker writes their batches into their shared memory
(remote/lib/Slots.h); `--socket` makes them take everything over the
socket instead, as trainers on other hosts would. The worker's CPU is its
process's user + system time over the run (/proc); per batch is over the
batches both jobs received.

Usage: bench/remote_shared.py [--data DIR] [--epochs N] [--threads T]
                              [--repeats R] [--socket]
  Needs the build's Python package on PYTHONPATH and SLUICE_BIN.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _remote_common import (cpu_of, photos_root, start_worker,  # noqa: E402
                            stop_worker, write_spec)

TRAINER = """
import sys, time, sluice.remote as r
ds = r.Dataset(sys.argv[1], [sys.argv[2]], trainer=sys.argv[3], chunk=4,
               window=8, shared_memory=sys.argv[5] == "1")
n = 0
t0 = time.perf_counter()
for e in range(int(sys.argv[4])):
    ds.set_epoch(e)
    for b in ds.arrays():
        n += b["image"].shape[0]
print(n, time.perf_counter() - t0)
"""


def run(spec, epochs, threads, tmp, share, shm):
    extra = ["--share-outputs", "1GiB"] if share else []
    p, addr = start_worker(spec, threads, tmp, extra=extra)
    try:
        cpu0 = cpu_of(p.pid)
        jobs = [subprocess.Popen([sys.executable, "-c", TRAINER, spec, addr,
                                  name, str(epochs), "1" if shm else "0"],
                                 stdout=subprocess.PIPE, text=True)
                for name in ("job1", "job2")]
        outs = [j.communicate()[0].split() for j in jobs]
        if any(j.returncode for j in jobs):
            sys.exit("a trainer failed")
        cpu = cpu_of(p.pid) - cpu0
        images = sum(int(o[0]) for o in outs)
        return {"worker_cpu_batch_ms": 1e3 * cpu / (images / 128),
                "job_images_s": statistics.mean(int(o[0]) / float(o[1])
                                                for o in outs)}
    finally:
        stop_worker(p)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=os.environ.get(
        "SLUICE_BENCH_DATA", "/tmp/sluice-bench-data"))
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--socket", action="store_true",
                    help="the trainers take everything over the socket "
                         "(no shared memory), as on other hosts")
    args = ap.parse_args()
    root = photos_root(args.data)
    with tempfile.TemporaryDirectory() as tmp:
        spec = write_spec(tmp, "u8", root, f32=False)
        res = {False: [], True: []}
        for _ in range(args.repeats):  # interleaved
            for share in (False, True):
                res[share].append(run(spec, args.epochs, args.threads, tmp,
                                      share, not args.socket))
        print("trainers receive %s" % ("over the socket" if args.socket
                                       else "in shared memory"))
        print("| worker | CPU ms per batch delivered | images/s per job |")
        print("|---|---:|---:|")
        for share in (False, True):
            rows = res[share]
            print("| %s | %.1f | %.0f |" % (
                "--share-outputs 1GiB" if share else "not shared",
                statistics.median(r["worker_cpu_batch_ms"] for r in rows),
                statistics.median(r["job_images_s"] for r in rows)))
        ratio = statistics.median(
            s["worker_cpu_batch_ms"] / n["worker_cpu_batch_ms"]
            for s, n in zip(res[True], res[False]))
        print("\nshared / not shared, worker CPU per batch (median of "
              "paired runs): %.2f" % ratio)


if __name__ == "__main__":
    main()
