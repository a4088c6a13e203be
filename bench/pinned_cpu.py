#!/usr/bin/python3
"""CPU per batch with sluice's pinned batch buffers on and off.

On the ImageNet-style pipeline over the real pictures of bench/gen_photos.py
(bench/specs/photos_bench.yaml, 128 f32 images of 224x224 a batch), in
interleaved rounds, counts the CPU time (user + sys, getrusage of a child
process) per batch of:

  native       `sluice run SPEC --sink null` (no Python, no pinning)
  python       sluice.Pipeline(SPEC) iterated from Python, each batch made a
               tensor with torch.from_numpy (what sluice.torch does)
  python+pin   the same with pin_memory=True over a registrar KIND
               (--registrar: "mlock" page-locks every batch buffer with
               mlock(2), as cudaHostRegister does on a GPU host, and keeps
               it locked for reuse; "record" only records the calls)

CPU per batch is what a shared host cannot blur: the pinned path must add
nothing per batch after its buffers are registered (registration happens
once per buffer, not per batch: the counts are printed). What the old path
cost on a GPU host, a 77 MB `Tensor.pin_memory()` copy per batch, cannot run
here (it needs CUDA); its memcpy cost is measured instead ("copy": the same
python loop plus one copy of each batch into a preallocated buffer).

Usage: pinned_cpu.py [--epochs N] [--repeats N] [--registrar mlock|record]
"""
import argparse
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import python_iter  # noqa: E402

LOOP = r"""
import sys
sys.path.insert(0, sys.argv[3])
import resource, sluice, torch
from sluice import _sluice
mode = sys.argv[4]
kw = {}
if mode == "pin":
    _sluice.install_host_registrar(sys.argv[5])
    kw["pin_memory"] = True
r0 = resource.getrusage(resource.RUSAGE_SELF)
n = 0
dst = None
for batch in sluice.Pipeline(sys.argv[1], epochs=int(sys.argv[2]), **kw):
    x = torch.from_numpy(batch["image"])
    if mode == "copy":
        if dst is None:
            dst = torch.empty_like(x)
        dst.copy_(x)
    n += 1
r1 = resource.getrusage(resource.RUSAGE_SELF)
st = _sluice.pinned_stats()
print(n, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime),
      st["registered"], st["reused"], st["failures"])
"""


def python_cpu(spec, epochs, pydir, mode, registrar):
    _, out = python_iter.child_cpu(
        [sys.executable, "-c", LOOP, spec, str(epochs), pydir, mode,
         registrar])
    f = out.split()
    n, cpu = int(f[0]), float(f[1])
    return 1e3 * cpu / n, f[2:]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--registrar", choices=("mlock", "record"),
                    default="mlock")
    args = ap.parse_args()
    data = os.environ.get("SLUICE_BENCH_DATA", "/tmp/sluice-bench-data")
    if not os.path.isdir(os.path.join(data, "photos", "train")):
        sys.exit("pinned_cpu.py: no data; run bench/gen_photos.py")
    build = os.environ.get("SLUICE_BUILD_DIR",
                           os.path.join(HERE, "..", "build"))
    sluice_bin = os.path.join(build, "bin", "sluice")
    pydir = os.path.join(build, "python")
    spec = python_iter.spec_for(data, "photos")
    rows = {"native": [], "python": [], "python+pin": [], "copy": []}
    counts = None
    for r in range(args.repeats):
        rows["native"].append(128 * python_iter.cpu_per_image(
            "native", sluice_bin, spec, args.epochs, pydir))
        rows["python"].append(python_cpu(spec, args.epochs, pydir, "plain",
                                         args.registrar)[0])
        ms, counts = python_cpu(spec, args.epochs, pydir, "pin",
                                args.registrar)
        rows["python+pin"].append(ms)
        rows["copy"].append(python_cpu(spec, args.epochs, pydir, "copy",
                                       args.registrar)[0])
        print("round %d: %s" % (r + 1, "  ".join(
            "%s %.1f" % (k, v[-1]) for k, v in rows.items())), flush=True)
    print("load average at the end: %.1f" % os.getloadavg()[0])
    print("CPU ms per batch of 128 (median of %d):" % args.repeats)
    for k, v in rows.items():
        print("  %-11s %8.1f" % (k, statistics.median(v)))
    print("pinned (%s): %s buffers registered, %s reuses, %s failures in "
          "the last run" % (args.registrar, counts[0], counts[1], counts[2]))


if __name__ == "__main__":
    main()
