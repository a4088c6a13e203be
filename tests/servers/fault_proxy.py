#!/usr/bin/env python3
"""A fault-injecting HTTP proxy for the remote-source tests and the latency
bench: forwards every request to a real server (nginx or s3rver) on
127.0.0.1 and, for paths that match a rule, answers with an error status a
given number of times, cuts the body short, or waits before answering.

  fault_proxy.py --upstream 127.0.0.1:PORT [--delay-ms MS]

Prints "listening on 127.0.0.1:PORT" once it accepts connections. Rules are
set with `POST /__rules` (a JSON list of {"match": substring, "status": 503,
"times": 2} or {"match": ..., "truncate": true} or {"match": ...,
"delay_ms": 20}); `GET /__stats` returns {"requests": N, "injected": N}.
"""
import argparse
import http.client
import json
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding",
       "te", "trailer", "upgrade"}


class State:
    def __init__(self, upstream, delay_ms):
        self.upstream = upstream
        self.delay_ms = delay_ms
        self.rules = []
        self.lock = threading.Lock()
        self.requests = 0
        self.injected = 0
        self.local = threading.local()

    def conn(self):
        c = getattr(self.local, "conn", None)
        if c is None:
            host, port = self.upstream.rsplit(":", 1)
            c = http.client.HTTPConnection(host, int(port), timeout=60)
            c.connect()
            c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.local.conn = c
        return c

    def drop_conn(self):
        c = getattr(self.local, "conn", None)
        if c is not None:
            c.close()
        self.local.conn = None


def make_handler(state):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self):
            super().setup()
            # Headers and body go out as separate writes: without this,
            # Nagle's algorithm and the client's delayed ACK add ~40 ms to
            # every answer.
            self.connection.setsockopt(socket.IPPROTO_TCP,
                                       socket.TCP_NODELAY, 1)

        def log_message(self, fmt, *args):
            pass

        def rule(self):
            with state.lock:
                state.requests += 1
                for r in state.rules:
                    if r["match"] in self.path:
                        if "times" in r:
                            if r["times"] <= 0:
                                continue
                            r["times"] -= 1
                        state.injected += 1
                        return dict(r)
            return None

        def control(self):
            if self.path == "/__rules" and self.command == "POST":
                n = int(self.headers.get("Content-Length", "0"))
                rules = json.loads(self.rfile.read(n) or b"[]")
                with state.lock:
                    state.rules = rules
                body = b"ok"
            elif self.path == "/__stats":
                with state.lock:
                    body = json.dumps({"requests": state.requests,
                                       "injected": state.injected}).encode()
            else:
                return False
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return True

        def forward(self):
            if self.path.startswith("/__") and self.control():
                return
            r = self.rule()
            delay = (r or {}).get("delay_ms", state.delay_ms)
            if delay:
                time.sleep(delay / 1000.0)
            if r and "status" in r:
                body = b"<Error><Code>SlowDown</Code><Message>injected</Message></Error>"
                self.send_response(r["status"])
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            n = int(self.headers.get("Content-Length", "0") or 0)
            data = self.rfile.read(n) if n else None
            headers = {k: v for k, v in self.headers.items()
                       if k.lower() not in HOP}
            for attempt in range(2):
                c = state.conn()
                try:
                    c.request(self.command, self.path, body=data,
                              headers=headers)
                    resp = c.getresponse()
                    payload = resp.read()
                    break
                except (ConnectionError, http.client.HTTPException, OSError):
                    state.drop_conn()
                    if attempt:
                        raise
            self.send_response(resp.status)
            for k, v in resp.getheaders():
                if k.lower() not in HOP and k.lower() != "content-length":
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if self.command == "HEAD":
                return
            if r and r.get("truncate"):
                # Half the promised body, then the connection closes.
                self.wfile.write(payload[: len(payload) // 2])
                self.wfile.flush()
                self.close_connection = True
                return
            self.wfile.write(payload)

        do_GET = forward
        do_HEAD = forward
        do_PUT = forward
        do_POST = forward
        do_DELETE = forward

    return Handler


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--delay-ms", type=float, default=0)
    args = ap.parse_args()
    state = State(args.upstream, args.delay_ms)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), make_handler(state))
    server.daemon_threads = True
    print("listening on 127.0.0.1:%d" % server.server_address[1], flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
