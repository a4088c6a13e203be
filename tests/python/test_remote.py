"""Sources over remote objects: every file-reading source reads s3:// (s3rver,
an S3 API server, also at an https endpoint) and http:// and https:// (nginx,
range requests; TLS with a certificate from a CA made by the fixture) URLs
and gives exactly the records the same files give locally; an untrusted
certificate is refused; missing objects, 403s, 5xx (retried),
truncated bodies and objects that change mid-read are located errors under
on_error; resume states name the URLs; the secret key never appears in any
output. The servers run on 127.0.0.1, started and stopped here."""
import calendar
import glob
import hashlib
import hmac
import http.server
import io
import json
import os
import pickle
import re
import struct
import subprocess
import sys
import tarfile
import textwrap
import threading
import time
import urllib.parse

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
    monkeypatch.delenv("AWS_CA_BUNDLE", raising=False)
    for name in ("AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    # No role from the host: the tests that want one serve it themselves.
    for name in ("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                 "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                 "AWS_CONTAINER_AUTHORIZATION_TOKEN",
                 "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
                 "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN",
                 "AWS_ROLE_SESSION_NAME", "AWS_ENDPOINT_URL_STS",
                 "AWS_EC2_METADATA_SERVICE_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


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
    http = kind in ("http", "https")
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
    elif kind == "s3tls":
        # S3 at an https endpoint: listings and signed GETs over TLS.
        base = "s3://" + BUCKET
        remote = (REMOTE_OPTS % servers.s3_tls_endpoint)[:-1] + \
            ", ca_bundle: '%s'}" % servers.ca_bundle
    elif kind == "https":
        base, remote = servers.https, \
            "{concurrency: 3, chunk_size: 4KiB, retries: 4, ca_bundle: " \
            "'%s'}" % servers.ca_bundle
    else:
        base, remote = servers.http, \
            "{concurrency: 3, chunk_size: 4KiB, retries: 4}"
    return local, spec_for(tmp_path, name, source, select, (base, kind),
                           remote, extra)


def run_all(spec):
    return list(sluice.Pipeline(spec))


CASES = [(n, k) for n in SOURCES for k in ("s3", "http", "https", "s3tls")
         if not (n == "image_folder" and k in ("http", "https"))]


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


class QuietHandler(http.server.BaseHTTPRequestHandler):
    """The tests' own small servers: HTTP/1.1 keep-alive, quiet."""
    protocol_version = "HTTP/1.1"
    # Headers and body go out as separate writes: without this, Nagle's
    # algorithm holds the body for the client's delayed ACK (~40 ms).
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass


#: How AWS writes a time (expiresAt, Expiration): 2026-12-01T07:00:00Z.
AWS_TIME = "%Y-%m-%dT%H:%M:%SZ"


def aws_time_in(seconds):
    """The time `seconds` from now as AWS writes it."""
    return time.strftime(AWS_TIME, time.gmtime(time.time() + seconds))


def start_server(handler):
    """A ThreadingHTTPServer on 127.0.0.1 serving `handler` on a thread of
    its own: the server and its base URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, "http://127.0.0.1:%d" % server.server_address[1]


def sigv4_problem(method, target, headers, secret, service="s3"):
    """What is wrong with a request's AWS Signature Version 4, recomputed
    from AWS's documented algorithm with hashlib/hmac over the headers it
    names as signed (None: nothing), for `service` (S3's, or STS's). The
    same computation gives AWS's published GET Object example (checked
    below)."""
    auth = headers.get("authorization", "")
    m = re.match(r"AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/" +
                 service + r"/aws4_request, ?SignedHeaders=([^,]+), "
                 r"?Signature=([0-9a-f]{64})$", auth)
    if not m:
        return "no SigV4 Authorization header: %r" % auth
    _, day, region, signed, signature = m.groups()
    names = signed.split(";")
    if "host" not in names or "x-amz-date" not in names:
        return "host or x-amz-date not signed: " + signed
    path, _, query = target.partition("?")
    canonical_query = "&".join(sorted(
        "%s=%s" % (urllib.parse.quote(urllib.parse.unquote(k), safe="-_.~"),
                   urllib.parse.quote(urllib.parse.unquote(v), safe="-_.~"))
        for k, _, v in (q.partition("=") for q in query.split("&") if q)))
    canonical = "\n".join(
        [method, path, canonical_query] +
        ["%s:%s" % (n, " ".join(headers.get(n, "").split())) for n in names] +
        ["", signed, headers.get(
            "x-amz-content-sha256", "UNSIGNED-PAYLOAD" if service == "s3"
            else hashlib.sha256(b"").hexdigest())])
    stamp = headers["x-amz-date"]
    to_sign = "AWS4-HMAC-SHA256\n%s\n%s/%s/%s/aws4_request\n%s" % (
        stamp, day, region, service,
        hashlib.sha256(canonical.encode()).hexdigest())
    key = ("AWS4" + secret).encode()
    for part in (day, region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    want = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    return None if want == signature else "signature %s, want %s" % (
        signature, want)


def test_the_signature_check_reproduces_aws_example():
    empty = hashlib.sha256(b"").hexdigest()
    headers = {"host": "examplebucket.s3.amazonaws.com",
               "range": "bytes=0-9", "x-amz-content-sha256": empty,
               "x-amz-date": "20130524T000000Z",
               "authorization":
                   "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/"
                   "20130524/us-east-1/s3/aws4_request,SignedHeaders=host;"
                   "range;x-amz-content-sha256;x-amz-date,Signature=f0e8bdb"
                   "87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"}
    secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    assert sigv4_problem("GET", "/test.txt", headers, secret) is None
    headers["range"] = "bytes=0-8"
    assert sigv4_problem("GET", "/test.txt", headers, secret)


@pytest.mark.parametrize("signer", ["sluice", "libcurl"])
def test_requests_are_signed_as_aws_checks_them(tmp_path, signer):
    """Every request to an S3 endpoint carries a valid SigV4 signature:
    sluice's own for object GETs (the day's key kept; SigV4.cpp), libcurl's
    with SLUICE_NO_REMOTE_OWN_SIGNING=1, checked by a server that recomputes
    each one (s3rver does not check version 4), for whole objects (files),
    ranged reads (text_lines) and a session token, with the same records as
    local files."""
    objects = {"/bkt/d/f%d.bin" % i: bytes(range(i, 256)) * (i + 1)
               for i in range(3)}
    objects["/bkt/t/lines%20one.txt"] = b"".join(
        b"line %d\n" % i for i in range(3000))
    seen, problems = [], []
    token = "FQoGZXIvYXdzE+token/with=chars"

    class Handler(QuietHandler):
        def do_GET(self):
            self.answer(True)

        def do_HEAD(self):
            self.answer(False)

        def answer(self, with_body):
            headers = {k.lower(): v for k, v in self.headers.items()}
            seen.append(self.path)
            why = sigv4_problem(self.command, self.path, headers, SECRET_KEY)
            if headers.get("x-amz-security-token") != token:
                why = why or "no session token"
            if why:
                problems.append("%s %s: %s" % (self.command, self.path, why))
            data = objects.get(self.path.split("?")[0])
            if data is None or why:
                self.send_response(404 if data is None else 403)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            status, body = 200, data
            rng = re.match(r"bytes=(\d+)-(\d*)$", headers.get("range", ""))
            if rng:
                a = int(rng.group(1))
                b = min(int(rng.group(2) or len(data) - 1), len(data) - 1)
                status, body = 206, data[a:b + 1]
            self.send_response(status)
            self.send_header("ETag", '"e%d"' % len(data))
            self.send_header("Content-Length", str(len(body)))
            if status == 206:
                self.send_header("Content-Range", "bytes %d-%d/%d" % (
                    a, a + len(body) - 1, len(data)))
            self.end_headers()
            if with_body:
                self.wfile.write(body)

    server, endpoint = start_server(Handler)
    try:
        remote = "{endpoint: %s, concurrency: 3, chunk_size: 4KiB}" % endpoint
        specs = {
            "files": "files: {files: 's3://bkt/d/f{0..2}.bin', remote: %s}"
                     % remote,
            "text": "text_lines: {files: 's3://bkt/t/lines one.txt', "
                    "remote: %s}" % remote,
        }
        paths = []
        for name, source in specs.items():
            path = tmp_path / ("%s.yaml" % name)
            path.write_text("pipeline: signed_%s\nsource:\n  %s\nsteps:\n"
                            "  - batch: {size: 5, drop_remainder: false}\n"
                            % (name, source))
            paths.append(str(path))
        child = textwrap.dedent("""
            import pickle, sys, sluice
            got = [list(sluice.Pipeline(s)) for s in sys.argv[2:]]
            pickle.dump(got, open(sys.argv[1], "wb"))
        """)
        out = tmp_path / "got.pickle"
        env = dict(os.environ, AWS_SESSION_TOKEN=token,
                   SLUICE_NO_REMOTE_OWN_SIGNING=str(int(signer == "libcurl")))
        r = subprocess.run([sys.executable, "-c", child, str(out)] + paths,
                           env=env, capture_output=True, text=True)
        assert not problems, problems[:3]
        assert r.returncode == 0, r.stderr
        files, text = pickle.load(open(out, "rb"))
    finally:
        server.shutdown()
        server.server_close()
    got = b"".join(bytes(np.asarray(d)) for b in files for d in b["data"])
    assert got == b"".join(objects["/bkt/d/f%d.bin" % i] for i in range(3))
    lines = [str(x) for b in text for x in b["line"]]
    assert lines == ["line %d" % i for i in range(3000)]
    # Ranged reads of the text object: several requests, every one checked.
    assert sum(p.startswith("/bkt/t/") for p in seen) > 3, seen


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


def test_region_endpoint_and_keys_from_the_config_file(tmp_path, monkeypatch):
    """The profile's section of ~/.aws/config (AWS_CONFIG_FILE), as `aws
    configure` writes it, gives the region, endpoint_url and keys that
    neither the spec nor the environment gives; AWS_REGION still wins. A
    bucket in another region is an error that names it (S3's 301
    PermanentRedirect with x-amz-bucket-region, its 400
    AuthorizationHeaderMalformed with <Region>), and an SSO profile whose
    sso-session is not there is an error that says so."""
    text = b"".join(b"line %d\n" % i for i in range(50))
    seen, problems = [], []

    class Handler(QuietHandler):
        def do_GET(self):
            headers = {k.lower(): v for k, v in self.headers.items()}
            auth = headers.get("authorization", "")
            m = re.search(r"Credential=([^/]+)/\d{8}/([^/]+)/s3/", auth)
            seen.append((self.path.split("?")[0],) +
                        (m.groups() if m else (None, None)))
            why = sigv4_problem("GET", self.path, headers, "conf-secret-9")
            status, extra, body = 200, {}, text
            if self.path.startswith("/elsewhere/"):
                status, extra = 301, {"x-amz-bucket-region": "eu-west-1"}
                body = (b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error>"
                        b"<Code>PermanentRedirect</Code><Message>The bucket "
                        b"you are attempting to access must be addressed "
                        b"using the specified endpoint.</Message>"
                        b"<Bucket>elsewhere</Bucket></Error>")
            elif self.path.startswith("/malformed/"):
                status = 400
                body = (b"<Error><Code>AuthorizationHeaderMalformed</Code>"
                        b"<Message>The authorization header is malformed; the "
                        b"region 'eu-central-1' is wrong; expecting "
                        b"'ap-south-1'</Message><Region>ap-south-1</Region>"
                        b"</Error>")
            elif why:
                problems.append(why)
                status, body = 403, b""
            self.send_response(status)
            for k, v in extra.items():
                self.send_header(k, v)
            self.send_header("ETag", '"e1"')
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server, _ = start_server(Handler)
    try:
        conf = tmp_path / "config"
        conf.write_text(
            "[default]\nregion = eu-central-1\nendpoint_url = "
            "http://127.0.0.1:%d\naws_access_key_id = CONFKEY\n"
            "aws_secret_access_key = conf-secret-9\n\n[profile corp]\n"
            "sso_session = corp\nsso_account_id = 111122223333\n"
            "region = eu-central-1\n" % server.server_address[1])
        monkeypatch.setenv("AWS_CONFIG_FILE", str(conf))
        monkeypatch.delenv("AWS_ACCESS_KEY_ID")
        monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")

        def run(bucket):
            return error_of(one_file_spec(
                tmp_path, "s3://%s/t/a.txt" % bucket, "{}"))

        rc, out = run("bkt")
        assert rc == 0 and "50 records" in out, out
        assert not problems, problems
        assert seen and all(s == ("/bkt/t/a.txt", "CONFKEY", "eu-central-1")
                            for s in seen), seen
        monkeypatch.setenv("AWS_REGION", "us-west-2")
        del seen[:]
        rc, out = run("bkt")
        assert rc == 0 and seen and all(s[2] == "us-west-2" for s in seen), \
            (out, seen)
        monkeypatch.delenv("AWS_REGION")
        rc, out = run("elsewhere")
        assert rc == 1
        assert ("s3://elsewhere/t/a.txt: record 0: text_lines: cannot read "
                "file: cannot open: HTTP 301 (PermanentRedirect: The bucket "
                "you are attempting to access must be addressed using the "
                "specified endpoint.); the bucket is in region eu-west-1, "
                "and the requests were made for eu-central-1 (profile "
                "'default' of %s): set the source's remote.region: eu-west-1 "
                "(or AWS_REGION=eu-west-1)" % conf) in out, out
        rc, out = run("malformed")
        assert rc == 1 and "the bucket is in region ap-south-1, and the " \
            "requests were made for eu-central-1" in out, out
        monkeypatch.setenv("AWS_PROFILE", "corp")
        rc, out = run("bkt")
        assert rc == 1
        assert ("profile 'corp' of %s names sso_session 'corp', and %s has "
                "no [sso-session corp] section" % (conf, conf)) in out, out
        assert "conf-secret-9" not in out
    finally:
        server.shutdown()
        server.server_close()


class RoleServer:
    """An S3 endpoint that checks every signature against the role's keys
    it handed out, and the three places a role's keys come from: the EC2
    instance metadata service (IMDSv2: a session token first), a container
    credentials endpoint (an Authorization token) and STS's
    AssumeRoleWithWebIdentity (XML). Each fetch of keys hands out the next
    pair (ROLEKEY1, ROLEKEY2, ...), valid for `valid` seconds."""

    def __init__(self, objects, valid):
        self.objects, self.valid = objects, valid
        self.issued, self.used, self.problems, self.anonymous = [], [], [], 0
        self.middle = 0
        self.fail_issue = False
        # The SSO portal's valid access tokens, and SSO OIDC's renewals
        # (CreateToken with a refresh token): those asked for, the refresh
        # token it takes now, and how long it waits before answering.
        self.sso_tokens = {"sso-access-7"}
        self.renewals, self.refresh_token, self.renew_delay = 0, \
            "sso-refresh-1", 0.0
        outer = self

        class Handler(QuietHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get(
                    "Content-Length", "0")))
                if self.path != "/token":
                    return self.reply(404, b"")
                # SSO OIDC's CreateToken, grant type refresh_token.
                outer.renewals += 1
                time.sleep(outer.renew_delay)
                q = json.loads(body)
                if q.get("grantType") != "refresh_token" or \
                        q.get("clientId") != "sso-client-1" or \
                        q.get("clientSecret") != "sso-client-secret-1":
                    return self.reply(400, json.dumps({
                        "error": "invalid_client"}).encode())
                if q.get("refreshToken") != outer.refresh_token:
                    return self.reply(400, json.dumps({
                        "error": "invalid_grant",
                        "error_description": "Invalid refresh token "
                        "provided"}).encode())
                token = "sso-access-r%d" % outer.renewals
                outer.sso_tokens.add(token)
                outer.refresh_token = "sso-refresh-%d" % (outer.renewals + 1)
                self.reply(200, json.dumps({
                    "accessToken": token, "expiresIn": 3600,
                    "refreshToken": outer.refresh_token,
                    "tokenType": "Bearer"}).encode())

            def do_PUT(self):
                if self.path == "/latest/api/token" and self.headers.get(
                        "X-aws-ec2-metadata-token-ttl-seconds"):
                    self.reply(200, b"imds-session-77")
                else:
                    self.reply(400, b"")

            def do_GET(self):
                h = {k.lower(): v for k, v in self.headers.items()}
                path, _, query = self.path.partition("?")
                md = "/latest/meta-data/iam/security-credentials/"
                if path.startswith(md):
                    if h.get("x-aws-ec2-metadata-token") != "imds-session-77":
                        return self.reply(401, b"")
                    if path == md:
                        return self.reply(200, b"train-role")
                    return self.issue("json")
                if path == "/container/creds":
                    if h.get("authorization") != "pod-token-5":
                        return self.reply(401, b"")
                    return self.issue("json")
                if path == "/federation/credentials":
                    # The SSO portal's GetRoleCredentials.
                    q = urllib.parse.parse_qs(query)
                    if h.get("x-amz-sso_bearer_token") not in \
                            outer.sso_tokens:
                        return self.reply(401, json.dumps({
                            "message": "Session token not found or invalid"
                        }).encode())
                    if q.get("account_id") != ["111122223333"] or \
                            q.get("role_name") != ["Train"]:
                        return self.reply(403, b"{}")
                    return self.issue("sso")
                if path == "/" and "Action=AssumeRole&" in query:
                    q = urllib.parse.parse_qs(query)
                    why = sigv4_problem("GET", self.path, h, "src-secret-3",
                                        service="sts")
                    if not why and h.get("x-amz-security-token") != \
                            "src-token-3":
                        why = "source session token %r" % h.get(
                            "x-amz-security-token")
                    if not why and q.get("RoleArn") == [
                            "arn:aws:iam::1:role/mid"]:
                        # A role whose keys assume the next one (a chain of
                        # source profiles): it hands out the source's keys
                        # again, which the next AssumeRole is checked with.
                        outer.middle += 1
                        return self.reply(200, (
                            "<AssumeRoleResponse><AssumeRoleResult>"
                            "<Credentials><AccessKeyId>SRCKEY3</AccessKeyId>"
                            "<SecretAccessKey>src-secret-3</SecretAccessKey>"
                            "<SessionToken>src-token-3</SessionToken>"
                            "<Expiration>%s</Expiration></Credentials>"
                            "</AssumeRoleResult></AssumeRoleResponse>" %
                            aws_time_in(3600)).encode())
                    if why or q.get("RoleArn") != ["arn:aws:iam::1:role/t"] \
                            or q.get("RoleSessionName") != ["train-run"]:
                        outer.problems.append(why or query)
                        return self.reply(403, b"<ErrorResponse><Error><Code>"
                                          b"AccessDenied</Code><Message>not "
                                          b"authorized</Message></Error>"
                                          b"</ErrorResponse>")
                    return self.issue("xml")
                if path == "/" and "AssumeRoleWithWebIdentity" in query:
                    q = urllib.parse.parse_qs(query)
                    if (q.get("WebIdentityToken") != ["eyJ.web.token"] or
                            q.get("RoleArn") != ["arn:aws:iam::1:role/t"]):
                        return self.reply(403, b"<ErrorResponse><Error><Code>"
                                          b"AccessDenied</Code><Message>no"
                                          b"</Message></Error></ErrorResponse>")
                    return self.issue("xml")
                if path.startswith("/private/") and "authorization" not in h:
                    return self.reply(403, b"<Error><Code>AccessDenied</Code>"
                                      b"<Message>Access Denied</Message>"
                                      b"</Error>")
                data = outer.objects.get(path)
                if data is None:
                    return self.reply(404, b"")
                if "authorization" not in h:
                    outer.anonymous += 1
                    return self.reply(200, data)
                m = re.search(r"Credential=(ROLEKEY(\d+))/", h["authorization"])
                n = m.group(2) if m else "?"
                why = sigv4_problem("GET", self.path, h, "role-secret-" + n)
                if not why and h.get("x-amz-security-token") != \
                        "role-token-" + n:
                    why = "session token %r" % h.get("x-amz-security-token")
                if why:
                    outer.problems.append(why)
                    return self.reply(403, b"")
                outer.used.append(m.group(1))
                self.reply(200, data)

            def issue(self, form):
                if outer.fail_issue:
                    return self.reply(500, b"")
                n = len(outer.issued) + 1
                outer.issued.append(n)
                exp = aws_time_in(outer.valid)
                if form == "sso":
                    body = json.dumps({"roleCredentials": {
                        "accessKeyId": "ROLEKEY%d" % n,
                        "secretAccessKey": "role-secret-%d" % n,
                        "sessionToken": "role-token-%d" % n,
                        "expiration": int((time.time() + outer.valid) * 1000)
                    }}).encode()
                elif form == "json":
                    body = json.dumps({
                        "Code": "Success", "Type": "AWS-HMAC",
                        "AccessKeyId": "ROLEKEY%d" % n,
                        "SecretAccessKey": "role-secret-%d" % n,
                        "Token": "role-token-%d" % n,
                        "Expiration": exp}).encode()
                else:
                    body = ("<AssumeRoleWithWebIdentityResponse><AssumeRole"
                            "WithWebIdentityResult><Credentials><AccessKeyId>"
                            "ROLEKEY%d</AccessKeyId><SecretAccessKey>role-"
                            "secret-%d</SecretAccessKey><SessionToken>role-"
                            "token-%d</SessionToken><Expiration>%s</Expiration>"
                            "</Credentials></AssumeRoleWithWebIdentityResult>"
                            "</AssumeRoleWithWebIdentityResponse>"
                            % (n, n, n, exp)).encode()
                self.reply(200, body)

            def reply(self, status, body):
                self.send_response(status)
                self.send_header("ETag", '"e%d"' % len(body))
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server, self.url = start_server(Handler)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def sso_profile(kind, tmp_path, monkeypatch, server, expires_in=3600,
                token="sso-access-7", extra="", renewable=None):
    """A profile that signs in through IAM Identity Center, as `aws
    configure sso` writes it (with an [sso-session], or of the older form
    with the start URL in the profile), and the sign-in `aws sso login`
    cached under HOME (named by the SHA-1 of the session's name, or of the
    start URL). `renewable` (seconds the client registration has left):
    the sign-in holds the refresh token and registration an sso-session's
    login caches, and SSO OIDC is the test's server."""
    url = "https://example.awsapps.com/start"
    conf = tmp_path / "config"
    if kind == "sso-legacy":
        conf.write_text("[profile train]\nsso_start_url = %s\nsso_region = "
                        "eu-west-1\nsso_account_id = 111122223333\n"
                        "sso_role_name = Train\n%s" % (url, extra))
        name = url
    else:
        conf.write_text("[profile train]\nsso_session = corp\n"
                        "sso_account_id = 111122223333\nsso_role_name = Train"
                        "\n%s\n[sso-session corp]\nsso_start_url = %s\n"
                        "sso_region = eu-west-1\n" % (extra, url))
        name = "corp"
    cache = tmp_path / "home" / ".aws" / "sso" / "cache"
    cache.mkdir(parents=True)
    signin = {"startUrl": url, "region": "eu-west-1", "accessToken": token,
              "expiresAt": aws_time_in(expires_in)}
    if renewable is not None:
        signin.update({
            "clientId": "sso-client-1", "clientSecret": "sso-client-secret-1",
            "registrationExpiresAt": aws_time_in(renewable),
            "refreshToken": "sso-refresh-1"})
        monkeypatch.setenv("AWS_ENDPOINT_URL_SSO_OIDC", server.url)
    (cache / (hashlib.sha1(name.encode()).hexdigest() + ".json")).write_text(
        json.dumps(signin))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(conf))
    monkeypatch.setenv("AWS_PROFILE", "train")
    monkeypatch.setenv("AWS_ENDPOINT_URL_SSO", server.url)
    return cache


def role_env(kind, server, tmp_path, monkeypatch):
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    if kind == "instance":
        monkeypatch.delenv("AWS_EC2_METADATA_DISABLED")
        monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", server.url)
    elif kind == "container":
        token = tmp_path / "pod-token"
        token.write_text("pod-token-5\n")
        monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI",
                           server.url + "/container/creds")
        monkeypatch.setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", str(token))
    elif kind == "process":
        # A program that prints the keys (as aws-vault, granted or an SSO
        # helper do), here fetched from the test's server; its path has a
        # space, quoted in the profile as a shell would be.
        d = tmp_path / "cred helper"
        d.mkdir()
        (d / "print keys.py").write_text(textwrap.dedent("""
            import json, sys, urllib.request
            r = urllib.request.Request(sys.argv[1] + "/container/creds",
                                       headers={"Authorization": sys.argv[2]})
            k = json.load(urllib.request.urlopen(r))
            print(json.dumps({"Version": 1, "AccessKeyId": k["AccessKeyId"],
                              "SecretAccessKey": k["SecretAccessKey"],
                              "SessionToken": k["Token"],
                              "Expiration": k["Expiration"]}))
        """))
        conf = tmp_path / "config"
        conf.write_text("[profile train]\ncredential_process = %s "
                        "\"%s\" %s 'pod-token-5'\n"
                        % (sys.executable, d / "print keys.py", server.url))
        monkeypatch.setenv("AWS_CONFIG_FILE", str(conf))
        monkeypatch.setenv("AWS_PROFILE", "train")
    elif kind.startswith("assume"):
        # A profile that assumes the role with another profile's keys, or
        # with the environment's (credential_source).
        creds = tmp_path / "credentials"
        creds.write_text("[src]\naws_access_key_id = SRCKEY3\n"
                         "aws_secret_access_key = src-secret-3\n"
                         "aws_session_token = src-token-3\n")
        source = "source_profile = src"
        if kind == "assume-chain":
            source = ("source_profile = mid\n\n[profile mid]\n"
                      "role_arn = arn:aws:iam::1:role/mid\n"
                      "source_profile = src")
        if kind == "assume-env":
            source = "credential_source = Environment"
            monkeypatch.setenv("AWS_ACCESS_KEY_ID", "SRCKEY3")
            monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "src-secret-3")
            monkeypatch.setenv("AWS_SESSION_TOKEN", "src-token-3")
        conf = tmp_path / "config"
        conf.write_text("[profile train]\nrole_arn = arn:aws:iam::1:role/t\n"
                        "role_session_name = train-run\n%s\n" % source)
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
        monkeypatch.setenv("AWS_CONFIG_FILE", str(conf))
        monkeypatch.setenv("AWS_ENDPOINT_URL_STS", server.url)
        if kind != "assume-env":
            monkeypatch.setenv("AWS_PROFILE", "train")
    elif kind.startswith("sso"):
        sso_profile(kind, tmp_path, monkeypatch, server)
    elif kind == "profile-web":
        token = tmp_path / "web-token"
        token.write_text("eyJ.web.token")
        conf = tmp_path / "config"
        conf.write_text("[profile train]\nweb_identity_token_file = %s\n"
                        "role_arn = arn:aws:iam::1:role/t\n" % token)
        monkeypatch.setenv("AWS_CONFIG_FILE", str(conf))
        monkeypatch.setenv("AWS_PROFILE", "train")
        monkeypatch.setenv("AWS_ENDPOINT_URL_STS", server.url)
    else:
        token = tmp_path / "web-token"
        token.write_text("eyJ.web.token")
        monkeypatch.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(token))
        monkeypatch.setenv("AWS_ROLE_ARN", "arn:aws:iam::1:role/t")
        monkeypatch.setenv("AWS_ENDPOINT_URL_STS", server.url)


@pytest.mark.parametrize("kind", ["instance", "container", "web", "process",
                                  "assume", "assume-env", "assume-chain",
                                  "profile-web", "sso", "sso-legacy"])
def test_a_roles_keys_are_fetched_and_renewed(tmp_path, monkeypatch, kind):
    """Without keys of its own the host's role signs the requests: keys
    from the EC2 instance metadata service (IMDSv2), a container
    credentials endpoint (ECS, EKS Pod Identity) or STS for a web identity
    token (EKS's roles for service accounts); or the profile's: a
    credential_process's, or a role it assumes with STS's AssumeRole signed
    with its source_profile's keys (or those of the role its source profile
    assumes) or the environment's, or with its web identity token file; or
    the role IAM Identity Center (SSO) gives for the sign-in `aws sso login`
    cached. Fetched again
    before they expire (here they expire 5 min + 2 s after each fetch, so
    within the run), the records the same, the keys in no output."""
    objects = {"/bkt/d/f%03d.bin" % i: bytes([i % 256]) * (100 + i)
               for i in range(240)}
    server = RoleServer(objects, valid=302)
    try:
        role_env(kind, server, tmp_path, monkeypatch)
        spec = tmp_path / "role.yaml"
        spec.write_text(
            "pipeline: role\nsource:\n  files: {files: 's3://bkt/d/"
            "f{000..239}.bin', remote: {endpoint: %s, concurrency: 2%s}}\n"
            "steps:\n  - batch: {size: 1}\n" % (
                server.url,
                # The environment's keys come before AWS_PROFILE's profile
                # (AWS's order): a profile named in the spec comes first.
                ", profile: train" if kind == "assume-env" else ""))
        child = textwrap.dedent("""
            import os, pickle, sys, time, sluice
            got = []
            for i, b in enumerate(sluice.Pipeline(sys.argv[2])):
                got.append(bytes(b["data"][0]))
                if i == 5:
                    time.sleep(3)  # past the first keys' renewal time
            # A forked child (a DataLoader worker) gets keys of its own.
            pid = os.fork()
            if pid == 0:
                again = [bytes(b["data"][0])
                         for b in sluice.Pipeline(sys.argv[2])]
                os._exit(0 if again == got else 3)
            assert os.waitpid(pid, 0)[1] == 0, "the forked child failed"
            pickle.dump(got, open(sys.argv[1], "wb"))
        """)
        out = tmp_path / "got.pickle"
        r = subprocess.run([sys.executable, "-c", child, str(out), str(spec)],
                           capture_output=True, text=True)
        assert r.returncode == 0, (r.stderr, server.problems[:3])
        got = pickle.load(open(out, "rb"))
    finally:
        server.close()
    assert got == [objects["/bkt/d/f%03d.bin" % i] for i in range(240)]
    assert not server.problems, server.problems[:3]
    assert server.anonymous == 0
    assert len(server.issued) >= 2, server.issued
    assert (server.middle >= 1) == (kind == "assume-chain"), server.middle
    assert server.used[0] == "ROLEKEY1" and server.used[-1] != "ROLEKEY1", \
        sorted(set(server.used))
    for secret in ("role-secret-", "role-token-", "pod-token-5",
                   "eyJ.web.token", "imds-session-77", "src-secret-3",
                   "src-token-3", "sso-access-7"):
        assert secret not in r.stdout + r.stderr


@pytest.mark.parametrize("kind", ["container", "web"])
def test_a_role_that_cannot_be_had_is_a_spec_error(tmp_path, monkeypatch,
                                                   kind):
    server = RoleServer({}, valid=3600)
    try:
        role_env(kind, server, tmp_path, monkeypatch)
        server.fail_issue = kind == "container"
        if kind == "web":
            monkeypatch.setenv("AWS_ROLE_ARN", "arn:aws:iam::1:role/other")
        rc, out = error_of(one_file_spec(
            tmp_path, "s3://bkt/t/a.txt", "{endpoint: %s}" % server.url))
    finally:
        server.close()
    assert rc == 1
    if kind == "container":
        assert ("text_lines: cannot get credentials from the container "
                "credentials endpoint %s/container/creds "
                "(AWS_CONTAINER_CREDENTIALS_FULL_URI): HTTP 500"
                % server.url) in out, out
    else:
        assert ("text_lines: cannot get credentials from STS "
                "AssumeRoleWithWebIdentity at %s (AWS_WEB_IDENTITY_TOKEN_FILE "
                % server.url) in out and "HTTP 403 (AccessDenied: no)" in out, \
            out


PY = sys.executable
#: Profiles that cannot give keys, and what the error says: (config file's
#: [profile p] lines, what the message holds).
PROFILE_ERRORS = {
    "process-fails": (
        "credential_process = %s -c \"import sys; sys.stderr.write("
        "'helper: token expired\\n'); sys.exit(2)\"" % PY,
        "cannot get credentials from the credential_process of profile 'p' "
        "of {conf}: it exited with status 2 (what it wrote to stderr is "
        "above)"),
    "not-json": (
        "credential_process = %s -c \"print('KEY secret-leak-1')\"" % PY,
        "of {conf}: its output is not a JSON object"),
    "version": (
        "credential_process = %s -c 'print(\"{\\\"Version\\\": 2, "
        "\\\"AccessKeyId\\\": \\\"K\\\", \\\"SecretAccessKey\\\": "
        "\\\"secret-leak-1\\\"}\")'" % PY,
        "its output's Version is not 1"),
    "no-keys": (
        "credential_process = %s -c 'print(\"{\\\"Version\\\": 1}\")'" % PY,
        "its output holds no AccessKeyId and SecretAccessKey"),
    "process-hangs": (
        "credential_process = %s -c \"import time; time.sleep(60)\"" % PY,
        "of {conf}: it did not finish within 1 s (killed; "
        "SLUICE_CREDENTIAL_PROCESS_TIMEOUT=SECONDS allows more)"),
    "process-lingers": (
        "credential_process = %s -c \"import os, time; os.close(1); "
        "time.sleep(60)\"" % PY,
        "of {conf}: it did not finish within 1 s (killed; "),
    "missing-program": (
        "credential_process = /nonexistent/helper --profile p",
        "cannot run /nonexistent/helper: No such file or directory"),
    "unclosed-quote": (
        "credential_process = helper 'p",
        "cannot split its command into words: a single quote is not closed"),
    "mfa": (
        "role_arn = arn:aws:iam::1:role/t\nsource_profile = src\n"
        "mfa_serial = arn:aws:iam::1:mfa/me",
        "profile 'p' of {conf} assumes role arn:aws:iam::1:role/t with an "
        "MFA code (mfa_serial), which sluice cannot ask for: export them "
        "first (eval \"$(aws configure export-credentials --profile p "
        "--format env)\")"),
    "no-source": (
        "role_arn = arn:aws:iam::1:role/t",
        "assumes role arn:aws:iam::1:role/t without saying with which keys: "
        "give it source_profile"),
    "two-sources": (
        "role_arn = arn:aws:iam::1:role/t\nsource_profile = src\n"
        "credential_source = Environment",
        "gives more than one of source_profile, credential_source and "
        "web_identity_token_file: keep one"),
    "bad-source": (
        "role_arn = arn:aws:iam::1:role/t\ncredential_source = Ec2",
        "credential_source is 'Ec2': give Environment, Ec2InstanceMetadata "
        "or EcsContainer"),
    "missing-source": (
        "role_arn = arn:aws:iam::1:role/t\nsource_profile = nope",
        "source_profile 'nope' is not a profile with credentials in"),
    "cycle": (
        "role_arn = arn:aws:iam::1:role/t\nsource_profile = q\n\n"
        "[profile q]\nrole_arn = arn:aws:iam::1:role/q\nsource_profile = p",
        "profile 'q' of {conf}: source_profile 'p' leads back to profile "
        "'p' (a cycle)"),
    "duration": (
        "role_arn = arn:aws:iam::1:role/t\nsource_profile = src\n"
        "duration_seconds = 60",
        "duration_seconds is '60': give whole seconds from 900 to 43200"),
    "denied": (
        "role_arn = arn:aws:iam::1:role/other\nsource_profile = src\n"
        "role_session_name = train-run",
        "cannot get credentials from STS AssumeRole of "
        "arn:aws:iam::1:role/other at {sts} (profile 'p' of {conf}, signed "
        "with profile 'src' of {creds}): HTTP 403 (AccessDenied: not "
        "authorized)"),
}


@pytest.mark.parametrize("case", sorted(PROFILE_ERRORS))
def test_a_profile_that_cannot_give_keys_is_a_spec_error(tmp_path,
                                                         monkeypatch, case):
    """A profile whose credential_process fails or hangs (killed after
    SLUICE_CREDENTIAL_PROCESS_TIMEOUT seconds, also once it has closed its
    stdout but does not exit), or prints what is not AWS's
    JSON of Version 1 with keys, or whose role cannot be assumed as
    it is written (an MFA code to type, no source or two, a cycle of source
    profiles, STS refusing), is an error of the spec that names the profile
    and what is wrong, before any object is asked for; what the process
    printed is never quoted (its stderr is the user's)."""
    lines, want = PROFILE_ERRORS[case]
    server = RoleServer({}, valid=3600)
    try:
        conf, creds = tmp_path / "config", tmp_path / "credentials"
        conf.write_text("[profile p]\n%s\n" % lines)
        creds.write_text("[src]\naws_access_key_id = SRCKEY3\n"
                         "aws_secret_access_key = src-secret-3\n"
                         "aws_session_token = src-token-3\n")
        monkeypatch.delenv("AWS_ACCESS_KEY_ID")
        monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
        monkeypatch.setenv("AWS_CONFIG_FILE", str(conf))
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
        monkeypatch.setenv("AWS_PROFILE", "p")
        monkeypatch.setenv("AWS_ENDPOINT_URL_STS", server.url)
        monkeypatch.setenv("SLUICE_CREDENTIAL_PROCESS_TIMEOUT", "1")
        start = time.monotonic()
        rc, out = error_of(one_file_spec(
            tmp_path, "s3://bkt/t/a.txt", "{endpoint: %s}" % server.url))
        took = time.monotonic() - start
    finally:
        server.close()
    assert rc == 1, out
    assert took < 20, took  # the hanging process is killed after 1 s
    want = want.format(conf=conf, creds=creds, sts=server.url)
    assert "one.yaml:3:3: source 'text_lines': text_lines: " in out, out
    assert want in out, out
    for secret in ("secret-leak-1", "src-secret-3", "src-token-3"):
        assert secret not in out
    if case == "process-fails":
        assert "helper: token expired" in out


@pytest.mark.parametrize("case", ["expired", "not-cached", "refused",
                                  "no-role", "no-section"])
def test_an_sso_profile_that_cannot_sign_in_is_a_spec_error(
        tmp_path, monkeypatch, case):
    """An SSO profile whose cached sign-in has expired, is not there, or is
    refused by the portal says to sign in again (`aws sso login`); one
    written without what it needs says what is missing. The token is in no
    message."""
    server = RoleServer({}, valid=3600)
    try:
        monkeypatch.delenv("AWS_ACCESS_KEY_ID")
        monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
        cache = sso_profile(
            "sso", tmp_path, monkeypatch, server,
            expires_in=-60 if case == "expired" else 3600,
            token="stale-token-1" if case == "refused" else "sso-access-7")
        conf = tmp_path / "config"
        if case == "not-cached":
            for f in cache.iterdir():
                f.unlink()
        elif case == "no-role":
            conf.write_text(conf.read_text().replace(
                "sso_role_name = Train\n", ""))
        elif case == "no-section":
            conf.write_text(conf.read_text().split("[sso-session")[0])
        rc, out = error_of(one_file_spec(
            tmp_path, "s3://bkt/t/a.txt", "{endpoint: %s}" % server.url))
    finally:
        server.close()
    assert rc == 1, out
    login = ": run `aws sso login --profile train`"
    cached = cache / (hashlib.sha1(b"corp").hexdigest() + ".json")
    source = ("cannot get credentials from the SSO portal at %s (profile "
              "'train' of %s, account 111122223333, role Train): "
              % (server.url, conf))
    want = {
        "expired": source + "the sign-in cached in %s expired at " % cached,
        "not-cached": source + "no sign-in is cached for it (%s)%s"
        % (cached, login),
        "refused": source + "HTTP 401 (Session token not found or invalid)"
        + login,
        "no-role": "profile 'train' of %s signs in through SSO but gives no "
        "sso_role_name (in the profile or its [sso-session corp] section): "
        "add them as `aws configure sso` writes them" % conf,
        "no-section": "profile 'train' of %s names sso_session 'corp', and "
        "%s has no [sso-session corp] section" % (conf, conf),
    }[case]
    assert want in out, out
    if case == "expired":
        assert out.strip().endswith(login), out
    for secret in ("sso-access-7", "stale-token-1"):
        assert secret not in out


@pytest.mark.parametrize("case", ["expiring", "expired", "fresh", "two",
                                  "refused", "refused-expired",
                                  "registration-expired", "legacy-expired"])
def test_an_sso_sign_in_is_renewed_before_it_expires(tmp_path, monkeypatch,
                                                      case):
    """An sso-session's cached sign-in that expires within 15 minutes (or
    has) is renewed with its refresh token (SSO OIDC's CreateToken), as
    AWS's CLI renews it, and written back for the CLI and other processes:
    a run longer than the access token's hour keeps reading. Two processes
    renewing at once renew once. One that cannot be renewed goes on with
    the token while it is valid, and is a spec error that says why and to
    sign in again once it has expired. No token or secret in any output."""
    objects = {"/bkt/t/a.txt": b"".join(b"l %d\n" % i for i in range(20))}
    server = RoleServer(objects, valid=3600)
    try:
        monkeypatch.delenv("AWS_ACCESS_KEY_ID")
        monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
        expires_in = {"fresh": 3600, "expiring": 600, "two": 600,
                      "refused": 600}.get(case, -60)
        cache = sso_profile(
            "sso-legacy" if case == "legacy-expired" else "sso", tmp_path,
            monkeypatch, server, expires_in=expires_in,
            renewable=-60 if case == "registration-expired" else 86400)
        if case.startswith("refused"):
            server.refresh_token = "sso-refresh-0"  # the one given retired
        [cached] = cache.iterdir()
        before = json.loads(cached.read_text())
        spec = one_file_spec(tmp_path, "s3://bkt/t/a.txt",
                             "{endpoint: %s}" % server.url)
        cmd = [SLUICE_BIN, "run", str(spec), "--sink", "null", "--stats"]
        if case == "two":
            server.renew_delay = 0.5  # both processes find it expiring
            runs = [subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
                    for _ in range(2)]
            outs = [p.communicate(timeout=60) for p in runs]
            rcs = [p.returncode for p in runs]
            out = "".join(o for o, _ in outs)
        else:
            r = subprocess.run(cmd, capture_output=True, text=True,
                               timeout=60)
            rcs, out = [r.returncode], r.stdout + r.stderr
    finally:
        server.close()
    after = json.loads(cached.read_text())
    renewed = case in ("expiring", "expired", "two")
    if case in ("refused-expired", "registration-expired", "legacy-expired"):
        assert rcs == [1], out
        why = {
            "refused-expired": " and cannot be renewed: SSO OIDC at %s "
            "answered HTTP 400 (invalid_grant: Invalid refresh token "
            "provided)" % server.url,
            "registration-expired": " and cannot be renewed: its client "
            "registration expired at %s" % before["registrationExpiresAt"],
            "legacy-expired": "",
        }[case]
        assert ("the sign-in cached in %s expired at %s%s: run `aws sso "
                "login --profile train`" % (cached, before["expiresAt"],
                                            why)) in out, out
    else:
        assert rcs == [0] * len(rcs), out
        assert out.count("text_lines  read 20 = emitted 20 ") == len(rcs), out
    assert server.renewals == {"expiring": 1, "expired": 1, "two": 1,
                               "refused": 1, "refused-expired": 1}.get(
                                   case, 0), server.renewals
    if renewed:
        assert after["accessToken"] == "sso-access-r1", after
        assert after["refreshToken"] == "sso-refresh-2", after
        left = calendar.timegm(time.strptime(
            after["expiresAt"], AWS_TIME)) - time.time()
        assert 3500 < left <= 3600, after
        # What the login cached beside the token is kept.
        for k in ("startUrl", "region", "clientId", "clientSecret",
                  "registrationExpiresAt"):
            assert after[k] == before[k], (k, after)
        assert cached.stat().st_mode & 0o777 == 0o600
        assert sorted(p.name for p in cache.iterdir()) == [cached.name]
    else:
        assert after == before, after
    for secret in ("sso-access-7", "sso-access-r1", "sso-refresh-",
                   "sso-client-secret-1", "role-secret-", "role-token-"):
        assert secret not in out, (secret, out)


