"""sluice.torch.Dataset with torch.utils.data.DataLoader, and a small
training run of examples/train_fashion_mnist.py that must learn."""
import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader  # noqa: E402

import sluice  # noqa: E402
import sluice.torch  # noqa: E402
from conftest import batches_equal  # noqa: E402

SOURCE_DIR = os.environ.get(
    "SLUICE_SOURCE_DIR",
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def test_dataloader_yields_tensors_per_epoch(image_spec):
    ds = sluice.torch.Dataset(image_spec)
    loader = DataLoader(ds, batch_size=None, num_workers=0)
    first = list(loader)
    assert len(first) == 6
    b = first[0]
    assert isinstance(b["image"], torch.Tensor)
    assert b["image"].shape == (8, 3, 32, 32)
    assert b["label"].dtype == torch.int64
    assert isinstance(b["path"], list) and isinstance(b["path"][0], str)
    again = list(loader)  # same epoch again: same batches
    assert all(torch.equal(x["image"], y["image"])
               for x, y in zip(first, again))
    ds.set_epoch(1)
    second = list(loader)
    ref = list(sluice.Pipeline(image_spec))[6:]  # epoch 1 of a full run
    assert all(np.array_equal(x["image"].numpy(), y["image"])
               for x, y in zip(second, ref))
    assert [p for x in first for p in x["path"]] != \
        [p for x in second for p in x["path"]]


def test_tensors_share_the_runtime_buffer(image_spec):
    ds = sluice.torch.Dataset(image_spec)
    bases = []
    convert = ds._convert

    def spy(batch):
        bases.append(batch["image"].base.address)
        return convert(batch)

    ds._convert = spy
    it = iter(ds)
    b = next(it)
    assert ds._pipeline.held_bytes >= b["image"].numel() * 4
    # The tensor's storage is the runtime's buffer (from_numpy: no copy).
    assert b["image"].data_ptr() == bases[0]


def test_worker_processes_are_refused(image_spec):
    loader = DataLoader(sluice.torch.Dataset(image_spec), batch_size=None,
                        num_workers=2)
    with pytest.raises(RuntimeError, match="num_workers=0"):
        list(loader)


def test_pin_memory_without_cuda_warns_and_changes_nothing(image_spec):
    """Without CUDA (this suite's machines have none; pinning has never run
    on a GPU) pin_memory=True warns once and yields the same zero-copy
    tensors as pin_memory=False, the way DataLoader's pin_memory does."""
    if torch.cuda.is_available():
        ds = sluice.torch.Dataset(image_spec, pin_memory=True)
        assert ds.pinning
        assert next(iter(ds))["image"].is_pinned()
        return
    with pytest.warns(UserWarning, match="sees no CUDA device.*not pinned"):
        ds = sluice.torch.Dataset(image_spec, pin_memory=True)
    assert ds.pin_memory and not ds.pinning
    plain = list(sluice.torch.Dataset(image_spec))
    pinned = list(ds)
    assert len(pinned) == len(plain) == 6
    for a, b in zip(pinned, plain):
        assert not a["image"].is_pinned()
        assert torch.equal(a["image"], b["image"])
        assert a["label"].dtype == torch.int64


def test_fashion_mnist_model_learns():
    """A short run of the example (30 batches of 256, 2000 test images):
    a model that learned nothing scores ~10%."""
    script = os.path.join(SOURCE_DIR, "examples", "train_fashion_mnist.py")
    r = subprocess.run(
        [sys.executable, script, "--epochs", "1", "--max-batches", "30",
         "--test-batches", "2", "--min-accuracy", "0.6"],
        capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "test accuracy:" in r.stdout


GNOME = "/usr/share/backgrounds/gnome"


def photo_folder(root, per_class=4, size=(200, 300)):
    """Two class folders of JPEGs cut from Debian's gnome-backgrounds
    photographs (webp wallpapers), each crop resized to 200..300 px and
    encoded here with PIL."""
    from PIL import Image
    photos = sorted(p for p in os.listdir(GNOME) if p.endswith(".webp"))
    rng = np.random.default_rng(2)
    n = 0
    for label in range(2):
        d = root / ("class%d" % label)
        d.mkdir(parents=True)
        for i in range(per_class):
            with Image.open(os.path.join(GNOME, photos[n % len(photos)])) as im:
                im = im.convert("RGB")
                w, h = im.size
                s = int(min(w, h) * rng.uniform(0.3, 0.6))
                x, y = int(rng.integers(0, w - s)), int(rng.integers(0, h - s))
                side = int(rng.integers(size[0], size[1] + 1))
                im.crop((x, y, x + s, y + s)).resize((side, side)).save(
                    d / ("photo%d.jpg" % i), quality=90)
            n += 1


def test_imagenet_style_example_trains_resnet18(tmp_path):
    """examples/train_imagenet_style.py for 2 steps of a torchvision
    ResNet-18 on 8 photographs through an ImageNet-style spec (decode,
    random resized crop, flip, normalize, CHW, shuffle, batch): the batches
    have the model's shapes and dtypes, and the loss is finite."""
    pytest.importorskip("torchvision")
    if not os.path.isdir(GNOME):
        pytest.skip("needs gnome-backgrounds (scripts/setup installs it)")
    photo_folder(tmp_path / "train")
    spec = tmp_path / "imagenet_small.yaml"
    spec.write_text(open(os.path.join(SOURCE_DIR, "examples",
                                      "imagenet.yaml")).read()
                    .replace("data/imagenet/train", str(tmp_path / "train"))
                    .replace("[224, 224]", "[96, 96]")
                    .replace("{size: 128, drop_remainder: true}",
                             "{size: 4, drop_remainder: true}")
                    .replace("schedule: auto", "schedule: {}"))
    script = os.path.join(SOURCE_DIR, "examples", "train_imagenet_style.py")
    r = subprocess.run(
        [sys.executable, script, "--spec", str(spec), "--epochs", "1",
         "--max-batches", "2", "--threads", "2", "--classes", "2"],
        capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "first batch: image torch.float32 [4, 3, 96, 96], label " \
           "torch.int64 [4]" in r.stdout, r.stdout
    losses = [float(line.rsplit(" ", 1)[1]) for line in r.stdout.splitlines()
              if ": loss " in line]
    assert len(losses) == 2 and all(np.isfinite(losses)), r.stdout
    assert "epoch 0: 8 images" in r.stdout, r.stdout
