#!/usr/bin/python3
"""Regenerates the small data sets under examples/data/ that the example
specs read (they are committed, so running the examples needs no generator):

  data/imagenet/train/<class>/*.jpg|png   138 photo-like images, 120..240 px
  data/criteo/day_0.tsv                   500 Criteo-format rows

Deterministic from the seed. Needs numpy and PIL (python3-pil) for JPEG
encoding. The benchmarks generate bigger sets with bench/gen_data.py.
"""
import os
import sys

import numpy as np
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))


def images(rng, root):
    classes = ["goldfish", "tabby", "tractor"]
    for label, cls in enumerate(classes):
        d = os.path.join(root, cls)
        os.makedirs(d, exist_ok=True)
        for i in range(46):
            h, w = int(rng.integers(120, 241)), int(rng.integers(120, 241))
            yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
            img = np.empty((h, w, 3), np.float32)
            for c in range(3):
                fx, fy = rng.uniform(0.01, 0.05, size=2)
                img[..., c] = 128 + 90 * np.sin(fx * xx + label + c) * np.cos(fy * yy + i)
            cy, cx, r = rng.integers(0, h), rng.integers(0, w), rng.integers(20, 80)
            img[(yy - cy) ** 2 + (xx - cx) ** 2 < r * r] = rng.uniform(0, 255, size=3)
            img += rng.normal(0, 6, size=img.shape)
            pil = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))
            if i == 45:  # one PNG per class: the source reads both formats
                pil.save(os.path.join(d, "img%02d.png" % i), optimize=True)
            else:
                pil.save(os.path.join(d, "img%02d.jpg" % i), quality=88)


def criteo(rng, path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        for _ in range(500):
            label = str(int(rng.random() < 0.25))
            dense = ["" if rng.random() < 0.1 else str(int(rng.geometric(0.01)) - 2)
                     for _ in range(13)]
            cats = ["" if rng.random() < 0.05 else "%08x" % int(rng.zipf(1.3) * 2654435761 % 2**32)
                    for _ in range(26)]
            f.write("\t".join([label] + dense + cats) + "\n")


def main():
    rng = np.random.default_rng(int(sys.argv[1]) if len(sys.argv) > 1 else 2026)
    images(rng, os.path.join(HERE, "data", "imagenet", "train"))
    criteo(rng, os.path.join(HERE, "data", "criteo", "day_0.tsv"))


if __name__ == "__main__":
    main()
