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
    with pytest.raises(sluice.PipelineError, match="budget.memory"):
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