def test_a_host_without_an_instance_role_reads_anonymously(tmp_path,
                                                            monkeypatch):
    """Not an EC2 instance (nothing answers at the metadata service's
    address), or one without a role (404): anonymous requests, as a public
    bucket is read."""
    objects = {"/bkt/t/a.txt": b"".join(b"l %d\n" % i for i in range(20))}
    server = RoleServer(objects, valid=3600)
    try:
        for where in ("http://127.0.0.1:%d" % remote_servers.free_port(),
                      server.url + "/no-role"):
            monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
            monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "y")
            role_env("instance", server, tmp_path, monkeypatch)
            monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", where)
            server.anonymous = 0
            rc, out = error_of(one_file_spec(
                tmp_path, "s3://bkt/t/a.txt", "{endpoint: %s}" % server.url))
            assert rc == 0 and "20 records" in out, out
            assert server.anonymous >= 1
            monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
        # A bucket that is not public says the request had no credentials.
        rc, out = error_of(one_file_spec(
            tmp_path, "s3://private/t/a.txt", "{endpoint: %s}" % server.url))
        assert rc == 1 and ("HTTP 403 (AccessDenied: Access Denied); the "
                            "request was anonymous (no AWS_ACCESS_KEY_ID, "
                            "profile or role was found): give credentials, "
                            "or read a public bucket") in out, out
        # remote.sign: false: unsigned although the environment has keys.
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
        server.anonymous = 0
        unsigned = "{endpoint: %s, sign: false}" % server.url
        rc, out = error_of(one_file_spec(tmp_path, "s3://bkt/t/a.txt",
                                         unsigned))
        assert rc == 0 and "20 records" in out and server.anonymous >= 1, out
        rc, out = error_of(one_file_spec(tmp_path, "s3://private/t/a.txt",
                                         unsigned))
        assert rc == 1 and "the request was unsigned (remote.sign: false)" \
            in out, out
        rc, out = error_of(one_file_spec(
            tmp_path, "s3://bkt/t/a.txt",
            "{endpoint: %s, sign: false, profile: x}" % server.url))
        assert rc == 1 and "remote.sign: false sends unsigned requests, and " \
            "remote.profile names keys to sign with" in out, out
    finally:
        server.close()


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


