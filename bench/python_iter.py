#!/usr/bin/python3
"""Python iteration benchmark: what handing batches to Python costs.

On the ImageNet-style pipeline, in interleaved rounds, over either data set:
--data photos (the default) runs bench/specs/photos_bench.yaml on the real
pictures bench/gen_photos.py cuts from gnome-backgrounds; --data imagenet runs
bench/specs/imagenet_bench.yaml on the generated JPEGs of bench/gen_data.py:

  native   `sluice bench SPEC --seconds S`: outputs/s x 128 (images/s
           delivered by the C++ runtime to its null consumer)
  python   sluice.Pipeline(SPEC) iterated from Python for S seconds after a
           warm-up, each batch turned into a tensor with torch.from_numpy
  torch    torchvision ImageFolder + the same transforms in a DataLoader
           (bench/peers/torch_imagenet.py), num_workers = --torch-workers
           (default: the cores)

Wall-clock rates are noisy on a shared machine, so each round also counts
CPU time (user + sys, getrusage of a child process) per image for the same
--cpu-epochs epochs run natively (`sluice run SPEC --sink null`) and iterated
from Python: on a CPU-bound pipeline the extra CPU per image is what Python
costs, whatever else runs on the machine. The DataLoader's CPU per image
(its worker processes included) over one epoch is counted the same way: on a
CPU-bound loader, CPU per image is what sets images/s once the cores are
busy, so python/torch in CPU per image is the load-independent form of the
images/s ratio.

Prints the medians over --repeats rounds, the Python overhead
(1 - python/native; target <= 5%) and python/torch (target >= 3x), with the
load average at the start and the end.

--dtype bf16 (or f16) makes the spec's normalize write that type; a list
(--dtype f32,bf16) runs each in every round, interleaved, and prints each
one's medians and their ratios to the first's. --order readme moves the
spec's shuffle to where the README writes it (after select; the compiler
hoists it back toward the source, with the same output).

Usage: python_iter.py [--data photos|imagenet] [--seconds S] [--repeats N]
                      [--dtype f32|bf16|f16[,...]] [--order first|readme]
                      [--torch-batches N] [--torch-workers N] [--no-torch]
                      [--cpu-epochs N]
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


def spec_for(data, name, dtype="f32", order="first"):
    """bench/specs/NAME_bench.yaml with its data prefix pointed at `data`
    (and its normalize writing `dtype`, its shuffle after select for
    order "readme")."""
    text = open(os.path.join(HERE, "specs", name + "_bench.yaml")).read()
    text = text.replace("/tmp/sluice-bench-data", data)
    if dtype != "f32":
        norm = "std: [58.395, 57.12, 57.375]}"
        assert norm in text
        text = text.replace(norm, norm[:-1] + ", dtype: %s}" % dtype)
    if order == "readme":
        shuffle, select = "  - shuffle: {buffer: 4096}\n", "  - select: [image, label]\n"
        assert shuffle in text and select in text
        text = text.replace(shuffle, "").replace(select, select + shuffle)
    d = tempfile.mkdtemp(prefix="sluice-pyiter-")
    path = os.path.join(d, "%s_%s_%s_bench.yaml" % (name, order, dtype))
    with open(path, "w") as f:
        f.write(text)
    return path


def native(sluice_bin, spec, seconds):
    out = subprocess.run([sluice_bin, "bench", spec, "--seconds", str(seconds)],
                         capture_output=True, text=True, check=True).stdout
    m = re.search(r"outputs/s\s+([0-9.]+)", out)
    return float(m.group(1)) * 128


def as_tensor(torch, a):
    """torch.from_numpy, with a bf16 field's uint16 bits viewed as
    torch.bfloat16 (what sluice.torch.Dataset does): no copy."""
    if a.dtype.char == "H":
        return torch.from_numpy(a.view("int16")).view(torch.bfloat16)
    return torch.from_numpy(a)


def python(spec, seconds, warmup=2.0):
    import sluice
    import torch
    p = sluice.Pipeline(spec, epochs=1000000)
    t0 = time.perf_counter()
    start, images = None, 0
    for batch in p:
        x = as_tensor(torch, batch["image"])
        y = torch.from_numpy(batch["label"])
        assert tuple(x.shape) == (128, 3, 224, 224) and y.shape == (128,)
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
    a = batch["image"]
    x = (torch.from_numpy(a.view("int16")).view(torch.bfloat16)
         if a.dtype.char == "H" else torch.from_numpy(a))
    n += x.shape[0]
r1 = resource.getrusage(resource.RUSAGE_SELF)
print(n, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime))
"""


