#!/usr/bin/python3
"""Trains a small CNN on Debian's Fashion-MNIST through sluice, on the CPU.

    scripts/setup && /usr/bin/python3 examples/train_fashion_mnist.py

The training input is examples/fashion_mnist.yaml (random 28x28 crops of the
2-pixel padded images, normalization, a 10000-record shuffle buffer, batches
of 256) and the test input examples/fashion_mnist_test.yaml. sluice runs the
pipeline on its own threads and hands each batch over as tensors that share
memory with its runtime; PyTorch only trains. Prints the test accuracy after
each epoch (about 90% after the default 4 epochs).

--max-batches, --test-batches and --min-accuracy make a quick check of it
(tests/python/test_torch.py trains on 30 batches, tests on 2 batches of the
test set and expects at least 60%, where a model that learned nothing scores
about 10%).
"""
import argparse
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader

import sluice
import sluice.torch

HERE = os.path.dirname(os.path.abspath(__file__))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(32)
        self.bn2 = nn.BatchNorm2d(64)
        self.fc1 = nn.Linear(64 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        x = F.dropout(F.relu(self.fc1(x.flatten(1))), 0.25, self.training)
        return self.fc2(x)


def evaluate(model, spec, threads, max_batches=None):
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for i, batch in enumerate(sluice.Pipeline(spec, threads=threads)):
            if max_batches is not None and i >= max_batches:
                break
            x = torch.from_numpy(batch["image"]).unsqueeze(1)
            y = torch.from_numpy(batch["label"])
            correct += (model(x).argmax(1) == y).sum().item()
            total += y.numel()
    return correct / total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--threads", type=int, default=0,
                    help="sluice worker threads (0: the spec's budget)")
    ap.add_argument("--max-batches", type=int, default=None,
                    help="stop each epoch after this many training batches")
    ap.add_argument("--test-batches", type=int, default=None,
                    help="evaluate on this many test batches of 1000")
    ap.add_argument("--min-accuracy", type=float, default=None,
                    help="exit 1 if the final test accuracy is lower")
    ap.add_argument("--train-spec",
                    default=os.path.join(HERE, "fashion_mnist.yaml"))
    ap.add_argument("--test-spec",
                    default=os.path.join(HERE, "fashion_mnist_test.yaml"))
    args = ap.parse_args()

    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    # Halve the step size after every epoch.
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    ds = sluice.torch.Dataset(args.train_spec, threads=args.threads)
    loader = DataLoader(ds, batch_size=None, num_workers=0)
    acc = 0.0
    for epoch in range(args.epochs):
        ds.set_epoch(epoch)
        model.train()
        t0, seen, loss_sum = time.time(), 0, 0.0
        for i, batch in enumerate(loader):
            if args.max_batches is not None and i >= args.max_batches:
                break
            x = batch["image"].unsqueeze(1)  # [B, 1, 28, 28] f32
            y = batch["label"]
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            seen += y.numel()
            loss_sum += loss.item() * y.numel()
        sched.step()
        acc = evaluate(model, args.test_spec, args.threads, args.test_batches)
        print("epoch %d: %d images in %.1f s, train loss %.4f, test accuracy "
              "%.2f%%" % (epoch, seen, time.time() - t0, loss_sum / seen,
                          100 * acc), flush=True)
    print("test accuracy: %.2f%%" % (100 * acc))
    if args.min_accuracy is not None and acc < args.min_accuracy:
        print("below --min-accuracy %.2f%%" % (100 * args.min_accuracy),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
