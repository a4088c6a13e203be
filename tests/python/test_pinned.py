"""Pinned batches without a copy: the runtime allocates the last batch
step's buffers page-locked through the process's host registrar and keeps
them registered for reuse. This host has no GPU, so the tests install the
recording registrar (SLUICE_PIN_REGISTRAR=record|mlock, or
install_host_registrar), which keeps every call: each buffer handed out
must be registered exactly once, unregistered when the pipeline ends,
counted in the budget, never reused before a device copy's event says the
copy is done, and the bytes the same as without pinning."""
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import sluice  # noqa: E402
import sluice.torch  # noqa: E402
from sluice import _sluice  # noqa: E402
from conftest import write  # noqa: E402


@pytest.fixture
def recording(monkeypatch):
    """The recording registrar, as sluice.torch installs it for
    SLUICE_PIN_REGISTRAR=record; uninstalled afterwards."""
    monkeypatch.setenv("SLUICE_PIN_REGISTRAR", "record")
    monkeypatch.setattr(sluice.torch, "_registrar", None)
    yield
    _sluice.install_host_registrar("none")


@pytest.fixture(scope="module")
def big_spec(image_root, tmp_path_factory):
    """Batches of 8 f32 64x64 images (384 KiB) and their labels."""
    d = tmp_path_factory.mktemp("pinspec")
    return write(d / "big.yaml", """
        pipeline: pinned
        seed: 11
        source:
          image_folder: {root: %s, extensions: [jpg]}
        steps:
          - decode_image: {field: data, as: image, channels: 3}
          - random_resized_crop: {field: image, size: [64, 64]}
          - normalize: {field: image, mean: [120, 120, 120], std: [60, 60, 60]}
          - transpose: {field: image, to: CHW}
          - select: [image, label]
          - shuffle: {buffer: 16}
          - batch: {size: 8, drop_remainder: true}
        epochs: 2
        budget: {cores: 2, memory: 256MiB}
        """ % image_root)


def live_ranges():
    log = _sluice.host_registrar_log()
    assert log is not None
    return log


def inside(ptr, nbytes, ranges):
    return any(a <= ptr and ptr + nbytes <= a + n for a, n in ranges)


def test_batches_are_pinned_where_made_registered_once(recording, big_spec):
    """Every numeric tensor of every batch lies in a range registered once;
    buffers are reused (far fewer registrations than batches); the idle
    ones are counted in the budget; all are unregistered once the pipeline
    and the last batch are gone; the bytes equal an unpinned run's."""
    plain = [{k: v.clone() if isinstance(v, torch.Tensor) else v
              for k, v in b.items()} for b in sluice.torch.Dataset(big_spec)]
    ds = sluice.torch.Dataset(big_spec, pin_memory=True)
    assert ds.pinned_in_runtime and not ds.pinning  # no CUDA here
    got = 0
    before = _sluice.pinned_stats()
    for want, b in zip(plain, ds):  # each batch dropped before the next
        ranges = live_ranges()["live"]
        t = b["image"]  # 384 KiB a batch: pinned (labels are 64 bytes)
        assert inside(t.data_ptr(), t.numel() * t.element_size(), ranges)
        assert torch.equal(t, want["image"])
        assert torch.equal(b["label"], want["label"])
        got += 1
    assert got == len(plain) == 6
    st = ds.stats()["pinned"]
    assert st["registrar"] == "record"
    assert st["failures"] == before["failures"]
    registered = st["registered"] - before["registered"]
    reused = st["reused"] - before["reused"]
    # The batch stage, the rows ahead and the output hold a few batches at
    # once: buffers come back and are handed out again.
    assert 1 <= registered < 6
    assert reused >= 6 - registered
    assert st["buffers"] == st["registered"] - st["unregistered"]
    peaks = ds.stats()["memory"]["peaks"]
    assert peaks["pinned batches (idle)"] >= 8 * 3 * 64 * 64 * 4
    log = live_ranges()
    assert log["double_registrations"] == 0
    assert log["stray_unregistrations"] == 0
    ds.close()
    del b, t  # the last batch: it stays valid (and registered) until then
    log = live_ranges()
    assert log["live"] == [], log["live"]
    assert log["registrations"] == log["unregistrations"] == registered


def test_batches_held_after_close_unregister_when_dropped(recording,
                                                         big_spec):
    """A batch the caller still holds when the pipeline ends stays
    registered and valid; dropping it unregisters it."""
    _sluice.install_host_registrar("record")
    pipe = sluice.Pipeline(big_spec, pin_memory=True, epochs=1)
    ref = [dict(b) for b in sluice.Pipeline(big_spec, epochs=1)]
    kept = [next(pipe), next(pipe)]
    pipe.close()
    log = live_ranges()
    assert len(log["live"]) == 2  # two batches' images
    for b, want in zip(kept, ref):
        assert np.array_equal(b["image"], want["image"])
        assert inside(b["image"].ctypes.data, b["image"].nbytes, log["live"])
    del b
    kept.clear()
    log = live_ranges()
    assert log["live"] == [] and log["stray_unregistrations"] == 0
    assert log["registrations"] == log["unregistrations"]