def test_image_folder_lists_its_classes_side_by_side(servers, tmp_path,
                                                    monkeypatch):
    """image_folder over s3:// lists its root one level deep, then each
    class's keys with many listings in flight, each paged on its own (a
    class of 1,100 keys is two pages): the same records as the flat
    listing page after page (SLUICE_NO_PARALLEL_LISTING=1). A glob whose
    pattern has no '/' after its prefix lists that level only."""
    objects = {"tree/readme.jpg": b"at the root: no class"}
    for c in range(12):
        for i in range(1100 if c == 3 else 7):
            objects["tree/c%02d/img%04d.jpg" % (c, i)] = b"%d-%d" % (c, i)
    objects["tree/c05/deeper/more.jpg"] = b"nested"
    objects["tree/z \u00fcn\u00ef & co+1/img.jpg"] = b"escaped class"
    objects["tree/empty/"] = b""
    objects["tree/c07/note.txt"] = b"not a picture"
    servers.put_s3(objects)
    spec = tmp_path / "tree.yaml"
    spec.write_text(
        "pipeline: tree\nsource:\n  image_folder: {root: 's3://%s/tree', "
        "extensions: [jpg], remote: {endpoint: %s}}\nsteps:\n"
        "  - select: [path, label, data]\n"
        "  - batch: {size: 4096, drop_remainder: false}\n"
        % (BUCKET, servers.s3_proxy))

    def records():
        before = servers.proxy_stats(servers.s3_proxy)["requests"]
        out = []
        p = sluice.Pipeline(str(spec))
        for b in p:
            out += [(str(p), int(l), bytes(np.asarray(d)))
                    for p, l, d in zip(b["path"], b["label"], b["data"])]
        return (out, servers.proxy_stats(servers.s3_proxy)["requests"] - before,
                p.stats()["remote"])

    side_by_side, requests, stats = records()
    monkeypatch.setenv("SLUICE_NO_PARALLEL_LISTING", "1")
    flat, flat_requests, flat_stats = records()
    assert side_by_side == flat
    # The same objects fetched; a listing per class (13 prefixes) and a
    # second page for the class of 1,100, against 2 flat pages; the stats
    # count them, and the keys listed either way.
    assert requests - flat_requests >= 12, (requests, flat_requests)
    assert stats["list_requests"] - flat_stats["list_requests"] == \
        requests - flat_requests
    assert stats["listed_keys"] == flat_stats["listed_keys"] == len(objects)
    assert flat_stats["listing_seconds"] > 0
    assert len(flat) == 11 * 7 + 1100 + 2
    assert ("s3://%s/tree/c05/deeper/more.jpg" % BUCKET, 5, b"nested") in flat
    assert ("s3://%s/tree/z \u00fcn\u00ef & co+1/img.jpg" % BUCKET, 13,
            b"escaped class") in flat
    # A glob over one level, with deeper keys under its prefix.
    monkeypatch.delenv("SLUICE_NO_PARALLEL_LISTING")
    glob_spec = tmp_path / "glob.yaml"
    glob_spec.write_text(
        "pipeline: g\nsource:\n  files: {files: 's3://%s/tree/c0*/img000?.jpg"
        "', remote: {endpoint: %s}}\nsteps:\n  - batch: {size: 1000, "
        "drop_remainder: false}\n" % (BUCKET, servers.s3_endpoint))
    one = tmp_path / "one.yaml"
    one.write_text(glob_spec.read_text().replace("tree/c0*/img000?.jpg",
                                                 "tree/c03/img10*.jpg"))
    for path, want in ((glob_spec, 10 * 7 + 3), (one, 100)):
        got = [bytes(np.asarray(d)) for b in sluice.Pipeline(str(path))
               for d in b["data"]]
        monkeypatch.setenv("SLUICE_NO_PARALLEL_LISTING", "1")
        assert got == [bytes(np.asarray(d))
                       for b in sluice.Pipeline(str(path)) for d in b["data"]]
        monkeypatch.delenv("SLUICE_NO_PARALLEL_LISTING")
        assert len(got) == want


