#!/usr/bin/python3
"""Loopback benchmark of `sluice serve` (docs/distributed.md): trainer-side
images/s with 1 and 2 worker processes against the same pipeline in-process,
CPU per batch serving (the workers' processes) and receiving (the trainer's
process), and bytes on the wire per image, for f32 and u8 outputs.

The pipeline is photos_bench.yaml's (decode, random_resized_crop 224, flip,
normalize, CHW, batch 128) with the source read by position (`shuffle: true`
on the source instead of a shuffle step: what `sluice serve` needs); the u8
variant leaves out `normalize` (a trainer normalizes on its GPU), so each
image travels as 150 KB instead of 602 KB.

On one host the workers and the trainer share the cores: with 2 cores, one
worker of 2 threads against the in-process pipeline of 2 threads measures
what serving and receiving cost, not what more hosts would add.

Usage: bench/remote_loopback.py [--data DIR] [--epochs N] [--threads T]
                                [--repeats R]
  (data: $SLUICE_BENCH_DATA or /tmp/sluice-bench-data, made by
  bench/gen_photos.py when missing). Needs the build's Python package on
  PYTHONPATH and SLUICE_BIN (default build/bin/sluice).
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SLUICE_BIN = os.environ.get("SLUICE_BIN",
                            os.path.join(HERE, "..", "build", "bin", "sluice"))

SPEC = """
pipeline: remote_bench_{name}
seed: 42
source:
  image_folder: {{root: {root}, extensions: [jpg], shuffle: true}}
steps:
  - decode_image: {{field: data, as: image, channels: 3}}
  - random_resized_crop: {{field: image, size: [224, 224], scale: [0.08, 1.0], ratio: [0.75, 1.3333]}}
  - random_flip: {{field: image, axis: width, p: 0.5}}
{normalize}  - transpose: {{field: image, to: CHW}}
  - select: [image, label]
  - batch: {{size: 128, drop_remainder: true}}
epochs: 1
budget: {{cores: all, memory: 2GiB}}
"""
NORMALIZE = ("  - normalize: {field: image, mean: [123.675, 116.28, 103.53], "
             "std: [58.395, 57.12, 57.375]}\n")


CHUNK, WINDOW = 4, 8


def cpu_of(pid):
    """User + system seconds of a process (and its threads)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick


def self_cpu():
    t = os.times()
    return t.user + t.system


def self_faults():
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def start_worker(spec, threads, tmp, env=None):
    port_file = os.path.join(tmp, "port-%d" % time.monotonic_ns())
    p = subprocess.Popen([SLUICE_BIN, "serve", spec, "--listen",
                          "127.0.0.1:0", "--port-file", port_file,
                          "--threads", str(threads), "-q"],
                         stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, **(env or {})))
    while not os.path.exists(port_file):
        if p.poll() is not None:
            sys.exit("sluice serve failed: " + p.stderr.read())
        time.sleep(0.05)
    return p, open(port_file).read().strip()


def run_local(spec, epochs, threads):
    import sluice
    images = 0
    cpu0, t0, f0 = self_cpu(), time.perf_counter(), self_faults()
    for e in range(epochs):
        for b in sluice.Pipeline(spec, epochs=e + 1, first_epoch=e,
                                 threads=threads):
            images += b["image"].shape[0]
    dt = time.perf_counter() - t0
    return {"images_s": images / dt, "trainer_cpu_batch_ms":
            1e3 * (self_cpu() - cpu0) / (images / 128),
            "trainer_faults_batch": (self_faults() - f0) / (images / 128)}


