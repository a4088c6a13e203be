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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--torch-batches", type=int, default=10)
    ap.add_argument("--no-torch", action="store_true")
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
    for r in range(args.repeats):
        runs["native"].append(native(sluice_bin, spec, args.seconds))
        runs["python"].append(python(spec, args.seconds))
        if not args.no_torch:
            import torch_imagenet
            runs["torch"].append(torch_imagenet.measure(
                root, cores, 2, args.torch_batches, 42 + r))
        print("round %d: %s" % (r, ", ".join(
            "%s %.1f" % (k, v[-1]) for k, v in runs.items() if v)),
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
    if "torch" in med:
        print("python / torch DataLoader: %.2fx (target >= 3x)"
              % (med["python"] / med["torch"]))
    shutil.rmtree(os.path.dirname(spec), ignore_errors=True)


if __name__ == "__main__":
    main()
