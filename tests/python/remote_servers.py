"""Real servers for the remote-source tests, on 127.0.0.1 only: nginx
(Debian's) serving a directory with range requests, s3rver (npm, installed
under tests/servers by scripts/setup) as the S3 API, both also behind TLS
(nginx, with a certificate from a CA the fixture makes with openssl), and a
fault-injecting proxy (tests/servers/fault_proxy.py) in front of each.
Started by the test fixture and stopped with it."""
import ctypes
import json
import os
import signal
import sys
import shutil
import socket
import subprocess
import time
import urllib.request

ROOT = os.environ.get("SLUICE_SOURCE_DIR",
                      os.path.dirname(os.path.dirname(os.path.dirname(
                          os.path.abspath(__file__)))))
SERVERS = os.path.join(ROOT, "tests", "servers")
S3RVER = os.path.join(SERVERS, "node_modules", "s3rver", "bin", "s3rver.js")
PROXY = os.path.join(SERVERS, "fault_proxy.py")
DELAY_PROXY = os.path.join(SERVERS, "delay_proxy.py")
# libnginx-mod-http-echo (scripts/setup): echo_sleep for nginx_with_latency.
ECHO_MODULE = "/usr/lib/nginx/modules/ngx_http_echo_module.so"
BUCKET = "bkt"
# s3rver knows one access key; it does not check SigV4 signatures, so the
# secret is free: a distinctive one lets the tests grep every output for it.
ACCESS_KEY = "S3RVER"
SECRET_KEY = "sluice-secret-7d41c2e9a0"