def test_a_glob_over_levels_lists_only_the_directories_it_names(
        servers, tmp_path, monkeypatch):
    """A glob whose wildcards span levels (`shards/part-*/train-*.tar`, a
    directory per part) lists its levels one by one: the directories under
    `shards/` that `part-*` matches, then in each (side by side) the keys
    from `train-`, not the deep tree beside them page after page. The same
    objects as the flat listing (SLUICE_NO_PARALLEL_LISTING=1); the stats
    count fewer keys listed."""
    objects = {}
    for part in range(12):
        for i in range(10):
            objects["levels/part-%02d/train-%03d.tar" % (part, i)] = \
                b"%d/%d" % (part, i)
        objects["levels/part-%02d/val-000.tar" % part] = b"val"
    for i in range(2100):
        objects["levels/part-04/deep/junk-%04d.bin" % i] = b"j"
    objects["levels/other-1/train-000.tar"] = b"not a part"
    objects["levels/part-05x"] = b"a key, not a directory"
    servers.put_s3(objects)
    spec = tmp_path / "levels.yaml"
    spec.write_text(
        "pipeline: levels\nsource:\n  files: {files: 's3://%s/levels/"
        "part-*/train-*.tar', remote: {endpoint: %s}}\nsteps:\n"
        "  - batch: {size: 1000, drop_remainder: false}\n"
        % (BUCKET, servers.s3_endpoint))

    def records():
        p = sluice.Pipeline(str(spec))
        got = [(str(f), bytes(np.asarray(d))) for b in p
               for f, d in zip(b["path"], b["data"])]
        return got, p.stats()["remote"]

    by_level, stats = records()
    monkeypatch.setenv("SLUICE_NO_PARALLEL_LISTING", "1")
    flat, flat_stats = records()
    assert by_level == flat
    assert len(flat) == 120
    assert flat[0] == ("s3://%s/levels/part-00/train-000.tar" % BUCKET,
                       b"0/0")
    # By level: `levels/part-` one level deep (1 request), then each of the
    # 12 parts from `train-` (12), 120 keys; flat: all 2,256 keys under
    # `levels/part-`, 3 pages of 1,000.
    assert stats["listed_keys"] == 120, stats
    assert flat_stats["listed_keys"] == 12 * 11 + 2100 + 1, flat_stats
    assert stats["list_requests"] == 13, stats
    assert flat_stats["list_requests"] == 3, flat_stats


@pytest.mark.parametrize("source,want", [
    ("text_lines: {files: 's3:///key.txt'}",
     "text_lines: files: 's3:///key.txt': an s3:// URL names its bucket "
     "first: s3://BUCKET/KEY"),
    ("text_lines: {files: 's3://bkt/'}",
     "text_lines: files: 's3://bkt/': names bucket 'bkt' but no object in "
     "it: s3://bkt/KEY, or a glob of keys (s3://bkt/shards/*.tar)"),
    ("webdataset: {files: 'gs://bkt/s-{000..009}.tar', fields: [{ext: jpg, "
     "name: data}]}",
     "webdataset: files: 'gs://bkt/s-{000..009}.tar': gs:// URLs are not "
     "read; sluice reads s3://, https://, http:// and file:// (Google Cloud "
     "Storage: its S3-compatible API, as s3://BUCKET/KEY with remote: "
     "{endpoint: https://storage.googleapis.com} and an HMAC key)"),
    ("tfrecord: {files: 'S3://bkt/a.tfrecord', features: [{name: x, type: "
     "bytes}]}",
     "tfrecord: files: 'S3://bkt/a.tfrecord': write the scheme in lowercase "
     "(s3://)"),
    ("csv: {files: 'https:///a.csv', columns: [{name: x, type: i64}]}",
     "csv: files: 'https:///a.csv': an https:// URL names its host first: "
     "https://HOST/PATH"),
    ("image_folder: {root: 'hdfs://nn/train'}",
     "image_folder: root: 'hdfs://nn/train': hdfs:// URLs are not read"),
    ("idx: {images: 'az://c/i.gz'}",
     "idx: images: 'az://c/i.gz': az:// URLs are not read"),
])
def test_a_url_sluice_cannot_read_is_a_spec_error(tmp_path, source, want):
    """A URL of a scheme sluice does not read (gs://, hdfs://, az://), an
    s3:// URL without its bucket or object, an https:// one without its
    host, or a known scheme in capitals is an error of the spec that says
    what to write, before anything is read; not a missing local file, nor
    libcurl's "Unsupported protocol" at the first record."""
    spec = tmp_path / "url.yaml"
    spec.write_text("pipeline: url\nsource:\n  %s\n" % source)
    rc, out = error_of(str(spec))
    assert rc == 1, out
    assert "url.yaml:3:3: source '%s': %s" % (source.split(":")[0], want) \
        in out, out


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


