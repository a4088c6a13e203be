"""Shared fixtures of the Python tests: small real data sets written in the
test (JPEGs encoded with PIL, CSV text) and specs over them, plus Debian's
Fashion-MNIST. Run by ctest (tests/CMakeLists.txt) with PYTHONPATH pointing
at the build's python/ folder and SLUICE_BIN at the driver."""
import os
import sys
import textwrap

import numpy as np
import pytest

FASHION = "/usr/share/datasets/fashion-mnist"
SLUICE_BIN = os.environ.get("SLUICE_BIN", "sluice")


def write(path, text):
    with open(path, "w") as f:
        f.write(textwrap.dedent(text).lstrip())
    return str(path)


@pytest.fixture(scope="session")
def image_root(tmp_path_factory):
    """48 JPEGs in 3 classes, 40..90 px, deterministic."""
    from PIL import Image
    root = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(5)
    for label in range(3):
        d = root / ("class%d" % label)
        d.mkdir()
        for i in range(16):
            h, w = int(rng.integers(40, 91)), int(rng.integers(40, 91))
            yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
            img = np.stack([128 + 100 * np.sin(0.05 * (c + 1) * xx + i)
                            * np.cos(0.07 * yy + label) for c in range(3)], -1)
            img += rng.normal(0, 8, img.shape)
            Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(
                d / ("img%02d.jpg" % i), quality=90)
    return root


def spec_yaml(name, seed, source, steps, epochs=1, memory="256MiB",
              cores=2):
    """A spec's text: `source` the lines under `source:`, `steps` one
    step's YAML each."""
    lines = ["pipeline: %s" % name, "seed: %d" % seed, "source:"]
    lines += ["  " + line for line in source]
    lines += ["steps:"] + ["  - " + step for step in steps]
    lines += ["epochs: %d" % epochs,
              "budget: {cores: %d, memory: %s}" % (cores, memory)]
    return "\n".join(lines) + "\n"


def fashion_source(*extra):
    """Debian's Fashion-MNIST test set (idx, gzipped), with `extra` lines
    under `idx:` (e.g. "shuffle: true")."""
    return ["idx:",
            "  images: %s/t10k-images-idx3-ubyte.gz" % FASHION,
            "  labels: %s/t10k-labels-idx1-ubyte.gz" % FASHION] + \
        ["  " + e for e in extra]


def images_source(root, shuffle=False):
    """image_folder over `root`'s JPEGs, by position when `shuffle`."""
    return ["image_folder: {root: %s, extensions: [jpg]%s}" % (
        root, ", shuffle: true" if shuffle else "")]


DECODE = "decode_image: {field: data, as: image, channels: 3}"
#: Decode, a random 24x24 crop and a flip: random choices keyed by position.
AUGMENT_24 = [DECODE, "random_resized_crop: {field: image, size: [24, 24]}",
              "random_flip: {field: image, axis: width, p: 0.5}"]


@pytest.fixture(scope="session")
def image_spec(image_root, tmp_path_factory):
    d = tmp_path_factory.mktemp("spec")
    return write(d / "images.yaml", spec_yaml("images", 3, images_source(
        image_root), [
        DECODE,
        "random_resized_crop: {field: image, size: [32, 32]}",
        "random_flip: {field: image, axis: width, p: 0.5}",
        "normalize: {field: image, mean: [120, 120, 120], "
        "std: [60, 60, 60]}",
        "transpose: {field: image, to: CHW}",
        "select: [path, image, label]",
        "shuffle: {buffer: 16}",
        "batch: {size: 8, drop_remainder: true}"], epochs=2))


@pytest.fixture(scope="session")
def positional_spec(image_root, tmp_path_factory):
    """Random augmentations, source-level shuffle, no shuffle buffer."""
    d = tmp_path_factory.mktemp("spec")
    return write(d / "pos.yaml", spec_yaml(
        "positional", 9, images_source(image_root, shuffle=True),
        AUGMENT_24 + [
            "select: [path, image, label]",
            "batch: {size: 4}"], epochs=2))


@pytest.fixture(scope="session")
def fashion_spec(tmp_path_factory):
    d = tmp_path_factory.mktemp("spec")
    return write(d / "fashion.yaml", spec_yaml("fashion", 11, fashion_source(), [
        "take: 2000",
        "random_crop: {field: image, size: [28, 28], padding: 2}",
        "normalize: {field: image, mean: 72.94, std: 90.02}",
        "shuffle: {buffer: 500}",
        "batch: {size: 64}"]))


def batches_equal(a, b):
    if a.keys() != b.keys():
        return False
    for k in a:
        x, y = a[k], b[k]
        if x.dtype == object:
            if x.tolist() != y.tolist():
                return False
        elif x.dtype != y.dtype or x.shape != y.shape or \
                x.tobytes() != y.tobytes():
            return False
    return True
