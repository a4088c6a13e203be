#!/usr/bin/python3
"""What a PyTorch training loop sees of sluice.torch.Dataset across epochs.

1. First-batch latency per epoch on an ImageNet-style spec (default
   bench/specs/photos_bench.yaml on the pictures of bench/gen_photos.py,
   `schedule: auto`): epoch 0 (compile, generate kernels, tune, start),
   epoch 1 (the next epoch: the running pipeline continues), epoch 5 after
   set_epoch (out of order: Pipeline.restart, nothing compiled or tuned),
   and for comparison what each epoch cost before the Dataset kept its
   pipeline: a new sluice.Pipeline(first_epoch=1, schedule=<the tuned one>)
   to its first batch.
2. Data wait per step in a small training loop (a 2-layer CNN on
   Fashion-MNIST, examples/fashion_mnist.yaml, CPU): time spent in
   next(loader) per step (mean and p99 after the first batch), the first
   batch, and the Dataset's own stall meter (ds.stats()["consumer"]).

Medians over --repeats. Usage:
  torch_epochs.py [--spec SPEC] [--repeats N] [--steps N] [--threads N]
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

import torch
from torch.utils.data import DataLoader

import sluice
import sluice.torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def photos_spec(epochs):
    data = os.environ.get("SLUICE_BENCH_DATA", "/tmp/sluice-bench-data")
    text = open(os.path.join(HERE, "specs", "photos_bench.yaml")).read()
    text = text.replace("/tmp/sluice-bench-data", data)
    text = text.replace("epochs: 1", "epochs: %d" % epochs)
    d = tempfile.mkdtemp(prefix="sluice-epochs-")
    path = os.path.join(d, "photos_bench.yaml")
    with open(path, "w") as f:
        f.write(text)
    return path


def first_batch(it):
    t = time.perf_counter()
    next(it)
    return time.perf_counter() - t


def latencies(spec, threads):
    out = {}
    ds = sluice.torch.Dataset(spec, threads=threads)
    t = time.perf_counter()
    it = iter(ds)
    next(it)
    out["epoch 0 (compile, tune, start)"] = time.perf_counter() - t
    for _ in it:
        pass
    out["epoch 1 (continues the pipeline)"] = first_batch(iter(ds))
    ds.set_epoch(5)
    out["epoch 5 after set_epoch (restart)"] = first_batch(iter(ds))
    sched = ds.pipeline().schedule
    t = time.perf_counter()
    p = sluice.Pipeline(spec, first_epoch=1, epochs=2, threads=threads,
                        schedule=sched)
    next(p)
    out["a new Pipeline per epoch (before)"] = time.perf_counter() - t
    p.close()
    ds.close()
    return out


class SmallCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(),
            torch.nn.MaxPool2d(2), torch.nn.Flatten(),
            torch.nn.Linear(32 * 7 * 7, 10))

    def forward(self, x):
        return self.net(x)


def training_waits(steps, threads):
    spec = os.path.join(ROOT, "examples", "fashion_mnist.yaml")
    ds = sluice.torch.Dataset(spec, threads=threads)
    loader = DataLoader(ds, batch_size=None, num_workers=0)
    model = SmallCNN()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    waits = []
    it = iter(loader)
    for _ in range(steps):
        t = time.perf_counter()
        try:
            b = next(it)
        except StopIteration:
            it = iter(loader)
            b = next(it)
        waits.append(time.perf_counter() - t)
        x = b["image"].unsqueeze(1)
        loss = torch.nn.functional.cross_entropy(model(x), b["label"])
        opt.zero_grad()
        loss.backward()
        opt.step()
    c = ds.stats()["consumer"]
    ds.close()
    rest = sorted(waits[1:])
    return {"first batch s": waits[0],
            "wait per step ms (mean)": statistics.mean(rest) * 1e3,
            "wait per step ms (p99)": rest[int(0.99 * (len(rest) - 1))] * 1e3,
            "stall meter: stalls": c["stalls"],
            "stall meter: mean wait ms": c["mean_wait_seconds"] * 1e3,
            "stall meter: headspace s": c["headspace_seconds"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--spec")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--no-latency", action="store_true")
    args = ap.parse_args()
    print("load average at start: %.2f" % os.getloadavg()[0])
    if not args.no_latency:
        spec = args.spec or photos_spec(epochs=6)
        runs = [latencies(spec, args.threads) for _ in range(args.repeats)]
        print("first-batch latency, s (median of %d):" % args.repeats)
        for k in runs[0]:
            print("  %-40s %.3f" % (k, statistics.median(r[k] for r in runs)))
    runs = [training_waits(args.steps, args.threads)
            for _ in range(args.repeats)]
    print("small CNN on Fashion-MNIST, %d steps of 256 (median of %d):"
          % (args.steps, args.repeats))
    for k in runs[0]:
        print("  %-40s %.3f" % (k, statistics.median(r[k] for r in runs)))
    print("load average at end: %.2f" % os.getloadavg()[0])


if __name__ == "__main__":
    sys.exit(main())
