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
    """As with DataLoader(shuffle=True): len() is the batches per epoch and
    each iteration is a new epoch (new order and augmentations), the same
    bytes as epochs 0 and 1 of sluice.Pipeline; set_epoch(n) picks one."""
    ds = sluice.torch.Dataset(image_spec)
    loader = DataLoader(ds, batch_size=None, num_workers=0)
    assert len(loader) == len(ds) == 6
    first = list(loader)
    assert len(first) == 6
    b = first[0]
    assert isinstance(b["image"], torch.Tensor)
    assert b["image"].shape == (8, 3, 32, 32)
    assert b["label"].dtype == torch.int64
    assert isinstance(b["path"], list) and isinstance(b["path"][0], str)
    second = list(loader)  # no set_epoch: the next epoch
    ref = list(sluice.Pipeline(image_spec))  # the spec's 2 epochs
    assert len(second) == 6 and len(ref) == 12
    for got, want in zip(first + second, ref):
        assert np.array_equal(got["image"].numpy(), want["image"])
        assert got["path"] == want["path"].tolist()
    assert [p for x in first for p in x["path"]] != \
        [p for x in second for p in x["path"]]
    # Consecutive epochs ran on one pipeline, never restarted (a restart
    # would have set its counters back to zero).
    assert ds.stats()["consumer"]["outputs"] == 12
    ds.set_epoch(0)
    again = list(loader)
    assert all(torch.equal(x["image"], y["image"])
               for x, y in zip(first, again))
    assert ds.stats()["consumer"]["outputs"] == 6  # restarted at epoch 0
    assert ds.epoch == 1


def test_epoch_left_early_is_followed_by_the_next(image_spec):
    ref = list(sluice.Pipeline(image_spec, epochs=3))
    ds = sluice.torch.Dataset(image_spec)
    for i, b in enumerate(ds):
        if i == 1:
            break
    rest = list(ds) + list(ds)  # epochs 1 and 2, whole
    assert len(rest) == 12
    assert all(np.array_equal(x["image"].numpy(), y["image"])
               for x, y in zip(rest, ref[6:]))


def test_unknown_length_epochs_end_where_they_do(image_spec, tmp_path):
    """A filter makes the epoch's length unknown: len() is a TypeError that
    says why, and each iteration still ends exactly at its epoch's end."""
    text = open(image_spec).read().replace(
        "  - shuffle:", "  - filter: {where: \"label != 1\"}\n  - shuffle:")
    spec = os.path.join(os.path.dirname(image_spec),
                        "filtered-%s.yaml" % tmp_path.name)
    with open(spec, "w") as f:
        f.write(text)
    ds = sluice.torch.Dataset(spec)
    with pytest.raises(TypeError, match="not known in advance.*filter"):
        len(ds)
    with pytest.raises(TypeError):
        len(DataLoader(ds, batch_size=None))
    ref = list(sluice.Pipeline(spec, epochs=3))
    got = [list(ds) for _ in range(3)]
    assert [len(e) for e in got] == [4, 4, 4]  # 32 records, 8 per batch
    flat = [b for e in got for b in e]
    assert len(flat) == len(ref)
    assert all(np.array_equal(x["image"].numpy(), y["image"])
               for x, y in zip(flat, ref))


@pytest.mark.parametrize("kwargs", [{}, {"batch_size": 4},
                                    {"batch_size": 1, "shuffle": False}])
def test_a_batching_dataloader_is_refused(image_spec, kwargs):
    loader = DataLoader(sluice.torch.Dataset(image_spec), **kwargs)
    with pytest.raises(ValueError, match=r"batch_size=None"):
        next(iter(loader))


