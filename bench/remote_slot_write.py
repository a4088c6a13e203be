#!/usr/bin/python3
"""What writing a batch into the trainer's shared memory costs a worker
(remote/lib/Slots.cpp), per output, from the worker's own thread CPU:
`sluice serve` reports the CPU its sending thread spent per output
encoding and writing it (the slot write is nearly all of it for f32
batches), which does not depend on the host's load the way images/s
does. One worker of bench/_remote_common.py's photo pipeline, runs with
each way of writing interleaved, medians over --repeats. Also the worker
process's whole CPU per output (its pipeline's included: a batch made in
its slot moves no copy onto the pipeline's threads, but a slot's first
touch lands there) and the outputs its pipeline made in their slots
(SlotBatches) against those in slots at all.

Usage: bench/remote_slot_write.py [--data DIR] [--epochs N] [--repeats R]
  [--only f32|u8]. Needs the build's Python package on PYTHONPATH and
  SLUICE_BIN (default build/bin/sluice)."""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _remote_common import (SLUICE_BIN, cpu_of, photos_root,  # noqa
                            write_spec)

WAYS = {
    "pwrite, mapped after 12 writes, made in the slot (default)": {},
    "pwrite, mapped after 32 writes, copied (SLUICE_NO_SLOT_DIRECT=1)":
        {"SLUICE_NO_SLOT_DIRECT": "1"},
    "mapped at the first write, made in the slot (SLUICE_NO_SLOT_PWRITE=1)":
        {"SLUICE_NO_SLOT_PWRITE": "1"},
    "mapped at the first write, copied (both =1)":
        {"SLUICE_NO_SLOT_PWRITE": "1", "SLUICE_NO_SLOT_DIRECT": "1"},
    "mapped at the first write, made in the slot, no slots lent ahead "
    "(trainer's SLUICE_NO_SLOTS_AHEAD=1)":
        {"SLUICE_NO_SLOT_PWRITE": "1", "trainer:SLUICE_NO_SLOTS_AHEAD": "1"},
}


def write_ms(spec, epochs, tmp, env):
    """The worker's CPU ms per output encoding and writing, its process's
    CPU ms per output, and its outputs made in their slots / in slots, over
    `epochs` epochs (the first one's too: slots are made in it)."""
    import sluice.remote
    trainer = {k[8:]: v for k, v in env.items() if k.startswith("trainer:")}
    env = {k: v for k, v in env.items() if not k.startswith("trainer:")}
    # Not _remote_common.start_worker: that one runs it quiet (-q), and
    # the stats it prints at its end are what this reads.
    port_file = os.path.join(tmp, "port-%d" % time.monotonic_ns())
    p = subprocess.Popen([SLUICE_BIN, "serve", spec, "--listen",
                          "127.0.0.1:0", "--port-file", port_file,
                          "--threads", "2", "--stats-interval", "0"],
                         stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, **env))
    while not os.path.exists(port_file):
        if p.poll() is not None:
            sys.exit("sluice serve failed: " + p.stderr.read())
        time.sleep(0.05)
    with open(port_file) as f:
        addr = f.read().strip()
    saved = {k: os.environ.get(k) for k in trainer}
    os.environ.update(trainer)
    ds = sluice.remote.Dataset(spec, [addr], chunk=4, window=8)
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k)
        else:
            os.environ[k] = v
    for e in range(epochs):
        ds.set_epoch(e)
        for _ in ds.arrays():
            pass
    outputs = ds.stats()["outputs"]
    ds.close()
    process_ms = 1e3 * cpu_of(p.pid) / outputs
    p.terminate()
    err = p.stderr.read()
    p.wait()
    found = re.findall(r"([\d.]+) ms CPU per output encoding and writing",
                       err)
    if not found:
        sys.exit("no stats from the worker:\n" + err)
    slots = re.findall(r"(\d+) of them in the trainer's shared memory .*?"
                       r"(\d+) of them made there by the pipeline", err)
    made = "%d/%d" % (sum(int(d) for _, d in slots),
                      sum(int(n) for n, _ in slots))
    return float(found[-1]), process_ms, made


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=os.environ.get(
        "SLUICE_BENCH_DATA", "/tmp/sluice-bench-data"))
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    root = photos_root(args.data)
    print("| output | slot written by | sending thread's CPU ms per output "
          "(median) | worker process CPU ms per output (median) | made in "
          "their slot / in slots | runs (sending ms) |")
    print("|---|---|---:|---:|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("f32", "u8"):
            if args.only and name != args.only:
                continue
            spec = write_spec(tmp, name, root, name == "f32")
            res = {w: [] for w in WAYS}
            for _ in range(args.repeats):
                for way, env in WAYS.items():
                    res[way].append(write_ms(spec, args.epochs, tmp, env))
            for way, v in res.items():
                print("| %s | %s | %.2f | %.1f | %s | %s |" % (
                    name, way, statistics.median(x[0] for x in v),
                    statistics.median(x[1] for x in v),
                    " ".join(x[2] for x in v),
                    " ".join("%.2f" % x[0] for x in v)))


if __name__ == "__main__":
    main()
