#!/usr/bin/env python3
"""Independent reference computations for end-to-end tests of `sluice run`.

Each check recomputes a pipeline's output with plain numpy from the raw data
(no sluice code involved) and compares it with what `sluice run --sink
npy:DIR` wrote. Subcommands:

  make-png DIR        write an image_folder of PNGs (encoded here with zlib)
                      and DIR/spec.yaml: decode -> center_crop -> normalize
                      -> transpose CHW -> batch
  check-png DIR OUT   compare OUT (the npy sink of DIR/spec.yaml) to numpy
  check-fmnist OUT N  compare OUT with the first N batches of 100 of
                      Fashion-MNIST t10k, normalized, in file order
  check-criteo DIR OUT  write nothing; compare OUT with DIR/data.tsv parsed
                      and transformed in numpy (see make-criteo)
  make-criteo DIR     write DIR/data.tsv (Criteo-like, with empty cells) and
                      DIR/spec.yaml
"""
import gzip
import json
import os
import struct
import sys
import zlib

import numpy as np

FMNIST = "/usr/share/datasets/fashion-mnist"
MEAN = [123.675, 116.28, 103.53]
STD = [58.395, 57.12, 57.375]
CROP = 32


def fail(msg):
    sys.stderr.write("reference: " + msg + "\n")
    sys.exit(1)


def write_png(path, img):
    """Encodes an HxWx3 uint8 array as an RGB PNG (filter type 0 rows)."""
    h, w, _ = img.shape
    raw = b"".join(b"\x00" + img[y].tobytes() for y in range(h))

    def chunk(tag, data):
        c = struct.pack(">I", len(data)) + tag + data
        return c + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    png = b"\x89PNG\r\n\x1a\n"
    png += chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
    png += chunk(b"IDAT", zlib.compress(raw, 6))
    png += chunk(b"IEND", b"")
    with open(path, "wb") as f:
        f.write(png)


def read_outputs(out):
    with open(os.path.join(out, "index.json")) as f:
        index = json.load(f)
    batches = []
    for entry in index["outputs"]:
        fields = {}
        for name, meta in entry["fields"].items():
            fields[name] = np.load(os.path.join(out, meta["file"]))
        batches.append(fields)
    return index, batches


