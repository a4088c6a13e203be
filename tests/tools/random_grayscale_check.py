#!/usr/bin/python3
"""Checks the `random_grayscale` op against PIL.

  random_grayscale_check.py make DIR P
      writes DIR/train/c0/*.png (24 RGB images, 29x41, seed 5) and
      DIR/spec.yaml (decode, random_grayscale with probability P, batch)
  random_grayscale_check.py check DIR OUT MODE
      OUT (an npy sink of the spec) holds, in file order, each PNG either
      unchanged or as PIL's convert("L") repeated in 3 channels; MODE
      `none` wants every image unchanged, `all` every one gray, `some`
      both kinds. Prints which records turned gray.
"""
import os
import sys

import numpy as np
from PIL import Image

H, W, N = 29, 41, 24


def make(d, p):
    rng = np.random.default_rng(5)
    os.makedirs(os.path.join(d, "train", "c0"), exist_ok=True)
    for i in range(N):
        px = rng.integers(0, 256, size=(H, W, 3))
        Image.fromarray(px.astype(np.uint8), "RGB").save(
            os.path.join(d, "train", "c0", "img%02d.png" % i))
    with open(os.path.join(d, "spec.yaml"), "w") as f:
        f.write("pipeline: random_gray\nseed: 7\nsource:\n"
                "  image_folder: {root: %s}\n"
                "steps:\n  - decode_image: {field: data, as: image, channels: 3}\n"
                "  - center_crop: {field: image, size: [%d, %d]}\n"
                "  - random_grayscale: {field: image, p: %s}\n"
                "  - select: [image]\n  - batch: {size: 5}\n"
                % (os.path.join(d, "train"), H, W, p))


def check(d, out, mode):
    files = sorted(os.listdir(os.path.join(d, "train", "c0")))
    names = sorted(n for n in os.listdir(out) if n.endswith(".image.npy"))
    got = []
    for n in names:
        got.extend(list(np.load(os.path.join(out, n))))
    if len(got) != len(files):
        sys.exit("got %d images, want %d" % (len(got), len(files)))
    gray = []
    for i, (a, f) in enumerate(zip(got, files)):
        img = Image.open(os.path.join(d, "train", "c0", f))
        rgb = np.asarray(img.convert("RGB"))
        luma = np.repeat(np.asarray(img.convert("L"))[:, :, None], 3, axis=2)
        if a.shape != rgb.shape or a.dtype != np.uint8:
            sys.exit("image %d (%s): shape %s dtype %s" % (i, f, a.shape, a.dtype))
        if np.array_equal(a, luma):
            gray.append(i)
        elif not np.array_equal(a, rgb):
            sys.exit("image %d (%s) is neither the image nor its luma" % (i, f))
    want = {"none": len(gray) == 0, "all": len(gray) == len(files),
            "some": 0 < len(gray) < len(files)}[mode]
    if not want:
        sys.exit("mode %s, but %d of %d images turned gray" % (mode, len(gray), len(files)))
    print("random_grayscale: gray %s" % " ".join(str(i) for i in gray))


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2], sys.argv[3])
    else:
        check(sys.argv[2], sys.argv[3], sys.argv[4])
