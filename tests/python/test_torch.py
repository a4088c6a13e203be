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


def test_pin_memory_needs_cuda(image_spec):
    if torch.cuda.is_available():
        ds = sluice.torch.Dataset(image_spec, pin_memory=True)
        assert next(iter(ds))["image"].is_pinned()
    else:
        with pytest.raises(ValueError, match="CUDA"):
            sluice.torch.Dataset(image_spec, pin_memory=True)


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
