#!/usr/bin/python3
"""Cuts the real-picture benchmark set from Debian's gnome-backgrounds.

Synthetic noise-heavy images decode about 2x slower than real pictures of the
same size and so hide the cost of everything around the decode. This script
cuts ImageNet-like JPEGs from the 4096x4096 wallpapers that Debian's
gnome-backgrounds package installs under /usr/share/backgrounds/gnome
(rendered scenes and photographs, WebP): each output picks a wallpaper, a
region 1.5-6x larger than the output (so detail density varies as in photos
taken at different distances), resizes it with PIL's Lanczos filter to a
random size of 300-600 px per side (--min-side, --max-side), and encodes it with libjpeg-turbo (PIL) at
quality 75, 90 or 95 and 4:2:0 or 4:4:4 chroma subsampling.

Layout: OUT/photos/train/<wallpaper>/NNNNN.jpg (one class per wallpaper, as
image_folder and torchvision's ImageFolder read it) and OUT/photos/manifest.json.
Deterministic from --seed.

Usage: gen_photos.py [--out DIR] [--images N] [--seed S] [--source DIR]
                     [--min-side PX] [--max-side PX] [--name NAME]
       (defaults: $SLUICE_BENCH_DATA or /tmp/sluice-bench-data, 2000, 42,
       /usr/share/backgrounds/gnome, 300, 600, photos: OUT/NAME/train)
"""

import argparse
import glob
import json
import os
import statistics
import sys

try:
    import numpy as np
    from PIL import Image
except ImportError as e:  # pragma: no cover
    sys.exit("gen_photos.py: %s (apt-get install python3-numpy python3-pil)" % e)

QUALITIES = (75, 90, 95)
# PIL's subsampling codes: 2 is 4:2:0 (what most cameras and ImageNet use),
# 0 is 4:4:4.
SUBSAMPLINGS = ((2, "4:2:0"), (0, "4:4:4"))


def sources(directory):
    """The wallpapers at least 1024 px a side (the 256 px tiles are skipped)."""
    out = []
    for path in sorted(glob.glob(os.path.join(directory, "*"))):
        if not path.lower().endswith((".jpg", ".jpeg", ".png", ".webp")):
            continue
        try:
            with Image.open(path) as im:
                if min(im.size) >= 1024:
                    out.append(path)
        except OSError:
            continue
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.environ.get("SLUICE_BENCH_DATA",
                                                    "/tmp/sluice-bench-data"))
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--source", default="/usr/share/backgrounds/gnome")
    ap.add_argument("--min-side", type=int, default=300)
    ap.add_argument("--max-side", type=int, default=600)
    ap.add_argument("--name", default="photos",
                    help="the set's directory under --out (default photos)")
    args = ap.parse_args()

    srcs = sources(args.source)
    if not srcs:
        sys.exit("gen_photos.py: no wallpapers of 1024 px or more in %s "
                 "(apt-get install gnome-backgrounds, or scripts/setup --bench)"
                 % args.source)
    rng = np.random.default_rng(args.seed)
    root = os.path.join(args.out, args.name, "train")
    os.makedirs(root, exist_ok=True)
    # Plan every image first, so the output does not depend on the order the
    # wallpapers are opened in; then open each wallpaper once.
    plans = []
    for i in range(args.images):
        h = int(rng.integers(args.min_side, args.max_side + 1))
        w = int(rng.integers(args.min_side, args.max_side + 1))
        zoom = float(rng.uniform(1.5, 6.0))
        plans.append({
            "index": i, "source": int(rng.integers(len(srcs))), "h": h, "w": w,
            "zoom": zoom, "fy": float(rng.random()), "fx": float(rng.random()),
            "quality": int(QUALITIES[rng.integers(len(QUALITIES))]),
            "subsampling": SUBSAMPLINGS[0 if rng.random() < 0.7 else 1],
        })
    sizes, counts = [], {}
    for s, path in enumerate(srcs):
        mine = [p for p in plans if p["source"] == s]
        if not mine:
            continue
        name = os.path.splitext(os.path.basename(path))[0]
        os.makedirs(os.path.join(root, name), exist_ok=True)
        with Image.open(path) as im:
            im = im.convert("RGB")
            W, H = im.size
            for p in mine:
                rh = min(H, int(p["h"] * p["zoom"]))
                rw = min(W, int(p["w"] * p["zoom"]))
                y = int(p["fy"] * (H - rh))
                x = int(p["fx"] * (W - rw))
                crop = im.resize((p["w"], p["h"]), Image.LANCZOS,
                                 box=(x, y, x + rw, y + rh))
                out = os.path.join(root, name, "%05d.jpg" % p["index"])
                crop.save(out, quality=p["quality"], subsampling=p["subsampling"][0])
                sizes.append(os.path.getsize(out))
                key = "q%d %s" % (p["quality"], p["subsampling"][1])
                counts[key] = counts.get(key, 0) + 1
        print("%s: %d images" % (name, len(mine)), file=sys.stderr)
    pixels = [p["h"] * p["w"] for p in plans]
    manifest = {
        "images": len(plans), "classes": len({p["source"] for p in plans}),
        "source": args.source, "seed": args.seed, "bytes": sum(sizes),
        "kb_min": min(sizes) / 1e3, "kb_median": statistics.median(sizes) / 1e3,
        "kb_max": max(sizes) / 1e3,
        "bits_per_pixel": 8.0 * sum(sizes) / sum(pixels),
        "encodings": counts,
    }
    manifest["sides"] = [args.min_side, args.max_side]
    with open(os.path.join(args.out, args.name, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
    print(json.dumps(manifest))


if __name__ == "__main__":
    main()
