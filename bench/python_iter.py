#!/usr/bin/python3
"""Python iteration benchmark: what handing batches to Python costs.

On the ImageNet-style pipeline (bench/specs/imagenet_bench.yaml, the data of
bench/gen_data.py), in interleaved rounds:

  native   `sluice bench SPEC --seconds S`: outputs/s x 128 (images/s
           delivered by the C++ runtime to its null consumer)
  python   sluice.Pipeline(SPEC) iterated from Python for S seconds after a
           warm-up, each batch turned into a tensor with torch.from_numpy
  torch    torchvision ImageFolder + the same transforms in a DataLoader
           (bench/peers/torch_imagenet.py), num_workers = the cores

Wall-clock rates are noisy on a shared machine, so each round also counts
CPU time (user + sys, getrusage of a child process) per image for the same
--cpu-epochs epochs run natively (`sluice run SPEC --sink null`) and iterated
from Python: on a CPU-bound pipeline the extra CPU per image is what Python
costs, whatever else runs on the machine.

Prints the medians over --repeats rounds, the Python overhead
(1 - python/native; target <= 5%) and python/torch (target >= 3x), with the
load average at the start and the end.

Usage: python_iter.py [--seconds S] [--repeats N] [--torch-batches N]
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "peers"))


def spec_for(data):
    """The bench spec with its data prefix pointed at `data`."""
    text = open(os.path.join(HERE, "specs", "imagenet_bench.yaml")).read()
    text = text.replace("/tmp/sluice-bench-data", data)
    d = tempfile.mkdtemp(prefix="sluice-pyiter-")
    path = os.path.join(d, "imagenet_bench.yaml")
    with open(path, "w") as f:
        f.write(text)
    return path


def native(sluice_bin, spec, seconds):
    out = subprocess.run([sluice_bin, "bench", spec, "--seconds", str(seconds)],
                         capture_output=True, text=True, check=True).stdout
    m = re.search(r"outputs/s\s+([0-9.]+)", out)
    return float(m.group(1)) * 128


def python(spec, seconds, warmup=2.0):
    import sluice
    import torch
    p = sluice.Pipeline(spec, epochs=1000000)
    t0 = time.perf_counter()
    start, images = None, 0
    for batch in p:
        x = torch.from_numpy(batch["image"])
        y = torch.from_numpy(batch["label"])
        assert x.shape == (128, 3, 224, 224) and y.shape == (128,)
        now = time.perf_counter()
        if start is None:
            if now - t0 >= warmup:
                start = now
            continue
        images += x.shape[0]
        if now - start >= seconds:
            break
    rate = images / (time.perf_counter() - start)
    p.close()
    return rate


PY_LOOP = r"""
import sys
sys.path.insert(0, sys.argv[3])
import resource, sluice, torch
r0 = resource.getrusage(resource.RUSAGE_SELF)
n = 0
for batch in sluice.Pipeline(sys.argv[1], epochs=int(sys.argv[2])):
    x = torch.from_numpy(batch["image"])
    n += x.shape[0]
r1 = resource.getrusage(resource.RUSAGE_SELF)
print(n, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime))
"""


def child_cpu(cmd):
    """CPU seconds (user + sys) a child command uses, and its stdout."""
    import resource
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime), out


def cpu_per_image(kind, sluice_bin, spec, epochs, pydir):
    if kind == "native":
        cpu, out = child_cpu([sluice_bin, "run", spec, "--epochs", str(epochs),
                              "--sink", "null", "--quiet"])
        m = re.search(r"(\d+) outputs in", out)
        images = int(m.group(1)) * 128
    else:
        # The child's own count from after its imports (importing torch
        # costs ~1 s of CPU that is not iteration); like `sluice run`'s, it
        # includes compiling the spec and starting the pipeline.
        _, out = child_cpu([sys.executable, "-c", PY_LOOP, spec, str(epochs),
                            pydir])
        images, cpu = int(out.split()[0]), float(out.split()[1])
    return 1e3 * cpu / images  # ms per image


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--torch-batches", type=int, default=10)
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--cpu-epochs", type=int, default=2)
    args = ap.parse_args()
    data = os.environ.get("SLUICE_BENCH_DATA", "/tmp/sluice-bench-data")
    root = os.path.join(data, "imagenet", "train")
    if not os.path.isdir(root):
        sys.exit("python_iter.py: no data at %s; run bench/gen_data.py" % root)
    build = os.environ.get("SLUICE_BUILD_DIR",
                           os.path.join(HERE, "..", "build"))
    sluice_bin = os.environ.get("SLUICE", os.path.join(build, "bin", "sluice"))
    sys.path.insert(0, os.path.join(build, "python"))
    spec = spec_for(data)
    cores = os.cpu_count() or 1
    load0 = os.getloadavg()[0]
    runs = {"native": [], "python": [], "torch": []}
    cpu = {"native": [], "python": []}
    pydir = os.path.join(build, "python")
    for r in range(args.repeats):
        for k in ("native", "python") if r % 2 == 0 else ("python", "native"):
            cpu[k].append(cpu_per_image(k, sluice_bin, spec, args.cpu_epochs,
                                        pydir))
        runs["native"].append(native(sluice_bin, spec, args.seconds))
        runs["python"].append(python(spec, args.seconds))
        if not args.no_torch:
            import torch_imagenet
            runs["torch"].append(torch_imagenet.measure(
                root, cores, 2, args.torch_batches, 42 + r))
        print("round %d: %s; CPU ms/image native %.3f python %.3f" % (
            r, ", ".join("%s %.1f" % (k, v[-1]) for k, v in runs.items()
                         if v), cpu["native"][-1], cpu["python"][-1]),
            flush=True)
    load1 = os.getloadavg()[0]
    med = {k: statistics.median(v) for k, v in runs.items() if v}
    print("\nmedian images/s over %d rounds (load average %.2f -> %.2f):"
          % (args.repeats, load0, load1))
    for k, v in med.items():
        print("  %-7s %8.1f   (runs: %s)" % (k, v, ", ".join(
            "%.1f" % x for x in runs[k])))
    print("python iteration overhead vs native: %.1f%% (target <= 5%%)"
          % (100 * (1 - med["python"] / med["native"])))
    cn, cp = statistics.median(cpu["native"]), statistics.median(cpu["python"])
    print("CPU per image over %d epochs: native %.3f ms, python %.3f ms "
          "(runs: %s / %s): python costs %.1f%% more CPU per image"
          % (args.cpu_epochs, cn, cp,
             ", ".join("%.3f" % x for x in cpu["native"]),
             ", ".join("%.3f" % x for x in cpu["python"]), 100 * (cp / cn - 1)))
    if "torch" in med:
        print("python / torch DataLoader: %.2fx (target >= 3x)"
              % (med["python"] / med["torch"]))
    shutil.rmtree(os.path.dirname(spec), ignore_errors=True)


if __name__ == "__main__":
    main()
