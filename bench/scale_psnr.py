#!/usr/bin/python3
"""How far `decode_image: {scale: auto}` is from the exact decode, in PSNR.

Runs the same training crop twice over the real-picture set
(bench/gen_photos.py) with one seed: decode_image (scale exact, then auto)
-> random_resized_crop 224 (antialiased) -> batch, written with
`sluice run --sink npy:DIR`. Same seed, same boxes: the box is drawn from
the full-size header either way, so the two outputs differ only where the
DCT-scaled decode replaced pixels. Prints, per image pair, the PSNR of the
u8 auto output against the exact one (peak 255), then a summary: how many
images were decoded scaled (any byte differs), and the mean / median / 5th
percentile / minimum PSNR over those, and the PSNR over all pixels of the
set. docs/ops.md (decode_image) quotes the summary.

Usage: scale_psnr.py [--data DIR] [--sluice BIN] [--seed S] [--size N]
       [--antialias true|false] [--keep DIR]
"""

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

SPEC = """pipeline: scale_psnr
seed: {seed}
source:
  image_folder: {{root: {root}, extensions: [jpg]}}
steps:
  - decode_image: {{field: data, as: image, channels: 3, scale: {scale}}}
  - random_resized_crop: {{field: image, size: [{size}, {size}], antialias: {aa}}}
  - select: [image]
  - batch: {{size: 100}}
"""


def run(sluice, spec_text, workdir, name):
    spec = os.path.join(workdir, name + ".yaml")
    with open(spec, "w") as f:
        f.write(spec_text)
    out = os.path.join(workdir, name)
    subprocess.run([sluice, "run", spec, "--sink", "npy:" + out, "--quiet"],
                   check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(out, "index.json")) as f:
        index = json.load(f)
    return [os.path.join(out, e["fields"]["image"]["file"]) for e in index["outputs"]]


def psnr(mse):
    return float("inf") if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


def main():
    root_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=os.path.join(
        os.environ.get("SLUICE_BENCH_DATA", "/tmp/sluice-bench-data"), "photos", "train"))
    ap.add_argument("--sluice", default=os.path.join(root_dir, "build", "bin", "sluice"))
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--antialias", default="true", choices=["true", "false"])
    ap.add_argument("--keep", help="keep the npy outputs in this directory")
    args = ap.parse_args()
    if not os.path.isdir(args.data):
        sys.exit("scale_psnr.py: no pictures in %s (run bench/gen_photos.py)" % args.data)

    work = args.keep or tempfile.mkdtemp(prefix="scale-psnr-")
    os.makedirs(work, exist_ok=True)
    try:
        files = {}
        for scale in ("exact", "auto"):
            files[scale] = run(args.sluice, SPEC.format(
                seed=args.seed, root=args.data, scale=scale, size=args.size,
                aa=args.antialias), work, scale)
        if len(files["exact"]) != len(files["auto"]):
            sys.exit("scale_psnr.py: the two runs wrote different numbers of batches")
        per_image, total_se, total_n, scaled = [], 0.0, 0, 0
        for fe, fa in zip(files["exact"], files["auto"]):
            e = np.load(fe).astype(np.float64)
            a = np.load(fa).astype(np.float64)
            for i in range(e.shape[0]):
                se = float(((e[i] - a[i]) ** 2).sum())
                total_se += se
                total_n += e[i].size
                if se > 0:
                    scaled += 1
                    per_image.append(psnr(se / e[i].size))
        n = total_n // (args.size * args.size * 3)
        print("images: %d; decoded at a DCT scale (output differs): %d (%.0f %%)" % (
            n, scaled, 100.0 * scaled / max(n, 1)))
        if per_image:
            v = np.array(per_image)
            print("PSNR of scale: auto against exact over those images: mean %.1f dB, "
                  "median %.1f dB, 5th percentile %.1f dB, min %.1f dB" % (
                      v.mean(), np.median(v), np.percentile(v, 5), v.min()))
        print("PSNR over every pixel of the set: %.1f dB" % psnr(total_se / max(total_n, 1)))
        print("(seed %d, random_resized_crop %d, antialias %s, %s)" % (
            args.seed, args.size, args.antialias, args.data))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
