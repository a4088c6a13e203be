#!/usr/bin/env python3
"""Compares the memory `sluice run` reports with the memory the process
really holds, for real pipeline specs (the examples, the bench specs).

  rss_table.py SLUICE [--tolerance FRACTION] [--floor MiB] [--threads N]
               [--epochs N] [--check] SPEC...

For each SPEC it runs `sluice run --stats-json` and reads the child's peak
resident set (getrusage ru_maxrss, from os.wait4) and, from the stats, the
baseline: the resident set when the process's first pipeline started
(`memory.baseline_rss`: binary, libraries, JIT code; the heap's free pages
returned first), and the reported peak (`memory.process_peak`: the most
bytes the budgets held at once, a `schedule: auto` probe included). The
start-up peak is the peak RSS of the same spec with `take: 1` first and one
epoch: the baseline plus what start-up (JIT compiling) held for a while.
With --check it exits 1 when, for some spec, peak RSS > budget.memory +
max(baseline, start-up peak), or the reported peak differs from
RSS - baseline by more than the tolerance (10%) and more than the floor
(2 MiB: below it the difference is page-granular noise, e.g. a pipeline of
a few hundred KiB) -- the rules of README "Memory". The variant spec is
written next to SPEC (relative paths keep working) and removed afterwards.
"""
import json
import os
import subprocess
import sys
import tempfile

import yaml


def run(cmd):
    """Runs cmd; returns (exit status, ru_maxrss in bytes, output)."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = p.stdout.read()
    _, status, usage = os.wait4(p.pid, 0)
    return (os.waitstatus_to_exitcode(status), usage.ru_maxrss * 1024,
            out.decode(errors="replace"))


def measure(sluice, spec, extra, tmp):
    stats = os.path.join(tmp, "stats.json")
    rc, rss, out = run([sluice, "run", "--quiet", "--stats-json", stats] +
                       extra + [spec])
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
        measure(sluice, path, extra, tmp)
        peak, _, _, end = measure(sluice, path, extra, tmp)
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
            print("| %s | %d MiB | %.1f MiB | %.1f MiB | %.1f MiB | %.1f MiB "
                  "| %.1f MiB | %.2f |" % (
                      spec, limit / mib, base / mib, startup / mib, rss / mib,
                      used / mib, peak / mib,
                      peak / used if used > 0 else float("nan")))
            if rss > limit + max(base, startup):
                print("FAIL: %s: peak RSS exceeds budget + baseline" % spec)
                ok = False
            if abs(peak - used) > max(tolerance * max(used, 0), floor * mib):
                print("FAIL: %s: reported peak is not within %d%% (or %g MiB) "
                      "of RSS - baseline" % (spec, round(tolerance * 100),
                                             floor))
                ok = False
    sys.stdout.flush()
    if check:
        sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