def test_libcurl_is_loaded_only_for_remote_urls(servers, tmp_path):
    """A run of local files never loads libcurl (CurlLoader.cpp loads it on
    the first remote URL); a run of remote ones does, and reads them."""
    local = tmp_path / "local.txt"
    local.write_text("a\nb\n")
    env = dict(os.environ, LD_DEBUG="files")
    r = subprocess.run([SLUICE_BIN, "run", one_file_spec(tmp_path, str(local),
                                                         "{}"),
                        "--sink", "null"], capture_output=True, text=True,
                       env=env)
    assert r.returncode == 0, r.stderr
    assert "libcurl" not in r.stderr
    assert "calling init" in r.stderr  # LD_DEBUG=files did report loading
    url = "s3://%s/text/lines.txt" % BUCKET
    r = subprocess.run([SLUICE_BIN, "run", one_file_spec(
        tmp_path, url, "{endpoint: %s}" % servers.s3_endpoint), "--sink",
        "null"], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert re.search(r"file=libcurl\.so\.4 \[0\];\s+dynamically loaded",
                     r.stderr), r.stderr[-2000:]


def test_missing_libcurl_is_a_clear_error(servers, tmp_path):
    url = "s3://%s/text/lines.txt" % BUCKET
    env = dict(os.environ, SLUICE_LIBCURL=str(tmp_path / "no-libcurl.so"))
    r = subprocess.run([SLUICE_BIN, "run", one_file_spec(
        tmp_path, url, "{endpoint: %s}" % servers.s3_endpoint), "--sink",
        "null"], capture_output=True, text=True, env=env)
    assert r.returncode != 0
    out = r.stdout + r.stderr
    assert re.search(r"text_lines: .*no-libcurl\.so could not be loaded "
                     r"\(.*\); remote URLs need it: install libcurl", out), out


def test_https_is_read_over_http2_where_the_server_offers_it(servers,
                                                              tmp_path):
    """The https server offers HTTP/2 (ALPN) and libcurl takes it: ranged
    requests multiplexed on its connections give the local bytes too (the
    S3 endpoint over TLS speaks HTTP/1.1, as S3 does)."""
    local, remote = local_and_remote(servers, tmp_path, "webdataset",
                                     "https")
    open(servers.https_log, "w").close()
    assert all(batches_equal(a, b)
               for a, b in zip(run_all(local), run_all(remote)))
    lines = open(servers.https_log).read().split("\n")
    shards = [line for line in lines if "/shards/" in line]
    assert shards and all(line.startswith("HTTP/2.0 206 ")
                          for line in shards), lines[:5]


@pytest.mark.parametrize("kind", ["https", "s3tls"])
def test_untrusted_certificate_is_a_located_error(servers, tmp_path, kind):
    """A server whose certificate no trusted CA signed: the run stops at once
    (no retries: retrying cannot mend it) with the URL and what to set; with
    on_error: skip the object is skipped and counted, never read unchecked."""
    if kind == "https":
        url, remote = servers.https + "/text/lines.txt", "{retries: 3}"
    else:
        url, remote = "s3://%s/text/lines.txt" % BUCKET, \
            "{endpoint: %s, retries: 3}" % servers.s3_tls_endpoint
    rc, out = error_of(one_file_spec(tmp_path, url, remote))
    assert rc == 1, out
    assert re.search(re.escape(url) + r": record 0: text_lines: cannot read "
                     r"file: cannot open: .*certificate", out), out
    assert "remote.ca_bundle (or AWS_CA_BUNDLE)" in out, out
    assert "attempts" not in out, out
    rc, out = error_of(one_file_spec(tmp_path, url, remote, "skip"))
    assert rc == 0, out
    # A bundle without the CA that signed it is refused the same way.
    other = tmp_path / "other.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
                    str(tmp_path / "other.key"), "-out", str(other), "-days",
                    "1", "-subj", "/CN=another CA"], check=True,
                   capture_output=True)
    rc, out = error_of(one_file_spec(
        tmp_path, url, remote[:-1] + ", ca_bundle: '%s'}" % other))
    assert rc == 1 and "not signed by a certificate authority in %s " \
        "(remote.ca_bundle)" % other in out, out
    # The message names the variable when the bundle came from it (as
    # where AWS_CA_BUNDLE names the system's store).
    with open(os.path.join(str(tmp_path), "env.pem"), "wb") as f:
        f.write(other.read_bytes())
    env = dict(os.environ, AWS_CA_BUNDLE=f.name)
    r = subprocess.run([SLUICE_BIN, "run", one_file_spec(tmp_path, url,
                                                         remote),
                        "--sink", "null"], capture_output=True, text=True,
                       env=env)
    assert r.returncode == 1 and "in %s (AWS_CA_BUNDLE)" % f.name in \
        r.stderr, r.stderr


def test_https_to_a_plain_http_server_says_so(servers, tmp_path):
    url = servers.http.replace("http://", "https://") + "/text/lines.txt"
    rc, out = error_of(one_file_spec(tmp_path, url, "{retries: 1}"))
    assert rc == 1 and url in out, out
    assert "does not answer in TLS: if it serves plain HTTP, write http://" \
        in out, out


def test_certificate_for_another_host_says_so(servers, tmp_path):
    # The fixture's certificate names 127.0.0.1 only.
    url = servers.https.replace("127.0.0.1", "localhost") + "/text/lines.txt"
    rc, out = error_of(one_file_spec(
        tmp_path, url, "{ca_bundle: '%s'}" % servers.ca_bundle))
    assert rc == 1 and url in out, out
    assert "certificate does not name the host of the URL" in out, out


def test_untrusted_certificate_of_a_listing_is_a_spec_error(servers,
                                                            tmp_path):
    spec = tmp_path / "list.yaml"
    spec.write_text("pipeline: l\nsource:\n  files: {files: 's3://%s/shards/"
                    "*.tar', remote: {endpoint: %s, retries: 2}}\n"
                    % (BUCKET, servers.s3_tls_endpoint))
    rc, out = error_of(str(spec))
    assert rc != 0 and "certificate" in out and "remote.ca_bundle" in out, \
        out


def test_ca_bundle_from_the_environment_or_relative_to_the_spec(
        servers, tmp_path, monkeypatch):
    local, remote = local_and_remote(servers, tmp_path, "tfrecord", "https")
    want = run_all(local)
    text = open(remote).read().replace(
        ", ca_bundle: '%s'" % servers.ca_bundle, "")
    assert "ca_bundle" not in text
    open(remote, "w").write(text)
    monkeypatch.setenv("AWS_CA_BUNDLE", servers.ca_bundle)
    assert all(batches_equal(a, b) for a, b in zip(want, run_all(remote)))
    monkeypatch.delenv("AWS_CA_BUNDLE")
    # Relative to the spec's directory, wherever the run starts.
    os.makedirs(str(tmp_path / "certs"))
    with open(servers.ca_bundle, "rb") as f:
        (tmp_path / "certs" / "ca.pem").write_bytes(f.read())
    open(remote, "w").write(text.replace("retries: 4}",
                                         "retries: 4, ca_bundle: certs/ca.pem}"))
    monkeypatch.chdir("/")
    assert all(batches_equal(a, b) for a, b in zip(want, run_all(remote)))


def test_ca_bundle_that_cannot_be_used_is_a_clear_error(servers, tmp_path,
                                                         monkeypatch):
    url = servers.https + "/text/lines.txt"
    rc, out = error_of(one_file_spec(tmp_path, url,
                                     "{ca_bundle: no-such.pem}"))
    assert rc != 0
    assert re.search(r"text_lines: remote\.ca_bundle: cannot use '.*"
                     r"no-such\.pem': No such file or directory \(it names "
                     r"the PEM file", out), out
    rc, out = error_of(one_file_spec(tmp_path, url, "{ca_bundle: ''}"))
    assert rc != 0 and "remote.ca_bundle is empty" in out, out
    monkeypatch.setenv("AWS_CA_BUNDLE", str(tmp_path))
    rc, out = error_of(one_file_spec(tmp_path, url, "{}"))
    assert rc != 0 and "AWS_CA_BUNDLE: cannot use '%s': not a file" % \
        tmp_path in out, out
    monkeypatch.delenv("AWS_CA_BUNDLE")
    # Not PEM (the server's key, a DER file): refused before any request.
    junk = tmp_path / "junk.pem"
    junk.write_text("this is not a certificate\n")
    rc, out = error_of(one_file_spec(tmp_path, url,
                                     "{ca_bundle: '%s'}" % junk))
    assert rc != 0 and "remote.ca_bundle: cannot use '%s': it holds no " \
        "PEM certificate" % junk in out, out
    assert "record 0" not in out, out


def test_forbidden_is_a_located_error(servers, tmp_path, monkeypatch):
    rc, out = error_of(one_file_spec(tmp_path, servers.http +
                                     "/forbidden/x.txt", "{}"))
    assert rc == 1 and "HTTP 403" in out and "/forbidden/x.txt" in out
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "NOPE")
    url = "s3://%s/text/lines.txt" % BUCKET
    rc, out = error_of(one_file_spec(tmp_path, url, "{endpoint: %s}"
                                     % servers.s3_endpoint))
    assert rc == 1 and "HTTP 403 (InvalidAccessKeyId" in out and url in out
    assert "check the credentials (from environment)" in out, out


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
        servers.put_http(key, changed, newer=True)
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
    assert re.search(r"source: 3 requests in flight \(up to \d+ at once, set "
                     r"by remote.concurrency\), [\d.]+ ms median latency",
                     everything)  # the stats line
    assert SECRET_KEY not in everything
    assert "sluice-token-55aa" not in everything



# --- requests in flight: the schedule's, the spec's -------------------------

def test_schedule_parallelism_on_the_source_sets_requests_in_flight(
        servers, tmp_path):
    source, select = SOURCES["image_folder"]
    remote = "{endpoint: %s}" % servers.s3_endpoint
    spec = spec_for(tmp_path, "image_folder", source, select,
                    ("s3://" + BUCKET, "s3"), remote)
    want = run_all(spec)

    def in_flight(schedule):
        text = open(spec).read() + "schedule: %s\n" % schedule
        path = tmp_path / "sched.yaml"
        path.write_text(text)
        p = sluice.Pipeline(str(path))
        got = list(p)
        assert len(got) == len(want)
        assert all(batches_equal(a, b) for a, b in zip(want, got))
        st = p.stats()["remote"]
        return st["requests_in_flight"], st["in_flight_pinned"]

    assert in_flight("{image_folder: {parallelism: 5}}") == (5, False)
    # A default for the workers leaves the source at its own default.
    assert in_flight("{default: {parallelism: 2}}") == (8, False)
    # The spec's remote.concurrency overrides a schedule.
    text = open(spec).read().replace(
        "{endpoint: %s}" % servers.s3_endpoint,
        "{endpoint: %s, concurrency: 3}" % servers.s3_endpoint)
    open(spec, "w").write(text)
    assert in_flight("{image_folder: {parallelism: 5}}") == (3, True)


def tune_with_delay(servers, proxy, spec, report, delay_ms=20):
    """`sluice tune SPEC --report REPORT` (a fresh profile) while `proxy`
    waits `delay_ms` before every answer: report.md and schedule.yaml."""
    servers.rules(proxy, [{"match": "", "delay_ms": delay_ms}])
    try:
        r = subprocess.run([SLUICE_BIN, "tune", str(spec), "--report",
                            str(report)], capture_output=True, text=True,
                           env=dict(os.environ, SLUICE_NO_SCHEDULE_CACHE="1"))
    finally:
        servers.rules(proxy, [])
    assert r.returncode == 0, r.stdout + r.stderr
    return ((report / "report.md").read_text(),
            (report / "schedule.yaml").read_text())


def test_tune_chooses_requests_in_flight_and_says_so(servers, tmp_path):
    # 20 ms before every answer: the tuner measures the requests and picks
    # how many to keep in flight (Little's law), says so in the report, and
    # writes it as the source's parallelism in the schedule.
    proxy = servers.s3_proxy
    spec = tmp_path / "tune.yaml"
    spec.write_text("""
pipeline: remote_tune
source:
  image_folder: {root: 's3://%s/images', extensions: [jpg],
                 remote: {endpoint: %s}}
steps:
  - decode_image: {field: data, as: image, channels: 3}
  - resize: {field: image, size: [32, 32]}
  - select: [image, label]
  - batch: {size: 8}
budget: {cores: 2, memory: 256MiB}
""" % (BUCKET, proxy))
    report = tmp_path / "report"
    md, sched = tune_with_delay(servers, proxy, spec, report)
    m = re.search(r"source: (\d+) requests in flight, (\d+) ms median "
                  r"latency", md)
    assert m, md
    n, latency = int(m.group(1)), int(m.group(2))
    assert latency >= 20  # the proxy's delay is part of every request
    # A per-file source: requests per record (Little's law in records), not
    # a stream's window in bytes, which would keep 4 ("two shards ahead")
    # in flight whatever the rate.
    assert "in bytes" not in md and "shards ahead" not in md, md
    assert "requests per record): Little's law gives" in md, md
    assert 1 <= n <= 256
    assert re.search(r"image_folder:\s*\{?\s*parallelism: %d" % n, sched), \
        sched
    rep = json.loads((report / "report.json").read_text())
    assert any(k["knob"] == "requests in flight" and k["value"] == str(n)
               for k in rep["knobs"])



def test_tune_models_a_windowed_source_in_bytes(servers, tmp_path):
    """webdataset shards over http:// with 20 ms before every answer: the
    tuner models the sequential source in bytes (its window and the shards'
    first windows ahead against the consumer's demand), says so with each
    figure, chooses at least 4, and writes it as the source's parallelism."""
    proxy = servers.http_proxy
    spec = tmp_path / "tune_wds.yaml"
    spec.write_text("""
pipeline: remote_tune_wds
source:
  webdataset: {files: '%s/shards/shard-{000..002}.tar',
               remote: {chunk_size: 4KiB},
               fields: [{ext: jpg, name: data},
                        {ext: cls, name: label, type: i64}]}
steps:
  - decode_image: {field: data, as: image, channels: 3}
  - resize: {field: image, size: [32, 32]}
  - select: [image, label]
  - batch: {size: 8}
budget: {cores: 2, memory: 256MiB}
""" % proxy)
    md, sched = tune_with_delay(servers, proxy, spec, tmp_path / "report")
    m = re.search(r"source: (\d+) requests in flight, (\d+) ms median "
                  r"latency \((\d+) ms without queueing; Little's law in "
                  r"bytes", md)
    assert m, md
    n, latency, unloaded = (int(g) for g in m.groups())
    assert 20 <= unloaded and 20 <= latency  # the proxy delays every answer
    assert 4 <= n <= 256
    assert re.search(r"webdataset:\s*\{?\s*parallelism: %d" % n, sched), \
        sched


# --- the on-disk cache of fetched objects ------------------------------------

def cached_spec(servers, tmp_path, name, kind, cache, epochs=2, size=None):
    local, remote = local_and_remote(servers, tmp_path, name, kind)
    opts = "cache: '%s'" % cache + (", cache_size: %s" % size if size else "")
    text = open(remote).read()
    if kind == "s3":
        text = text.replace("retries: 4}", "retries: 4, %s}" % opts)
    else:
        text = text.replace("retries: 4}", "retries: 4, %s}" % opts)
    text = text.replace("epochs: 2", "epochs: %d" % epochs)
    open(remote, "w").write(text)
    text = open(local).read().replace("epochs: 2", "epochs: %d" % epochs)
    open(local, "w").write(text)
    return local, remote


def objects_of(servers, name):
    counts = {"image_folder": 48, "files": 16, "webdataset": 3}
    return counts[name]


@pytest.mark.parametrize("name,kind", [("image_folder", "s3"),
                                       ("files", "http"),
                                       ("webdataset", "s3"),
                                       ("webdataset", "http")])
def test_cache_serves_later_epochs_with_the_same_bytes(servers, tmp_path,
                                                       name, kind):
    cache = tmp_path / "cache"
    local, remote = cached_spec(servers, tmp_path, name, kind, cache)
    want = run_all(local)
    p = sluice.Pipeline(remote)
    got = list(p)
    assert len(got) == len(want) > 0
    assert all(batches_equal(a, b) for a, b in zip(want, got))
    n = len(glob.glob(str(cache / "*.obj")))
    st = p.stats()["remote"]["cache"]
    # Epoch 1 fetched every object and kept it; epoch 2 read every one
    # from the disk (the server said 304 Not Modified).
    assert st["misses"] == n and st["hits"] == n and st["stale"] == 0, st
    assert st["bytes_read"] == st["bytes_stored"] > 0
    assert not glob.glob(str(cache / ".*.tmp"))
    # Another pipeline (a later run) reads everything locally.
    q = sluice.Pipeline(remote)
    again = list(q)
    assert all(batches_equal(a, b) for a, b in zip(want, again))
    st = q.stats()["remote"]["cache"]
    assert st["hits"] == 2 * n and st["misses"] == 0, st


