#!/usr/bin/python3
"""Generates the benchmark data sets: ImageNet-like JPEGs and a Criteo-style TSV.

Everything is deterministic from --seed (same seed, same bytes, given the same
libjpeg-turbo behind PIL), so peers and sluice always read identical inputs.

  images:  DATA/imagenet/train/class_NN/img_NNNNNN.jpg, 10 class directories,
           random sizes 300..600 px per side, photo-like content (smooth
           gradients, large shapes, mid-frequency texture and sensor-like
           noise) so that JPEG sizes land in the 30..120 KB range of real photos.
  criteo:  DATA/criteo/day_K.tsv, tab-separated, no header:
           label (0/1), 13 dense integer counts (~10 % empty cells, a few
           negative values as in the real data), 26 categorical ids as 8 hex
           digits (Zipf-distributed vocabularies, some empty cells). sluice's
           csv source reads empty f32 cells as NaN and empty hex32 cells as 0.

Usage: gen_data.py [--out DIR] [--images N] [--rows N] [--criteo-files K]
                   [--seed S] [--only images|criteo]
"""

import argparse
import io
import json
import os
import sys
import time

import numpy as np

try:
    from PIL import Image, ImageDraw
except ImportError:  # pragma: no cover - Debian's python3-pil is expected
    sys.exit("gen_data.py: needs PIL (apt-get install python3-pil)")

DENSE = 13
CATS = 26
NUM_CLASSES = 10


# ---------------------------------------------------------------- images ---

def _smooth_field(rng, h, w, cells, channels, amplitude):
    """Low-frequency random field: a coarse random grid upsampled bicubically."""
    gh, gw = max(2, cells), max(2, int(round(cells * w / h)))
    grid = rng.uniform(-amplitude, amplitude, size=(gh, gw, channels))
    out = np.empty((h, w, channels), np.float32)
    for c in range(channels):
        plane = Image.fromarray(grid[:, :, c].astype(np.float32), mode="F")
        out[:, :, c] = np.asarray(plane.resize((w, h), Image.BICUBIC))
    return out


