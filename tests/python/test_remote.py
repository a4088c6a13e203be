"""Sources over remote objects: every file-reading source reads s3:// (s3rver,
an S3 API server) and http:// (nginx, range requests) URLs and gives exactly
the records the same files give locally; missing objects, 403s, 5xx (retried),
truncated bodies and objects that change mid-read are located errors under
on_error; resume states name the URLs; the secret key never appears in any
output. The servers run on 127.0.0.1, started and stopped here."""
import glob
import io
import json
import os
import re
import struct
import subprocess
import tarfile
import textwrap

import numpy as np
import pytest

import sluice
from conftest import SLUICE_BIN, batches_equal, write
import remote_servers
from remote_servers import BUCKET, ACCESS_KEY, SECRET_KEY

WHY = remote_servers.why_unavailable()
pytestmark = pytest.mark.skipif(WHY is not None, reason=WHY or "")

# Small chunks and a few in flight: every shard is read as many ranged
# requests, several at once.
REMOTE_OPTS = "{endpoint: %s, concurrency: 3, chunk_size: 4KiB, retries: 4}"


# --- data written by the test ------------------------------------------------

def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def tfrecord(payloads):
    out = io.BytesIO()
    for p in payloads:
        n = struct.pack("<Q", len(p))
        out.write(n + struct.pack("<I", masked(n)) + p +
                  struct.pack("<I", masked(p)))
    return out.getvalue()


def varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def example(data, label):
    """A tf.train.Example with data (bytes) and label (int64)."""
    def feature_entry(key, feature):
        k = key.encode()
        entry = b"\x0a" + varint(len(k)) + k + b"\x12" + varint(len(feature)) + feature
        return b"\x0a" + varint(len(entry)) + entry
    bytes_list = b"\x0a" + varint(len(data)) + data
    f_bytes = b"\x0a" + varint(len(bytes_list)) + bytes_list
    int_list = b"\x0a" + varint(len(varint(label))) + varint(label)
    f_int = b"\x1a" + varint(len(int_list)) + int_list
    features = feature_entry("data", f_bytes) + feature_entry("label", f_int)
    return b"\x0a" + varint(len(features)) + features


def tar_shard(samples):
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as t:
        for key, members in samples:
            for ext, data in members:
                info = tarfile.TarInfo("%s.%s" % (key, ext))
                info.size = len(data)
                info.mtime = 0
                t.addfile(info, io.BytesIO(data))
    return out.getvalue()


@pytest.fixture(scope="session")
def dataset(image_root, tmp_path_factory):
    """{relative name: bytes}: images, tar shards, TFRecords, CSV, text, npy."""
    rng = np.random.default_rng(11)
    files = {}
    for path in sorted(glob.glob(str(image_root / "*" / "*.jpg"))):
        rel = os.path.relpath(path, str(image_root))
        with open(path, "rb") as f:
            files["images/" + rel] = f.read()
    jpgs = [v for k, v in sorted(files.items())]
    for s in range(3):
        files["shards/shard-%03d.tar" % s] = tar_shard(
            [("s%d_%03d" % (s, i), [("jpg", jpgs[(s * 7 + i) % len(jpgs)]),
                                    ("cls", b"%d" % ((s + i) % 5))])
             for i in range(6)])
    for s in range(2):
        files["tfr/part-%d.tfrecord" % s] = tfrecord(
            [example(rng.bytes(int(rng.integers(100, 3000))), s * 100 + i)
             for i in range(20)])
    for s in range(2):
        rows = ["%d,%s,%.6f" % (i, "w%d" % rng.integers(0, 1000), rng.normal())
                for i in range(2500)]
        files["csv/day-%d.csv" % s] = ("id,word,x\n" + "\n".join(rows) +
                                       "\n").encode()
    files["text/lines.txt"] = "\n".join(
        "line %d %s" % (i, "x" * int(rng.integers(0, 90)))
        for i in range(1500)).encode()
    buf = io.BytesIO()
    np.save(buf, rng.normal(size=(300, 7)).astype(np.float32))
    files["npy/feat.npy"] = buf.getvalue()
    return files


@pytest.fixture(scope="session")
def servers(dataset, tmp_path_factory):
    s = remote_servers.Servers(tmp_path_factory.mktemp("servers")).start()
    local = tmp_path_factory.mktemp("local")
    for rel, data in dataset.items():
        s.put_http(rel, data)
        os.makedirs(os.path.dirname(str(local / rel)), exist_ok=True)
        with open(str(local / rel), "wb") as f:
            f.write(data)
    s.put_s3(dataset)
    s.local = str(local)
    yield s
    s.stop()


