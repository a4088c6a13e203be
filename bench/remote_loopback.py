#!/usr/bin/python3
"""Loopback benchmark of `sluice serve` (docs/distributed.md): trainer-side
images/s with 1 and 2 worker processes against the same pipeline in-process,
CPU per batch serving (the workers' processes) and receiving (the trainer's
process), and bytes on the wire per image, for f32 and u8 outputs.

The pipeline and the data are bench/_remote_common.py's (u8 and f32
outputs of the photo pipeline). A worker on the trainer's host writes the
batches into the trainer's shared memory (remote/lib/Slots.h); `--socket`
adds runs with that off (everything over the socket, as from another
host).

On one host the workers and the trainer share the cores: with 2 cores, one
worker of 2 threads against the in-process pipeline of 2 threads measures
what serving and receiving cost, not what more hosts would add.

Each repeat runs the in-process pipeline, then each remote variant, so the
table gives, besides the medians' ratio, the median (min-max) of the
per-repeat ratios (each remote run against the in-process run just before
it: the host's load drifts between repeats more than within one), the load
average at the start and the end, CPU and minor faults per batch of each
process, and how many of the first worker's slots the rent-or-buy rule had
mapped (remote/lib/Slots.cpp). A worker makes batches in its slots only
once it maps them: the slots within the trainer's bound (7 with chunk=4)
at their first write, in the first untimed epoch (`--warmup 1`); others
after as many writes as the rent-or-buy rule measured on this host says
(`--off SLUICE_NO_SLOT_MAP_BOUND` maps only by that rule).

Usage: bench/remote_loopback.py [--data DIR] [--epochs N] [--threads T]
                                [--repeats R]
  (data: $SLUICE_BENCH_DATA or /tmp/sluice-bench-data, made by
  bench/gen_photos.py when missing). Needs the build's Python package on
  PYTHONPATH and SLUICE_BIN (default build/bin/sluice).
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _remote_common import (cpu_of, faults_of, photos_root,  # noqa: E402
                            start_worker, stop_worker, write_spec)

CHUNK, WINDOW = 4, 8
# --worker-env: set in every worker's environment.
WORKER_ENV = {}


def self_cpu():
    t = os.times()
    return t.user + t.system


def self_faults():
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def run_local(spec, epochs, threads, warmup=0):
    import sluice
    for e in range(warmup):
        for _ in sluice.Pipeline(spec, epochs=e + 1, first_epoch=e,
                                 threads=threads):
            pass
    images = 0
    cpu0, t0, f0 = self_cpu(), time.perf_counter(), self_faults()
    for e in range(warmup, warmup + epochs):
        for b in sluice.Pipeline(spec, epochs=e + 1, first_epoch=e,
                                 threads=threads):
            images += b["image"].shape[0]
    dt = time.perf_counter() - t0
    return {"images_s": images / dt, "trainer_cpu_batch_ms":
            1e3 * (self_cpu() - cpu0) / (images / 128),
            "trainer_faults_batch": (self_faults() - f0) / (images / 128)}


def run_remote(spec, epochs, workers, threads_each, tmp, copies=False,
               shm=True, warmup=0, runs=True, worker_env=None):
    """copies: the way before raw messages (each data part copied into a
    protobuf message on the worker and parsed into one on the trainer:
    SLUICE_REMOTE_COPY_PARTS=1, SLUICE_REMOTE_PARSE_PARTS=1); shm: the
    trainer lends the worker shared memory (off: over the socket)."""
    import sluice.remote
    if copies:
        os.environ["SLUICE_REMOTE_PARSE_PARTS"] = "1"
    else:
        os.environ.pop("SLUICE_REMOTE_PARSE_PARTS", None)
    env = {"SLUICE_REMOTE_COPY_PARTS": "1"} if copies else {}
    env.update(WORKER_ENV)
    env.update(worker_env or {})
    procs = [start_worker(spec, threads_each, tmp, env)
             for _ in range(workers)]
    # The switches are the trainer's too while it connects (those it reads
    # there: SLUICE_NO_SLOT_BOUND, SLUICE_NO_SLOTS_AHEAD, ...).
    saved = {k: os.environ.get(k) for k in (worker_env or {})}
    os.environ.update(worker_env or {})
    try:
        ds = sluice.remote.Dataset(spec, [a for _, a in procs],
                                   chunk=CHUNK or None, window=WINDOW,
                                   shared_memory=shm and not copies,
                                   chunk_runs=runs)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        # --warmup: epochs untimed first (the buffers, slots and
        # mappings each end makes once, then reuses).
        wcpu_w = [cpu_of(p.pid) for p, _ in procs]
        warm_images = 0
        for e in range(warmup):
            ds.set_epoch(e)
            for b in ds.arrays():
                warm_images += b["image"].shape[0]
        # A loop's variable keeps its last batch, and that batch its slot:
        # the timed loop's trainer would hold two (the pool then grows by one
        # in the timed epochs: SLUICE_SLOT_TRACE=1, docs/distributed.md).
        b = None
        images = 0
        st0 = ds.stats()
        wcpu0 = [cpu_of(p.pid) for p, _ in procs]
        # The workers' CPU per batch in the untimed epochs: where each
        # slot's first touches fall.
        warm_cpu = (1e3 * sum(c - w for c, w in zip(wcpu0, wcpu_w)) /
                    (warm_images / 128) if warm_images else float("nan"))
        wflt0 = [faults_of(p.pid) for p, _ in procs]
        cpu0, t0, f0 = self_cpu(), time.perf_counter(), self_faults()
        for e in range(warmup, warmup + epochs):
            ds.set_epoch(e)
            for b in ds.arrays():
                images += b["image"].shape[0]
        dt = time.perf_counter() - t0
        batches = images / 128
        serve_cpu = sum(cpu_of(p.pid) - c for (p, _), c in zip(procs, wcpu0))
        serve_faults = sum(faults_of(p.pid) - f
                           for (p, _), f in zip(procs, wflt0))
        st_end = ds.stats()
        st = {k: v - st0[k] for k, v in st_end.items()}
        mapped, opened = slot_mappings(procs[0][0].pid)
        ds.close()
        return {"images_s": images / dt,
                "trainer_cpu_batch_ms": 1e3 * (self_cpu() - cpu0) / batches,
                "trainer_faults_batch": (self_faults() - f0) / batches,
                "worker_cpu_batch_ms": 1e3 * serve_cpu / batches,
                "worker_faults_batch": serve_faults / batches,
                "wire_bytes_image": st["wire_bytes"] / images,
                "receive_cpu_batch_ms":
                    1e3 * st["receive_cpu_seconds"] / st["outputs"],
                "shm_share": st["shared_memory_outputs"] / st["outputs"],
                "runs_share": st["runs"] / st["chunks"],
                # The first worker's slots: opened, and mapped whole by the
                # rent-or-buy rule (Slots.cpp), after the timed epochs.
                "slots_mapped": mapped, "slots_opened": opened,
                # Slots the trainer made in all, and in the timed epochs.
                "slots_made": st_end["slots_made"],
                "slots_made_timed": st["slots_made"],
                "slots_huge": st_end["slots_huge"],
                "warmup_worker_cpu_batch_ms": warm_cpu}
    finally:
        for p, _ in procs:
            stop_worker(p)


def slot_mappings(pid):
    """(slots mapped whole, slots opened) by worker `pid`: its mappings of
    the trainer's memfds (a slot's header page alone until the rent-or-buy
    rule maps the whole slot, remote/lib/Slots.cpp)."""
    whole = opened = 0
    with open("/proc/%d/maps" % pid) as f:
        for line in f:
            if "sluice-slot" not in line:
                continue
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            opened += hi - lo <= 4096
            whole += hi - lo > 4096
    return whole, opened


def switches(off):
    """--off's value: SWITCH (set to 1), or NAME=VALUE,NAME=VALUE."""
    if "=" not in off:
        return {off: "1"}
    return dict(kv.split("=", 1) for kv in off.split(","))


