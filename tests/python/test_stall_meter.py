"""The stall meter (how long the consumer waited for each output, and the
pipeline's headspace while the consumer worked) in pipe.stats(), the torch
Dataset, `sluice run --stats/--stats-json`, its Prometheus exports (a file,
and a server on 127.0.0.1 scraped while the run lasts), prometheus_client
and TensorBoard-style scalars from Python, and `sluice tune --consumer`.
Waits are counted, not timed tightly: a consumer much slower than the
pipeline sees (almost) no stalls, a consumer much faster sees (almost)
only stalls."""
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request

import numpy as np
import pytest

import sluice
from conftest import SLUICE_BIN, write


@pytest.fixture(scope="module")
def big_images(tmp_path_factory):
    """48 JPEGs of 320x320 (noise over gradients: slow to decode)."""
    from PIL import Image
    root = tmp_path_factory.mktemp("big")
    rng = np.random.default_rng(9)
    for label in range(2):
        d = root / ("c%d" % label)
        d.mkdir()
        for i in range(24):
            img = rng.integers(0, 256, (320, 320, 3), dtype=np.uint8)
            Image.fromarray(img).save(d / ("%02d.jpg" % i), quality=95)
    return root


@pytest.fixture(scope="module")
def slow_spec(big_images, tmp_path_factory):
    """A pipeline that is slow next to a consumer that does nothing: every
    batch decodes 12 large noisy JPEGs on one thread."""
    d = tmp_path_factory.mktemp("slow")
    return write(d / "slow.yaml", """
        pipeline: slow
        seed: 1
        source:
          image_folder: {root: %s, extensions: [jpg]}
        steps:
          - decode_image: {field: data, as: image, channels: 3}
          - center_crop: {field: image, size: [256, 256]}
          - select: [image, label]
          - batch: {size: 12, drop_remainder: true}
        epochs: 2
        budget: {cores: 1, memory: 256MiB}
        """ % big_images)


def test_a_slow_consumer_does_not_wait(fashion_spec):
    pipe = sluice.Pipeline(fashion_spec, threads=2)
    n = 0
    for _ in pipe:
        time.sleep(0.03)  # a training step far slower than the pipeline
        n += 1
    c = pipe.stats()["consumer"]
    assert c["outputs"] == n == 32
    # Start-up aside, the batches were ready when asked for.
    assert c["stalls"] <= 3, c
    assert c["away_seconds"] >= 0.03 * (n - 1)
    assert c["headspace_seconds"] >= 0.8 * c["away_seconds"], c
    assert c["mean_wait_seconds"] < c["away_seconds"] / (n - 1) / 10, c


def test_a_slow_pipeline_makes_the_consumer_wait(slow_spec):
    pipe = sluice.Pipeline(slow_spec)
    n = sum(1 for _ in pipe)
    c = pipe.stats()["consumer"]
    assert c["outputs"] == n == 8
    assert c["stalls"] >= n - 2, c
    assert c["wait_seconds"] > 0 and c["max_wait_seconds"] > 0.001
    assert c["headspace_seconds"] <= c["away_seconds"]


def test_the_torch_dataset_reports_its_waits(fashion_spec):
    pytest.importorskip("torch")
    import sluice.metrics
    import sluice.torch
    ds = sluice.torch.Dataset(fashion_spec, threads=2)
    for _ in ds:
        time.sleep(0.02)
    c = ds.stats()["consumer"]
    assert c["outputs"] == 32 and c["stalls"] <= 3, c

    class Writer:  # what torch.utils.tensorboard.SummaryWriter offers
        def __init__(self):
            self.logged = {}

        def add_scalar(self, name, value, step):
            self.logged[name] = (value, step)

    w = Writer()
    sluice.metrics.add_scalars(w, ds, 7)
    assert w.logged["sluice/consumer_stalls"] == (c["stalls"], 7)
    assert w.logged["sluice/outputs"] == (32.0, 7)
    assert w.logged["sluice/consumer_mean_wait_ms"][0] == \
        pytest.approx(c["mean_wait_seconds"] * 1e3)


def test_prometheus_client_collector(fashion_spec):
    prometheus_client = pytest.importorskip("prometheus_client")
    import sluice.metrics
    from prometheus_client.parser import text_string_to_metric_families
    registry = prometheus_client.CollectorRegistry()
    pipe = sluice.Pipeline(fashion_spec)
    sluice.metrics.register(pipe, registry)
    for _ in pipe:
        pass
    text = prometheus_client.generate_latest(registry).decode()
    samples = {s.name: s for f in text_string_to_metric_families(text)
               for s in f.samples}
    assert samples["sluice_outputs_total"].value == 32
    assert samples["sluice_outputs_total"].labels == {"pipeline": "fashion"}
    assert samples["sluice_consumer_stalls_total"].value == \
        pipe.stats()["consumer"]["stalls"]