@pytest.fixture(autouse=True)
def credentials(monkeypatch, tmp_path):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))


# --- the sources -------------------------------------------------------------

SOURCES = {
    "image_folder": ("image_folder: {root: '%(images)s', extensions: [jpg], "
                     "remote: %(remote)s}", "[data, label]"),
    "files": ("files: {files: '%(files)s', remote: %(remote)s}", "[data]"),
    "webdataset": ("webdataset: {files: '%(shards)s', remote: %(remote)s, "
                   "fields: [{ext: jpg, name: data}, "
                   "{ext: cls, name: label, type: i64}]}", "[key, data, label]"),
    "tfrecord": ("tfrecord: {files: '%(tfr)s', remote: %(remote)s, features: "
                 "[{name: data, type: bytes}, {name: label, type: i64}]}",
                 "[data, label]"),
    "csv": ("csv: {files: '%(csv)s', header: true, remote: %(remote)s, columns: "
            "[{name: id, type: i64}, {name: word, type: string}, "
            "{name: x, type: f32}]}", "[id, word, x]"),
    "text_lines": ("text_lines: {files: '%(text)s', remote: %(remote)s}",
                   "[line]"),
    # The type of remote npy files is given: the spec is checked before
    # anything is fetched.
    "npy": ("npy: {files: '%(npy)s', field: f, dtype: f32, shape: [7], "
            "remote: %(remote)s}", "[f]"),
}


def places(base, kind):
    """The file parameters of each source under `base` (local dir, s3:// or
    http://), as globs where S3 and local files can list, brace lists over
    HTTP."""
    http = kind == "http"
    return {
        "images": base + "/images",
        "files": base + ("/images/class1/img{00..15}.jpg" if http
                         else "/images/class1/*.jpg"),
        "shards": base + ("/shards/shard-{000..002}.tar" if http
                          else "/shards/shard-*.tar"),
        "tfr": base + ("/tfr/part-{0,1}.tfrecord" if http
                       else "/tfr/part-?.tfrecord"),
        "csv": base + ("/csv/day-{0..1}.csv" if http else "/csv/day-*.csv"),
        "text": base + "/text/lines.txt",
        "npy": base + "/npy/feat.npy",
    }


def spec_for(tmp_path, name, source, select, where, remote, extra=""):
    values = dict(places(*where))
    values["remote"] = remote
    text = """
pipeline: remote_%s
seed: 5
source:
  %s
steps:
  - select: %s
%s  - batch: {size: 7}
epochs: 2
budget: {cores: 2, memory: 256MiB}
""" % (name, source % values, select, extra)
    path = tmp_path / ("%s_%s.yaml" % (name, where[1]))
    path.write_text(text)
    return str(path)


def local_and_remote(servers, tmp_path, name, kind, extra=""):
    source, select = SOURCES[name]
    local = spec_for(tmp_path, name, source, select, (servers.local, "local"),
                     "{}", extra)
    if kind == "s3":
        base, remote = "s3://" + BUCKET, REMOTE_OPTS % servers.s3_endpoint
    else:
        base, remote = servers.http, \
            "{concurrency: 3, chunk_size: 4KiB, retries: 4}"
    return local, spec_for(tmp_path, name, source, select, (base, kind),
                           remote, extra)


def run_all(spec):
    return list(sluice.Pipeline(spec))


CASES = [(n, k) for n in SOURCES for k in ("s3", "http")
         if not (n == "image_folder" and k == "http")]


@pytest.mark.parametrize("name,kind", CASES)
def test_remote_records_equal_local(servers, tmp_path, name, kind):
    local, remote = local_and_remote(servers, tmp_path, name, kind)
    want, got = run_all(local), run_all(remote)
    assert len(want) == len(got) > 0
    assert all(batches_equal(a, b) for a, b in zip(want, got))


@pytest.mark.parametrize("name", ["image_folder", "files"])
def test_shuffled_per_file_sources_equal_local(servers, tmp_path, name):
    # shuffle: true reads by position in a permuted order: the GETs ahead
    # follow it.
    source, select = SOURCES[name]
    source = source.replace("remote:", "shuffle: true, remote:")
    local = spec_for(tmp_path, name, source, select, (servers.local, "local"),
                     "{}")
    remote = spec_for(tmp_path, name, source, select, ("s3://" + BUCKET, "s3"),
                      REMOTE_OPTS % servers.s3_endpoint)
    want, got = run_all(local), run_all(remote)
    assert len(want) == len(got) > 0
    assert all(batches_equal(a, b) for a, b in zip(want, got))