@pytest.mark.parametrize("kind", ["s3", "http"])
def test_cache_refetches_an_object_whose_etag_changed(servers, tmp_path,
                                                      kind):
    cache = tmp_path / "cache"
    rows = "".join("row %05d\n" % i for i in range(4000)).encode()
    key = "cachechange/%s.txt" % kind
    if kind == "s3":
        servers.put_s3({key: rows})
        url, remote = "s3://%s/%s" % (BUCKET, key), \
            "{endpoint: %s, chunk_size: 8KiB, cache: '%s'}" % (
                servers.s3_endpoint, cache)
    else:
        servers.put_http(key, rows)
        url, remote = servers.http + "/" + key, \
            "{chunk_size: 8KiB, cache: '%s'}" % cache
    spec = tmp_path / "cc.yaml"
    spec.write_text("pipeline: cc\nsource:\n  text_lines: {files: '%s', "
                    "remote: %s}\nsteps:\n  - batch: {size: 1000}\n"
                    % (url, remote))
    lines = lambda bs: [x for b in bs for x in b["line"]]
    p = sluice.Pipeline(str(spec))
    assert lines(p) == rows.decode().splitlines()
    assert p.stats()["remote"]["cache"]["misses"] == 1
    # The same size, other bytes: a new version with a new ETag.
    changed = rows.replace(b"row", b"ROW")
    if kind == "s3":
        servers.put_s3({key: changed})
    else:
        servers.put_http(key, changed, newer=True)
    q = sluice.Pipeline(str(spec))
    assert lines(q) == changed.decode().splitlines()
    st = q.stats()["remote"]["cache"]
    assert st["stale"] == 1 and st["misses"] == 1 and st["hits"] == 0, st
    # The entry now holds the new version.
    r = sluice.Pipeline(str(spec))
    assert lines(r) == changed.decode().splitlines()
    assert r.stats()["remote"]["cache"]["hits"] == 1


def test_cache_is_bounded_and_evicts_the_least_recent(servers, tmp_path):
    cache = tmp_path / "cache"
    # 48 pictures of 1-4 KB each; a bound of 20,000 bytes holds a few.
    local, remote = cached_spec(servers, tmp_path, "image_folder", "s3",
                                cache, epochs=2, size="20000")
    want = run_all(local)
    p = sluice.Pipeline(remote)
    got = list(p)
    assert all(batches_equal(a, b) for a, b in zip(want, got))
    total = sum(os.path.getsize(f) for f in glob.glob(str(cache / "*.obj")))
    assert 0 < total <= 20000
    st = p.stats()["remote"]["cache"]
    assert st["evictions"] > 0, st
    # Every read was either local or fetched: nothing was lost.
    assert st["hits"] + st["misses"] == 2 * 48, st


def test_a_damaged_entry_is_dropped_and_fetched_again(servers, tmp_path):
    cache = tmp_path / "cache"
    local, remote = cached_spec(servers, tmp_path, "files", "s3", cache,
                                epochs=1)
    want = run_all(local)
    assert all(batches_equal(a, b) for a, b in zip(want, run_all(remote)))
    entries = sorted(glob.glob(str(cache / "*.obj")))
    assert len(entries) == 16
    data = bytearray(open(entries[0], "rb").read())
    data[-1] ^= 0xFF  # one byte of the object: the CRC no longer matches
    open(entries[0], "wb").write(bytes(data))
    p = sluice.Pipeline(remote)
    got = list(p)
    assert all(batches_equal(a, b) for a, b in zip(want, got))
    st = p.stats()["remote"]["cache"]
    assert st["damaged"] == 1 and st["hits"] == 15 and st["misses"] == 1, st


def test_processes_sharing_a_cache_read_whole_entries(servers, tmp_path):
    # Three processes at once over one cache directory, twice: each writes
    # entries under temporary names and renames them, so none reads half
    # an entry; every run gives the local bytes.
    cache = tmp_path / "cache"
    local, remote = cached_spec(servers, tmp_path, "webdataset", "http",
                                cache, epochs=2)
    script = textwrap.dedent("""
        import hashlib, sys
        import sluice
        h = hashlib.sha256()
        for b in sluice.Pipeline(sys.argv[1]):
            for k in sorted(b):
                h.update(k.encode())
                h.update(repr(b[k].tolist()).encode())
        print(h.hexdigest())
    """)
    env = dict(os.environ)

    def digests(spec, n):
        procs = [subprocess.Popen([sys_python(), "-c", script, spec],
                                  stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=env)
                 for _ in range(n)]
        outs = [p.communicate(timeout=300) for p in procs]
        assert all(p.returncode == 0 for p in procs), outs
        return [o[0].strip() for o in outs]

    want = digests(local, 1)[0]
    for _ in range(2):
        assert digests(remote, 3) == [want] * 3
    assert len(glob.glob(str(cache / "*.obj"))) == 3
    assert not glob.glob(str(cache / ".*.tmp"))


def sys_python():
    import sys
    return sys.executable


