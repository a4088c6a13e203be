#!/usr/bin/python3
"""Scaling bench: sluice's image pipeline at 1, 2, 4, ... threads against a
plain libjpeg-turbo decode loop over the same files, in both spec orders,
and a projection to 16/32/64 cores from the per-stage costs measured here.

Usage:
  bench/scaling.py [--sluice build/bin/sluice] [--decode BIN] [--data DIR]
                   [--threads 1,2] [--epochs 4] [--repeats 3]
                   [--project 16,32,64] [--mem-gbps 100] [--out FILE.md]

What runs (each `sluice run --sink null --threads N --stats-json`, wrapped in
getrusage through os.wait4, REPEATS interleaved rounds, medians):
  readme     the README's order (shuffle after decode, augmentations, select)
  readme-buffered  the same with SLUICE_NO_POSITIONAL_SHUFFLE=1 (the hoisted
             shuffle run as a buffer instead of the source reading in its
             order)
  readme-off the same with --disable-pass sluice-hoist-shuffle (what the
             README's order cost before the pass; same output bytes)
  first      the shuffle written right after the source
  readme-exe the README's order as the executable `sluice compile` writes
             (no compiler, no JIT load of the cached kernels at start: what
             a deployed pipeline pays)
and the decode loop (bench/decode_only_bench, SLUICE_DECODE_THREADS=N): every
JPEG read from the page cache and decoded in full, nothing else.

Two rates per run: whole process (records over spawn-to-exit wall time,
start-up included) and steady state (records over the pipeline's own wall
seconds from --stats-json).

Where the run reports them (`consumer_cpu_seconds` and the stages'
`thread_cpu_seconds`), serial work is what the serial threads' own CPU
clocks measured (the consumer, each parallel step's feeder, each prefetch's
producer), and parallel work is the rest of the process's CPU; the
unaccounted column is then 0. Otherwise, as follows.

The projection (how this work is judged on a 2-core machine): from the
runs at the most threads of each order, every stage's CPU seconds per
source record, split into parallel work (element stages, and the files the
source reads ahead, which run on the pool's workers) and serial work (the
source's own thread, shuffle, batch and every other stage that runs on one
thread), plus the process CPU no stage counter sees (hand-offs,
allocation; counted as parallel work, and as serial work for the pessimistic
bound). At N cores:
  rate(N) = min( N / (parallel + serial),          all the work on N cores
                 1 / serial_s for each serial stage s,   Amdahl's one thread
                 memory bandwidth / bytes moved per record )
with bytes per record from the stages that move them (bytes_moved: element
stages' input and output, the source's output, the rows a batch copies;
records passed by reference count nothing). The decode loop
scales linearly from its 1-thread rate (measured so on a 16-core host:
1,085/s at 1 thread, 16,611/s at 16). The ratio of the two is the projected
share of the hardware sluice keeps at N cores.

Data: $SLUICE_BENCH_DATA/photos/train (bench/gen_photos.py, real pictures),
or --data DIR (an image_folder layout of JPEGs).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

STEPS_README = """\
  - decode_image: {field: data, as: image, channels: 3}
  - random_resized_crop: {field: image, size: [224, 224], scale: [0.08, 1.0], ratio: [0.75, 1.3333]}
  - random_flip: {field: image, axis: width, p: 0.5}
  - normalize: {field: image, mean: [123.675, 116.28, 103.53], std: [58.395, 57.12, 57.375]}
  - transpose: {field: image, to: CHW}
  - select: [image, label]
  - shuffle: {buffer: 4096}
  - batch: {size: 128, drop_remainder: true}
