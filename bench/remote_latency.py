#!/usr/bin/python3
"""Remote sources under injected latency: the same pipeline over local files,
over s3:// (s3rver) and over http:// (nginx), with a delaying proxy
(tests/servers/fault_proxy.py) adding DELAY ms before every answer, at
several `remote.concurrency` values.

Three sources, all decoding real photographs (bench/gen_photos.py):
  image_folder over an s3:// prefix: one GET per picture, kept in flight ahead
  files over http:// (every object named): the same, from nginx
  webdataset shards over http://: ranged chunks of 1 MiB, kept in flight ahead
each: decode_image -> random_resized_crop 224 -> batch 64, `--sink null`.

Usage: remote_latency.py [--images N] [--delay-ms MS] [--concurrency 1,4,16]
                         [--sluice PATH] [--data DIR]
Prints a Markdown table (records/s, and the ratio to local files).
"""
import argparse
import io
import os
import re
import subprocess
import sys
import tarfile
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
import remote_servers  # noqa: E402

STEPS = """steps:
  - decode_image: {field: data, as: image, channels: 3}
  - random_resized_crop: {field: image, size: [224, 224]}
  - select: [image, label]
  - batch: {size: 64}
epochs: 1
budget: {cores: 2, memory: 1GiB}
"""


def run(sluice, spec, env):
    r = subprocess.run([sluice, "run", spec, "--sink", "null"],
                       capture_output=True, text=True, env=env)
    out = r.stdout + r.stderr
    if r.returncode != 0:
        sys.exit("sluice failed on %s:\n%s" % (spec, out))
    m = re.search(r"\((\d+) records, ([\d.]+)(k?) records/s", out)
    rate = float(m.group(2)) * (1000 if m.group(3) else 1)
    return int(m.group(1)), rate


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=600)
    ap.add_argument("--delay-ms", type=float, default=20)
    ap.add_argument("--concurrency", default="1,4,16,32")
    ap.add_argument("--sluice", default=os.path.join(ROOT, "build", "bin",
                                                     "sluice"))
    ap.add_argument("--data", default=None)
    args = ap.parse_args()
    why = remote_servers.why_unavailable()
    if why:
        sys.exit("remote_latency: " + why)
    work = tempfile.mkdtemp(prefix="sluice-remote-bench-")
    data = args.data or os.path.join(work, "data")
    if not os.path.isdir(os.path.join(data, "photos", "train")):
        subprocess.run([sys.executable, os.path.join(HERE, "gen_photos.py"),
                        "--out", data, "--images", str(args.images)],
                       check=True, stdout=subprocess.DEVNULL)
    train = os.path.join(data, "photos", "train")
    classes = sorted(os.listdir(train))
    files = {}
    for label, c in enumerate(classes):
        for f in sorted(os.listdir(os.path.join(train, c))):
            with open(os.path.join(train, c, f), "rb") as fh:
                files["photos/%s/%s" % (c, f)] = (label, fh.read())
    # Shards of ~64 pictures, as WebDataset writes them.
    shards, items = {}, sorted(files.items())
    for s in range(0, len(items), 64):
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as t:
            for i, (name, (label, jpg)) in enumerate(items[s:s + 64]):
                for ext, payload in (("jpg", jpg), ("cls", b"%d" % label)):
                    info = tarfile.TarInfo("%06d.%s" % (s + i, ext))
                    info.size = len(payload)
                    t.addfile(info, io.BytesIO(payload))
        shards["shards/s-%04d.tar" % (s // 64)] = out.getvalue()
    nshards = len(shards)

    srv = remote_servers.Servers(os.path.join(work, "servers")).start()
    try:
        for rel, data_bytes in shards.items():
            srv.put_http(rel, data_bytes)
        for rel, (_, jpg) in files.items():
            srv.put_http(rel, jpg)
        srv.put_s3({k: v for k, (_, v) in files.items()})
        env = dict(os.environ, AWS_ACCESS_KEY_ID=remote_servers.ACCESS_KEY,
                   AWS_SECRET_ACCESS_KEY=remote_servers.SECRET_KEY)

        def spec(name, source):
            path = os.path.join(work, name + ".yaml")
            with open(path, "w") as f:
                f.write("pipeline: %s\nseed: 1\nsource:\n  %s\n%s"
                        % (name, source, STEPS))
            return path

        brace = "{0000..%04d}" % (nshards - 1)
        wds = ("webdataset: {files: '%s/shards/s-%s.tar', remote: %s, fields: "
               "[{ext: jpg, name: data}, {ext: cls, name: label, type: i64}]}")
        local_if = spec("local_if", "image_folder: {root: '%s/photos'}"
                        % srv.www)
        # The same pictures as `files` over http://: HTTP cannot list, so
        # the spec names every object (labels are not needed here).
        names = sorted(files)
        urls = lambda base: "'%s/{%s}'" % (base, ",".join(names))
        steps_files = STEPS.replace("select: [image, label]",
                                    "select: [image]")

        def spec_files(name, base, remote):
            path = os.path.join(work, name + ".yaml")
            with open(path, "w") as f:
                f.write("pipeline: %s\nseed: 1\nsource:\n  files: {files: %s%s}\n%s"
                        % (name, urls(base), remote, steps_files))
            return path
        local_files = spec_files("local_files", srv.www, "")
        local_wds = spec("local_wds", wds.replace(", remote: %s", "")
                         % (srv.www, brace))
        rows = []
        base_if = run(args.sluice, local_if, env)[1]
        base_wds = run(args.sluice, local_wds, env)[1]
        base_files = run(args.sluice, local_files, env)[1]
        rows.append(("local files", "-", base_if, base_files, base_wds))
        for delay in (0, args.delay_ms):
            srv.rules(srv.s3_proxy, [{"match": "", "delay_ms": delay}])
            srv.rules(srv.http_proxy, [{"match": "", "delay_ms": delay}])
            for c in [int(x) for x in args.concurrency.split(",")]:
                s3 = spec("s3_%d_%d" % (delay, c),
                          "image_folder: {root: 's3://%s/photos', remote: "
                          "{endpoint: %s, concurrency: %d}}"
                          % (remote_servers.BUCKET, srv.s3_proxy, c))
                http = spec("http_%d_%d" % (delay, c), wds % (
                    srv.http_proxy, brace,
                    "{concurrency: %d, chunk_size: 1MiB}" % c))
                fh = spec_files("files_%d_%d" % (delay, c), srv.http_proxy,
                                ", remote: {concurrency: %d}" % c)
                rows.append(("%g ms" % delay, c, run(args.sluice, s3, env)[1],
                             run(args.sluice, fh, env)[1],
                             run(args.sluice, http, env)[1]))
        print("%d pictures (%d shards), 2 cores; records/s (ratio to local)\n"
              % (len(files), nshards))
        print("| latency added | concurrency | image_folder over s3:// "
              "(s3rver) | files over http:// (nginx) | webdataset over "
              "http:// (nginx) |")
        print("|---|---:|---:|---:|---:|")
        for lat, c, a, f, b in rows:
            print("| %s | %s | %.0f (%.2f×) | %.0f (%.2f×) | %.0f (%.2f×) |"
                  % (lat, c, a, a / base_if, f, f / base_files, b,
                     b / base_wds))
    finally:
        srv.stop()


if __name__ == "__main__":
    main()
