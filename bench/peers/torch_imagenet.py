#!/usr/bin/python3
"""PyTorch peer for the ImageNet-style benchmark (bench/specs/imagenet_bench.yaml).

The standard torchvision recipe: ImageFolder (PIL + libjpeg-turbo decode),
RandomResizedCrop(224), RandomHorizontalFlip, ToTensor, Normalize, and a
DataLoader with batch_size 128, shuffle, drop_last. For every num_workers in
0..cores it times --batches batches after --warmup batches (worker start-up and
the first prefetch are not counted), --repeats times; the figure for a setting
is the median of its repeats and the peer's figure is the best setting.

Usage: torch_imagenet.py [ROOT] [--batches N] [--warmup N] [--repeats N]
                         [--workers 0,1,2] [--json FILE]
ROOT defaults to $SLUICE_BENCH_DATA/imagenet/train.
"""

import argparse
import json
import os
import statistics
import sys
import time

try:
    import torch
    import torchvision
    from torchvision import transforms as T
except ImportError as e:  # pragma: no cover
    sys.exit("torch_imagenet.py: %s (apt-get install python3-torch "
             "python3-torchvision, or scripts/setup --bench)" % e)

BATCH = 128


def make_loader(root, workers, seed):
    tf = T.Compose([
        T.RandomResizedCrop(224),
        T.RandomHorizontalFlip(),
        T.ToTensor(),
        T.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
    ])
    ds = torchvision.datasets.ImageFolder(root, tf)
    if len(ds) < BATCH:
        sys.exit("torch_imagenet.py: %s has %d images, fewer than one batch"
                 % (root, len(ds)))
    g = torch.Generator()
    g.manual_seed(seed)
    return torch.utils.data.DataLoader(
        ds, batch_size=BATCH, shuffle=True, num_workers=workers,
        drop_last=True, persistent_workers=workers > 0, generator=g)


def batches_forever(loader):
    while True:
        for batch in loader:
            yield batch


def measure(root, workers, warmup, batches, seed):
    """images/s over `batches` batches after `warmup` batches."""
    loader = make_loader(root, workers, seed)
    it = batches_forever(loader)
    for _ in range(warmup):
        next(it)
    images = 0
    t0 = time.perf_counter()
    for _ in range(batches):
        x, _ = next(it)
        assert x.shape == (BATCH, 3, 224, 224) and x.dtype == torch.float32
        images += x.shape[0]
    rate = images / (time.perf_counter() - t0)
    del it, loader  # stops the workers before the next setting starts
    return rate


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    data = os.environ.get("SLUICE_BENCH_DATA", "/tmp/sluice-bench-data")
    ap.add_argument("root", nargs="?",
                    default=os.path.join(data, "imagenet", "train"))
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", default=None,
                    help="comma-separated num_workers values (default 0..cores)")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    if not os.path.isdir(args.root):
        sys.exit("torch_imagenet.py: no image folder at %s; run bench/gen_data.py"
                 % args.root)
    if args.batches < 1 or args.warmup < 0 or args.repeats < 1:
        ap.error("--batches and --repeats must be >= 1, --warmup >= 0")
    cores = os.cpu_count() or 1
    workers = ([int(w) for w in args.workers.split(",")] if args.workers
               else list(range(0, cores + 1)))

    settings = {}
    for w in workers:
        runs = [measure(args.root, w, args.warmup, args.batches, args.seed + r)
                for r in range(args.repeats)]
        settings[w] = {"runs": [round(r, 2) for r in runs],
                       "median": round(statistics.median(runs), 2)}
        print("torch DataLoader num_workers=%d: %.1f images/s (runs: %s)"
              % (w, settings[w]["median"],
                 ", ".join("%.1f" % r for r in runs)), flush=True)
    best = max(settings, key=lambda w: settings[w]["median"])
    print("best: num_workers=%d, %.1f images/s" % (best, settings[best]["median"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({
                "name": "torch DataLoader (torchvision %s, torch %s)"
                        % (torchvision.__version__, torch.__version__),
                "unit": "images/s",
                "rate": settings[best]["median"],
                "best_num_workers": best,
                "settings": {str(w): s for w, s in settings.items()},
                "batches": args.batches, "warmup": args.warmup,
                "repeats": args.repeats, "batch_size": BATCH,
            }, f, indent=2)


if __name__ == "__main__":
    main()