def why_unavailable():
    """None when the servers can be started, else what is missing."""
    nginx = shutil.which("nginx") or (
        "/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
    if not nginx:
        return "nginx is not installed (Debian package nginx; run scripts/setup)"
    if not shutil.which("node"):
        return "node is not installed (Debian package nodejs; run scripts/setup)"
    if not os.path.exists(S3RVER):
        return ("s3rver is not installed under tests/servers (run "
                "scripts/setup, which runs npm install there)")
    if not shutil.which("curl"):
        return "curl is not installed (Debian package curl; run scripts/setup)"
    if not shutil.which("openssl"):
        return ("openssl is not installed (Debian package openssl; run "
                "scripts/setup): the https server's certificates are made "
                "with it")
    return None


def die_with_parent():
    """Runs in the child before exec: a test process that dies (a crash,
    a kill) takes its servers with it."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def popen(args, **kw):
    return subprocess.Popen(args, preexec_fn=die_with_parent, **kw)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_line(proc, prefix, timeout=30):
    """The first stdout line of `proc` starting with `prefix`."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            if proc.poll() is not None:
                raise RuntimeError("server exited: %s" % proc.args)
            continue
        line = line.decode(errors="replace").strip()
        if prefix in line:
            return line
    raise RuntimeError("server did not start: %s" % proc.args)


def wait_port(port, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("nothing listens on port %d" % port)


class Servers:
    def __init__(self, workdir):
        self.workdir = str(workdir)
        self.www = os.path.join(self.workdir, "www")
        os.makedirs(self.www, exist_ok=True)
        self.procs = []

    def start(self):
        self._start_nginx()
        self._start_s3rver()
        self._start_tls()
        self.http_proxy = self._start_proxy(self.nginx_port)
        self.s3_proxy = self._start_proxy(self.s3_port)
        return self

    def _start_tls(self):
        """The same files over https: a CA made here (self.ca_bundle, its
        PEM certificate) signs a certificate for 127.0.0.1, and two nginx
        present it: self.https serves the www directory as self.http does,
        self.s3_tls_endpoint passes everything to s3rver (the Host header
        kept: the requests are signed for it), over HTTP/1.1 as S3 is."""
        d = os.path.join(self.workdir, "tls")
        os.makedirs(d, exist_ok=True)
        ca_key, ca = os.path.join(d, "ca.key"), os.path.join(d, "ca.pem")
        key, csr = os.path.join(d, "server.key"), os.path.join(d, "server.csr")
        cert, ext = os.path.join(d, "server.pem"), os.path.join(d, "ext.cnf")
        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
              "-nodes"]

        def run(args):
            subprocess.run(["openssl"] + args, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        run(["req", "-x509"] + ec + ["-keyout", ca_key, "-out", ca,
             "-days", "2", "-subj", "/CN=sluice test CA",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign"])
        run(["req"] + ec + ["-keyout", key, "-out", csr,
             "-subj", "/CN=127.0.0.1"])
        with open(ext, "w") as f:
            f.write("subjectAltName=IP:127.0.0.1\n"
                    "basicConstraints=CA:FALSE\n"
                    "extendedKeyUsage=serverAuth\n")
        run(["x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key,
             "-CAcreateserial", "-out", cert, "-days", "2",
             "-extfile", ext])
        self.ca_bundle = ca
        tls = self.tls_lines = \
            "    ssl_certificate %s;\n    ssl_certificate_key %s;\n" % (
                cert, key)
        # Offering HTTP/2 (ALPN), as object stores' and CDNs' TLS fronts
        # do: libcurl takes it, so https:// is read over HTTP/2 here and
        # the S3 endpoint below over HTTP/1.1. The log says which.
        self.https_log = os.path.join(d, "https-access.log")
        port = self._nginx("nginx-tls", tls + """    root %s;
    access_log %s proto;
    location /forbidden/ { return 403; }""" % (self.www, self.https_log),
                           ssl=True, http2=True,
                           http="  log_format proto '$server_protocol "
                                "$status $request_uri';")
        self.https = "https://127.0.0.1:%d" % port
        port = self._nginx("nginx-s3-tls", tls + """    location / {
      proxy_pass http://127.0.0.1:%d;
      proxy_set_header Host $http_host;
      proxy_buffering off;
    }""" % self.s3_port, ssl=True)
        self.s3_tls_endpoint = "https://127.0.0.1:%d" % port

    def _start_nginx(self):
        self.nginx_port = self._nginx("nginx", """    root %s;
    location /forbidden/ { return 403; }""" % self.www)
        self.http = "http://127.0.0.1:%d" % self.nginx_port

    def _start_s3rver(self):
        d = os.path.join(self.workdir, "s3rver")
        os.makedirs(d, exist_ok=True)
        # s3rver's continuation tokens use DES, which OpenSSL 3 keeps in
        # its legacy provider.
        p = popen(["node", "--openssl-legacy-provider", S3RVER, "-d", d, "-a", "127.0.0.1",
                              "-p", "0", "--configure-bucket", BUCKET],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.procs.append(p)
        line = wait_line(p, "listening on")
        self.s3_port = int(line.rsplit(":", 1)[1])
        self.s3_endpoint = "http://127.0.0.1:%d" % self.s3_port
        # Its request log goes on stdout: keep draining it.
        self.s3_log = os.path.join(self.workdir, "s3rver.log")
        popen(["cat"], stdin=p.stdout,
                         stdout=open(self.s3_log, "wb"))

    def _nginx(self, name, server, modules="", http="", ssl=False,
               http2=False):
        """Starts an nginx of its own (one process) with `server` as its
        server block's body (after `listen`, with `ssl` a TLS one, with
        `http2` offering HTTP/2 too) and `http` as more directives of its
        http block: its port."""
        d = os.path.join(self.workdir, name)
        os.makedirs(os.path.join(d, "tmp"), exist_ok=True)
        port = free_port()
        user = "user root;" if os.geteuid() == 0 else ""
        conf = os.path.join(d, "nginx.conf")
        with open(conf, "w") as f:
            f.write("""
%s
%s
master_process off;
error_log %s/error.log;
pid %s/nginx.pid;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path %s/tmp/body;
  proxy_temp_path %s/tmp/proxy;
  fastcgi_temp_path %s/tmp/fastcgi;
  uwsgi_temp_path %s/tmp/uwsgi;
  scgi_temp_path %s/tmp/scgi;
  default_type application/octet-stream;
%s
  server {
    listen 127.0.0.1:%d%s;
%s
  }
}
""" % (modules, user, d, d, d, d, d, d, d, http, port,
       (" ssl" if ssl else "") + (" http2" if http2 else ""), server))
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        p = popen([nginx, "-p", d, "-c", conf, "-g", "daemon off;"],
                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.procs.append(p)
        wait_port(port)
        return port

    def nginx_with_latency(self, delay_ms, s3=False, tls=False):
        """For the throughput benches: an nginx that waits `delay_ms` before
        answering each request (the echo module's echo_sleep: a timer, no
        CPU, bytes sent with sendfile) and then serves the HTTP files, or
        with `s3` acts as the S3 endpoint: the plain object GETs (path style,
        ranges and If-None-Match included) answered from s3rver's own files,
        everything else (listings, puts, HEAD) passed to s3rver. Its base
        URL. The Python delay proxy and s3rver's own GETs cost 0.2-2 ms of
        CPU per picture on the cores the pipeline uses (s3rver reads a file
        and a JSON metadata file in node and logs a line); a real object
        store's CPU is elsewhere. ETags are then nginx's (mtime-size), the
        same for every read of an unchanged object. It runs as a file
        server is set up to (sendfile, an open-file cache): a sixth less of
        its CPU per picture on the pipeline's cores (0.075 against 0.089 ms,
        medians of 6 alternating runs of bench/remote_latency.py's s3://
        pipeline) than with each GET opening, reading and writing its file. The open-file cache keeps
        a file's size and mtime for up to a second, so this server is for
        objects that do not change while it runs (the benches), not for the
        tests that replace one. With `tls` it answers over TLS with the
        certificate _start_tls made (self.ca_bundle verifies it).

        Without `tcp_nopush` (nginx's default; Debian's packaged nginx.conf
        turns it on): with it, nginx on Linux corks each sendfile response
        and leaves its keep-alive connections without TCP_NODELAY, so on
        loopback (a 64 KiB MSS) the last part of a response over ~60 KB
        waited for the client's delayed ACK, 33-40 ms (image_folder over
        s3://, no added latency, 8 in flight: 14-24 delayed ACKs a run of
        4,000 objects, the reader blocked in epoll_wait 31-37 ms each
        time, 3-5% of the run idle; 1,402 against 1,489 records/s without
        it, 4 interleaved runs). Object stores answer with TCP_NODELAY
        set."""
        s3rver = "http://127.0.0.1:%d" % self.s3_port
        if s3:
            serve = """
      if ($args) { proxy_pass %s; }
      if ($request_method != GET) { proxy_pass %s; }
      try_files $uri._S3rver_object @s3rver;""" % (s3rver, s3rver)
            root = os.path.join(self.workdir, "s3rver")
        else:
            serve = "\n      try_files $uri =404;"
            root = self.www
        server = self.tls_lines if tls else ""
        server += """    root %s;
    location / {
      echo_sleep %.3f;
      echo_exec @serve;
    }
    location @serve {%s
    }
    location @s3rver { proxy_pass %s; }""" % (root, delay_ms / 1000.0, serve,
                                             s3rver)
        port = self._nginx(
            "nginx-%s-%g%s" % ("s3" if s3 else "http", delay_ms,
                               "-tls" if tls else ""), server,
            "load_module %s;" % ECHO_MODULE,
            http="  sendfile on;\n"
                 "  open_file_cache max=100000 inactive=60s;\n"
                 "  open_file_cache_valid 1s;", ssl=tls)
        return "%s://127.0.0.1:%d" % ("https" if tls else "http", port)

    def _start_proxy(self, upstream_port):
        p = popen([sys.executable, PROXY, "--upstream",
                              "127.0.0.1:%d" % upstream_port],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.procs.append(p)
        line = wait_line(p, "listening on")
        return "http://" + line.split()[-1]

    def delay_proxy(self, upstream_port, delay_ms):
        """A latency-adding TCP proxy (delay_proxy.py) in front of a server:
        its base URL."""
        p = popen([sys.executable, DELAY_PROXY, "--upstream",
                   "127.0.0.1:%d" % upstream_port, "--delay-ms",
                   str(delay_ms)],
                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.procs.append(p)
        line = wait_line(p, "listening on")
        return "http://" + line.split()[-1]

    def stop(self):
        for p in reversed(self.procs):
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()

    # --- data ---------------------------------------------------------------

    def put_http(self, rel, data, newer=False):
        """A file nginx serves at /rel, replaced at once as object stores
        replace an object (written beside it, then renamed over it), so a
        request never sees it half written. With `newer`, its modification
        time is 100 s after the one it replaces before it appears (nginx's
        ETag is the time in seconds and the size: a new version of the same
        size written within the same second would keep the old ETag)."""
        path = os.path.join(self.www, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        temp = path + ".part"
        with open(temp, "wb") as f:
            f.write(data)
        if newer:
            t = os.stat(path).st_mtime + 100
            os.utime(temp, (t, t))
        os.replace(temp, path)

    def put_s3(self, items):
        """Uploads {key: bytes} to the bucket with curl (SigV4)."""
        d = os.path.join(self.workdir, "upload")
        os.makedirs(d, exist_ok=True)
        args = ["curl", "-sS", "--fail", "--aws-sigv4", "aws:amz:us-east-1:s3",
                "--user", "%s:%s" % (ACCESS_KEY, SECRET_KEY),
                "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD"]
        for i, (key, data) in enumerate(sorted(items.items())):
            path = os.path.join(d, "%d" % i)
            with open(path, "wb") as f:
                f.write(data)
            args += ["-T", path, "%s/%s/%s" % (self.s3_endpoint, BUCKET,
                                                urllib.request.quote(key))]
        subprocess.run(args, check=True, stdout=subprocess.DEVNULL)

    def rules(self, proxy, rules):
        req = urllib.request.Request(proxy + "/__rules",
                                     data=json.dumps(rules).encode(),
                                     method="POST")
        urllib.request.urlopen(req).read()

    def proxy_stats(self, proxy):
        return json.loads(urllib.request.urlopen(proxy + "/__stats").read())
