#!/usr/bin/env python3
"""Regenerates the small seed corpora in tools/fuzz/corpus/<target>/ (a few
valid inputs per fuzz target, each under 4 KiB). Usage: make_corpus.py."""
import io
import os
import struct
import subprocess
import sys
import tarfile
import zlib

import numpy
from PIL import Image

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "tools"))
from make_bad_data import example, masked  # noqa: E402

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(target, name, data):
    d = os.path.join(root, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


put("csv", "plain", "1,0.5,2.5,hello,ff\n2,,3,\"quoted, \"\"x\"\"\",0a0b\n")
put("csv", "crlf", "3,1e3,-2,caf\xc3\xa9,deadbeef\r\n")
put("tsv", "header", "a\ts\tx\n1\tone\t0.25\n255\ttwo\t-1e-3\n")


def record(payload):
    head = struct.pack("<Q", len(payload))
    return head + struct.pack("<I", masked(head)) + payload + struct.pack("<I", masked(payload))


ex = example(7, 1.5)
put("tfrecord", "two", record(ex) + record(ex))
put("example", "one", ex)
put("idx", "images", struct.pack(">IIII", 0x803, 2, 3, 3) + bytes(range(18)))
put("idx", "labels", struct.pack(">II", 0x801, 4) + bytes([1, 2, 3, 4]))
for name, arr in (("f32", numpy.arange(12, dtype=numpy.float32).reshape(3, 4)),
                  ("u8", numpy.arange(6, dtype=numpy.uint8)),
                  ("i64", numpy.array([[1, -2]], dtype=numpy.int64))):
    buf = io.BytesIO()
    numpy.save(buf, arr)
    put("npy", name, buf.getvalue())
tar = io.BytesIO()
with tarfile.open(fileobj=tar, mode="w", format=tarfile.USTAR_FORMAT) as t:
    for key, ext, data in (("s1", "cls", b"3"), ("s1", "txt", b"a cat"),
                           ("s2", "cls", b"4"), ("s2", "txt", b"a dog")):
        info = tarfile.TarInfo("%s.%s" % (key, ext))
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
put("webdataset", "two", tar.getvalue())
put("text", "lines", "one\n\ntwo three\r\nlast")
for fmt in ("JPEG", "PNG"):
    for mode, size in (("RGB", (5, 3)), ("L", (4, 4))):
        buf = io.BytesIO()
        Image.new(mode, size, 128).save(buf, format=fmt)
        put("image", "%s-%s" % (fmt.lower(), mode), buf.getvalue())
# JPEGs with restart markers (Debian's jpegtran), for the fused crop's
# restart-interval window: one marker per MCU, and one per MCU row.
grad = Image.new("RGB", (40, 37))
grad.putdata([((x * 6) % 256, (y * 7) % 256, (x * y) % 256)
              for y in range(37) for x in range(40)])
buf = io.BytesIO()
grad.save(buf, format="JPEG", quality=80)
for name, args in (("jpeg-RGB-restarts", ["-restart", "1B"]),
                   ("jpeg-RGB-restart-rows", ["-restart", "1"])):
    out = subprocess.run(["jpegtran"] + args, input=buf.getvalue(),
                         stdout=subprocess.PIPE, check=True).stdout
    put("image", name, out)
# A 141-byte PNG whose tEXt chunk declares 0x7FFFFFF0 bytes and holds 100:
# libpng allocated the declared size per decoding thread (2 GiB, uncounted).
ihdr = b"IHDR" + struct.pack(">IIBBBBB", 16, 16, 8, 2, 0, 0, 0)
put("image", "png-huge-text-chunk",
    b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + ihdr +
    struct.pack(">I", zlib.crc32(ihdr) & 0xffffffff) +
    struct.pack(">I", 0x7FFFFFF0) + b"tEXtComment\x00" + b"A" * 92)
for i, e in enumerate(["x * 2 + 1", "log(max(x, 0) + 1)", "(label >= 3) & (x < 0.5)",
                       "where(x > 0, x, -x) / 255.0", "clip(x, -1, 1) ** 2"]):
    put("expr", "e%d" % i, e)
# exprsize: a 2-byte repeat count, then HEAD '\0' UNIT (exprsize_fuzzer.cpp):
# flat chains far past the height bound, and ones just inside it.
for name, count, head, unit in (("plus-20000", 20000, "x", "+x"),
                                ("mul-20000", 20000, "x", "*x"),
                                ("or-20000", 20000, "x > 0", " or x > 0"),
                                ("plus-255", 255, "x", "+x"),
                                ("neg-20000", 20000, "", "-"),
                                ("brackets-20000", 20000, "", "("),
                                ("calls-300", 300, "x", "+max(x, 1)")):
    put("exprsize", name, struct.pack("<H", count) + (head + "\0" + unit).encode())
put("schedule", "plain", "schedule:\n  default: {parallelism: 2, prefetch: 4}\n  shuffle: {prefetch: 1}\n")
put("schedule", "steps", "filter: {parallelism: 1}\nbatch: {cache: memory}\n")