def make_png(d):
    rng = np.random.default_rng(1234)
    root = os.path.join(d, "data", "train")
    images = []
    for label, cls in enumerate(["cat", "dog", "eel"]):
        os.makedirs(os.path.join(root, cls), exist_ok=True)
        for i in range(5):
            h, w = int(rng.integers(34, 70)), int(rng.integers(34, 70))
            y, x = np.mgrid[0:h, 0:w]
            img = np.stack([(x * 255 // max(w - 1, 1)), (y * 255 // max(h - 1, 1)),
                            rng.integers(0, 256, size=(h, w))], axis=-1).astype(np.uint8)
            write_png(os.path.join(root, cls, "img%02d.png" % i), img)
    with open(os.path.join(d, "spec.yaml"), "w") as f:
        f.write("""pipeline: png_reference
source:
  image_folder: {root: data/train, extensions: [png]}
steps:
  - decode_image: {field: data, as: image, channels: 3}
  - center_crop: {field: image, size: %d}
  - normalize: {field: image, mean: %s, std: %s}
  - transpose: {field: image, to: CHW}
  - select: [image, label]
  - batch: {size: 4}
""" % (CROP, MEAN, STD))


def read_png(path):
    """Decodes the PNGs make_png wrote (8-bit RGB, filter 0, one IDAT)."""
    data = open(path, "rb").read()
    w, h = struct.unpack(">II", data[16:24])
    pos, idat = 8, b""
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        if data[pos + 4:pos + 8] == b"IDAT":
            idat += data[pos + 8:pos + 8 + n]
        pos += 12 + n
    raw = np.frombuffer(zlib.decompress(idat), dtype=np.uint8).reshape(h, 1 + w * 3)
    assert (raw[:, 0] == 0).all()
    return raw[:, 1:].reshape(h, w, 3)


def center_crop(img, size):
    h, w, _ = img.shape
    top = int(round((h - size) / 2.0))
    left = int(round((w - size) / 2.0))
    out = np.zeros((size, size, 3), dtype=img.dtype)
    for oy in range(size):
        for ox in range(size):
            y, x = top + oy, left + ox
            if 0 <= y < h and 0 <= x < w:
                out[oy, ox] = img[y, x]
    return out


def check_png(d, out):
    root = os.path.join(d, "data", "train")
    expected_imgs, expected_labels = [], []
    for label, cls in enumerate(sorted(os.listdir(root))):
        for name in sorted(os.listdir(os.path.join(root, cls))):
            img = read_png(os.path.join(root, cls, name)).astype(np.float32)
            img = center_crop(img, CROP)
            img = (img - np.float32(MEAN)) / np.float32(STD)
            expected_imgs.append(img.transpose(2, 0, 1))
            expected_labels.append(label)
    _, batches = read_outputs(out)
    got_imgs = np.concatenate([b["image"] for b in batches])
    got_labels = np.concatenate([b["label"] for b in batches])
    exp = np.stack(expected_imgs)
    if got_imgs.shape != exp.shape:
        fail("image shape %s, expected %s" % (got_imgs.shape, exp.shape))
    if not (got_labels == np.array(expected_labels)).all():
        fail("labels differ: %s vs %s" % (got_labels, expected_labels))
    # normalize is (x - mean) * (1/std) in f32: allow a few ULPs.
    err = np.abs(got_imgs - exp).max()
    if err > 1e-5:
        fail("images differ from the reference by up to %g" % err)
    print("png reference: %d images match (max abs err %.3g)" % (len(exp), err))


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def check_fmnist(out, nbatches):
    images = read_idx(os.path.join(FMNIST, "t10k-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(FMNIST, "t10k-labels-idx1-ubyte.gz"))
    _, batches = read_outputs(out)
    if len(batches) != nbatches:
        fail("%d batches, expected %d" % (len(batches), nbatches))
    for i, b in enumerate(batches):
        sl = slice(100 * i, 100 * (i + 1))
        exp = (images[sl].astype(np.float32) - np.float32(72.94)) / np.float32(90.02)
        err = np.abs(b["image"] - exp).max()
        if b["image"].shape != (100, 28, 28) or err > 1e-5:
            fail("batch %d: shape %s, max err %g" % (i, b["image"].shape, err))
        if not (b["label"] == labels[sl].astype(np.int64)).all():
            fail("batch %d: labels differ" % i)
    print("fashion-mnist reference: %d batches match" % len(batches))


def make_criteo(d):
    rng = np.random.default_rng(99)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "data.tsv"), "w") as f:
        for r in range(1000):
            label = int(rng.integers(-1, 2))  # -1 rows are filtered out
            dense = ["" if rng.random() < 0.1 else str(int(rng.integers(-5, 5000)))
                     for _ in range(13)]
            cat = ["%08x" % int(rng.integers(0, 2**32)) for _ in range(26)]
            f.write("\t".join([str(label)] + dense + cat) + "\n")
    with open(os.path.join(d, "spec.yaml"), "w") as f:
        f.write("""pipeline: criteo_reference
source:
  tsv:
    files: data.tsv
    columns:
      - {name: label, type: i64}
      - {name: dense, type: f32, count: 13}
      - {name: cat, type: hex32, count: 26}
steps:
  - filter: {where: "label >= 0"}
  - fill_missing: {field: dense, value: 0}
  - map: {field: dense, expr: "log(max(x, 0) + 1)"}
  - bucketize: {field: dense, boundaries: [0.5, 2, 4, 8], as: dense_bucket}
  - batch: {size: 128}
""")


def check_criteo(d, out):
    labels, dense, cat = [], [], []
    for line in open(os.path.join(d, "data.tsv")):
        cells = line.rstrip("\n").split("\t")
        if int(cells[0]) < 0:
            continue
        labels.append(int(cells[0]))
        dense.append([np.nan if c == "" else float(c) for c in cells[1:14]])
        cat.append([int(c, 16) for c in cells[14:40]])
    dense = np.array(dense, dtype=np.float32)
    dense = np.where(np.isnan(dense), np.float32(0), dense)
    dense = np.log(np.maximum(dense.astype(np.float64), 0) + 1).astype(np.float32)
    bucket = np.digitize(dense, [0.5, 2, 4, 8]).astype(np.int32)
    _, batches = read_outputs(out)
    got = {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}
    if not (got["label"] == np.array(labels)).all():
        fail("labels differ")
    if not (got["cat"] == np.array(cat, dtype=np.int64)).all():
        fail("categorical ids differ")
    err = np.abs(got["dense"] - dense).max()
    if err > 1e-5:
        fail("dense differs by up to %g" % err)
    if not (got["dense_bucket"] == bucket).all():
        fail("buckets differ")
    sizes = [b["label"].shape[0] for b in batches]
    if sum(sizes) != len(labels) or any(s != 128 for s in sizes[:-1]):
        fail("batch sizes %s for %d rows" % (sizes, len(labels)))
    print("criteo reference: %d rows in %d batches match" % (len(labels), len(batches)))


def main():
    cmd = sys.argv[1]
    if cmd == "make-png":
        make_png(sys.argv[2])
    elif cmd == "check-png":
        check_png(sys.argv[2], sys.argv[3])
    elif cmd == "check-fmnist":
        check_fmnist(sys.argv[2], int(sys.argv[3]))
    elif cmd == "make-criteo":
        make_criteo(sys.argv[2])
    elif cmd == "check-criteo":
        check_criteo(sys.argv[2], sys.argv[3])
    else:
        fail("unknown command " + cmd)


if __name__ == "__main__":
    main()
