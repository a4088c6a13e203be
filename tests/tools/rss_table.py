#!/usr/bin/env python3
"""Compares the memory `sluice run` reports with the memory the process
really holds, for real pipeline specs (the examples, the bench specs).

  rss_table.py SLUICE [--tolerance FRACTION] [--floor MiB] [--threads N]
               [--epochs N] [--check] SPEC...

For each SPEC it runs `sluice run --stats-json` and reads the child's peak
resident set (getrusage ru_maxrss, from os.wait4), the baseline (the
resident set at the end of a one-record run of the same spec, `memory.rss`
of its stats: binary, libraries, JIT code, started threads) and, from the
stats, the reported peak (`memory.process_peak`: the most bytes the budgets
held at once, a `schedule: auto` probe included). The
start-up peak is the peak RSS of the same spec with `take: 1` first and one
epoch: the baseline plus what start-up (JIT compiling) held for a while.
With --check it exits 1 when, for some spec, peak RSS > budget.memory +
max(baseline, start-up peak), or the reported peak differs from
RSS - baseline by more than the tolerance (10%) and more than the floor
(2 MiB: below it the difference is noise -- the baseline itself varies by
1-2 MiB from run to run with the worker threads' stacks and what the JIT
leaves behind, and a pipeline of a few hundred KiB reads any ratio) -- the
rules of README "Memory". A run whose peak RSS is its start-up peak (within
0.5 MiB, and a reported peak below what start-up added) is shown as "n/a":
compiling the plan, not the pipeline, set its peak. The one-record runs
that measure the baseline run with the buffer pool off
(SLUICE_NO_BUFFER_POOL=1): its idle buffers outlive a pipeline and are no
part of the baseline. They also run with glibc's mmap threshold fixed at its
default 128 KiB (MALLOC_MMAP_THRESHOLD_): glibc raises it as large blocks
are freed (compiling the plan frees some), and then a reader's 1 MiB block
buffer and zlib's buffers came from the heap and stayed resident after the
one-record run freed them, so the baseline held ~0.8 MiB of the pipeline's
own (counted) buffers (examples/fashion_mnist_test.yaml: end-of-run RSS 1.3
MiB over the start's with it, 0.5 MiB with the threshold fixed) and the
check read the reported peak that much too high. The variant spec is written next to SPEC (relative
paths keep working) and removed afterwards.
"""
import json
import os
import subprocess
import sys
import tempfile

import yaml

# How far above the start-up peak a run's peak RSS may be and still count as
# reached at start-up (MiB).
STARTUP_MARGIN_MIB = 0.5


def run(cmd, env=None):
    """Runs cmd; returns (exit status, ru_maxrss in bytes, output)."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         env=env)
    out = p.stdout.read()
    _, status, usage = os.wait4(p.pid, 0)
    return (os.waitstatus_to_exitcode(status), usage.ru_maxrss * 1024,
            out.decode(errors="replace"))


def measure(sluice, spec, extra, tmp, env=None):
    stats = os.path.join(tmp, "stats.json")
    rc, rss, out = run([sluice, "run", "--quiet", "--stats-json", stats] +
                       extra + [spec], env)
    if rc != 0:
        sys.exit("%s failed (exit %d):\n%s" % (spec, rc, out))
    with open(stats) as f:
        mem = json.load(f)["memory"]
    # process_peak: with the pipelines run before this one in the process
    # (the probe runs of `schedule: auto`).
    return (rss, mem.get("process_peak", mem["peak"]), mem["limit"],
            mem.get("rss", 0))


def baseline(sluice, spec, extra, tmp):
    with open(spec) as f:
        doc = yaml.safe_load(f)
    doc["steps"] = [{"take": 1}] + list(doc.get("steps") or [])
    doc["epochs"] = 1
    # The schedule probe of `schedule: auto` needs outputs to measure.
    doc.pop("schedule", None)
    d = os.path.dirname(os.path.abspath(spec))
    fd, path = tempfile.mkstemp(prefix=".rss-baseline-", suffix=".yaml", dir=d)
    try:
        with os.fdopen(fd, "w") as f:
            yaml.safe_dump(doc, f, sort_keys=False)
        # Twice: the first run fills the JIT kernel cache
        # ($SLUICE_CACHE_DIR), whose misses leave compiler memory behind,
        # so that both the baseline and the real run find it warm.
        # With the buffer pool off: its idle buffers outlive the pipeline
        # (uncounted once it stopped) and are no part of the baseline. With
        # the mmap threshold fixed: freed read buffers leave the heap.
        env = dict(os.environ, SLUICE_NO_BUFFER_POOL="1", MALLOC_MMAP_THRESHOLD_="131072")
        measure(sluice, path, extra, tmp, env)
        peak, _, _, end = measure(sluice, path, extra, tmp, env)
    finally:
        os.unlink(path)
    return peak, end


def main():
    args = sys.argv[1:]
    sluice = args.pop(0)
    tolerance, floor, check, extra, specs = 0.10, 2.0, False, [], []
    while args:
        a = args.pop(0)
        if a == "--tolerance":
            tolerance = float(args.pop(0))
        elif a == "--floor":
            floor = float(args.pop(0))
        elif a == "--check":
            check = True
        elif a in ("--threads", "--epochs"):
            extra += [a, args.pop(0)]
        else:
            specs.append(a)
    mib = float(1 << 20)
    ok = True
    print("| spec | budget | baseline | start-up peak | peak RSS | "
          "RSS - baseline | reported peak | reported / (RSS - baseline) |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for spec in specs:
            startup, base = baseline(sluice, spec, extra, tmp)
            rss, peak, limit, _ = measure(sluice, spec, extra, tmp)
            if base <= 0:  # an older sluice: the one-record run's peak
                base = startup
            used = rss - base
            # A run whose resident set never rose above its start-up peak
            # (compiling the plan) by more than page-granular noise: the
            # peak RSS is the start-up's, and says nothing of its buffers.
            at_startup = rss <= startup + STARTUP_MARGIN_MIB * mib and \
                peak < startup - base
            print("| %s | %d MiB | %.1f MiB | %.1f MiB | %.1f MiB | %.1f MiB "
                  "| %.1f MiB | %s |" % (
                      spec, limit / mib, base / mib, startup / mib, rss / mib,
                      used / mib, peak / mib,
                      "n/a (peak RSS at start-up)" if at_startup else
                      "%.2f" % (peak / used if used > 0 else float("nan"))))
            if rss > limit + max(base, startup):
                print("FAIL: %s: peak RSS exceeds budget + baseline" % spec)
                ok = False
            if not at_startup and \
                    abs(peak - used) > max(tolerance * max(used, 0), floor * mib):
                print("FAIL: %s: reported peak is not within %d%% (or %g MiB) "
                      "of RSS - baseline" % (spec, round(tolerance * 100),
                                             floor))
                ok = False
    sys.stdout.flush()
    if check:
        sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
