#!/usr/bin/env python3
"""PIL and torchvision references for sluice's antialiased resize.

`resize` and `random_resized_crop` with `antialias: true` (the default for
bilinear) are PIL's Image.resize(size, BILINEAR) on u8 images; torchvision's
antialias=True copies PIL's filter. This script writes real encoded images
(JPEG and PNG, encoded by PIL here) with specs that resize them, and checks
what `sluice run --sink npy:DIR` wrote against PIL computed now:

  make DIR                   write DIR/data/{jpeg,png,gray}/... and the specs
  check DIR CASE OUT BOUND   compare OUT (npy sink of DIR/CASE.yaml) with the
                             reference of CASE; fail if any byte differs by
                             more than BOUND (and print the largest difference)
  same OUT1 OUT2             the two sinks hold byte-identical batches
  torch DIR CASE OUT BOUND   as check, against torchvision's
                             F.resize(antialias=True) on the decoded tensor
  psnr OUT1 OUT2 MIN         the two sinks differ in some image, and every
                             image's PSNR of OUT2 against OUT1 is >= MIN dB

Cases: jpeg_down / png_down / gray_down (resize to [h, w], antialiased),
png_up (upscaling), png_short (resize: s, shorter side), png_noaa
(antialias: false against torch.nn.functional.interpolate), png_rrc and
jpeg_rrc (random_resized_crop whose box is the deterministic fallback: a
centred h x round(h * 0.5) box; crop then resize, as torchvision does).
"""
import json
import os
import sys

import numpy as np
from PIL import Image

# Output sizes: factors from below 2x to about 9x, odd and even, plus an
# upscale.
SIZES = {"down": (23, 37), "up": (151, 97)}
COUNT = 6


def fail(msg):
    sys.stderr.write("antialias_ref: " + msg + "\n")
    sys.exit(1)


def photo_like(rng, h, w, gray=False):
    """Smooth gradients, mid-frequency texture, edges and a little noise."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    chans = []
    for c in range(1 if gray else 3):
        fx, fy = rng.uniform(0.02, 0.3, size=2)
        v = 128 + 60 * np.sin(x * fx + c) * np.cos(y * fy)
        v += 40 * (x / w) - 30 * (y / h)
        v += np.where((x - w / 2) ** 2 + (y - h / 3) ** 2 < (h / 4) ** 2, 50, 0)
        v += rng.normal(0, 6, size=(h, w))
        chans.append(v)
    img = np.clip(np.stack(chans, axis=-1), 0, 255).astype(np.uint8)
    return img[:, :, 0] if gray else img


def spec(case, kind, step, extra_steps=""):
    return """pipeline: aa_%s
source:
  image_folder: {root: data/%s, extensions: [%s]}
steps:
  - decode_image: {field: data, as: image, channels: %d}
  - %s
%s  - select: [image]
  - batch: {size: %d}