def test_ranks_come_from_torch_distributed(image_spec, tmp_path):
    """Two processes in a gloo process group (no RANK/WORLD_SIZE in their
    environment) read disjoint halves of each epoch; an explicit rank=
    still wins."""
    script = tmp_path / "ranks.py"
    script.write_text(
        "import json, sys\n"
        "import torch.distributed as dist\n"
        "import sluice.torch\n"
        "rank, world, init = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]\n"
        "dist.init_process_group('gloo', init_method=init, rank=rank,\n"
        "                        world_size=world)\n"
        "ds = sluice.torch.Dataset(sys.argv[4])\n"
        "pipe = ds.pipeline()\n"
        "paths = [p for b in ds for p in b['path']]\n"
        "own = sluice.Pipeline(sys.argv[4], rank=0, world_size=1)\n"
        "print(json.dumps({'rank': pipe.rank, 'world': pipe.world_size,\n"
        "                  'len': len(ds),\n"
        "                  'paths': paths, 'own': own.world_size}))\n"
        "dist.destroy_process_group()\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "JOB_COMPLETION_INDEX")}
    init = "file://" + str(tmp_path / "store")
    procs = [subprocess.Popen(
        [sys.executable, str(script), str(r), "2", init, image_spec],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for r in range(2)]
    import json
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        outs.append(json.loads(out.strip().splitlines()[-1]))
    assert [(o["rank"], o["world"], o["own"], o["len"]) for o in outs] == \
        [(0, 2, 1, 3), (1, 2, 1, 3)]
    a, b = set(outs[0]["paths"]), set(outs[1]["paths"])
    assert len(outs[0]["paths"]) == len(outs[1]["paths"]) == 24
    assert not a & b and len(a | b) == 48


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
    assert ds.pipeline().held_bytes >= b["image"].numel() * 4
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
    assert "data wait: first batch " in r.stdout, r.stdout


class FakeStreams:
    """Stands in for CUDA streams and events on a CPU-only host: copies are
    clones, and an event completes when the test says so."""

    def __init__(self):
        self.events = []
        self.waited = 0

    def copy(self, t):
        return t.clone()

    def record(self):
        ev = {"done": False}
        self.events.append(ev)
        return ev

    def hand_over(self, ev, tensors):
        self.waited += 1

    def done(self, ev):
        return ev["done"]


def test_device_copies_run_ahead_and_return_host_buffers(image_spec):
    """The bookkeeping of device=: `device_prefetch` batches are copied
    ahead of the one the loop gets, every batch is handed over through its
    event, and a host batch stays counted (held by sluice's budget) until
    its copy completes, then goes back to the pool."""
    from sluice.torch import _DeviceCopier
    plain = list(sluice.torch.Dataset(image_spec))
    ds = sluice.torch.Dataset(image_spec)
    streams = FakeStreams()
    ds._copier = copier = _DeviceCopier(streams, 3)
    got = []
    for i, b in enumerate(ds):
        got.append(b)
        if i < 3:
            assert copier.ahead == 3  # 3 more copies under way
        # No copy completed yet: every host batch handed over is kept.
        assert copier.held == i + 1
    assert streams.waited == 6 and len(streams.events) == 6
    batch_bytes = plain[0]["image"].numel() * 4
    assert ds.pipeline().held_bytes >= 6 * batch_bytes
    for ev in streams.events:
        ev["done"] = True
    copier._reap()
    assert copier.held == 0 and ds.pipeline().held_bytes < batch_bytes
    for x, y in zip(got, plain):
        assert torch.equal(x["image"], y["image"]) and x["path"] == y["path"]


def test_device_cuda_without_cuda_stays_on_the_cpu(image_spec):
    if torch.cuda.is_available():
        ds = sluice.torch.Dataset(image_spec, device="cuda")
        b = next(iter(ds))
        assert b["image"].is_cuda and ds.device_in_use.type == "cuda"
        return
    with pytest.warns(UserWarning, match="no CUDA device"):
        ds = sluice.torch.Dataset(image_spec, device="cuda")
    assert ds.device_in_use == torch.device("cpu")
    assert len(list(ds)) == 6
    with pytest.raises(ValueError, match="device_prefetch"):
        sluice.torch.Dataset(image_spec, device_prefetch=0)
    with pytest.raises(ValueError, match="CUDA device"):
        sluice.torch.Dataset(image_spec, device="meta")


def test_a_dataset_survives_fork_and_pickle(image_spec):
    """A Dataset whose pipeline exists (len() made it) still works in a
    forked child (which makes its own) and pickles without it."""
    import multiprocessing
    import pickle
    ds = sluice.torch.Dataset(image_spec)
    assert len(ds) == 6
    copy = pickle.loads(pickle.dumps(ds))
    assert len(list(copy)) == 6
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()

    def child():
        q.put(len(list(ds)))

    p = ctx.Process(target=child)
    p.start()
    p.join(120)
    assert p.exitcode == 0 and q.get(timeout=5) == 6
    assert len(list(ds)) == 6  # the parent's pipeline is untouched


def test_channels_last_is_a_view_of_the_hwc_batch(image_spec, tmp_path):
    """A spec that leaves its images HWC, batched, is handed over as NCHW
    tensors in torch.channels_last format over the runtime's buffer (no
    copy), with exactly the values the CHW spec gives."""
    text = open(image_spec).read()
    assert "transpose: {field: image, to: CHW}" in text
    hwc = os.path.join(os.path.dirname(image_spec),
                       "hwc-%s.yaml" % tmp_path.name)
    with open(hwc, "w") as f:
        f.write(text.replace("  - transpose: {field: image, to: CHW}\n",
                             ""))
    ds = sluice.torch.Dataset(hwc, channels_last=True)
    seen = []
    convert = ds._convert

    def spy(batch):
        seen.append(batch["image"].base.address)
        return convert(batch)

    ds._convert = spy
    got = list(ds)
    want = list(sluice.torch.Dataset(image_spec))
    assert len(got) == len(want) == 6
    for i, (a, b) in enumerate(zip(got, want)):
        x = a["image"]
        assert x.shape == b["image"].shape == (8, 3, 32, 32)
        assert x.is_contiguous(memory_format=torch.channels_last)
        assert x.data_ptr() == seen[i]  # the runtime's buffer itself
        assert torch.equal(x, b["image"])
        assert a["label"].dim() == 1  # other fields untouched
    with pytest.raises(ValueError, match="'label' is \\[8\\], not a 4-D"):
        next(iter(sluice.torch.Dataset(hwc, channels_last=["label"])))
