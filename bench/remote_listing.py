#!/usr/bin/python3
"""How long an image_folder over s3:// takes to list its objects before the
first record: the listing side by side (one level, then each class's keys
with many listings in flight) against the flat listing page after page
(SLUICE_NO_PARALLEL_LISTING=1), DELAY ms added to every request.

The server answers ListObjectsV2 as S3 does (pages of at most 1,000 keys
and common prefixes, continuation tokens, `delimiter`), from a sorted list
of --classes x --per-class keys held in memory, each answer after
--delay-ms on a thread of its own: a page costs its round trip, not the
size of the bucket, as on S3. (s3rver, the tests' server, walks its files
for every page on one thread: there the listings' CPU, not their round
trips, sets the time, and side by side gains nothing: 7.00 against 7.04 s
for 44,000 keys at 20 ms.) It times `sluice check` of an image_folder spec
(the check lists the source and reads no object), the two interleaved,
--repeats times each, and prints a Markdown table of the medians and the
listing requests each made.

Usage: remote_listing.py [--classes 100] [--per-class 1300] [--delay-ms 20]
                         [--repeats 3] [--sluice PATH]
"""

import argparse
import bisect
import http.server
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from xml.sax.saxutils import escape

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def serve(keys, delay_s):
    """A ListObjectsV2 server over the sorted `keys`: its base URL and the
    count of requests it answered (a one-element list)."""
    count = [0]

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def do_GET(self):
            count[0] += 1
            q = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)
            prefix = q.get("prefix", [""])[0]
            delim = q.get("delimiter", [""])[0]
            after = q.get("continuation-token", [""])[0]
            i = bisect.bisect_right(keys, after) if after else \
                bisect.bisect_left(keys, prefix)
            contents, prefixes, last = [], [], ""
            while i < len(keys) and keys[i].startswith(prefix) and \
                    len(contents) + len(prefixes) < 1000:
                k = keys[i]
                cut = k.find(delim, len(prefix)) if delim else -1
                if cut >= 0:
                    p = k[:cut + len(delim)]
                    prefixes.append(p)
                    # Past every key under that common prefix.
                    last = p + "\U0010ffff"
                    i = bisect.bisect_left(keys, last)
                else:
                    contents.append(k)
                    last = k
                    i += 1
            truncated = i < len(keys) and keys[i].startswith(prefix)
            body = ("<ListBucketResult><Prefix>%s</Prefix><IsTruncated>%s"
                    "</IsTruncated>%s%s%s</ListBucketResult>" % (
                        escape(prefix), "true" if truncated else "false",
                        "".join("<Contents><Key>%s</Key><Size>1</Size>"
                                "</Contents>" % escape(k) for k in contents),
                        "".join("<CommonPrefixes><Prefix>%s</Prefix>"
                                "</CommonPrefixes>" % escape(p)
                                for p in prefixes),
                        "<NextContinuationToken>%s</NextContinuationToken>"
                        % escape(last) if truncated else "")).encode()
            time.sleep(delay_s)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    class Server(http.server.ThreadingHTTPServer):
        # Python's default backlog of 5 drops the SYNs of a burst of new
        # connections: each then waits 1 s for its retransmission.
        request_queue_size = 1024
        daemon_threads = True

    server = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, "http://127.0.0.1:%d" % server.server_address[1], count


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--classes", type=int, default=100)
    ap.add_argument("--per-class", type=int, default=1300)
    ap.add_argument("--delay-ms", type=float, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sluice", default=os.path.join(ROOT, "build", "bin",
                                                     "sluice"))
    args = ap.parse_args()
    keys = sorted("train/c%04d/img%05d.jpg" % (c, i)
                  for c in range(args.classes) for i in range(args.per_class))
    server, url, count = serve(keys, args.delay_ms / 1000)
    work = tempfile.mkdtemp(prefix="sluice-listing-bench-")
    try:
        spec = os.path.join(work, "tree.yaml")
        with open(spec, "w") as f:
            f.write("pipeline: tree\nsource:\n  image_folder: {root: "
                    "'s3://bkt/train', extensions: [jpg], remote: {endpoint: "
                    "%s, sign: false}}\nsteps:\n  - batch: {size: 64}\n" % url)
        modes = {"side by side": {},
                 "flat": {"SLUICE_NO_PARALLEL_LISTING": "1"}}
        times = {m: [] for m in modes}
        requests = {}
        for _ in range(args.repeats):
            for m, extra in modes.items():
                before = count[0]
                t = time.time()
                r = subprocess.run([args.sluice, "check", spec],
                                   env=dict(os.environ, **extra),
                                   capture_output=True, text=True)
                times[m].append(time.time() - t)
                if r.returncode != 0:
                    sys.exit("sluice check failed:\n" + r.stdout + r.stderr)
                requests[m] = count[0] - before
        print("%d keys in %d classes (%d each), %g ms added per request; "
              "`sluice check` wall time, median of %d\n"
              % (len(keys), args.classes, args.per_class, args.delay_ms,
                 args.repeats))
        print("| listing | seconds (median; runs) | list requests |")
        print("|---|---:|---:|")
        for m in modes:
            print("| %s | %.2f (%s) | %d |" % (
                m, statistics.median(times[m]),
                ", ".join("%.2f" % x for x in times[m]), requests[m]))
    finally:
        server.shutdown()


if __name__ == "__main__":
    main()