""" % (case, kind, "jpg" if kind == "jpeg" else "png", 1 if kind == "gray" else 3,
       step, extra_steps, COUNT)


def make(d):
    rng = np.random.default_rng(7)
    for kind in ("jpeg", "png", "gray"):
        root = os.path.join(d, "data", kind, "all")
        os.makedirs(root, exist_ok=True)
        for i in range(COUNT):
            h, w = int(rng.integers(150, 300)), int(rng.integers(160, 340))
            img = photo_like(rng, h, w, gray=(kind == "gray"))
            im = Image.fromarray(img)
            if kind == "jpeg":
                im.save(os.path.join(root, "img%02d.jpg" % i), quality=90,
                        subsampling=2 if i % 2 else 0)
            else:
                im.save(os.path.join(root, "img%02d.png" % i))
    dh, dw = SIZES["down"]
    uh, uw = SIZES["up"]
    down = "resize: {field: image, size: [%d, %d]}" % (dh, dw)
    rrc = ("random_resized_crop: {field: image, size: [%d, %d], scale: [1.0, 1.0], "
           "ratio: [0.5, 0.5]}" % (dh, dw))
    specs = {
        "jpeg_down": spec("jpeg_down", "jpeg", down),
        "png_down": spec("png_down", "png", down),
        "gray_down": spec("gray_down", "gray", down),
        "png_up": spec("png_up", "png", "resize: {field: image, size: [%d, %d]}" % (uh, uw)),
        "png_noaa": spec("png_noaa", "png",
                         "resize: {field: image, size: [%d, %d], antialias: false}" % (dh, dw)),
        "png_rrc": spec("png_rrc", "png", rrc),
        "jpeg_rrc": spec("jpeg_rrc", "jpeg", rrc),
        # The fused decode + crop + epilogue against the unfused steps.
        "jpeg_train": spec("jpeg_train", "jpeg",
                           "random_resized_crop: {field: image, size: [%d, %d]}" % (dh, dw),
                           "  - random_flip: {field: image, axis: width}\n"
                           "  - normalize: {field: image, mean: [123.7, 116.3, 103.5], "
                           "std: [58.4, 57.1, 57.4]}\n"
                           "  - transpose: {field: image, to: CHW}\n"),
        # decode_image scale: auto against exact (same seed, same boxes).
        "jpeg_scale_exact": spec("jpeg_scale_exact", "jpeg",
                                 "random_resized_crop: {field: image, size: [%d, %d]}" % (dh, dw)),
        "jpeg_scale_auto": spec("jpeg_scale_auto", "jpeg",
                                "random_resized_crop: {field: image, size: [%d, %d]}" % (dh, dw)
                                ).replace("channels: 3}", "channels: 3, scale: auto}"),
        "jpeg_train_noaa": spec("jpeg_train_noaa", "jpeg",
                                "random_resized_crop: {field: image, size: [%d, %d], "
                                "antialias: false}" % (dh, dw),
                                "  - random_flip: {field: image, axis: width}\n"),
    }
    specs["png_short"] = spec("png_short", "png", "resize: {field: image, size: 20}").replace(
        "  - select", "  - center_crop: {field: image, size: 20}\n  - select")
    for name, text in specs.items():
        with open(os.path.join(d, name + ".yaml"), "w") as f:
            f.write("seed: 5\n" + text)


def sources(d, case):
    kind = case.split("_")[0]
    root = os.path.join(d, "data", kind, "all")
    return [os.path.join(root, f) for f in sorted(os.listdir(root))], kind


def read_images(out):
    with open(os.path.join(out, "index.json")) as f:
        index = json.load(f)
    arrays = [np.load(os.path.join(out, e["fields"]["image"]["file"]))
              for e in index["outputs"]]
    return np.concatenate(arrays) if arrays else np.zeros((0,))


def pil_reference(path, case, gray):
    im = Image.open(path)
    im = im.convert("L" if gray else "RGB")
    w, h = im.size
    if case.endswith("_down"):
        return np.asarray(im.resize(SIZES["down"][::-1], Image.BILINEAR))
    if case.endswith("_up"):
        return np.asarray(im.resize(SIZES["up"][::-1], Image.BILINEAR))
    if case.endswith("_short"):
        # torchvision: the shorter side becomes 20, the longer int(20 * l / s).
        if h <= w:
            size = (int(20 * w / h), 20)
        else:
            size = (20, int(20 * h / w))
        r = np.asarray(im.resize(size, Image.BILINEAR))
        rh, rw = r.shape[:2]
        top, left = int(round((rh - 20) / 2.0)), int(round((rw - 20) / 2.0))
        return r[top:top + 20, left:left + 20]
    if case.endswith("_rrc"):
        # RandomResizedCrop's fallback box for ratio 0.5 on a wider image.
        bw = int(round(h * 0.5))
        left = (w - bw) // 2
        return np.asarray(im.crop((left, 0, left + bw, h)).resize(SIZES["down"][::-1],
                                                                  Image.BILINEAR))
    if case.endswith("_noaa"):
        import torch
        t = torch.from_numpy(np.asarray(im).copy()).permute(2, 0, 1)[None].float()
        r = torch.nn.functional.interpolate(t, size=SIZES["down"], mode="bilinear",
                                            align_corners=False, antialias=False)
        return r.round().clamp(0, 255).to(torch.uint8)[0].permute(1, 2, 0).numpy()
    fail("unknown case " + case)


def compare(got, want, bound, what):
    got = got.astype(np.int32)
    want = want.astype(np.int32)
    if got.shape != want.shape:
        fail("%s: shape %s, expected %s" % (what, got.shape, want.shape))
    diff = np.abs(got - want)
    worst = int(diff.max()) if diff.size else 0
    print("%s: max |diff| %d, mean %.4f, %d of %d values differ" %
          (what, worst, diff.mean(), int((diff > 0).sum()), diff.size))
    if worst > bound:
        fail("%s differs from the reference by %d > %d" % (what, worst, bound))


def check(d, case, out, bound, torch_ref=False):
    files, kind = sources(d, case)
    gray = kind == "gray"
    got = read_images(out)
    if got.shape[0] != len(files):
        fail("%d images in %s, expected %d" % (got.shape[0], out, len(files)))
    worst = []
    for i, path in enumerate(files):
        if torch_ref:
            import torch
            import torchvision.transforms.functional as F
            im = Image.open(path).convert("L" if gray else "RGB")
            t = torch.from_numpy(np.asarray(im).copy())
            t = t[None] if gray else t.permute(2, 0, 1)
            r = F.resize(t, list(SIZES["down"]), antialias=True)
            want = r[0].numpy() if gray else r.permute(1, 2, 0).numpy()
        else:
            want = pil_reference(path, case, gray)
        g = got[i]
        if gray and g.ndim == 3:
            g = g[:, :, 0]
        compare(g, want, bound, "%s %s" % (case, os.path.basename(path)))
        worst.append(g)
    print("%s: %d images within %d of %s" % (case, len(files), bound,
                                             "torchvision" if torch_ref else "the reference"))


def same(a, b):
    with open(os.path.join(a, "index.json")) as f:
        ia = json.load(f)
    with open(os.path.join(b, "index.json")) as f:
        ib = json.load(f)
    if len(ia["outputs"]) != len(ib["outputs"]) or not ia["outputs"]:
        fail("different or no batches: %d vs %d" % (len(ia["outputs"]), len(ib["outputs"])))
    for ea, eb in zip(ia["outputs"], ib["outputs"]):
        for name, meta in ea["fields"].items():
            with open(os.path.join(a, meta["file"]), "rb") as fa, \
                    open(os.path.join(b, eb["fields"][name]["file"]), "rb") as fb:
                if fa.read() != fb.read():
                    fail("field %s differs between %s and %s" % (name, a, b))
    print("identical: %d batches" % len(ia["outputs"]))


def psnr(a, b, minimum):
    x, y = read_images(a).astype(np.float64), read_images(b).astype(np.float64)
    if x.shape != y.shape or x.shape[0] == 0:
        fail("shapes %s and %s" % (x.shape, y.shape))
    worst, differ = float("inf"), 0
    for i in range(x.shape[0]):
        mse = ((x[i] - y[i]) ** 2).mean()
        if mse > 0:
            differ += 1
            worst = min(worst, 10 * np.log10(255.0 ** 2 / mse))
    print("%d of %d images differ; lowest PSNR %.1f dB" % (differ, x.shape[0], worst))
    if differ == 0:
        fail("the outputs are identical")
    if worst < minimum:
        fail("PSNR %.1f dB < %.1f dB" % (worst, minimum))


def main(argv):
    if len(argv) >= 2 and argv[0] == "make":
        make(argv[1])
    elif len(argv) == 5 and argv[0] in ("check", "torch"):
        check(argv[1], argv[2], argv[3], int(argv[4]), torch_ref=argv[0] == "torch")
    elif len(argv) == 4 and argv[0] == "psnr":
        psnr(argv[1], argv[2], float(argv[3]))
    elif len(argv) == 3 and argv[0] == "same":
        same(argv[1], argv[2])
    else:
        fail("usage: see the docstring")


if __name__ == "__main__":
    main(sys.argv[1:])