def test_cache_directory_that_cannot_be_used_is_a_spec_error(servers,
                                                             tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    spec = one_file_spec(tmp_path, servers.http + "/text/lines.txt",
                         "{cache: '%s'}" % (blocker / "sub"))
    rc, out = error_of(spec)
    assert rc != 0
    assert "remote.cache" in out and "name a writable directory" in out


# --- gzip over HTTP and S3; idx headers at check time ------------------------

def gz(data):
    import gzip
    return gzip.compress(data, mtime=0)


def idx_images(n, rows, cols, rng):
    return (struct.pack(">IIII", 0x803, n, rows, cols) +
            rng.integers(0, 256, size=n * rows * cols,
                         dtype=np.uint8).tobytes())


def idx_labels(n, rng):
    return struct.pack(">II", 0x801, n) + rng.integers(
        0, 10, size=n, dtype=np.uint8).tobytes()


@pytest.fixture(scope="module")
def gz_objects(servers):
    rng = np.random.default_rng(3)
    csv = ("id,word,x\n" + "".join("%d,w%d,%.4f\n" % (i, i % 97, i / 7.0)
                                   for i in range(20000))).encode()
    text = "".join("text line %d\n" % i for i in range(9000)).encode()
    # Two gzip members in one object, as `cat a.gz b.gz` makes.
    two = gz(text[:40000]) + gz(text[40000:])
    objs = {"gz/a.csv.gz": gz(csv), "gz/lines.txt.gz": two,
            "gz/img-idx3-ubyte.gz": gz(idx_images(60, 28, 28, rng)),
            "gz/lab-idx1-ubyte.gz": gz(idx_labels(60, rng))}
    for rel, data in objs.items():
        servers.put_http(rel, data)
        path = os.path.join(servers.local, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    servers.put_s3(objs)
    return objs


GZ_SOURCES = {
    "csv": "csv: {files: '%s/gz/a.csv.gz', header: true, remote: %s, columns: "
           "[{name: id, type: i64}, {name: word, type: string}, "
           "{name: x, type: f32}]}",
    "text_lines": "text_lines: {files: '%s/gz/lines.txt.gz', remote: %s}",
    "idx": "idx: {images: '%s/gz/img-idx3-ubyte.gz', "
           "labels: '%s/gz/lab-idx1-ubyte.gz', remote: %s}",
}


def gz_spec(tmp_path, name, base, remote):
    src = GZ_SOURCES[name]
    src = (src % (base, base, remote) if name == "idx"
           else src % (base, remote))
    path = tmp_path / ("gz_%s_%d.yaml" % (name, abs(hash(base)) % 10000))
    path.write_text("pipeline: g\nsource:\n  %s\nsteps:\n  - batch: {size: 64}\n"
                    % src)
    return str(path)


@pytest.mark.parametrize("name", sorted(GZ_SOURCES))
@pytest.mark.parametrize("kind", ["s3", "http"])
def test_remote_gzip_equals_local(servers, gz_objects, tmp_path, name, kind):
    local = gz_spec(tmp_path, name, servers.local, "{}")
    if kind == "s3":
        remote = gz_spec(tmp_path, name, "s3://" + BUCKET,
                         "{endpoint: %s, chunk_size: 4KiB, concurrency: 3}"
                         % servers.s3_endpoint)
    else:
        remote = gz_spec(tmp_path, name, servers.http,
                         "{chunk_size: 4KiB, concurrency: 3}")
    want, got = run_all(local), run_all(remote)
    assert len(want) == len(got) > 0
    assert all(batches_equal(a, b) for a, b in zip(want, got))


def test_truncated_gzip_object_is_a_located_error(servers, gz_objects,
                                                  tmp_path):
    whole = gz_objects["gz/lines.txt.gz"]
    servers.put_http("gz/cut.txt.gz", whole[:len(whole) // 2])
    spec = one_file_spec(tmp_path, servers.http + "/gz/cut.txt.gz",
                         "{chunk_size: 4KiB}")
    rc, out = error_of(spec)
    assert rc == 1, out
    assert "cut.txt.gz" in out and "ends early" in out, out


def test_check_reads_remote_idx_headers(servers, gz_objects, tmp_path):
    spec = gz_spec(tmp_path, "idx", servers.http, "{}")
    r = subprocess.run([SLUICE_BIN, "check", spec], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    assert re.search(r"u8\[28, ?28\]", r.stdout), r.stdout
    # A header that is not an idx header is found at check time, located.
    servers.put_http("gz/bad-idx3-ubyte.gz", gz(b"\x00\x00\x09\x03" + b"\0" * 20))
    bad = open(spec).read().replace("img-idx3-ubyte.gz", "bad-idx3-ubyte.gz")
    path = tmp_path / "bad.yaml"
    path.write_text(bad)
    r = subprocess.run([SLUICE_BIN, "check", str(path)], capture_output=True,
                       text=True)
    assert r.returncode != 0
    assert "bad-idx3-ubyte.gz" in r.stderr, r.stderr


@pytest.mark.parametrize("budget", ["256MiB", "8MiB", "3MiB"])
def test_objects_fetched_ahead_are_counted_in_the_budget(servers, tmp_path,
                                                        budget):
    """The whole-object GETs a per-file source starts ahead are reserved in
    the budget ("<source> objects ahead") from when they are requested
    until a reader takes them, and a budget that cannot hold more bounds
    the read-ahead instead of being overrun: a small budget still finishes
    with the same bytes as local files."""
    source, select = SOURCES["image_folder"]
    remote = "{endpoint: %s, concurrency: 32}" % servers.s3_endpoint
    local = spec_for(tmp_path, "image_folder", source, select,
                     (servers.local, "local"), "{}")
    spec = spec_for(tmp_path, "image_folder", source, select,
                    ("s3://" + BUCKET, "s3"), remote)
    text = open(spec).read().replace("memory: 256MiB", "memory: " + budget)
    open(spec, "w").write(text)
    want = run_all(local)
    p = sluice.Pipeline(spec)
    got = list(p)
    assert len(got) == len(want) > 0
    assert all(batches_equal(a, b) for a, b in zip(want, got))
    st = p.stats()
    ahead = st["memory"]["peaks"]["image_folder objects ahead"]
    # The first requests reserve a guess (256 KiB each), the later ones the
    # largest object taken so far (the JPEGs here are a few KiB), each at
    # most a quarter of what the budget has left: at 8 MiB fewer than the 32
    # asked for fit at first; at 3 MiB maybe none (one GET at a time then).
    if budget != "3MiB":
        assert ahead > 0
    assert st["memory"]["peak"] <= st["memory"]["limit"]


@pytest.mark.parametrize("name,kind", [("webdataset", "http"),
                                       ("tfrecord", "s3"), ("csv", "http")])
def test_next_shards_first_chunks_are_fetched_ahead(servers, tmp_path, name,
                                                    kind):
    """A source that reads each shard as one stream asks for the first chunk
    of the next shards while it reads one (counted in "<source> objects
    ahead"), with the same records as local files; with
    SLUICE_NO_SHARD_PREFETCH=1 (read once per process: a child process)
    nothing is asked for ahead and the records are the same again."""
    local, remote = local_and_remote(servers, tmp_path, name, kind)
    want = run_all(local)
    p = sluice.Pipeline(remote)
    got = list(p)
    assert len(got) == len(want) > 0
    assert all(batches_equal(a, b) for a, b in zip(want, got))
    assert p.stats()["memory"]["peaks"].get(
        "%s objects ahead" % name, 0) > 0, p.stats()["memory"]["peaks"]

    out = tmp_path / "off.pickle"
    child = textwrap.dedent("""
        import pickle, sys, sluice
        p = sluice.Pipeline(sys.argv[1])
        batches = list(p)
        peaks = p.stats()["memory"]["peaks"]
        pickle.dump((batches, peaks), open(sys.argv[2], "wb"))
    """)
    env = dict(os.environ, SLUICE_NO_SHARD_PREFETCH="1")
    r = subprocess.run([sys.executable, "-c", child, remote, str(out)],
                       env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    off, peaks = pickle.load(open(out, "rb"))
    assert "%s objects ahead" % name not in peaks, peaks
    assert len(off) == len(want)
    assert all(batches_equal(a, b) for a, b in zip(want, off))


def child_runs_on_and_off(tmp_path, child, spec, switch):
    """Runs the Python program `child` (argv: the spec, a file to pickle its
    result into) with the switch `switch` at "0" (the optimization on) and
    "1" (off), each in a process of its own: {"0": result, "1": result}."""
    runs = {}
    for value in ("0", "1"):
        out = tmp_path / ("%s-%s.pickle" % (switch, value))
        env = dict(os.environ, **{switch: value})
        r = subprocess.run([sys.executable, "-c", child, spec, str(out)],
                           env=env, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        runs[value] = pickle.load(open(out, "rb"))
    return runs


@pytest.mark.parametrize("name,kind", [("webdataset", "http"),
                                       ("tfrecord", "s3"), ("csv", "http")])
def test_next_shards_first_window_is_fetched_ahead(servers, tmp_path, name,
                                                   kind):
    """A shard asked for ahead (and the first one of each pass) is asked for
    in one request of a whole window of chunks (3 x 4 KiB here), so a
    reader that opens it waits for no second round trip; with
    SLUICE_NO_SHARD_WINDOW_AHEAD=1 (read once per process: a child process)
    in one chunk, as before. Both give the records of local files, and the
    requests saved are exactly the chunks the window's request took over:
    2 per shard larger than 8 KiB and per epoch (every object here is)."""
    local, remote = local_and_remote(servers, tmp_path, name, kind)
    want = run_all(local)
    child = textwrap.dedent("""
        import pickle, sys, sluice
        p = sluice.Pipeline(sys.argv[1])
        batches = list(p)
        st = p.stats()
        # A retry (a connection reset under load) is a request more.
        pickle.dump((batches,
                     st["remote"]["requests"] - st["remote"]["retries"],
                     st["memory"]["peaks"]), open(sys.argv[2], "wb"))
    """)
    runs = child_runs_on_and_off(tmp_path, child, remote,
                                 "SLUICE_NO_SHARD_WINDOW_AHEAD")
    shards = {"webdataset": "shards/shard-*.tar", "tfrecord": "tfr/part-*",
              "csv": "csv/day-*.csv"}[name]
    sizes = [os.path.getsize(f)
             for f in glob.glob(os.path.join(servers.local, shards))]
    assert len(sizes) >= 2 and min(sizes) > 8192, sizes
    for switch, (batches, requests, peaks) in runs.items():
        assert len(batches) == len(want), switch
        assert all(batches_equal(a, b) for a, b in zip(want, batches)), switch
    on, off = runs["0"], runs["1"]
    epochs = 2
    saved = epochs * 2 * len(sizes)
    if name == "webdataset":
        # The tar reader stops at the end-of-archive blocks; whether the
        # chunk holding only padding is asked for follows its read-ahead
        # (timing), in either mode: one request either way per shard read.
        assert saved - epochs * len(sizes) <= off[1] - on[1] <= \
            saved + epochs * len(sizes), (on[1], off[1])
    else:
        assert off[1] - on[1] == saved, (on[1], off[1])
    ahead = "%s objects ahead" % name
    assert on[2][ahead] >= 3 * 4096, on[2]
    assert off[2][ahead] <= 2 * 4096, off[2]


def served_lines(servers, tmp_path, name, seed, rows, fill):
    """`rows` lines of random length (seeded), served over HTTP as big/NAME
    and written to tmp_path/NAME; returns (the bytes, the local path)."""
    rng = np.random.default_rng(seed)
    text = "\n".join("row %d %s" % (i, fill * int(rng.integers(0, 200)))
                     for i in range(rows)).encode()
    servers.put_http("big/" + name, text)
    local_file = tmp_path / name
    local_file.write_bytes(text)
    return text, local_file


def lines_local_spec(tmp_path, pipeline, local_file, memory):
    """Batches of 1,000 lines of `local_file` (served_lines): the local
    spec's path, and the steps and budget for the remote specs to share."""
    body = """
steps:
  - batch: {size: 1000, drop_remainder: false}
budget: {cores: 2, memory: %s}
""" % memory
    local = tmp_path / "local.yaml"
    local.write_text("pipeline: %s\nsource:\n  text_lines: {files: '%s'}\n%s"
                     % (pipeline, local_file, body))
    return local, body


def test_chunk_bodies_are_reused(servers, tmp_path):
    """Chunks of 256 KiB and more: a consumed chunk's buffer takes a later
    response's body (counted in the stats' bodies_reused), and with
    SLUICE_NO_REMOTE_BODY_REUSE=1 (read once per process: a child process)
    none is, with the same lines as the local file either way. A fresh
    body of that size has its pages faulted in at once (bodies_populated),
    none with SLUICE_NO_REMOTE_BODY_POPULATE=1, the same lines again."""
    text, local_file = served_lines(servers, tmp_path, "lines.txt", 24,
                                    40000, "y")
    assert len(text) > 12 * (256 << 10)
    local, body = lines_local_spec(tmp_path, "big", local_file, "256MiB")
    remote = tmp_path / "remote.yaml"
    remote.write_text(
        "pipeline: big\nsource:\n  text_lines: {files: '%s/big/lines.txt', "
        "remote: {concurrency: 2, chunk_size: 256KiB}}\n%s"
        % (servers.http, body))
    want = run_all(str(local))
    child = textwrap.dedent("""
        import pickle, sys, sluice
        p = sluice.Pipeline(sys.argv[1])
        pickle.dump((list(p), p.stats()["remote"]), open(sys.argv[2], "wb"))
    """)
    for switch in ("0", "1", "populate"):
        out = tmp_path / ("reuse-%s.pickle" % switch)
        env = dict(os.environ,
                   SLUICE_NO_REMOTE_BODY_REUSE=str(int(switch == "1")),
                   SLUICE_NO_REMOTE_BODY_POPULATE=str(
                       int(switch == "populate")))
        r = subprocess.run([sys.executable, "-c", child, str(remote),
                            str(out)], env=env, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        got, stats = pickle.load(open(out, "rb"))
        assert len(got) == len(want) > 0
        assert all(batches_equal(a, b) for a, b in zip(want, got)), switch
        assert stats["requests"] >= 12, stats
        if switch == "1":
            assert stats["bodies_reused"] == 0, stats
        else:
            assert stats["bodies_reused"] > 0, stats
        if switch == "populate":
            assert stats["bodies_populated"] == 0, stats
        else:
            # Every body that no kept buffer served was fresh.
            assert stats["bodies_populated"] >= \
                stats["requests"] - stats["bodies_reused"] - 1 > 0, stats


def test_large_chunk_bodies_are_mapped_on_huge_pages(servers, tmp_path):
    """Ranged chunks of 4 MiB: a fresh chunk's body is a mapping of its own
    advised as huge pages (bodies_mapped, the rest served by kept ones), and
    with SLUICE_NO_REMOTE_HUGE_BODIES=1 none is (a string, as before); the
    lines are the local file's either way. Chunks of 1 MiB are too small
    for a 2 MiB page: none mapped but the first request (a window of
    chunks at once). image_folder's whole objects never are
    (each becomes a record's string). A child process each: the switch is
    read once per process."""
    text, local_file = served_lines(servers, tmp_path, "huge.txt", 77,
                                    240000, "h")
    assert len(text) > 6 * (4 << 20)
    local, body = lines_local_spec(tmp_path, "huge", local_file, "512MiB")
    want = run_all(str(local))
    child = textwrap.dedent("""
        import pickle, sys, sluice
        p = sluice.Pipeline(sys.argv[1])
        pickle.dump((list(p), p.stats()["remote"]), open(sys.argv[2], "wb"))
    """)
    for chunk, off in (("4MiB", "0"), ("4MiB", "1"), ("1MiB", "0")):
        remote = tmp_path / ("remote-%s-%s.yaml" % (chunk, off))
        remote.write_text(
            "pipeline: huge\nsource:\n  text_lines: {files: "
            "'%s/big/huge.txt', remote: {concurrency: 2, chunk_size: %s}}\n%s"
            % (servers.http, chunk, body))
        out = tmp_path / ("huge-%s-%s.pickle" % (chunk, off))
        env = dict(os.environ, SLUICE_NO_REMOTE_HUGE_BODIES=off)
        r = subprocess.run([sys.executable, "-c", child, str(remote),
                            str(out)], env=env, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        got, stats = pickle.load(open(out, "rb"))
        assert len(got) == len(want) > 0
        assert all(batches_equal(a, b) for a, b in zip(want, got)), (chunk,
                                                                      off)
        assert stats["requests"] >= 6, stats
        if chunk == "4MiB" and off == "0":
            # Every request took a kept body or a fresh mapped one (the
            # last chunk, under 1.6 MiB, may be a string).
            assert stats["bodies_mapped"] >= 1, stats
            assert stats["bodies_mapped"] + stats["bodies_reused"] >= \
                stats["requests"] - 1, stats
        elif off == "1":
            assert stats["bodies_mapped"] == 0, stats
        else:
            # Only the first request, which asks for a window of chunks at
            # once, is large enough.
            assert stats["bodies_mapped"] <= 1, stats
            assert stats["bodies_reused"] > 0, stats
    local_if, remote_if = local_and_remote(servers, tmp_path, "image_folder",
                                           "s3")
    out = tmp_path / "if.pickle"
    r = subprocess.run([sys.executable, "-c", child, remote_if, str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    got, stats = pickle.load(open(out, "rb"))
    assert all(batches_equal(a, b) for a, b in zip(run_all(local_if), got))
    assert stats["requests"] > 0 and stats["bodies_mapped"] == 0, stats


def test_kept_bodies_are_counted_in_the_budget(servers, tmp_path):
    """The consumed chunks' buffers the client keeps for later responses are
    counted in the budget (the "remote bodies (idle)" account, in --stats):
    with 256 MiB some 2 MiB buffers are kept and reused, within a sixteenth
    of the budget; with 12 MiB (a sixteenth is 768 KiB) no 2 MiB one is,
    and the lines are those of the local file either way; without shards
    fetched ahead they are counted too. A child process each: the kept
    buffers are the process's."""
    text, local_file = served_lines(servers, tmp_path, "kept.txt", 2424,
                                    80000, "z")
    assert len(text) > 3 * (2 << 20)
    steps = "steps:\n  - batch: {size: 1000, drop_remainder: false}\n"
    local = tmp_path / "local.yaml"
    local.write_text("pipeline: kept\nsource:\n  text_lines: {files: '%s'}\n%s"
                     % (local_file, steps))
    want = run_all(str(local))
    child = textwrap.dedent("""
        import pickle, sys, sluice
        p = sluice.Pipeline(sys.argv[1])
        got = list(p)
        stats = p.stats()
        pickle.dump((got, stats["remote"], stats["memory"]["peaks"]),
                    open(sys.argv[2], "wb"))
    """)
    kept = {}
    # The third: no shard fetched ahead (SLUICE_NO_SHARD_PREFETCH=1), and the
    # kept buffers are counted all the same.
    for budget, prefetch in (("256MiB", "0"), ("12MiB", "0"),
                             ("256MiB", "1")):
        spec = tmp_path / ("remote-%s.yaml" % budget)
        spec.write_text(
            "pipeline: kept\nsource:\n  text_lines: {files: "
            "'%s/big/kept.txt', remote: {concurrency: 2, chunk_size: 2MiB}}\n"
            "%sbudget: {cores: 2, memory: %s}\n"
            % (servers.http, steps, budget))
        out = tmp_path / ("kept-%s-%s.pickle" % (budget, prefetch))
        env = dict(os.environ, SLUICE_NO_SHARD_PREFETCH=prefetch)
        r = subprocess.run([sys.executable, "-c", child, str(spec), str(out)],
                           env=env, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        got, remote, peaks = pickle.load(open(out, "rb"))
        assert len(got) == len(want) > 0
        assert all(batches_equal(a, b) for a, b in zip(want, got)), budget
        assert "remote bodies (idle)" in peaks, peaks
        kept[budget, prefetch] = (peaks["remote bodies (idle)"],
                                  remote["bodies_reused"])
    big, small = kept["256MiB", "0"], kept["12MiB", "0"]
    assert 2 << 20 <= big[0] <= (256 << 20) // 16 and big[1] > 0, kept
    # No 2 MiB chunk fits in 768 KiB: at most the object's shorter last one.
    assert small[0] <= (12 << 20) // 16 < 2 << 20, kept
    unfetched = kept["256MiB", "1"]
    assert 2 << 20 <= unfetched[0] <= (256 << 20) // 16, kept


@pytest.mark.parametrize("budget", ["256MiB", "8MiB"])
def test_records_across_chunks_read_through_the_chunk_view(servers, tmp_path,
                                                           budget):
    """A plain remote object's reader windows the received chunks instead
    of a copy of them, and puts a record that goes on in the next chunk
    together in its buffer (64 KiB of the next chunk at a time, the buffer
    grown for a record longer than it): lines of 0 to 200 KB (cut at every
    place a 64 KiB chunk can end) and tar members of 0 bytes to 3 chunks
    read as the local files', with SLUICE_NO_REMOTE_CHUNK_VIEW=1 (every byte
    copied into the buffer first, read once per process: a child process)
    and without, at a budget of 256 MiB and at a small one (8 MiB)."""
    rng = np.random.default_rng(24)
    lines = "\n".join(
        "line %d %s" % (i, "q" * int(n))
        for i, n in enumerate([0, 65536, 65530, 200000, 1, 131072] +
                              list(rng.integers(0, 120000, size=40))))
    lines = lines.encode()
    servers.put_http("views/lines.txt", lines)
    (tmp_path / "lines.txt").write_bytes(lines)
    sizes = [0, 1, 511, 512, 513, 65536 - 1024, 65536, 65537, 70000, 3,
             200000, 131072 - 512, 130000, 17, 65536 * 3, 1500]
    sizes += [int(x) for x in rng.integers(0, 90000, size=24)]
    shard = tar_shard([("m%03d" % i, [("bin", rng.bytes(n)),
                                      ("cls", b"%d" % (i % 7))])
                       for i, n in enumerate(sizes)])
    servers.put_http("views/shard.tar", shard)
    (tmp_path / "shard.tar").write_bytes(shard)
    sources = {
        "lines": ("text_lines: {files: '%s/lines.txt'%s}", "[line]",
                  len(lines)),
        "tar": ("webdataset: {files: '%s/shard.tar'%s, fields: "
                "[{ext: bin, name: data}, {ext: cls, name: label, "
                "type: i64}]}", "[key, data, label]", len(shard)),
    }
    child = textwrap.dedent("""
        import pickle, sys, sluice
        p = sluice.Pipeline(sys.argv[1])
        pickle.dump((list(p), p.stats()["remote"]), open(sys.argv[2], "wb"))
    """)
    for name, (source, select, size) in sources.items():
        body = ("steps:\n  - select: %s\n  - batch: {size: 5}\nepochs: 2\n"
                "budget: {cores: 2, memory: %s}\n" % (select, budget))
        local = tmp_path / ("local-%s.yaml" % name)
        local.write_text("pipeline: views\nsource:\n  %s\n%s"
                         % (source % (tmp_path, ""), body))
        remote = tmp_path / ("remote-%s.yaml" % name)
        remote.write_text(
            "pipeline: views\nsource:\n  %s\n%s"
            % (source % (servers.http + "/views", ", remote: {concurrency: "
                         "2, chunk_size: 64KiB}"), body))
        want = run_all(str(local))
        assert sum(len(b[select[1:-1].split(",")[0]]) for b in want) == \
            2 * (len(sizes) if name == "tar" else lines.count(b"\n") + 1)
        runs = child_runs_on_and_off(tmp_path, child, str(remote),
                                     "SLUICE_NO_REMOTE_CHUNK_VIEW")
        for switch, (got, stats) in runs.items():
            assert len(got) == len(want) > 0, (name, switch)
            assert all(batches_equal(a, b) for a, b in zip(want, got)), \
                (name, switch)
            assert stats["failures"] == 0 and stats["requests"] >= 2, stats
            assert size < stats["bytes"] <= 2 * size, stats


# --- the client's optimizations, each off --------------------------------------

CLIENT_SWITCHES = ["SLUICE_NO_REMOTE_SOCKET_EVENTS",
                   "SLUICE_NO_REMOTE_HANDLE_REUSE", "SLUICE_NO_REMOTE_PRESIZE",
                   "SLUICE_NO_REMOTE_LARGE_READS", "SLUICE_NO_REMOTE_BODY_REUSE",
                   "SLUICE_NO_REMOTE_BODY_CLASSES",
                   "SLUICE_NO_REMOTE_CHUNK_VIEW",
                   "SLUICE_NO_REMOTE_BODY_POPULATE",
                   "SLUICE_NO_REMOTE_OWN_SIGNING",
                   "SLUICE_NO_REMOTE_BATCH_THREAD",
                   "SLUICE_NO_REMOTE_CLIENT_THREADS",
                   # Not an off switch: libcurl's buffers kept, which is
                   # off by default (Remote.cpp, keepCurlBuffers).
                   "SLUICE_REMOTE_CURL_BUFFER_REUSE",
                   "SLUICE_NO_REMOTE_LAZY_SOCKETS",
                   # Not an off switch either: readers that drive the
                   # transfers, off by default (Remote.cpp, waiterDrives).
                   "SLUICE_REMOTE_WAITER_DRIVES",
                   "SLUICE_NO_REMOTE_HUGE_BODIES"]


@pytest.mark.parametrize("off", ["none", "curl_buffers", "lazy_sockets",
                                 "waiter_drives"])
def test_curl_buffers_are_reused_and_sockets_stay_in_the_epoll_set(
        servers, tmp_path, off):
    """image_folder over s3://, one request an object over kept-alive
    connections: with SLUICE_REMOTE_CURL_BUFFER_REUSE=1 (the "curl_buffers"
    case: off by default, Remote.cpp's keepCurlBuffers says why) libcurl's
    receive buffer of each transfer (freed as the transfer ends) is served
    to a later transfer from the kept blocks (curl_buffers_reused: none by
    default),
    a connection's socket stays in the epoll set between its requests
    (socket_updates: fewer than one a request; two or more with
    SLUICE_NO_REMOTE_LAZY_SOCKETS=1, libcurl's remove and add again each
    time), and the client thread finishes every transfer
    (finished_by_readers: none), or with SLUICE_REMOTE_WAITER_DRIVES=1 (the
    "waiter_drives" case, off by default: Remote.cpp's waiterDrives says
    why) the reader that waits for an object receives it itself when no
    other thread is receiving. The same records every way (read once per
    process: a child process)."""
    local, remote = local_and_remote(servers, tmp_path, "image_folder", "s3")
    want = run_all(local)
    out = tmp_path / "got.pickle"
    child = textwrap.dedent("""
        import pickle, sys, sluice
        p = sluice.Pipeline(sys.argv[1])
        pickle.dump((list(p), p.stats()["remote"]), open(sys.argv[2], "wb"))
    """)
    env = dict(os.environ,
               SLUICE_REMOTE_CURL_BUFFER_REUSE=str(int(off ==
                                                       "curl_buffers")),
               SLUICE_NO_REMOTE_LAZY_SOCKETS=str(int(off == "lazy_sockets")),
               SLUICE_REMOTE_WAITER_DRIVES=str(int(off == "waiter_drives")),
               SLUICE_NO_REMOTE_CLIENT_THREADS="1")
    r = subprocess.run([sys.executable, "-c", child, remote, str(out)],
                       env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    got, stats = pickle.load(open(out, "rb"))
    assert len(got) == len(want) > 0
    assert all(batches_equal(a, b) for a, b in zip(want, got))
    requests = stats["requests"]
    assert requests >= 96 and stats["failures"] == 0, stats
    if off != "curl_buffers":
        assert stats["curl_buffers_reused"] == 0, stats
    else:
        # All but the first few (one per transfer in flight at once).
        assert stats["curl_buffers_reused"] >= requests - 8, stats
    if off == "lazy_sockets":
        assert stats["socket_updates"] >= 2 * requests, stats
    else:
        assert 0 < stats["socket_updates"] < requests / 2, stats
    if off == "waiter_drives":
        assert stats["finished_by_readers"] > 0, stats
    else:
        assert stats["finished_by_readers"] == 0, stats


@pytest.mark.parametrize("off", ["none", "three_clients"] + CLIENT_SWITCHES +
                         ["all"])
def test_client_optimizations_off_give_the_same_bytes(servers, tmp_path, off):
    """The client's optimizations (socket events, easy handles kept set up,
    bodies sized from Content-Length, large reads, chunk bodies reused,
    bodies rounded to size classes, readers' windows over the received
    chunks instead of a copy) can each be turned off
    (read once per process: a child process) with the same records as local
    files: per-file objects over s3:// (signed), shards over http:// (not
    signed, on the same easy handles), and a TFRecord over s3:// whose
    first requests are answered 503 and retried."""
    cases = [("image_folder", "s3"), ("webdataset", "http"),
             ("text_lines", "s3")]
    specs = [local_and_remote(servers, tmp_path, n, k) for n, k in cases]
    local, retried = local_and_remote(servers, tmp_path, "tfrecord", "s3")
    text = open(retried).read().replace(servers.s3_endpoint, servers.s3_proxy)
    retried = str(tmp_path / "retried.yaml")
    open(retried, "w").write(text)
    specs.append((local, retried))
    out = tmp_path / "got.pickle"
    child = textwrap.dedent("""
        import pickle, sys, sluice
        got = []
        for spec in sys.argv[2:]:
            p = sluice.Pipeline(spec)
            got.append((list(p), p.stats()["remote"]))
        pickle.dump(got, open(sys.argv[1], "wb"))
    """)
    env = dict(os.environ)
    for name in CLIENT_SWITCHES:
        if off in (name, "all"):
            env[name] = "1"
    # A host of 25-36 cores runs three client threads (one per 12 cores):
    # requests go to them in turn, over their own connections.
    if off == "three_clients":
        env["SLUICE_REMOTE_CLIENT_THREADS"] = "3"
    servers.rules(servers.s3_proxy,
                  [{"match": "part-1", "status": 503, "times": 2}])
    try:
        r = subprocess.run([sys.executable, "-c", child, str(out)] +
                           [remote for _, remote in specs],
                           env=env, capture_output=True, text=True)
    finally:
        servers.rules(servers.s3_proxy, [])
    assert r.returncode == 0, r.stderr
    got = pickle.load(open(out, "rb"))
    for (local, remote), (batches, stats) in zip(specs, got):
        want = run_all(local)
        assert len(want) == len(batches) > 0, remote
        assert all(batches_equal(a, b) for a, b in zip(want, batches)), remote
        assert stats["requests"] > 0 and stats["failures"] == 0, stats
        if off == "three_clients":
            assert stats["client_threads"] == 3, stats
        elif off in ("SLUICE_NO_REMOTE_CLIENT_THREADS", "all"):
            assert stats["client_threads"] == 1, stats
    assert got[-1][1]["retries"] == 2, got[-1][1]


@pytest.mark.parametrize("kind", ["s3", "s3-shuffled"])
def test_a_per_file_sources_requests_go_in_bursts(servers, tmp_path, kind):
    """image_folder over s3:// (16 objects ahead, read in order or shuffled)
    tops its window up in bursts, sent together (one pass of the client):
    counted in remote.bursts and burst_requests, the stats' line says how
    many at a time. The same records as local files, and the same requests,
    as with SLUICE_NO_REQUEST_BURSTS=1 (read once per process: a child
    process), which sends them one at a time and counts no burst."""
    source, select = SOURCES["image_folder"]
    if kind == "s3-shuffled":
        source = source.replace("remote:", "shuffle: true, remote:")
    opts = (REMOTE_OPTS % servers.s3_endpoint).replace("concurrency: 3",
                                                       "concurrency: 16")
    local = spec_for(tmp_path, "image_folder", source, select,
                     (servers.local, "local"), "{}")
    remote = spec_for(tmp_path, "image_folder", source, select,
                      ("s3://" + BUCKET, "s3"), opts)
    want = run_all(local)
    child = textwrap.dedent("""
        import pickle, sys, sluice
        p = sluice.Pipeline(sys.argv[1])
        pickle.dump((list(p), p.stats()["remote"]), open(sys.argv[2], "wb"))
    """)
    runs = child_runs_on_and_off(tmp_path, child, remote,
                                 "SLUICE_NO_REQUEST_BURSTS")
    for switch, (got, st) in runs.items():
        assert len(got) == len(want) > 0, switch
        assert all(batches_equal(a, b) for a, b in zip(want, got)), switch
        assert st["failures"] == 0 and st["reader_stalls"] >= 0, st
    on, off = runs["0"][1], runs["1"][1]
    assert [s["requests"] - s["retries"] for s in (on, off)] == \
        [2 * 48] * 2, (on, off)
    # The first window (16 objects) goes in one burst; the reader here
    # (no decoding) outruns the server, so the rest mostly go one at a time.
    assert on["bursts"] >= 1 and 16 <= on["burst_requests"] <= 96, on
    assert on["burst_requests"] >= on["bursts"] + 15, on
    assert off["bursts"] == off["burst_requests"] == 0, off
    r = subprocess.run([SLUICE_BIN, "run", remote, "--sink", "null",
                        "--stats"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert re.search(r"; sent \d+\.\d at a time \(\d+ reader stalls\)",
                     r.stdout + r.stderr), r.stdout + r.stderr


@pytest.mark.parametrize("name,kind", [("webdataset", "http"),
                                       ("tfrecord", "s3"),
                                       ("image_folder", "s3"),
                                       ("image_folder", "s3-shuffled")])
def test_next_epochs_first_shards_are_asked_for_before_it(servers, tmp_path,
                                                          name, kind):
    """As an epoch reads its last shards, the first shards of the next one
    are asked for (the epoch boundary then waits for no round trip):
    counted in remote.next_pass_ahead, and every one is taken by a reader
    of the next epoch (next_pass_taken), with the records of local files.
    The last epoch asks for none ahead: the requests are those of a run
    with SLUICE_NO_NEXT_PASS_AHEAD=1 (read once per process: a child
    process), which asks for none ahead and gives the same records. A run
    stopped after the first epoch's last shard was opened (the next
    epoch's first asked for) resumes with the same records. Shuffled
    (`shuffle: true`: read by position, a permutation per epoch), the next
    epoch's first objects in its own order."""
    if kind == "s3-shuffled":
        source, select = SOURCES[name]
        source = source.replace("remote:", "shuffle: true, remote:")
        local = spec_for(tmp_path, name, source, select,
                         (servers.local, "local"), "{}")
        remote = spec_for(tmp_path, name, source, select,
                          ("s3://" + BUCKET, "s3"),
                          REMOTE_OPTS % servers.s3_endpoint)
    else:
        local, remote = local_and_remote(servers, tmp_path, name, kind)
    want = run_all(local)
    child = textwrap.dedent("""
        import pickle, sys, sluice
        p = sluice.Pipeline(sys.argv[1])
        batches = list(p)
        st = p.stats()["remote"]
        pickle.dump((batches, st), open(sys.argv[2], "wb"))
    """)
    runs = child_runs_on_and_off(tmp_path, child, remote,
                                 "SLUICE_NO_NEXT_PASS_AHEAD")
    for switch, (batches, st) in runs.items():
        assert len(batches) == len(want) > 0, switch
        assert all(batches_equal(a, b) for a, b in zip(want, batches)), switch
        assert st["failures"] == 0, st
    on, off = runs["0"][1], runs["1"][1]
    # concurrency 3: one shard ahead of a stream (the next epoch's first),
    # three objects ahead of image_folder's reader.
    assert on["next_pass_ahead"] == (3 if name == "image_folder" else 1), on
    assert on["next_pass_taken"] == on["next_pass_ahead"], on
    assert off["next_pass_ahead"] == off["next_pass_taken"] == 0, off
    sent = [s["requests"] - s["retries"] for s in (on, off)]
    if name == "webdataset":
        # Whether the chunk holding only a tar's padding is asked for
        # follows the reader's pace (test_next_shards_first_window_...).
        assert abs(sent[0] - sent[1]) <= 2 * 3, sent
    else:
        assert sent[0] == sent[1], sent

    if kind == "s3-shuffled":
        # With a `repeat`, the pass after the first is this epoch's again
        # (the same permutation): none of the next epoch's is named ahead.
        source, select = SOURCES[name]
        source = source.replace("remote:", "shuffle: true, remote:")
        rep = []
        for d, where, opts in (("l", (servers.local, "local"), "{}"),
                               ("r", ("s3://" + BUCKET, "s3"),
                                REMOTE_OPTS % servers.s3_endpoint)):
            (tmp_path / d).mkdir()
            rep.append(spec_for(tmp_path / d, name, source, select, where,
                                opts, "  - repeat: 2\n"))
        p = sluice.Pipeline(rep[1])
        got = list(p)
        assert p.stats()["remote"]["next_pass_ahead"] == 0
        want_rep = run_all(rep[0])
        assert len(got) == len(want_rep) > 0
        assert all(batches_equal(a, b) for a, b in zip(want_rep, got))

    # Resume from the middle of the first epoch's last shard.
    per_epoch = len(want) // 2
    p = sluice.Pipeline(remote)
    head = [next(p) for _ in range(per_epoch - 1)]
    state = p.state_dict()
    q = sluice.Pipeline(remote)
    q.load_state_dict(state)
    rest = list(q)
    assert len(head) + len(rest) == len(want)
    assert all(batches_equal(a, b) for a, b in zip(want, head + rest))
