#!/usr/bin/python3
"""Checks the `grayscale` op against PIL's convert("L").

  grayscale_ref.py make DIR    writes DIR/train/c0/*.png (RGB photos-like
                               noise, 29x41, seed 3) and DIR/spec1.yaml,
                               DIR/spec3.yaml (channels 1 and 3)
  grayscale_ref.py check DIR OUT CHANNELS
                               OUT (an npy sink of the spec) holds, in file
                               order, PIL's convert("L") of each PNG (and
                               for 3 channels that luma in every channel)
"""
import os
import sys

import numpy as np
from PIL import Image

H, W, N = 29, 41, 10


def make(d):
    rng = np.random.default_rng(3)
    os.makedirs(os.path.join(d, "train", "c0"), exist_ok=True)
    for i in range(N):
        # Smooth gradients plus noise: every luma byte value range is hit.
        y, x = np.mgrid[0:H, 0:W]
        base = np.stack([x * 6, y * 8, (x + y) * 3], axis=-1)
        px = (base + rng.integers(0, 90, size=(H, W, 3))) % 256
        Image.fromarray(px.astype(np.uint8), "RGB").save(
            os.path.join(d, "train", "c0", "img%02d.png" % i))
    for c in (1, 3):
        with open(os.path.join(d, "spec%d.yaml" % c), "w") as f:
            f.write("pipeline: gray%d\nsource:\n  image_folder: {root: %s}\n"
                    "steps:\n  - decode_image: {field: data, as: image, channels: 3}\n"
                    # Every PNG is HxW already: the crop only fixes the type.
                    "  - center_crop: {field: image, size: [%d, %d]}\n"
                    "  - grayscale: {field: image, channels: %d}\n"
                    "  - select: [image]\n  - batch: {size: 4}\n"
                    % (c, os.path.join(d, "train"), H, W, c))


def check(d, out, channels):
    files = sorted(os.listdir(os.path.join(d, "train", "c0")))
    want = []
    for f in files:
        g = np.asarray(Image.open(os.path.join(d, "train", "c0", f)).convert("L"))
        g = g[:, :, None]
        want.append(np.repeat(g, 3, axis=2) if channels == 3 else g)
    if not os.path.exists(os.path.join(out, "index.json")):
        sys.exit("no index.json in " + out)
    got = []
    # NNNNNN.image.npy: batches in order.
    names = sorted(n for n in os.listdir(out) if n.endswith(".image.npy"))
    for n in names:
        got.extend(list(np.load(os.path.join(out, n))))
    if len(got) != len(want):
        sys.exit("got %d images, want %d" % (len(got), len(want)))
    for i, (a, b) in enumerate(zip(got, want)):
        if a.shape != b.shape or a.dtype != np.uint8 or not np.array_equal(a, b):
            sys.exit("image %d (%s) differs from PIL's convert('L'): shape %s vs %s"
                     % (i, files[i], a.shape, b.shape))
    print("grayscale: %d images equal PIL's convert('L')" % len(got))


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2])
    else:
        check(sys.argv[2], sys.argv[3], int(sys.argv[4]))
