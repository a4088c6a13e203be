#!/usr/bin/python3
"""Profiles one `sluice serve` worker and its trainer on this host, or the
same pipeline in-process, in the steady state (docs/distributed.md, "One
worker, f32: where the worker's time goes"): `perf record -g` and `perf
stat` (task-clock, minor/major faults, context switches) are attached to
each process after the untimed epochs and stopped after the timed ones.

The pipeline and the data are bench/_remote_common.py's f32 photo
pipeline; one worker of 2 threads, chunk 4, window 8 (remote_loopback.py's).

Usage: bench/remote_profile.py local|remote OUTDIR [NAME=VALUE ...]
  [--warmup N] [--epochs N]; NAME=VALUE: set in the worker's environment.
  Then: perf report -i OUTDIR/worker.data --no-children --sort dso,sym
  -g none; OUTDIR/*.stat hold perf stat's counts (divide by the batches
  printed). PERFARGS (default "-F 499") replaces perf record's sampling
  arguments, e.g. PERFARGS="-e page-faults -c 1" to record every fault.
"""
import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _remote_common import (photos_root, start_worker,  # noqa: E402
                            stop_worker, write_spec)


def attach(pid, out, tag):
    rec = subprocess.Popen(
        ["perf", "record"] + os.environ.get("PERFARGS", "-F 499").split() +
        ["-g", "-p", str(pid), "-o", os.path.join(out, tag + ".data")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    stat = subprocess.Popen(
        ["perf", "stat", "-e", "task-clock,minor-faults,major-faults,"
         "context-switches,cpu-migrations", "-p", str(pid), "-o",
         os.path.join(out, tag + ".stat")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return [rec, stat]


def detach(procs):
    for p in procs:
        p.send_signal(signal.SIGINT)
    for p in procs:
        p.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=["local", "remote"])
    ap.add_argument("out")
    ap.add_argument("env", nargs="*", metavar="NAME=VALUE")
    ap.add_argument("--data", default=os.environ.get(
        "SLUICE_BENCH_DATA", "/tmp/sluice-bench-data"))
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=3)
    args = ap.parse_args()
    import sluice
    import sluice.remote
    os.makedirs(args.out, exist_ok=True)
    env = dict(kv.split("=", 1) for kv in args.env)
    tmp = tempfile.mkdtemp()
    spec = write_spec(tmp, "f32", photos_root(args.data), True)
    images = 0
    timed = range(args.warmup, args.warmup + args.epochs)
    if args.mode == "local":
        def epoch(e):
            return sluice.Pipeline(spec, epochs=e + 1, first_epoch=e,
                                   threads=2)
        for e in range(args.warmup):
            for _ in epoch(e):
                pass
        procs = attach(os.getpid(), args.out, "local")
        time.sleep(1.0)  # perf attached before the first timed batch
        t0 = time.perf_counter()
        for e in timed:
            for b in epoch(e):
                images += b["image"].shape[0]
        dt = time.perf_counter() - t0
        detach(procs)
    else:
        p, addr = start_worker(spec, 2, tmp, env)
        try:
            ds = sluice.remote.Dataset(spec, [addr], chunk=4, window=8)
            for e in range(args.warmup):
                ds.set_epoch(e)
                for _ in ds.arrays():
                    pass
            procs = (attach(os.getpid(), args.out, "trainer") +
                     attach(p.pid, args.out, "worker"))
            time.sleep(1.0)
            st0 = ds.stats()
            t0 = time.perf_counter()
            for e in timed:
                ds.set_epoch(e)
                for b in ds.arrays():
                    images += b["image"].shape[0]
            dt = time.perf_counter() - t0
            detach(procs)
            st = ds.stats()
            print("receiving ms/batch %.2f, outputs in shared memory %d of %d"
                  % (1e3 * (st["receive_cpu_seconds"] -
                            st0["receive_cpu_seconds"]) / (images / 128),
                     st["shared_memory_outputs"] -
                     st0["shared_memory_outputs"],
                     st["outputs"] - st0["outputs"]))
            ds.close()
        finally:
            stop_worker(p)
    print("batches %d, images/s %.0f (perf running)" % (images // 128,
                                                        images / dt))


if __name__ == "__main__":
    main()
