#!/usr/bin/python3
"""Drives a torchvision ResNet-18 (forward, backward, SGD step) from the
ImageNet-style spec examples/imagenet.yaml through sluice, on the CPU or a
GPU when there is one.

    scripts/setup && /usr/bin/python3 examples/train_imagenet_style.py

sluice reads the JPEG/PNG class folders, decodes only the random crop's
window, flips, normalizes and transposes to CHW on its own threads, and
hands each batch of 128 [3, 224, 224] f32 images to PyTorch as tensors over
its own buffers (no copy). With --pin-memory and a GPU the batches are copied
into page-locked memory for an asynchronous transfer (without a GPU the
option only warns). Prints the first batch's types, the loss of every step
(exiting with status 1 if one is not finite) and images/s per epoch for the
whole loop (input + model). tests/python/test_torch.py runs it for a few
steps on a handful of photographs.
"""
import argparse
import math
import os
import sys
import time

import torch
import torch.nn.functional as F
import torchvision
from torch.utils.data import DataLoader

import sluice
import sluice.torch

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--spec", default=os.path.join(HERE, "imagenet.yaml"))
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--max-batches", type=int, default=None)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--pin-memory", action="store_true")
    ap.add_argument("--classes", type=int, default=None,
                    help="the model's output classes (default: the class "
                    "folders of examples/data/imagenet/train for the "
                    "example spec, else 1000)")
    args = ap.parse_args()

    device = "cuda" if torch.cuda.is_available() else "cpu"
    stages = sluice.check(args.spec)
    classes = args.classes
    if classes is None:
        example = os.path.join(HERE, "imagenet.yaml")
        classes = len(os.listdir(os.path.join(HERE, "data", "imagenet",
                                              "train"))) if os.path.abspath(
            args.spec) == example else 1000
    print("sluice output:", stages[-1]["type"], "->", device, flush=True)
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=classes).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    # device="cuda": batches are copied on a side stream ahead of the step
    # (from pinned memory); on a CPU-only host they stay zero-copy.
    ds = sluice.torch.Dataset(args.spec, threads=args.threads,
                              pin_memory=args.pin_memory,
                              device=device if device != "cpu" else None)
    loader = DataLoader(ds, batch_size=None, num_workers=0)
    for epoch in range(args.epochs):
        ds.set_epoch(epoch)
        model.train()
        t0, n = time.time(), 0
        for i, batch in enumerate(loader):
            if args.max_batches is not None and i >= args.max_batches:
                break
            if epoch == 0 and i == 0:
                print("first batch: image %s %s, label %s %s" % (
                    batch["image"].dtype, list(batch["image"].shape),
                    batch["label"].dtype, list(batch["label"].shape)),
                    flush=True)
            x = batch["image"].to(device, non_blocking=True)
            y = batch["label"].to(device, non_blocking=True)
            loss = F.cross_entropy(model(x), y)
            if not math.isfinite(loss.item()):
                print("error: the loss is not finite (%s) at epoch %d batch "
                      "%d" % (loss.item(), epoch, i), file=sys.stderr)
                return 1
            opt.zero_grad()
            loss.backward()
            opt.step()
            n += y.numel()
            print("  epoch %d batch %d: loss %.4f" % (epoch, i, loss.item()),
                  flush=True)
        dt = time.time() - t0
        print("epoch %d: %d images in %.1f s (%.1f images/s)"
              % (epoch, n, dt, n / dt if dt > 0 else 0.0), flush=True)
    # The stall meter: how long the training loop waited for data.
    c = ds.stats()["consumer"]
    print("data wait: first batch %.3f s, then %.3f ms per batch, %d of %d "
          "batches stalled (> 1 ms)" % (
              c["first_wait_seconds"], c["mean_wait_seconds"] * 1e3,
              c["stalls"], max(0, c["outputs"] - 1)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
