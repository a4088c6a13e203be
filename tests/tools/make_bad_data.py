#!/usr/bin/env python3
"""Writes small data sets with one known defect each, plus a spec per set,
for the bad-data tests of `sluice run` (fail and skip behaviour, locations,
accounting). Usage: make_bad_data.py DIR

  DIR/jpeg/    image_folder with 5 good PNGs and 1 corrupt .jpg (class b, 2nd file)
  DIR/csv/     rows.csv: 6 rows, row 4 (line 4) has too few columns
  DIR/tfr/     data.tfrecord: 5 records; record 3's length CRC is wrong
"""
import os
import struct
import sys
import zlib

from tfrecord_writer import field, masked, varint


def example(label, value):
    int64_list = field(3, field(1, varint(label)))          # Feature.int64_list
    float_list = field(2, field(1, struct.pack("<f", value)))  # packed float
    entries = field(1, field(1, b"label") + field(2, int64_list))
    entries += field(1, field(1, b"value") + field(2, float_list))
    return field(1, entries)  # Example.features


def png(w, h, seed):
    raw = b"".join(b"\x00" + bytes((x * 7 + y * 3 + seed) % 256 for x in range(w * 3))
                   for y in range(h))

    def chunk(tag, data):
        return (struct.pack(">I", len(data)) + tag + data +
                struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def main(d):
    # Images: the corrupt file starts like a JPEG and then stops.
    for cls, names in (("a", ["1.png", "2.png", "3.png"]), ("b", ["1.png", "2.jpg", "3.png"])):
        os.makedirs(os.path.join(d, "jpeg", "img", cls), exist_ok=True)
        for i, n in enumerate(names):
            with open(os.path.join(d, "jpeg", "img", cls, n), "wb") as f:
                if n.endswith(".jpg"):
                    f.write(b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00" + b"\x00" * 40)
                else:
                    f.write(png(40 + i, 36, i))
    for policy in ("fail", "skip"):
        with open(os.path.join(d, "jpeg", policy + ".yaml"), "w") as f:
            f.write("""pipeline: bad_jpeg
source:
  image_folder: {root: img, on_error: %s}
steps:
  - decode_image: {field: data, as: image}
  - center_crop: {field: image, size: 32}
  - select: [image, label]
  - batch: 2
""" % policy)
        # The compiler fuses these steps into one; its errors still name
        # the decode and its line.
        with open(os.path.join(d, "jpeg", "fused-" + policy + ".yaml"), "w") as f:
            f.write("""pipeline: bad_jpeg_fused
source:
  image_folder: {root: img, on_error: %s}
steps:
  - decode_image: {field: data, as: image}
  - random_resized_crop: {field: image, size: 32}
  - random_flip: {field: image}
  - normalize: {field: image, mean: 127, std: 64}
  - transpose: {field: image, to: CHW}
  - select: [image, label]
  - batch: 2
""" % policy)

    os.makedirs(os.path.join(d, "csv"), exist_ok=True)
    with open(os.path.join(d, "csv", "rows.csv"), "w") as f:
        f.write("1,0.5,2\n2,1.5,3\n3,2.5,4\n4,3.5\n5,4.5,6\n6,5.5,7\n")
    for policy in ("fail", "skip"):
        with open(os.path.join(d, "csv", policy + ".yaml"), "w") as f:
            f.write("""pipeline: bad_csv
source:
  csv:
    files: rows.csv
    on_error: %s
    columns:
      - {name: id, type: i64}
      - {name: x, type: f32}
      - {name: y, type: i32}
steps:
  - filter: {where: "id != 2"}
  - batch: 2
""" % policy)

    os.makedirs(os.path.join(d, "tfr"), exist_ok=True)
    with open(os.path.join(d, "tfr", "data.tfrecord"), "wb") as f:
        for i in range(5):
            data = example(i, i * 0.25)
            length = struct.pack("<Q", len(data))
            crc = masked(length) ^ (0xDEAD if i == 3 else 0)
            f.write(length + struct.pack("<I", crc) + data + struct.pack("<I", masked(data)))
    for policy in ("fail", "skip"):
        with open(os.path.join(d, "tfr", policy + ".yaml"), "w") as f:
            f.write("""pipeline: bad_tfrecord
source:
  tfrecord:
    files: data.tfrecord
    on_error: %s
    features:
      - {name: label, type: i64}
      - {name: value, type: f32}
steps:
  - batch: 2
""" % policy)


if __name__ == "__main__":
    main(sys.argv[1])
