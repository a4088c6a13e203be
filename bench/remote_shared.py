#!/usr/bin/python3
"""Two trainer jobs sharing one `sluice serve` worker's decode
(--share-outputs, docs/distributed.md): the worker's CPU per batch
delivered, with and without sharing, and each job's images/s.

Two trainer processes of the same spec (rank 0 of 1, as a hyperparameter
search over one data set) read the same epochs at once from one worker;
with --share-outputs the worker makes each chunk once and sends it to both.
The pipeline is bench/remote_loopback.py's u8 one (decode,
random_resized_crop 224, flip, CHW, batch 128) on bench/gen_photos.py's
real photographs. The worker's CPU is its process's user + system time over
the run (/proc); per batch is over the batches both jobs received.

Usage: bench/remote_shared.py [--data DIR] [--epochs N] [--threads T]
                              [--repeats R]
  Needs the build's Python package on PYTHONPATH and SLUICE_BIN.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import remote_loopback as rl  # noqa: E402

TRAINER = """
import sys, time, sluice.remote as r
ds = r.Dataset(sys.argv[1], [sys.argv[2]], trainer=sys.argv[3], chunk=4,
               window=8)
n = 0
t0 = time.perf_counter()
for e in range(int(sys.argv[4])):
    ds.set_epoch(e)
    for b in ds.arrays():
        n += b["image"].shape[0]
print(n, time.perf_counter() - t0)
"""


def worker(spec, threads, tmp, share):
    port_file = os.path.join(tmp, "port-%d" % time.monotonic_ns())
    extra = ["--share-outputs", "1GiB"] if share else []
    p = subprocess.Popen([rl.SLUICE_BIN, "serve", spec, "--listen",
                          "127.0.0.1:0", "--port-file", port_file,
                          "--threads", str(threads), "-q", *extra],
                         stderr=subprocess.PIPE, text=True)
    while not os.path.exists(port_file):
        if p.poll() is not None:
            sys.exit("sluice serve failed: " + p.stderr.read())
        time.sleep(0.05)
    return p, open(port_file).read().strip()


def run(spec, epochs, threads, tmp, share):
    p, addr = worker(spec, threads, tmp, share)
    try:
        cpu0 = rl.cpu_of(p.pid)
        jobs = [subprocess.Popen([sys.executable, "-c", TRAINER, spec, addr,
                                  name, str(epochs)], stdout=subprocess.PIPE,
                                 text=True) for name in ("job1", "job2")]
        outs = [j.communicate()[0].split() for j in jobs]
        if any(j.returncode for j in jobs):
            sys.exit("a trainer failed")
        cpu = rl.cpu_of(p.pid) - cpu0
        images = sum(int(o[0]) for o in outs)
        return {"worker_cpu_batch_ms": 1e3 * cpu / (images / 128),
                "job_images_s": statistics.mean(int(o[0]) / float(o[1])
                                                for o in outs)}
    finally:
        p.terminate()
        p.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=os.environ.get(
        "SLUICE_BENCH_DATA", "/tmp/sluice-bench-data"))
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    root = os.path.join(args.data, "photos", "train")
    if not os.path.isdir(root):
        subprocess.check_call([sys.executable,
                               os.path.join(HERE, "gen_photos.py"),
                               "--out", args.data])
    with tempfile.TemporaryDirectory() as tmp:
        spec = os.path.join(tmp, "u8.yaml")
        with open(spec, "w") as f:
            f.write(rl.SPEC.format(name="u8", root=root, normalize=""))
        res = {False: [], True: []}
        for _ in range(args.repeats):  # interleaved
            for share in (False, True):
                res[share].append(run(spec, args.epochs, args.threads, tmp,
                                      share))
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
