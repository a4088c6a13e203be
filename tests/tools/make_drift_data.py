#!/usr/bin/env python3
"""Writes a data set whose per-record cost rises sharply part-way through,
for the re-planning test of `schedule: auto` (tests/examples/replan.test).
Usage: make_drift_data.py DIR [CHEAP] [COSTLY]

  DIR/drift.tfrecord  CHEAP records holding a 128x128 PNG, then COSTLY
                      records holding a 1024x1024 PNG (64 times the pixels to
                      decode and resize); every image is one flat colour, so
                      the file stays small (a few MB) while decoding does not
  DIR/drift.yaml      decode -> resize to 8x8 -> batch, `schedule: auto`

The brief profile of `schedule: auto` reads from the start and only sees the
cheap records (CHEAP is large enough for that), so the run's later records
drift far beyond the threshold.
"""
import os
import struct
import sys
import zlib

from tfrecord_writer import field, masked


def example(image):
    bytes_list = field(1, field(1, image))  # Feature.bytes_list
    return field(1, field(1, field(1, b"image") + field(2, bytes_list)))


def png(size, rgb):
    row = b"\x00" + bytes(rgb) * size
    raw = row * size

    def chunk(tag, data):
        return (struct.pack(">I", len(data)) + tag + data +
                struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF))
    return (b"\x89PNG\r\n\x1a\n" +
            chunk(b"IHDR", struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def main(d, cheap=20000, costly=300):
    os.makedirs(d, exist_ok=True)
    # A few distinct images of each size, cycled (CRCs computed once each).
    cheap_recs = []
    for k in range(16):
        ex = example(png(128, (k * 13 % 256, k * 29 % 256, k * 71 % 256)))
        cheap_recs.append(ex)
    costly_recs = []
    for k in range(4):
        costly_recs.append(example(png(1024, (k * 61 % 256, 200 - k * 7, 17 * k))))
    framed = {}

    def frame(ex):
        if id(ex) not in framed:
            length = struct.pack("<Q", len(ex))
            framed[id(ex)] = (length + struct.pack("<I", masked(length)) + ex +
                              struct.pack("<I", masked(ex)))
        return framed[id(ex)]
    with open(os.path.join(d, "drift.tfrecord"), "wb") as f:
        for i in range(cheap):
            f.write(frame(cheap_recs[i % len(cheap_recs)]))
        for i in range(costly):
            f.write(frame(costly_recs[i % len(costly_recs)]))
    with open(os.path.join(d, "drift.yaml"), "w") as f:
        f.write("""pipeline: drift
source:
  tfrecord:
    files: drift.tfrecord
    features:
      - {name: image, type: bytes}
steps:
  - decode_image: {field: image}
  - resize: {field: image, size: [8, 8]}
  - batch: 32
schedule: auto
""")


if __name__ == "__main__":
    main(sys.argv[1], *[int(a) for a in sys.argv[2:]])