"""

# The same steps with the shuffle written right after the source.
_SHUFFLE = "  - shuffle: {buffer: 4096}\n"
STEPS_FIRST = _SHUFFLE + STEPS_README.replace(_SHUFFLE, "")


def spec(root, steps, epochs):
    return ("pipeline: scaling\nseed: 42\nsource:\n"
            "  image_folder: {root: %s, extensions: [jpg, jpeg]}\nsteps:\n%s"
            "epochs: %d\nbudget: {cores: all, memory: 4GiB}\n" %
            (root, steps, epochs))


def run_rusage(cmd, env=None):
    """Runs cmd; returns (wall seconds, user+sys CPU seconds, max RSS KiB)."""
    t0 = time.monotonic()
    child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, env=env)
    _, status, ru = os.wait4(child.pid, 0)
    wall = time.monotonic() - t0
    err = child.stderr.read().decode(errors="replace")
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit("scaling.py: %s failed:\n%s" % (" ".join(cmd), err))
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss


def sluice_run(args, spec_path, threads, extra, env, stats_path, exe=None):
    """`sluice run SPEC`, or with `exe` the executable `sluice compile`
    wrote for it (the same flags)."""
    head = [exe] if exe else [args.sluice, "run", spec_path]
    cmd = head + ["--sink", "null", "--threads", str(threads), "--quiet",
                  "--stats-json", stats_path] + extra
    wall, cpu, rss = run_rusage(cmd, dict(os.environ, **env) if env else None)
    with open(stats_path) as f:
        stats = json.load(f)
    records = stats["stages"][0]["emitted"]
    return {"wall": wall, "cpu": cpu, "rss_kib": rss, "records": records,
            "steady": records / stats["wall_seconds"],
            "whole": records / wall, "stats": stats}


def decode_loop(args, threads):
    out = tempfile.NamedTemporaryFile(suffix=".json", delete=False).name
    env = dict(os.environ, SLUICE_DECODE_THREADS=",".join(map(str, threads)))
    subprocess.run([args.decode, args.data, "--benchmark_min_time=%s" %
                    args.decode_min_time, "--benchmark_format=json",
                    "--benchmark_out=" + out], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(out) as f:
        bench = json.load(f)
    os.unlink(out)
    rates = {}
    for b in bench["benchmarks"]:
        n = int(b["name"].rsplit("threads:", 1)[1])
        rates[n] = b["items_per_second"]
    return rates


# Per-record steps run on the pool's workers (a map stage groups them);
# everything else runs on a thread of its own or the consumer's.
PER_RECORD_OPS = {"select", "rename", "filter"}


def is_parallel(stage):
    return stage.get("kind") == "element" or stage.get("op") in PER_RECORD_OPS


def bytes_moved(stage):
    """Bytes a stage reads and writes in memory: an element stage reads its
    input and writes its output; the source writes what it read; a batch
    copies the rows the workers did not place (rows_in_place); select,
    rename, filter, shuffle and prefetch pass records by reference."""
    if stage.get("kind") == "element":
        return stage.get("bytes_in", 0) + stage.get("bytes_out", 0)
    if stage.get("kind") == "source":
        return stage.get("bytes_out", 0)
    if stage.get("op") == "batch":
        rows = max(1, stage.get("emitted", 0) + stage.get("discarded", 0))
        copied = max(0.0, 1.0 - stage.get("rows_in_place", 0) / rows)
        return 2 * stage.get("bytes_in", 0) * copied
    return 0


def split_costs(run):
    """Per source record: parallel and serial CPU, each serial stage's (or
    each serial thread's, where the run measured them), the unaccounted
    process CPU, and bytes moved."""
    stats = run["stats"]
    n = max(1, run["records"])
    if "consumer_cpu_seconds" in stats:
        # The serial threads' own CPU clocks: the consumer (inline stages)
        # and each stage's thread of its own (a parallel step's feeder,
        # which runs the source and the stages before it; a prefetch's
        # producer). Everything else the process used ran on the workers.
        threads = {"consumer": stats["consumer_cpu_seconds"] / n}
        for st in stats["stages"]:
            if st.get("thread_cpu_seconds", 0) > 0:
                threads["thread of " + st["name"]] = st["thread_cpu_seconds"] / n
        moved = sum(bytes_moved(st) for st in stats["stages"]) / n
        return {"parallel": max(0.0, run["cpu"] / n - sum(threads.values())),
                "serial": threads, "unaccounted": 0.0, "bytes": moved}
    parallel, serial, moved = 0.0, {}, 0.0
    for st in stats["stages"]:
        cpu = st.get("cpu_seconds", 0.0) / n
        # What a one-thread stage had done on the pool's workers (the
        # source's files read ahead) is parallel work.
        pool = min(cpu, st.get("pool_cpu_seconds", 0.0) / n)
        moved += bytes_moved(st) / n
        if is_parallel(st):
            parallel += cpu
        else:
            parallel += pool
            serial[st["name"]] = serial.get(st["name"], 0.0) + cpu - pool
    counted = parallel + sum(serial.values())
    unaccounted = max(0.0, run["cpu"] / n - counted)
    return {"parallel": parallel, "serial": serial,
            "unaccounted": unaccounted, "bytes": moved}


def project(costs, cores, mem_bps, pessimistic):
    serial_total = sum(costs["serial"].values())
    par = costs["parallel"]
    extra = costs["unaccounted"]
    total = par + serial_total + extra
    bounds = [cores / total]
    worst = max(costs["serial"].values(), default=0.0)
    if pessimistic:
        worst += extra  # as if the unaccounted CPU all ran on one thread
    if worst > 0:
        bounds.append(1.0 / worst)
    if costs["bytes"] > 0 and mem_bps > 0:
        bounds.append(mem_bps / costs["bytes"])
    return min(bounds)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sluice", default=os.path.join(ROOT, "build/bin/sluice"))
    ap.add_argument("--decode", default=os.path.join(ROOT, "build/bin/decode_only_bench"))
    data = os.environ.get("SLUICE_BENCH_DATA", "/tmp/sluice-bench-data")
    ap.add_argument("--data", default=os.path.join(data, "photos/train"))
    ap.add_argument("--threads", default="")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--project", default="16,32,64")
    ap.add_argument("--mem-gbps", type=float, default=100.0,
                    help="memory bandwidth of the projected host (GB/s)")
    ap.add_argument("--decode-min-time", default="2")
    ap.add_argument("--out", default="")
    args = ap.parse_args()

    cores = os.cpu_count() or 1
    if args.threads:
        threads = [int(t) for t in args.threads.split(",")]
    else:
        threads, t = [], 1
        while t < cores:
            threads.append(t)
            t *= 2
        threads.append(cores)
    tmp = tempfile.mkdtemp(prefix="sluice-scaling-")
    specs = {
        "readme": (STEPS_README, [], {}),
        "readme-off": (STEPS_README, ["--disable-pass", "sluice-hoist-shuffle"],
                       {}),
        "readme-buffered": (STEPS_README, [],
                            {"SLUICE_NO_POSITIONAL_SHUFFLE": "1"}),
        "first": (STEPS_FIRST, [], {}),
        "readme-exe": (STEPS_README, [], {}),
    }
    paths = {}
    for name, (steps, _, _) in specs.items():
        paths[name] = os.path.join(tmp, name + ".yaml")
        with open(paths[name], "w") as f:
            f.write(spec(args.data, steps, args.epochs))
    exes = {"readme-exe": os.path.join(tmp, "readme-exe")}
    subprocess.run([args.sluice, "compile", "-q", paths["readme-exe"], "-o",
                    exes["readme-exe"]], check=True)

    results = {(k, n): [] for k in specs for n in threads}
    decode = {n: [] for n in threads}
    for r in range(args.repeats):
        for n, rate in decode_loop(args, threads).items():
            decode.setdefault(n, []).append(rate)
        for n in threads:
            for name, (_, extra, env) in specs.items():
                results[(name, n)].append(sluice_run(
                    args, paths[name], n, extra, env,
                    os.path.join(tmp, "%s-%d-%d.json" % (name, n, r)),
                    exes.get(name)))
        print("round %d/%d done" % (r + 1, args.repeats), file=sys.stderr)

    med = statistics.median
    lines = []
    w = lines.append
    w("Host: %d cores (%s); data %s; %d epochs per run; median of %d "
      "interleaved rounds.\n" % (cores, cpu_model(), args.data, args.epochs,
                                 args.repeats))
    w("| threads | decode loop img/s | " + " | ".join(
        "%s whole / steady img/s (× loop)" % k for k in specs) + " |")
    w("|---:|---:|" + "---:|" * len(specs))
    for n in threads:
        d = med(decode[n]) if decode.get(n) else float("nan")
        cells = []
        for k in specs:
            runs = results[(k, n)]
            whole, steady = med(x["whole"] for x in runs), med(x["steady"] for x in runs)
            cells.append("%.0f / %.0f (%.2f× / %.2f×)" % (whole, steady, whole / d, steady / d))
        w("| %d | %.0f | %s |" % (n, d, " | ".join(cells)))
    w("")
    w("Process CPU per image (user + system µs, median; steadier than rates "
      "on a shared host): " + "; ".join(
          "%d thread%s: %s" % (n, "" if n == 1 else "s", ", ".join(
              "%s %.0f" % (k, med(x["cpu"] / max(1, x["records"]) for x in results[(k, n)]) * 1e6)
              for k in specs)) for n in threads) + ".")
    w("")
    w("Peak RSS (MiB, median) at %d threads: %s." % (threads[-1], ", ".join(
        "%s %.0f" % (k, med(x["rss_kib"] for x in results[(k, threads[-1])]) / 1024)
        for k in specs)))
    w("")
    # Projection from the runs at the most threads: what runs on the pool
    # only with more than one thread (the source's files read ahead) is
    # then measured as the pool's work. CPU per record is a count, so it
    # projects; the decode loop from its 1-thread rate.
    pt = threads[-1]
    d1 = med(decode[threads[0]]) / threads[0]
    proj = [int(c) for c in args.project.split(",")]
    w("Projection from the %d-thread runs (per source record; parallel = "
      "element stages and the source's read-ahead on the workers, serial = "
      "every stage's work on its one thread, "
      "unaccounted = process CPU no stage counts; memory %.0f GB/s):\n"
      % (pt, args.mem_gbps))
    w("| order | parallel µs | serial µs (largest stage) | unaccounted µs | MB moved | "
      + " | ".join("%d cores × loop" % c for c in proj) + " |")
    w("|---|---:|---:|---:|---:|" + "---:|" * len(proj))
    for k in specs:
        runs = results[(k, pt)]
        costs = [split_costs(x) for x in runs]
        c = {"parallel": med(x["parallel"] for x in costs),
             "unaccounted": med(x["unaccounted"] for x in costs),
             "bytes": med(x["bytes"] for x in costs),
             "serial": {s: med(x["serial"].get(s, 0.0) for x in costs)
                        for s in costs[0]["serial"]}}
        big = max(c["serial"].items(), key=lambda kv: kv[1], default=("-", 0))
        cells = []
        for cc in proj:
            opt = project(c, cc, args.mem_gbps * 1e9, False) / (d1 * cc)
            pes = project(c, cc, args.mem_gbps * 1e9, True) / (d1 * cc)
            cells.append("%.2f (%.2f)" % (opt, pes))
        w("| %s | %.0f | %.0f (%s %.0f) | %.0f | %.2f | %s |" % (
            k, c["parallel"] * 1e6, sum(c["serial"].values()) * 1e6, big[0],
            big[1] * 1e6, c["unaccounted"] * 1e6, c["bytes"] / 1e6,
            " | ".join(cells)))
    w("")
    w("Each projected cell: the unaccounted CPU as parallel work (in "
      "brackets: as if it all ran on the busiest serial thread).")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "a") as f:
            f.write(text)


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


if __name__ == "__main__":
    main()
