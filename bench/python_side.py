#!/usr/bin/python3
"""What the Python side costs per batch, apart from making the batches.

Iterates a spec three ways and counts, per batch, on the consuming thread:

  next       CPU of the thread inside Pipeline.__next__ (the C++ call: waiting
             is not CPU, handing the batch over is: the dict, one
             sluice.Buffer and one numpy array per field)
  wrap       CPU of torch.from_numpy on every numeric field (what a loop that
             uses sluice.Pipeline directly adds)
  dataset    CPU of the whole step through sluice.torch.Dataset (its
             generator, _convert, bf16 views, the pipeline's __next__), and
             what it adds to next + from_numpy
  blocks     Python heap blocks allocated per batch and not freed
             (sys.getallocatedblocks before and after: a leak shows here)
  allocs     Python allocations per batch (tracemalloc, on a separate pass:
             tracing slows everything)

The per-image figure is what the Python side adds to `sluice run`'s CPU per
image; compare it with bench/python_iter.py's native CPU per image.

Usage: python_side.py [--spec SPEC] [--batches N]
"""
import argparse
import os
import statistics
import sys
import time
import tracemalloc

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--spec", default=os.path.join(ROOT, "examples",
                                                   "fashion_mnist.yaml"))
    ap.add_argument("--batches", type=int, default=400)
    args = ap.parse_args()
    build = os.environ.get("SLUICE_BUILD_DIR", os.path.join(ROOT, "build"))
    sys.path.insert(0, os.path.join(build, "python"))
    os.chdir(os.path.dirname(os.path.abspath(args.spec)) + "/..")
    import torch
    import sluice
    import sluice.torch

    n = args.batches
    p = sluice.Pipeline(args.spec, epochs=-1)
    first = next(p)
    images = len(next(iter(first.values())))
    t_next, t_wrap = [], []
    b0 = sys.getallocatedblocks()
    for _ in range(n):
        c0 = time.thread_time()
        batch = next(p)
        c1 = time.thread_time()
        ts = [torch.from_numpy(a) for a in batch.values() if a.dtype != object]
        c2 = time.thread_time()
        t_next.append(c1 - c0)
        t_wrap.append(c2 - c1)
        del batch, ts
    blocks = (sys.getallocatedblocks() - b0) / n
    tracemalloc.start()
    s0 = tracemalloc.take_snapshot()
    for _ in range(50):
        batch = next(p)
        ts = [torch.from_numpy(a) for a in batch.values() if a.dtype != object]
        del batch, ts
    s1 = tracemalloc.take_snapshot()
    tracemalloc.stop()
    allocs = sum(s.count_diff for s in s1.compare_to(s0, "filename")) / 50
    p.close()

    # The Dataset's whole step (its generator, _convert, the views); less
    # the plain loop's next + from_numpy is what the Dataset adds.
    ds = sluice.torch.Dataset(args.spec)
    t_ds = []
    while len(t_ds) < n:
        it = iter(ds)
        while len(t_ds) < n:
            c0 = time.thread_time()
            try:
                next(it)
            except StopIteration:
                break
            t_ds.append(time.thread_time() - c0)
        del it
    ds.close()
    med = statistics.median
    k = 1e6
    print("spec %s: %d batches of %d" % (args.spec, n, images))
    print("  next (C++ hand-over)  %7.1f us/batch  %6.3f us/image" %
          (k * med(t_next), k * med(t_next) / images))
    print("  torch.from_numpy      %7.1f us/batch  %6.3f us/image" %
          (k * med(t_wrap), k * med(t_wrap) / images))
    extra = med(t_ds) - med(t_next) - med(t_wrap)
    print("  Dataset step          %7.1f us/batch  (%.1f more than next + "
          "from_numpy: %.3f us/image)" % (k * med(t_ds), k * extra,
                                         k * extra / images))
    print("  heap blocks kept      %7.2f per batch" % blocks)
    print("  allocations           %7.1f per batch (tracemalloc)" % allocs)


if __name__ == "__main__":
    main()