# The DataLoader peer's CPU per image: the child's own CPU plus its worker
# processes' (reaped when the loader is dropped), counted after the imports.
TORCH_LOOP = r"""
import gc, resource, sys
sys.path.insert(0, sys.argv[1])
import torch_imagenet

def cpu():
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime

c0 = cpu()
loader = torch_imagenet.make_loader(sys.argv[2], int(sys.argv[3]), 42)
n = 0
for _ in range(int(sys.argv[4])):
    for x, _ in loader:
        n += x.shape[0]
del loader
gc.collect()
print(n, cpu() - c0)
"""


def child_cpu(cmd):
    """CPU seconds (user + sys) a child command uses, and its stdout."""
    import resource
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime), out


def cpu_per_image(kind, sluice_bin, spec, epochs, pydir, root=None,
                  workers=0):
    if kind == "torch":
        _, out = child_cpu([sys.executable, "-c", TORCH_LOOP,
                            os.path.join(HERE, "peers"), root, str(workers),
                            str(epochs)])
        images, cpu = int(out.split()[0]), float(out.split()[1])
    elif kind == "native":
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
    ap.add_argument("--data", choices=("photos", "imagenet"), default="photos")
    ap.add_argument("--dtype", default="f32",
                    help="what the spec's normalize writes: f32, bf16 or f16, "
                    "or a comma-separated list of them, run interleaved")
    ap.add_argument("--order", choices=("first", "readme"), default="first",
                    help="the shuffle right after the source (the bench "
                    "spec's) or after select (the README's)")
    ap.add_argument("--torch-workers", type=int, default=None,
                    help="the DataLoader's num_workers (default: the cores)")
    args = ap.parse_args()
    data = os.environ.get("SLUICE_BENCH_DATA", "/tmp/sluice-bench-data")
    root = os.path.join(data, args.data, "train")
    if not os.path.isdir(root):
        sys.exit("python_iter.py: no data at %s; run bench/%s" % (
            root, "gen_photos.py" if args.data == "photos" else "gen_data.py"))
    build = os.environ.get("SLUICE_BUILD_DIR",
                           os.path.join(HERE, "..", "build"))
    sluice_bin = os.environ.get("SLUICE", os.path.join(build, "bin", "sluice"))
    sys.path.insert(0, os.path.join(build, "python"))
    dtypes = args.dtype.split(",")
    for dt in dtypes:
        if dt not in ("f32", "bf16", "f16"):
            sys.exit("python_iter.py: --dtype %r: expected f32, bf16 or f16 "
                     "(or a comma-separated list of them)" % dt)
    specs = {dt: spec_for(data, args.data, dt, args.order) for dt in dtypes}
    cores = os.cpu_count() or 1
    workers = cores if args.torch_workers is None else args.torch_workers
    load0 = os.getloadavg()[0]
    runs = {dt: {"native": [], "python": []} for dt in dtypes}
    cpu = {dt: {"native": [], "python": []} for dt in dtypes}
    torch_runs, torch_cpu = [], []
    pydir = os.path.join(build, "python")
    for r in range(args.repeats):
        # Alternate which dtype and which front end go first.
        order = dtypes if r % 2 == 0 else dtypes[::-1]
        for dt in order:
            spec = specs[dt]
            for k in ("native", "python") if r % 2 == 0 else ("python",
                                                              "native"):
                cpu[dt][k].append(cpu_per_image(k, sluice_bin, spec,
                                                args.cpu_epochs, pydir))
        if not args.no_torch:
            torch_cpu.append(cpu_per_image("torch", sluice_bin, None, 1,
                                           pydir, root, workers))
        for dt in order:
            runs[dt]["native"].append(native(sluice_bin, specs[dt],
                                             args.seconds))
            runs[dt]["python"].append(python(specs[dt], args.seconds))
        if not args.no_torch:
            import torch_imagenet
            torch_runs.append(torch_imagenet.measure(
                root, workers, 2, args.torch_batches, 42 + r))
        print("round %d (load %.2f): %s%s" % (
            r, os.getloadavg()[0], "; ".join(
                "%s: native %.1f, python %.1f img/s, CPU ms/image native "
                "%.3f, python %.3f" % (dt, runs[dt]["native"][-1],
                                       runs[dt]["python"][-1],
                                       cpu[dt]["native"][-1],
                                       cpu[dt]["python"][-1])
                for dt in dtypes),
            "; torch %.1f img/s, %.3f ms" % (torch_runs[-1], torch_cpu[-1])
            if torch_runs else ""), flush=True)
    load1 = os.getloadavg()[0]
    print("\n%s data, %s order, median images/s over %d rounds (load "
          "average %.2f -> %.2f; torch num_workers=%d):" % (
              args.data, args.order, args.repeats, load0, load1, workers))
    med = {}
    for dt in dtypes:
        med[dt] = {k: statistics.median(v) for k, v in runs[dt].items()}
        for k, v in med[dt].items():
            print("  %-5s %-7s %8.1f   (runs: %s)" % (dt, k, v, ", ".join(
                "%.1f" % x for x in runs[dt][k])))
    if torch_runs:
        print("  torch DataLoader %8.1f   (runs: %s)" % (
            statistics.median(torch_runs),
            ", ".join("%.1f" % x for x in torch_runs)))
    for dt in dtypes:
        print("%s: python iteration overhead vs native: %.1f%% (target <= "
              "5%%)" % (dt, 100 * (1 - med[dt]["python"] /
                                   med[dt]["native"])))
        cn = statistics.median(cpu[dt]["native"])
        cp = statistics.median(cpu[dt]["python"])
        print("%s: CPU per image over %d epochs: native %.3f ms, python "
              "%.3f ms (runs: %s / %s): python costs %.1f%% more CPU per "
              "image" % (dt, args.cpu_epochs, cn, cp,
                         ", ".join("%.3f" % x for x in cpu[dt]["native"]),
                         ", ".join("%.3f" % x for x in cpu[dt]["python"]),
                         100 * (cp / cn - 1)))
        if torch_runs:
            print("%s: python / torch DataLoader: %.2fx images/s (target >= "
                  "3x)" % (dt, med[dt]["python"] /
                           statistics.median(torch_runs)))
            ct = statistics.median(torch_cpu)
            print("%s: CPU per image, torch DataLoader (1 epoch, its workers "
                  "included): %.3f ms (runs: %s): %.2fx python's"
                  % (dt, ct, ", ".join("%.3f" % x for x in torch_cpu),
                     ct / cp))
    base = dtypes[0]
    for dt in dtypes[1:]:
        print("%s / %s: images/s native %.3fx, python %.3fx; CPU per image "
              "native %.3fx, python %.3fx" % (
                  dt, base, med[dt]["native"] / med[base]["native"],
                  med[dt]["python"] / med[base]["python"],
                  statistics.median(cpu[dt]["native"]) /
                  statistics.median(cpu[base]["native"]),
                  statistics.median(cpu[dt]["python"]) /
                  statistics.median(cpu[base]["python"])))
    for spec in specs.values():
        shutil.rmtree(os.path.dirname(spec), ignore_errors=True)


if __name__ == "__main__":
    main()