def label(off):
    return ", ".join("%s=%s" % kv for kv in switches(off).items())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=os.environ.get(
        "SLUICE_BENCH_DATA", "/tmp/sluice-bench-data"))
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=0,
                    help="epochs read untimed first, in every run (the "
                         "steady state: buffers, slots and mappings made)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--chunk", type=int, default=4,
                    help="batches per chunk handed to a worker; 0: the "
                         "client's own choice (chunk=None: 2, and 1 for "
                         "batches of 16 MiB or more in shared memory)")
    ap.add_argument("--window", type=int, default=8,
                    help="batches the trainer may hold ahead")
    ap.add_argument("--only", default="", help="f32 or u8: one output kind")
    ap.add_argument("--copies", action="store_true",
                    help="also run 1 worker the way before raw messages "
                         "(a copy into and out of a protobuf message per "
                         "part)")
    ap.add_argument("--shuffle-step", action="store_true",
                    help="shuffle with a step after select (buffer 1024, "
                         "the README's order), which the workers replay, "
                         "instead of `shuffle: true` on the source")
    ap.add_argument("--no-two", action="store_true",
                    help="leave out the 2-worker runs")
    ap.add_argument("--runs-off", action="store_true",
                    help="also run 2 workers with runs of chunks off "
                         "(chunks in turn: chunk_runs=False)")
    ap.add_argument("--socket", action="store_true",
                    help="also run 1 worker without shared memory (every "
                         "byte over the socket, as from another host)")
    ap.add_argument("--off", action="append", default=[],
                    metavar="SWITCH",
                    help="also run 1 worker (and 2, without --no-two) "
                         "with SWITCH=1 in the workers' environment and "
                         "the trainer's while it connects (e.g. "
                         "SLUICE_NO_SLOT_PWRITE: the same run with that "
                         "optimization off), or NAME=VALUE,NAME=VALUE; "
                         "repeatable")
    ap.add_argument("--worker-env", action="append", default=[],
                    metavar="NAME=VALUE",
                    help="set in every worker's environment (e.g. "
                         "SLUICE_NO_SLOT_PWRITE=1: slots mapped at their "
                         "first write, the steady state of a job whose "
                         "slots are written more than this bench's epochs "
                         "write them); repeatable")
    ap.add_argument("--two-threads", type=int, default=0,
                    help="threads of each worker in the 2-worker runs "
                         "(default: --threads / 2, the cores split by hand)")
    args = ap.parse_args()
    global CHUNK, WINDOW
    CHUNK, WINDOW = args.chunk, args.window
    for kv in args.worker_env:
        k, _, v = kv.partition("=")
        WORKER_ENV[k] = v
    root = photos_root(args.data)
    load0 = "/".join("%.2f" % x for x in os.getloadavg())
    with tempfile.TemporaryDirectory() as tmp:
        rows = []
        for name in ("f32", "u8"):
            if args.only and name != args.only:
                continue
            spec = write_spec(tmp, name, root, name == "f32")
            if args.shuffle_step:
                with open(spec) as f:
                    text = f.read()
                with open(spec, "w") as f:
                    f.write(text.replace(", shuffle: true}", "}").replace(
                        "  - batch:", "  - shuffle: {buffer: 1024}\n"
                        "  - batch:"))
            # Interleaved repeats: the host's load drifts.
            res = {"local": [], "1 worker": []}
            if args.socket:
                res["1 worker, socket only"] = []
            if args.copies:
                res["1 worker, copied parts"] = []
            for switch in args.off:
                res["1 worker, %s" % label(switch)] = []
                if not args.no_two:
                    res["2 workers, %s" % label(switch)] = []
            two = args.two_threads or max(1, args.threads // 2)
            if not args.no_two:
                res["2 workers"] = []
                if args.runs_off:
                    res["2 workers, runs off"] = []
            for _ in range(args.repeats):
                w = args.warmup
                res["local"].append(run_local(spec, args.epochs,
                                              args.threads, w))
                res["1 worker"].append(run_remote(spec, args.epochs, 1,
                                                  args.threads, tmp,
                                                  warmup=w))
                if args.socket:
                    res["1 worker, socket only"].append(run_remote(
                        spec, args.epochs, 1, args.threads, tmp, shm=False,
                        warmup=w))
                if args.copies:
                    res["1 worker, copied parts"].append(run_remote(
                        spec, args.epochs, 1, args.threads, tmp, True))
                for switch in args.off:
                    res["1 worker, %s" % label(switch)].append(run_remote(
                        spec, args.epochs, 1, args.threads, tmp, warmup=w,
                        worker_env=switches(switch)))
                    if not args.no_two:
                        res["2 workers, %s" % label(switch)].append(
                            run_remote(spec, args.epochs, 2, two, tmp,
                                       warmup=w,
                                       worker_env=switches(switch)))
                if not args.no_two:
                    res["2 workers"].append(run_remote(
                        spec, args.epochs, 2, two, tmp, warmup=w))
                    if args.runs_off:
                        res["2 workers, runs off"].append(run_remote(
                            spec, args.epochs, 2, two, tmp, warmup=w,
                            runs=False))
            base = statistics.median(r["images_s"] for r in res["local"])
            for how, rs in res.items():
                med = {k: statistics.median(r[k] for r in rs)
                       for k in rs[0]}
                # Each remote run against the in-process run of its own
                # repeat (run just before it): the host's load drifts
                # between repeats more than within one.
                pairs = [r["images_s"] / loc["images_s"]
                         for r, loc in zip(rs, res["local"])]
                rows.append((name, how, med, med["images_s"] / base, pairs))
    print("load average %s at the start, %s at the end; %d repeats, "
          "%d epochs timed after %d untimed" % (
              load0, "/".join("%.2f" % x for x in os.getloadavg()),
              args.repeats, args.epochs, args.warmup))
    print("| output | how | images/s | vs in-process | pairs: median (min-max) "
          "| trainer CPU ms/batch "
          "| receiving ms/batch | trainer faults/batch | workers' CPU ms/batch "
          "| workers' faults/batch | wire bytes/image | in shared memory "
          "| chunks starting a pipeline | slots mapped "
          "| slots made (in timed epochs), of huge pages "
          "| workers' CPU ms/batch untimed |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
          "---:|---:|---:|")
    for name, how, m, ratio, pairs in rows:
        print("| %s | %s | %.0f | %.2fx | %.2fx (%.2f-%.2f) | %.1f | %s | %.0f "
              "| %s | %s | %s | %s | %s | %s | %s | %s |" % (
            name, how, m["images_s"], ratio, statistics.median(pairs),
            min(pairs), max(pairs), m["trainer_cpu_batch_ms"],
            "%.1f" % m["receive_cpu_batch_ms"]
            if "receive_cpu_batch_ms" in m else "-",
            m["trainer_faults_batch"],
            "%.1f" % m["worker_cpu_batch_ms"] if "worker_cpu_batch_ms" in m
            else "-",
            "%.0f" % m["worker_faults_batch"] if "worker_faults_batch" in m
            else "-",
            "%.0f" % m["wire_bytes_image"] if "wire_bytes_image" in m
            else "-",
            "%.0f%%" % (100 * m["shm_share"]) if "shm_share" in m
            else "-",
            "%.0f%%" % (100 * m["runs_share"]) if "runs_share" in m
            else "-",
            "%d of %d" % (m["slots_mapped"], m["slots_opened"])
            if "slots_mapped" in m else "-",
            "%g (%g), %g" % (m["slots_made"], m["slots_made_timed"],
                             m["slots_huge"])
            if "slots_made" in m else "-",
            "%.1f" % m["warmup_worker_cpu_batch_ms"]
            if "warmup_worker_cpu_batch_ms" in m else "-"))
    # What receiving over the socket costs in memcpys of the same bytes
    # (autotune's kReceiveCopies): a batch's bytes copied on this host.
    for name, how, m, _, _ in rows:
        if how != "1 worker, socket only":
            continue
        nbytes = int(m["wire_bytes_image"] * 128)
        memcpy = memcpy_ms(nbytes)
        print("%s: receiving over the socket %.1f ms per batch = %.1f "
              "memcpys of its %d bytes (%.2f ms each)" % (
                  name, m["receive_cpu_batch_ms"],
                  m["receive_cpu_batch_ms"] / memcpy, nbytes, memcpy))


def memcpy_ms(nbytes, repeats=5):
    """Thread CPU ms of copying `nbytes` between two touched buffers
    (median of `repeats`)."""
    import numpy as np
    src = np.ones(nbytes, np.uint8)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    times = []
    for _ in range(repeats):
        t0 = time.thread_time()
        np.copyto(dst, src)
        times.append(time.thread_time() - t0)
    return 1e3 * statistics.median(times)


if __name__ == "__main__":
    main()
