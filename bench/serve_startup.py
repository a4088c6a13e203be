#!/usr/bin/python3
"""What serving costs a compiled executable (docs/distributed.md, "A
compiled executable as a worker"): size, shared libraries and start-up of
`sluice compile` against `sluice compile --serve`, and the time to
listening of `EXE --serve` against `sluice serve SPEC`.

Usage: bench/serve_startup.py [SPEC] [--rounds N]  (default
examples/imagenet.yaml, 7 rounds interleaved; medians). SLUICE_BIN
defaults to build/bin/sluice."""
import argparse
import os
import resource
import statistics
import subprocess
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SLUICE_BIN = os.environ.get("SLUICE_BIN",
                            os.path.join(HERE, "..", "build", "bin", "sluice"))


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def version(exe):
    c0, t0 = children_cpu(), time.perf_counter()
    subprocess.run([exe, "--version"], stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0, children_cpu() - c0


def to_listening(cmd, tmp):
    pf = os.path.join(tmp, "port-%d" % time.monotonic_ns())
    c0, t0 = children_cpu(), time.perf_counter()
    p = subprocess.Popen(cmd + ["--port-file", pf, "--threads", "1", "-q"],
                         stderr=subprocess.DEVNULL)
    while not os.path.exists(pf):
        if p.poll() is not None:
            raise SystemExit("the worker exited: %s" % cmd)
        time.sleep(0.002)
    wall = time.perf_counter() - t0
    p.terminate()
    p.wait()
    return wall, children_cpu() - c0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("spec", nargs="?", default=os.path.join(
        HERE, "..", "examples", "imagenet.yaml"))
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        plain, serving = os.path.join(tmp, "plain"), os.path.join(tmp, "serve")
        subprocess.run([SLUICE_BIN, "compile", "-q", a.spec, "-o", plain],
                       check=True)
        subprocess.run([SLUICE_BIN, "compile", "-q", "--serve", a.spec, "-o",
                        serving], check=True)
        for exe in (plain, serving):
            libs = subprocess.run(["ldd", exe], capture_output=True,
                                  text=True).stdout.strip().splitlines()
            print("%s: %d bytes, %d shared libraries" % (
                os.path.basename(exe), os.path.getsize(exe), len(libs)))
        runs = {}
        for _ in range(a.rounds):
            for name, f in [
                    ("plain --version", lambda: version(plain)),
                    ("serving --version", lambda: version(serving)),
                    ("EXE --serve to listening", lambda: to_listening(
                        [serving, "--serve", "127.0.0.1:0"], tmp)),
                    ("sluice serve to listening", lambda: to_listening(
                        [SLUICE_BIN, "serve", a.spec, "--listen",
                         "127.0.0.1:0"], tmp))]:
                runs.setdefault(name, []).append(f())
        for name, v in runs.items():
            print("%-26s wall %.3f s, CPU %.3f s (medians of %d)" % (
                name, statistics.median(x[0] for x in v),
                statistics.median(x[1] for x in v), len(v)))


if __name__ == "__main__":
    main()