def run_remote(spec, epochs, workers, threads_each, tmp, copies=False):
    """copies: the way before raw messages (each data part copied into a
    protobuf message on the worker and parsed into one on the trainer:
    SLUICE_REMOTE_COPY_PARTS=1, SLUICE_REMOTE_PARSE_PARTS=1)."""
    import sluice.remote
    if copies:
        os.environ["SLUICE_REMOTE_PARSE_PARTS"] = "1"
    else:
        os.environ.pop("SLUICE_REMOTE_PARSE_PARTS", None)
    env = {"SLUICE_REMOTE_COPY_PARTS": "1"} if copies else {}
    procs = [start_worker(spec, threads_each, tmp, env)
             for _ in range(workers)]
    try:
        ds = sluice.remote.Dataset(spec, [a for _, a in procs],
                                   chunk=CHUNK, window=WINDOW)
        # Warm the workers' kernel caches and page cache: one epoch untimed
        # would double the run; a single chunk is enough to start them.
        images = 0
        wcpu0 = [cpu_of(p.pid) for p, _ in procs]
        cpu0, t0, f0 = self_cpu(), time.perf_counter(), self_faults()
        for e in range(epochs):
            ds.set_epoch(e)
            for b in ds.arrays():
                images += b["image"].shape[0]
        dt = time.perf_counter() - t0
        batches = images / 128
        serve_cpu = sum(cpu_of(p.pid) - c for (p, _), c in zip(procs, wcpu0))
        st = ds.stats()
        ds.close()
        return {"images_s": images / dt,
                "trainer_cpu_batch_ms": 1e3 * (self_cpu() - cpu0) / batches,
                "trainer_faults_batch": (self_faults() - f0) / batches,
                "worker_cpu_batch_ms": 1e3 * serve_cpu / batches,
                "wire_bytes_image": st["wire_bytes"] / images}
    finally:
        for p, _ in procs:
            p.terminate()
            p.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=os.environ.get(
        "SLUICE_BENCH_DATA", "/tmp/sluice-bench-data"))
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--chunk", type=int, default=4,
                    help="batches per chunk handed to a worker")
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
    args = ap.parse_args()
    global CHUNK, WINDOW
    CHUNK, WINDOW = args.chunk, args.window
    root = os.path.join(args.data, "photos", "train")
    if not os.path.isdir(root):
        subprocess.check_call([sys.executable,
                               os.path.join(HERE, "gen_photos.py"),
                               "--out", args.data])
    with tempfile.TemporaryDirectory() as tmp:
        rows = []
        for name, norm in [("f32", NORMALIZE), ("u8", "")]:
            if args.only and name != args.only:
                continue
            spec = os.path.join(tmp, name + ".yaml")
            with open(spec, "w") as f:
                text = SPEC.format(name=name, root=root, normalize=norm)
                if args.shuffle_step:
                    text = text.replace(", shuffle: true}", "}").replace(
                        "  - batch:", "  - shuffle: {buffer: 1024}\n"
                        "  - batch:")
                f.write(text)
            # Interleaved repeats: the host's load drifts.
            res = {"local": [], "1 worker": []}
            if args.copies:
                res["1 worker, copied parts"] = []
            if not args.no_two:
                res["2 workers"] = []
            for _ in range(args.repeats):
                res["local"].append(run_local(spec, args.epochs,
                                              args.threads))
                res["1 worker"].append(run_remote(spec, args.epochs, 1,
                                                  args.threads, tmp))
                if args.copies:
                    res["1 worker, copied parts"].append(run_remote(
                        spec, args.epochs, 1, args.threads, tmp, True))
                if not args.no_two:
                    res["2 workers"].append(run_remote(
                        spec, args.epochs, 2, max(1, args.threads // 2),
                        tmp))
            base = statistics.median(r["images_s"] for r in res["local"])
            for how, rs in res.items():
                med = {k: statistics.median(r[k] for r in rs)
                       for k in rs[0]}
                rows.append((name, how, med, med["images_s"] / base))
    print("| output | how | images/s | vs in-process | trainer CPU ms/batch "
          "| trainer faults/batch | workers' CPU ms/batch "
          "| wire bytes/image |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for name, how, m, ratio in rows:
        print("| %s | %s | %.0f | %.2fx | %.1f | %.0f | %s | %s |" % (
            name, how, m["images_s"], ratio, m["trainer_cpu_batch_ms"],
            m["trainer_faults_batch"],
            "%.1f" % m["worker_cpu_batch_ms"] if "worker_cpu_batch_ms" in m
            else "-",
            "%.0f" % m["wire_bytes_image"] if "wire_bytes_image" in m
            else "-"))


if __name__ == "__main__":
    main()