def test_pin_memory_without_a_registrar_is_refused(big_spec):
    _sluice.install_host_registrar("none")
    with pytest.raises(sluice.PipelineError,
                       match="no host memory registrar is installed"):
        sluice.Pipeline(big_spec, pin_memory=True)
    with pytest.raises(ValueError, match="'cuda', 'record', 'mlock'"):
        _sluice.install_host_registrar("cudaa")


def test_budget_too_small_for_the_pinned_pool_says_so(recording, big_spec):
    """Page-locked batches keep one more batch registered for reuse, which
    the budget counts: a budget that holds the unpinned pipeline but not
    that one more batch is refused up front, at the batch step, saying so
    (and nothing is registered)."""
    _sluice.install_host_registrar("record")
    sluice.Pipeline(big_spec, memory="3600KiB").close()  # passes the check
    with pytest.raises(sluice.PipelineError) as e:
        sluice.Pipeline(big_spec, pin_memory=True, memory="3600KiB")
    msg = str(e.value)
    assert "big.yaml:12:5: error: the batch of 8 records (page-locked for " \
        "pin_memory, one more batch kept registered for reuse)" in msg, msg
    assert "lower batch.size to <= 6 or raise the memory budget" in msg, msg
    log = live_ranges()
    assert log["registrations"] == 0 and log["live"] == []


class HeldStreams:
    """CUDA streams and events stood in on a CPU-only host: a copy is a
    clone, and each event remembers the host buffers its copies read; an
    event completes when the test says so."""

    def __init__(self):
        self.events = []

    def copy(self, t):
        self.reading.append(t.data_ptr())
        return t.clone()

    def record(self):
        ev = {"done": False, "ptrs": self.reading}
        self.events.append(ev)
        self.reading = []
        return ev

    def hand_over(self, ev, tensors):
        pass

    def done(self, ev):
        return ev["done"]


def test_device_copy_buffers_wait_for_their_events(recording, big_spec):
    """device=: a host batch goes back to the pinned pool only after its
    copy's event has completed, so no buffer a copy still reads is handed
    out again; once completed, buffers are reused."""
    from sluice.torch import _DeviceCopier
    ref = sluice.torch.Dataset(big_spec)
    plain = [b["image"].clone() for _ in range(3) for b in ref]  # 3 epochs
    ds = sluice.torch.Dataset(big_spec, pin_memory=True)
    assert ds.pinned_in_runtime
    before = _sluice.pinned_stats()
    streams = HeldStreams()
    streams.reading = []
    ds._copier = _DeviceCopier(streams, 2)
    reused_after_done = 0
    for epoch in range(3):
        for i, b in enumerate(ds):
            assert torch.equal(b["image"], plain[i + 6 * epoch])
            # The GPU lags: only copies two batches old are done.
            for ev in streams.events[:-4]:
                ev["done"] = True
            pending = [p for ev in streams.events if not ev["done"]
                       for p in ev["ptrs"]]
            assert len(pending) == len(set(pending)), \
                "a buffer a copy still reads was handed out again"
            done = {p for ev in streams.events if ev["done"]
                    for p in ev["ptrs"]}
            reused_after_done += len(done & set(pending))
    assert reused_after_done > 0  # the check above could have failed
    for ev in streams.events:
        ev["done"] = True
    ds._copier._reap()
    st = ds.stats()["pinned"]
    assert st["reused"] > before["reused"]
    ds.close()
    log = live_ranges()
    assert log["live"] == [] and log["double_registrations"] == 0


def vm_locked_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmLck:"):
                return int(line.split()[1])
    return 0


def test_mlock_registrar_locks_pages_or_says_why(monkeypatch, big_spec):
    """With a registrar that really locks pages (mlock), the batches are
    locked while the pipeline runs and unlocked after; where the process
    may not lock them (RLIMIT_MEMLOCK), batches stay pageable and the stats
    say why. Same bytes either way."""
    monkeypatch.setenv("SLUICE_PIN_REGISTRAR", "mlock")
    monkeypatch.setattr(sluice.torch, "_registrar", None)
    try:
        plain = [b["image"].clone() for b in sluice.torch.Dataset(big_spec)]
        before = vm_locked_kib()
        ds = sluice.torch.Dataset(big_spec, pin_memory=True)
        it = iter(ds)
        failed = _sluice.pinned_stats()["failures"]
        first = next(it)
        st = ds.stats()["pinned"]
        if st["failures"] > failed:
            assert "mlock of" in st["first_error"] and \
                "RLIMIT_MEMLOCK" in st["first_error"]
        else:
            assert vm_locked_kib() - before >= 8 * 3 * 64 * 64 * 4 // 1024
        rest = [first["image"]] + [b["image"] for b in it]
        assert all(torch.equal(x, y) for x, y in zip(rest, plain))
        del first, rest
        ds.close()
        assert vm_locked_kib() == before
    finally:
        _sluice.install_host_registrar("none")


def test_pinning_can_be_switched_off(recording, big_spec, monkeypatch):
    monkeypatch.setenv("SLUICE_NO_PINNED_BATCHES", "1")
    ds = sluice.torch.Dataset(big_spec, pin_memory=True)
    assert len(list(ds)) == 6
    assert live_ranges()["registrations"] == 0
    ds.close()