def make_image(rng, label):
    """One photo-like RGB image as a PIL image."""
    w = int(rng.integers(300, 601))
    h = int(rng.integers(300, 601))
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    # Background: a linear gradient between two class-tinted colours.
    base = np.array([(label * 37) % 256, (label * 91) % 256, (label * 53) % 256],
                    np.float32)
    c0 = np.clip(base + rng.normal(0, 40, 3), 0, 255)
    c1 = np.clip(255 - base + rng.normal(0, 40, 3), 0, 255)
    angle = rng.uniform(0, np.pi)
    t = (xx * np.cos(angle) + yy * np.sin(angle))
    t = (t - t.min()) / max(1e-6, float(t.max() - t.min()))
    img = c0 + t[:, :, None] * (c1 - c0)
    # Lighting and texture at two scales.
    img += _smooth_field(rng, h, w, 4, 3, 35)
    img += _smooth_field(rng, h, w, int(rng.integers(24, 48)), 3, 18)
    pil = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), "RGB")
    # Objects: ellipses, rectangles and polygons with soft-ish colours.
    draw = ImageDraw.Draw(pil)
    for _ in range(int(rng.integers(3, 9))):
        colour = tuple(int(v) for v in rng.integers(0, 256, 3))
        x0, y0 = int(rng.integers(-w // 4, w)), int(rng.integers(-h // 4, h))
        x1 = x0 + int(rng.integers(w // 10, w // 2))
        y1 = y0 + int(rng.integers(h // 10, h // 2))
        kind = int(rng.integers(0, 3))
        if kind == 0:
            draw.ellipse([x0, y0, x1, y1], fill=colour)
        elif kind == 1:
            draw.rectangle([x0, y0, x1, y1], fill=colour)
        else:
            pts = [(int(rng.integers(x0, x1)), int(rng.integers(y0, y1)))
                   for _ in range(int(rng.integers(3, 7)))]
            draw.polygon(pts, fill=colour)
    arr = np.asarray(pil).astype(np.float32)
    # Shading over the objects too, then sensor-like noise.
    arr += _smooth_field(rng, h, w, 6, 1, 25)
    arr += rng.normal(0, float(rng.uniform(4.0, 9.0)), size=arr.shape)
    return Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8), "RGB")


def gen_images(out, n, seed):
    root = os.path.join(out, "imagenet", "train")
    for c in range(NUM_CLASSES):
        d = os.path.join(root, "class_%02d" % c)
        os.makedirs(d, exist_ok=True)
        # A smaller --images than last time must not leave stale files.
        for name in os.listdir(d):
            if name.startswith("img_") and name.endswith(".jpg"):
                os.remove(os.path.join(d, name))
    sizes = []
    t0 = time.time()
    for i in range(n):
        rng = np.random.default_rng([seed, 1, i])
        label = i % NUM_CLASSES
        img = make_image(rng, label)
        quality = int(rng.integers(88, 97))
        buf = io.BytesIO()
        img.save(buf, format="JPEG", quality=quality)
        path = os.path.join(root, "class_%02d" % label, "img_%06d.jpg" % i)
        with open(path, "wb") as f:
            f.write(buf.getvalue())
        sizes.append(buf.tell())
        if (i + 1) % 500 == 0:
            print("  images: %d/%d (%.0f s)" % (i + 1, n, time.time() - t0),
                  file=sys.stderr)
    sizes = np.array(sizes)
    return {
        "images": n,
        "bytes": int(sizes.sum()),
        "kb_min": round(float(sizes.min()) / 1024, 1),
        "kb_median": round(float(np.median(sizes)) / 1024, 1),
        "kb_max": round(float(sizes.max()) / 1024, 1),
    }


# ---------------------------------------------------------------- criteo ---

def _int_strings(values):
    """Decimal strings of an int array, formatting each distinct value once."""
    uniq, inv = np.unique(values, return_inverse=True)
    table = np.array([str(int(u)) for u in uniq], dtype=object)
    return table[inv]


def gen_criteo(out, rows, files, seed):
    root = os.path.join(out, "criteo")
    os.makedirs(root, exist_ok=True)
    rng = np.random.default_rng([seed, 2])
    # Per-column shapes of the data, drawn once.
    dense_scale = rng.uniform(0.5, 4.0, DENSE)        # log-normal sigma
    dense_mu = rng.uniform(0.0, 5.0, DENSE)
    dense_empty = rng.uniform(0.02, 0.18, DENSE)      # ~10 % on average
    vocab_size = rng.integers(10, 200000, CATS)
    cat_empty = np.where(rng.random(CATS) < 0.3, rng.uniform(0.01, 0.45, CATS), 0)
    vocabs = []
    for c in range(CATS):
        ids = rng.integers(0, 1 << 32, int(vocab_size[c]), dtype=np.uint64)
        vocabs.append(np.array(["%08x" % v for v in ids], dtype=object))

    per_file = [rows // files + (1 if k < rows % files else 0) for k in range(files)]
    total_bytes = 0
    empty_dense = 0
    empty_cat = 0
    chunk = 50000
    for k, nrows in enumerate(per_file):
        path = os.path.join(root, "day_%d.tsv" % k)
        with open(path, "w", newline="\n") as f:
            for start in range(0, nrows, chunk):
                n = min(chunk, nrows - start)
                crng = np.random.default_rng([seed, 3, k, start])
                cols = np.empty((n, 1 + DENSE + CATS), dtype=object)
                cols[:, 0] = np.where(crng.random(n) < 0.26, "1", "0")
                for d in range(DENSE):
                    v = np.floor(np.exp(crng.normal(dense_mu[d], dense_scale[d], n)))
                    v = np.minimum(v, 1e7).astype(np.int64)
                    if d == 1:  # the real column 2 has small negative values
                        v = v - (crng.random(n) < 0.05) * crng.integers(1, 4, n)
                    s = _int_strings(v)
                    empty = crng.random(n) < dense_empty[d]
                    s[empty] = ""
                    empty_dense += int(empty.sum())
                    cols[:, 1 + d] = s
                for c in range(CATS):
                    # Zipf-like: a few ids are very common, most are rare.
                    idx = np.minimum(crng.zipf(1.2, n) - 1, len(vocabs[c]) - 1)
                    s = vocabs[c][idx]
                    empty = crng.random(n) < cat_empty[c]
                    s[empty] = ""
                    empty_cat += int(empty.sum())
                    cols[:, 1 + DENSE + c] = s
                text = "\n".join("\t".join(r) for r in cols.tolist()) + "\n"
                f.write(text)
                total_bytes += len(text)
        print("  criteo: wrote %s (%d rows)" % (path, nrows), file=sys.stderr)
    return {
        "rows": rows,
        "files": files,
        "bytes": total_bytes,
        "empty_dense_fraction": round(empty_dense / float(rows * DENSE), 4),
        "empty_cat_fraction": round(empty_cat / float(rows * CATS), 4),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.environ.get("SLUICE_BENCH_DATA",
                                                    "/tmp/sluice-bench-data"))
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--rows", type=int, default=500000)
    ap.add_argument("--criteo-files", type=int, default=2)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--only", choices=["images", "criteo"])
    args = ap.parse_args()
    if args.images < 1 or args.rows < 1 or args.criteo_files < 1:
        ap.error("--images, --rows and --criteo-files must be >= 1")

    os.makedirs(args.out, exist_ok=True)
    manifest_path = os.path.join(args.out, "manifest.json")
    manifest = {}
    if os.path.exists(manifest_path):
        with open(manifest_path) as f:
            manifest = json.load(f)
    manifest["seed"] = args.seed
    if args.only in (None, "images"):
        print("generating %d images into %s" % (args.images, args.out),
              file=sys.stderr)
        manifest["imagenet"] = gen_images(args.out, args.images, args.seed)
    if args.only in (None, "criteo"):
        print("generating %d Criteo rows into %s" % (args.rows, args.out),
              file=sys.stderr)
        manifest["criteo"] = gen_criteo(args.out, args.rows, args.criteo_files,
                                        args.seed)
    with open(manifest_path, "w") as f:
        json.dump(manifest, f, indent=2)
    print(json.dumps(manifest, indent=2))


if __name__ == "__main__":
    main()