def parse_exposition(text):
    """The samples of Prometheus text, parsed by prometheus_client's own
    parser (so the C++ writer is checked against the format)."""
    from prometheus_client.parser import text_string_to_metric_families
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_sluice_run_stats_and_metrics_file(slow_spec, tmp_path):
    pytest.importorskip("prometheus_client")
    stats_json = tmp_path / "stats.json"
    metrics = tmp_path / "metrics.prom"
    r = subprocess.run([SLUICE_BIN, "run", slow_spec, "--stats", "-q",
                        "--stats-json", str(stats_json),
                        "--metrics-file", str(metrics)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "consumer: first output after" in r.stdout
    assert "outputs stalled" in r.stdout
    c = json.loads(stats_json.read_text())["consumer"]
    assert c["outputs"] == 8
    got = parse_exposition(metrics.read_text())
    base = (("pipeline", "slow"),)
    assert got[("sluice_outputs_total", base)] == 8
    assert got[("sluice_consumer_stalls_total", base)] == c["stalls"]
    assert got[("sluice_stage_read_total",
                tuple(sorted(base + (("stage", "decode_image"),))))] == 96
    assert not [p for p in os.listdir(tmp_path) if ".tmp." in p]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_sluice_run_serves_metrics_while_it_runs(fashion_spec, tmp_path):
    pytest.importorskip("prometheus_client")
    port = free_port()
    metrics = tmp_path / "final.prom"
    proc = subprocess.Popen(
        [SLUICE_BIN, "run", fashion_spec, "--epochs", "100000", "-q",
         "--metrics-port", str(port), "--metrics-file", str(metrics)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        text = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(
                        "http://127.0.0.1:%d/metrics" % port,
                        timeout=5) as resp:
                    assert resp.headers["Content-Type"].startswith(
                        "text/plain; version=0.0.4")
                    text = resp.read().decode()
                got = parse_exposition(text)
                if got[("sluice_outputs_total",
                        (("pipeline", "fashion"),))] > 0:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        assert text is not None, "nothing served on port %d" % port
        assert got[("sluice_outputs_total", (("pipeline", "fashion"),))] > 0
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    final = parse_exposition(metrics.read_text())
    assert final[("sluice_outputs_total", (("pipeline", "fashion"),))] >= \
        got[("sluice_outputs_total", (("pipeline", "fashion"),))]


def test_metrics_port_in_use_is_a_clear_error(fashion_spec):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        r = subprocess.run([SLUICE_BIN, "run", fashion_spec, "-q",
                            "--metrics-port", str(port)],
                           capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "cannot listen on 127.0.0.1:%d" % port in r.stderr
    bad = subprocess.run([SLUICE_BIN, "run", fashion_spec,
                          "--metrics-port", "70000"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "[1, 65535]" in bad.stderr


def test_metrics_server_module_is_loaded_only_for_a_port(fashion_spec,
                                                        tmp_path):
    """The --metrics-port server (cpp-httplib, which Debian builds with
    OpenSSL and brotli) lives in libsluice_metrics_http.so, loaded when a
    run asks for a port: a run without one loads none of it, a compiled
    executable finds the module too, and a module that cannot be loaded is
    a clear error (exit 2) that names the way around it."""
    env = dict(os.environ, LD_DEBUG="files")
    plain = subprocess.run([SLUICE_BIN, "run", fashion_spec, "-q",
                            "--epochs", "1", "--sink", "null"],
                           capture_output=True, text=True, timeout=120,
                           env=env)
    assert plain.returncode == 0, plain.stderr[-2000:]
    assert "libcpp-httplib" not in plain.stderr
    assert "libsluice_metrics_http" not in plain.stderr
    assert "libssl" not in plain.stderr

    exe = tmp_path / "fashion"
    subprocess.run([SLUICE_BIN, "compile", "-q", fashion_spec, "-o", str(exe)],
                   check=True, timeout=300)
    served = subprocess.run([str(exe), "-q", "--epochs", "1", "--sink", "null",
                             "--metrics-port", str(free_port())],
                            capture_output=True, text=True, timeout=120,
                            env=env)
    assert served.returncode == 0, served.stderr[-2000:]
    assert "libsluice_metrics_http.so" in served.stderr
    assert "libcpp-httplib" in served.stderr

    missing = subprocess.run(
        [SLUICE_BIN, "run", fashion_spec, "-q", "--metrics-port",
         str(free_port())], capture_output=True, text=True, timeout=120,
        env=dict(os.environ, SLUICE_METRICS_HTTP=str(tmp_path / "none.so")))
    assert missing.returncode == 2, missing.stderr
    assert "the HTTP server module libsluice_metrics_http.so could not be " \
        "loaded" in missing.stderr
    assert "none.so" in missing.stderr and "--metrics-file" in missing.stderr


def test_tune_report_judges_a_consumer_run(fashion_spec, slow_spec, tmp_path):
    """`sluice tune --consumer STATS` says whether that run's consumer
    waited: a slow training step that never waited needs no more cores."""
    pipe = sluice.Pipeline(fashion_spec, threads=2)
    for _ in pipe:
        time.sleep(0.02)
    stats = tmp_path / "consumer.json"
    stats.write_text(json.dumps(pipe.stats()))
    report = tmp_path / "report"
    r = subprocess.run([SLUICE_BIN, "tune", fashion_spec, "--seconds", "0.3",
                        "--consumer", str(stats), "--report", str(report)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    j = json.loads((report / "report.json").read_text())
    assert "did not wait for data" in j["consumer"]["verdict"]
    assert j["consumer"]["outputs"] == 32
    # The consumer took ~50 batches of 64 per second on its own.
    assert 0 < j["consumer"]["demand_records_per_second"] < 64 / 0.02
    assert "## Consumer" in (report / "report.md").read_text()
    # Stats of another pipeline are refused before any profiling.
    other = subprocess.run([SLUICE_BIN, "tune", slow_spec, "--consumer",
                            str(stats)], capture_output=True, text=True,
                           timeout=60)
    assert other.returncode == 2
    assert "the stats are of pipeline 'fashion', not 'slow'" in other.stderr
    bad = tmp_path / "bad.json"
    bad.write_text('{"pipeline": "fashion"}')
    r = subprocess.run([SLUICE_BIN, "tune", fashion_spec, "--consumer",
                        str(bad)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "stall meter" in r.stderr
