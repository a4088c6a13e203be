#!/usr/bin/python3
"""What the kernel counts for a pipeline, whole run and steady state.

  steady_state.py SLUICE SPEC [--short N] [--long N] [--repeats R]
                  [--variant NAME=VAR=VALUE[,VAR=VALUE]]...

Runs `sluice run --sink null --epochs N SPEC` for N = --short (default 4)
and --long (default 12) epochs, interleaved, --repeats times (default 3),
each under os.wait4 (getrusage of the child), and prints medians:

  whole run (the --long runs): CPU microseconds per record, the system-time
    share of the process's CPU time, minor page faults per record, peak RSS;
  steady state: the same figures over (long run - short run), i.e. the
    epochs after start-up (spec compiling, the schedule probe of
    `schedule: auto`, buffers and pools filling).

Records are the source's records (`epochs x` the records of one epoch, read
from --stats-json). A variant reruns everything with extra environment
variables (e.g. arena=SLUICE_MALLOC_ARENAS=0, nopool=SLUICE_NO_BUFFER_POOL=1);
the default variant is the environment as it is. The 1-minute load average
before and after is printed: figures from a busy machine are noisy, counted
figures (faults, CPU per record) less so than wall time.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile


def run(sluice, spec, epochs, env, stats):
    p = subprocess.Popen([sluice, "run", "--quiet", "--sink", "null",
                          "--epochs", str(epochs), "--stats-json", stats, spec],
                         env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    err = p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        sys.exit("%s failed (exit %d): %s" % (spec, code,
                                              err.decode(errors="replace")))
    with open(stats) as f:
        js = json.load(f)
    records = js["stages"][0]["elements_out"] if js.get("stages") else 0
    return {"cpu": ru.ru_utime + ru.ru_stime, "sys": ru.ru_stime,
            "faults": ru.ru_minflt, "rss": ru.ru_maxrss * 1024,
            "records": records}


def main():
    args = sys.argv[1:]
    if len(args) < 2:
        sys.exit(__doc__)
    sluice, spec = args[0], args[1]
    short, long_, repeats, variants = 4, 12, 3, [("default", {})]
    rest = args[2:]
    while rest:
        a = rest.pop(0)
        if a == "--short":
            short = int(rest.pop(0))
        elif a == "--long":
            long_ = int(rest.pop(0))
        elif a == "--repeats":
            repeats = int(rest.pop(0))
        elif a == "--variant":
            name, _, assigns = rest.pop(0).partition("=")
            env = {}
            for kv in assigns.split(","):
                k, _, v = kv.partition("=")
                env[k] = v
            variants.append((name, env))
        else:
            sys.exit("unknown argument %s" % a)
    print("load average before: %.2f %.2f %.2f" % os.getloadavg())
    res = {(n, e): [] for n, _ in variants for e in (short, long_)}
    with tempfile.TemporaryDirectory() as tmp:
        stats = os.path.join(tmp, "stats.json")
        for _ in range(repeats):
            for name, extra in variants:
                env = dict(os.environ, **extra)
                for epochs in (short, long_):
                    res[(name, epochs)].append(
                        run(sluice, spec, epochs, env, stats))
    print("load average after: %.2f %.2f %.2f" % os.getloadavg())
    print("| variant | part | records | CPU us/record | sys share | "
          "minor faults/record | peak RSS |")
    print("|---|---|---|---|---|---|---|")
    for name, _ in variants:
        whole, steady = [], []
        for s, l in zip(res[(name, short)], res[(name, long_)]):
            whole.append(l)
            steady.append({k: l[k] - s[k] for k in ("cpu", "sys", "faults",
                                                    "records")})
        for part, rows in (("whole run, %d epochs" % long_, whole),
                           ("steady state, epochs %d-%d" % (short + 1, long_),
                            steady)):
            n = statistics.median(r["records"] for r in rows)
            cpu = statistics.median(r["cpu"] / r["records"] for r in rows)
            share = statistics.median(r["sys"] / r["cpu"] for r in rows)
            faults = statistics.median(r["faults"] / r["records"]
                                       for r in rows)
            rss = ("%.0f MiB" % (statistics.median(r["rss"] for r in rows) /
                                 2**20)) if "rss" in rows[0] else "-"
            print("| %s | %s | %d | %.0f | %.1f%% | %.2f | %s |" % (
                name, part, n, cpu * 1e6, share * 100, faults, rss))


if __name__ == "__main__":
    main()
