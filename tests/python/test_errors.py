"""Errors cross into Python as exceptions with the CLI's text: spec errors
(file:line:col), data errors (file and record), and Ctrl-C stops iteration
promptly with the worker threads joined."""
import os
import signal
import subprocess
import sys
import time

import pytest

import sluice
from conftest import SLUICE_BIN, write


def test_spec_error_has_location_and_cli_text(tmp_path):
    spec = write(tmp_path / "bad.yaml", """
        pipeline: bad
        source:
          files: {glob: "*.jpg"}
        steps:
          - decode_imgae: {field: data, as: image}
        """)
    with pytest.raises(sluice.SpecError) as e:
        sluice.Pipeline(spec)
    msg = str(e.value)
    assert "bad.yaml:5:5: error: unknown op 'decode_imgae'; did you mean " \
           "'decode_image'?" in msg
    cli = subprocess.run([SLUICE_BIN, "check", spec], capture_output=True,
                         text=True, env=dict(os.environ, NO_COLOR="1"))
    assert cli.returncode == 2
    assert msg == cli.stderr.rstrip("\n")
    with pytest.raises(sluice.SpecError, match="5:5: error"):
        sluice.check(spec)
    assert isinstance(e.value, ValueError)


def test_missing_spec_file(tmp_path):
    with pytest.raises(sluice.SpecError, match="cannot open"):
        sluice.Pipeline(str(tmp_path / "nope.yaml"))


def test_bad_arguments():
    with pytest.raises(TypeError):
        sluice.Pipeline("x.yaml", epoch=3)  # misspelled keyword


def test_data_error_names_file_and_record(tmp_path, image_root):
    d = tmp_path / "imgs" / "a"
    d.mkdir(parents=True)
    good = (image_root / "class0" / "img00.jpg").read_bytes()
    (d / "0.jpg").write_bytes(good)
    (d / "1.jpg").write_bytes(good[:40] + b"\x00" * 20)  # truncated, corrupt
    spec = write(tmp_path / "s.yaml", """
        pipeline: broken
        source:
          image_folder: {root: imgs, extensions: [jpg]}
        steps:
          - decode_image: {field: data, as: image, channels: 3}
        """)
    p = sluice.Pipeline(spec)
    next(p)
    with pytest.raises(sluice.PipelineError) as e:
        next(p)
    assert "1.jpg" in str(e.value) and "decode_image" in str(e.value)
    with pytest.raises(StopIteration):  # stopped after the error
        next(p)


def test_budget_error(image_spec):
    # The budget is named by the argument that set it, not the spec's key.
    with pytest.raises(sluice.PipelineError,
                       match=r"the memory budget \(--memory, memory= in Python\) 1 KiB"):
        list(sluice.Pipeline(image_spec, memory="1KiB"))


SIGINT_SCRIPT = r"""
import sys, time, sluice
p = sluice.Pipeline(sys.argv[1], epochs=-1)
n = 0
try:
    for b in p:
        n += 1
        if n == 3:
            print("ready", flush=True)
except KeyboardInterrupt:
    print("interrupted after", n, flush=True)
    sys.exit(42)
"""


def test_ctrl_c_stops_iteration_promptly(image_spec, tmp_path):
    script = write(tmp_path / "loop.py", SIGINT_SCRIPT)
    proc = subprocess.Popen([sys.executable, script, image_spec],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.3)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
        elapsed = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 42, out
    assert "interrupted after" in out
    assert elapsed < 10


SLOW_BATCH_SCRIPT = r"""
import gc, sys, time, sluice

def threads():
    with open("/proc/self/status") as f:
        return int(next(l for l in f if l.startswith("Threads:")).split()[1])

spec = sys.argv[1]
# One whole batch, uninterrupted: how long assembling one takes. Closing
# it leaves oneTBB's worker pool warm, so the thread count below is the
# baseline a stopped pipeline must return to.
t0 = time.monotonic()
p = sluice.Pipeline(spec, epochs=1)
next(p)
batch_s = time.monotonic() - t0
p.close()
del p
gc.collect()
base = threads()
p = sluice.Pipeline(spec, epochs=1)
print("ready %.3f" % batch_s, flush=True)
try:
    next(p)
    print("finished", flush=True)
except KeyboardInterrupt:
    stamp = time.monotonic()
    del p
    gc.collect()
    # oneTBB's workers leave on their own shortly after the pipeline's
    # arena is gone; a thread still there after 5 s hangs.
    deadline = time.monotonic() + 5
    while threads() > base and time.monotonic() < deadline:
        time.sleep(0.05)
    after = threads()
    # The module still works after an interrupt.
    q = sluice.Pipeline(spec, epochs=1, threads=1)
    q.close()
    print("interrupted %.6f %d %d" % (stamp, base, after), flush=True)
    sys.exit(42)
"""