def test_paths_name_the_objects(servers, tmp_path):
    source = ("image_folder: {root: s3://%s/images, extensions: [jpg], "
              "remote: %s}" % (BUCKET, REMOTE_OPTS % servers.s3_endpoint))
    spec = tmp_path / "paths.yaml"
    spec.write_text("pipeline: p\nsource:\n  %s\nsteps:\n  - batch: {size: 48}\n"
                    % source)
    b = next(iter(sluice.Pipeline(str(spec))))
    assert b["path"][0] == "s3://%s/images/class0/img00.jpg" % BUCKET
    assert list(b["label"][:3]) == [0, 0, 0] and b["label"][-1] == 2


def test_endpoint_from_the_environment(servers, tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", servers.s3_endpoint)
    local, remote = local_and_remote(servers, tmp_path, "text_lines", "s3")
    text = open(remote).read().replace("endpoint: %s, " % servers.s3_endpoint,
                                       "")
    assert "endpoint" not in text
    open(remote, "w").write(text)
    assert all(batches_equal(a, b)
               for a, b in zip(run_all(local), run_all(remote)))


def test_credentials_from_a_profile(servers, tmp_path, monkeypatch):
    creds = tmp_path / "credentials"
    creds.write_text("[default]\naws_access_key_id = NOPE\n"
                     "aws_secret_access_key = x\n\n[test]\n"
                     "aws_access_key_id = %s\naws_secret_access_key = %s\n"
                     % (ACCESS_KEY, SECRET_KEY))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    local, remote = local_and_remote(servers, tmp_path, "csv", "s3")
    # The default profile's key is unknown to the server: 403.
    with pytest.raises(Exception, match="403.*InvalidAccessKeyId"):
        run_all(remote)
    monkeypatch.setenv("AWS_PROFILE", "test")
    assert all(batches_equal(a, b)
               for a, b in zip(run_all(local), run_all(remote)))


# --- patterns ----------------------------------------------------------------

def test_http_glob_is_refused_with_the_brace_form(servers, tmp_path):
    spec = tmp_path / "glob.yaml"
    spec.write_text("pipeline: g\nsource:\n  files: %s/shards/*.tar\n"
                    % servers.http)
    with pytest.raises(Exception) as e:
        sluice.Pipeline(str(spec))
    assert "HTTP has no listing" in str(e.value)
    assert "shard-{000000..000099}.tar" in str(e.value)


def test_s3_listing_is_paginated(servers, tmp_path):
    # 1,100 keys: more than one ListObjectsV2 page (1,000 keys).
    servers.put_s3({"many/k%04d.txt" % i: b"%d\n" % i for i in range(1100)})
    spec = tmp_path / "many.yaml"
    spec.write_text("pipeline: m\nsource:\n  text_lines: {files: 's3://%s/many/k*.txt', "
                    "remote: {endpoint: %s, concurrency: 16}}\nsteps:\n"
                    "  - batch: {size: 1100}\n" % (BUCKET, servers.s3_endpoint))
    b = list(sluice.Pipeline(str(spec)))
    assert len(b) == 1
    assert [int(x) for x in b[0]["line"]] == list(range(1100))


def test_s3_glob_that_matches_nothing(servers, tmp_path):
    spec = tmp_path / "none.yaml"
    spec.write_text("pipeline: n\nsource:\n  files: {files: 's3://%s/shards/*.zip',"
                    " remote: {endpoint: %s}}\n" % (BUCKET, servers.s3_endpoint))
    with pytest.raises(Exception, match="matched no objects"):
        sluice.Pipeline(str(spec))


# --- errors ------------------------------------------------------------------

def error_of(spec):
    r = subprocess.run([SLUICE_BIN, "run", spec, "--sink", "null"],
                       capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def one_file_spec(tmp_path, url, remote, on_error="fail", kind="text_lines"):
    spec = tmp_path / "one.yaml"
    spec.write_text("pipeline: one\nsource:\n  %s: {files: '%s', on_error: %s, "
                    "remote: %s}\nsteps:\n  - batch: {size: 10}\n"
                    % (kind, url, on_error, remote))
    return str(spec)


@pytest.mark.parametrize("kind", ["s3", "http"])
def test_missing_object_is_a_located_error(servers, tmp_path, kind):
    if kind == "s3":
        url, remote = "s3://%s/text/nope.txt" % BUCKET, \
            "{endpoint: %s}" % servers.s3_endpoint
    else:
        url, remote = servers.http + "/text/nope.txt", "{}"
    rc, out = error_of(one_file_spec(tmp_path, url, remote))
    assert rc == 1
    assert re.search(re.escape(url) + r": record 0: text_lines: cannot read "
                     r"file: cannot open: HTTP 404", out), out
    rc, out = error_of(one_file_spec(tmp_path, url, remote, "skip"))
    assert rc == 0, out


def test_forbidden_is_a_located_error(servers, tmp_path, monkeypatch):
    rc, out = error_of(one_file_spec(tmp_path, servers.http +
                                     "/forbidden/x.txt", "{}"))
    assert rc == 1 and "HTTP 403" in out and "/forbidden/x.txt" in out
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "NOPE")
    url = "s3://%s/text/lines.txt" % BUCKET
    rc, out = error_of(one_file_spec(tmp_path, url, "{endpoint: %s}"
                                     % servers.s3_endpoint))
    assert rc == 1 and "HTTP 403 (InvalidAccessKeyId" in out and url in out


@pytest.mark.parametrize("kind", ["s3", "http"])
def test_server_errors_are_retried_and_counted(servers, tmp_path, kind):
    proxy = servers.s3_proxy if kind == "s3" else servers.http_proxy
    name = "tfrecord"
    local, remote = local_and_remote(servers, tmp_path, name, kind)
    text = open(remote).read()
    text = text.replace(servers.s3_endpoint if kind == "s3" else servers.http,
                        proxy)
    open(remote, "w").write(text)
    # Two 503s for each of the first requests of part-1, one 429.
    servers.rules(proxy, [{"match": "part-1", "status": 503, "times": 3},
                          {"match": "part-0", "status": 429, "times": 1}])
    p = sluice.Pipeline(remote)
    got = list(p)
    assert all(batches_equal(a, b) for a, b in zip(run_all(local), got))
    st = p.stats()
    assert st["remote"]["retries"] == 4, st["remote"]
    assert st["remote"]["failures"] == 0
    # Past the retries the error is located and says how often it tried.
    servers.rules(proxy, [{"match": "part-1", "status": 500, "times": 100}])
    rc, out = error_of(remote)
    servers.rules(proxy, [])
    assert rc == 1
    assert re.search(r"part-1.tfrecord: record 0: tfrecord: cannot read "
                     r"file: cannot open: HTTP 500", out), out
    assert "HTTP 500" in out and "after 5 attempts" in out


@pytest.mark.parametrize("kind", ["s3", "http"])
def test_truncated_body_is_an_error_not_a_short_read(servers, tmp_path, kind):
    proxy = servers.s3_proxy if kind == "s3" else servers.http_proxy
    base = ("s3://%s" % BUCKET) if kind == "s3" else proxy
    remote = ("{endpoint: %s, retries: 2, chunk_size: 4KiB}" % proxy
              if kind == "s3" else "{retries: 2, chunk_size: 4KiB}")
    spec = one_file_spec(tmp_path, base + "/csv/day-1.csv", remote, kind="csv")
    text = open(spec).read().replace(
        "on_error: fail,", "on_error: fail, header: true, columns: "
        "[{name: id, type: i64}, {name: word, type: string}, "
        "{name: x, type: f32}],")
    open(spec, "w").write(text)
    servers.rules(proxy, [{"match": "day-1", "truncate": True}])
    try:
        rc, out = error_of(spec)
    finally:
        servers.rules(proxy, [])
    assert rc == 1, out
    assert "day-1.csv" in out and "truncated body" in out
    assert "after 3 attempts" in out
    rc, out = error_of(spec)
    assert rc == 0, out


@pytest.mark.parametrize("kind", ["s3", "http"])
def test_object_changed_mid_read_is_an_error(servers, tmp_path, kind):
    # A 3.5 MB object read 64 KiB at a time, 2 in flight: the reader holds
    # at most a 1 MiB buffer and a few records ahead, so after the first
    # batch most of the object is still to be fetched; replaced then, the
    # rest comes from another version (another ETag).
    rows = "".join("line %07d\n" % i for i in range(300000)).encode()
    key = "change/%s.txt" % kind
    if kind == "s3":
        servers.put_s3({key: rows})
        url, remote = "s3://%s/%s" % (BUCKET, key), \
            "{endpoint: %s, concurrency: 2, chunk_size: 64KiB}" % servers.s3_endpoint
    else:
        servers.put_http(key, rows)
        url, remote = servers.http + "/" + key, \
            "{concurrency: 2, chunk_size: 64KiB}"
    spec = tmp_path / "change.yaml"
    spec.write_text("pipeline: c\nsource:\n  text_lines: {files: '%s', "
                    "remote: %s}\nsteps:\n  - batch: {size: 10}\n"
                    % (url, remote))
    p = sluice.Pipeline(str(spec))
    next(p)
    changed = rows.replace(b"line", b"LINE")
    if kind == "s3":
        servers.put_s3({key: changed})
    else:
        # nginx's ETag is the modification time (seconds) and size.
        servers.put_http(key, changed)
        t = os.stat(os.path.join(servers.www, key)).st_mtime + 100
        os.utime(os.path.join(servers.www, key), (t, t))
    with pytest.raises(Exception) as e:
        list(p)
    assert "the object changed while being read" in str(e.value)
    assert url in str(e.value)


# --- resume and secrets ------------------------------------------------------

def test_resume_state_names_the_objects(servers, tmp_path):
    local, remote = local_and_remote(servers, tmp_path, "webdataset", "s3")
    full = run_all(remote)
    p = sluice.Pipeline(remote)
    head = [next(p) for _ in range(3)]
    state = p.state_dict()
    text = json.dumps(state)
    assert servers.local not in text
    q = sluice.Pipeline(remote)
    q.load_state_dict(state)
    rest = list(q)
    assert len(head) + len(rest) == len(full)
    assert all(batches_equal(a, b) for a, b in zip(full, head + rest))


def test_cli_resume_and_no_secret_in_any_output(servers, tmp_path,
                                                monkeypatch):
    monkeypatch.setenv("AWS_SESSION_TOKEN", "sluice-token-55aa")
    _, remote = local_and_remote(servers, tmp_path, "tfrecord", "s3")
    outputs = []
    state = tmp_path / "state.json"
    r = subprocess.run([SLUICE_BIN, "run", remote, "--sink", "null", "--stats",
                        "--save-state", str(state), "--stop-after", "3"],
                       capture_output=True, text=True)
    outputs += [r.stdout, r.stderr, state.read_text()]
    assert r.returncode == 0, r.stderr
    # The state says where the run stands in the source's order (the
    # objects, not a local copy of them).
    assert servers.local not in state.read_text()
    full = subprocess.run([SLUICE_BIN, "run", remote, "--sink", "null"],
                          capture_output=True, text=True)
    assert re.search(r"^(\d+) outputs", full.stdout + full.stderr, re.M)
    r = subprocess.run([SLUICE_BIN, "run", remote, "--sink", "null",
                        "--resume", str(state), "--stats-json",
                        str(tmp_path / "stats.json")],
                       capture_output=True, text=True)
    outputs += [r.stdout, r.stderr]
    assert r.returncode == 0, r.stderr
    total = int(re.search(r"^(\d+) outputs", full.stdout + full.stderr,
                          re.M).group(1))
    assert re.search(r"^%d outputs" % (total - 3), r.stdout + r.stderr, re.M), \
        r.stdout + r.stderr
    if (tmp_path / "stats.json").exists():
        outputs.append((tmp_path / "stats.json").read_text())
    # Errors: a missing object and a 403.
    rc, out = error_of(one_file_spec(tmp_path, "s3://%s/nope" % BUCKET,
                                     "{endpoint: %s}" % servers.s3_endpoint))
    outputs.append(out)
    p = sluice.Pipeline(remote)
    next(p)
    outputs.append(json.dumps(p.state_dict()))
    outputs.append(json.dumps(p.stats()))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "NOPE")
    rc, out = error_of(remote)
    assert rc == 1 and "403" in out
    outputs.append(out)
    everything = "\n".join(outputs)
    assert re.search(r"source: up to \d+ requests in flight, [\d.]+ ms "
                     r"median latency", everything)  # the stats line
    assert SECRET_KEY not in everything
    assert "sluice-token-55aa" not in everything