def test_ctrl_c_interrupts_a_batch_being_assembled(tmp_path):
    """A batch of 160 decodes of a 2000x1500 JPEG takes seconds; SIGINT
    half a second into it raises KeyboardInterrupt within a second (the
    cancel reaches into the batch being filled), the process is back to its
    threads from before the pipeline (none hangs), and it exits."""
    from PIL import Image
    import numpy as np
    root = tmp_path / "big" / "a"
    root.mkdir(parents=True)
    rng = np.random.default_rng(1)
    for i in range(4):
        yy, xx = np.mgrid[0:1500, 0:2000].astype(np.float32)
        img = np.stack([128 + 90 * np.sin(0.003 * (c + 2) * xx + i) *
                        np.cos(0.004 * yy) for c in range(3)], -1)
        img += rng.normal(0, 20, img.shape)
        Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(
            root / ("%d.jpg" % i), quality=92)
    spec = write(tmp_path / "slow.yaml", """
        pipeline: slow_batches
        source:
          image_folder: {root: %s, extensions: [jpg]}
        steps:
          - repeat: 100
          - decode_image: {field: data, as: image, channels: 3}
          - resize: {field: image, size: [64, 64]}
          - select: [image, label]
          - batch: {size: 160}
        budget: {cores: 2, memory: 512MiB}
        """ % (tmp_path / "big"))
    script = write(tmp_path / "slow.py", SLOW_BATCH_SCRIPT)
    proc = subprocess.Popen([sys.executable, script, spec],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        line = proc.stdout.readline().split()
        assert line and line[0] == "ready", proc.stderr.read()
        batch_s = float(line[1])
        time.sleep(0.5)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 42, out + err
    fields = out.split()
    assert fields[0] == "interrupted", out + err
    latency = float(fields[1]) - sent
    base, after = int(fields[2]), int(fields[3])
    # The interrupt landed inside the batch: it takes seconds to build.
    assert batch_s > 1.5, batch_s
    assert latency < 1.0, (latency, batch_s)
    assert after <= base, (base, after)


def test_gil_is_released_while_the_runtime_works(tmp_path):
    """The first batch of an idx source with `shuffle: true` loads all 60000
    records (hundreds of ms in the runtime). A Python thread keeps running
    meanwhile: its longest pause is far shorter than the call."""
    import threading
    spec = write(tmp_path / "gil.yaml", """
        pipeline: gil
        source:
          idx:
            images: /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz
            labels: /usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz
            shuffle: true
        steps:
          - batch: {size: 10}
        budget: {cores: 2, memory: 512MiB}
        """)
    p = sluice.Pipeline(spec)
    done = threading.Event()
    took = []

    def consume():
        t0 = time.monotonic()
        next(p)
        took.append(time.monotonic() - t0)
        done.set()

    t = threading.Thread(target=consume)
    last = time.monotonic()
    gap = 0.0
    t.start()
    while not done.is_set():
        now = time.monotonic()
        gap = max(gap, now - last)
        last = now
    t.join()
    assert took[0] > 0.1, "the call was too short to tell"
    assert gap < took[0] / 2, (gap, took[0])


def test_flat_expression_of_20000_terms_is_a_located_error(tmp_path):
    # `x+x+...` nests as deep as it is long; sluice.check crashed (SIGSEGV)
    # in the passes after the parser. In a subprocess: a crash fails the
    # test instead of ending pytest.
    spec = tmp_path / "long.yaml"
    spec.write_text(
        "pipeline: x\nsource: {csv: {files: x.csv, columns: "
        "[{name: a, type: f32}]}}\nsteps:\n  - map: {field: a, expr: \"" +
        "+".join(["x"] * 20000) + "\"}\n")
    code = ("import sluice\n"
            "try:\n"
            "    sluice.check(%r)\n"
            "except sluice.SpecError as e:\n"
            "    print(str(e).splitlines()[0])\n" % str(spec))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "long.yaml:4:539: error: the expression is nested more than " \
           "256 operations deep here" in r.stdout


def test_spec_that_is_a_device_or_a_fifo(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    code = ("import sluice\n"
            "for path in ('/dev/zero', %r):\n"
            "    try:\n"
            "        sluice.Pipeline(path)\n"
            "    except sluice.SpecError as e:\n"
            "        print(e)\n" % str(fifo))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "'/dev/zero' is a character device, not a file" in r.stdout
    assert "fifo' is a FIFO (named pipe), not a file" in r.stdout
