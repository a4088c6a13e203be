#!/usr/bin/python3
"""Data for tests/examples/projection.test: values nobody reads, some bad.

Usage: make_projection_data.py DIR

  DIR/csv/rows.csv   6 rows: id, x (f32), junk (f32, row 3 is 'abc'), n
                     (hex32); specs read id and x only (csv-skip.yaml,
                     csv-fail.yaml) or all (csv-all.yaml), and a row with
                     too few cells (short.yaml: the error stays)
  DIR/tfr/           5 Examples (label i64, value f32); record 2's value is
                     an int64_list (a type error for `value: f32`);
                     label-only specs, and one reading value too
  DIR/img/           image_folder with 3 PNGs and a corrupt .jpg; the spec
                     decodes and keeps only the label
"""
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_bad_data import field, masked, png, varint  # noqa: E402


def example(label, value, bad):
    int64_list = field(3, field(1, varint(label)))
    if bad:
        vlist = field(3, field(1, varint(7)))  # int64_list where f32 is declared
    else:
        vlist = field(2, field(1, struct.pack("<f", value)))
    entries = field(1, field(1, b"label") + field(2, int64_list))
    entries += field(1, field(1, b"value") + field(2, vlist))
    return field(1, entries)


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def main(d):
    os.makedirs(os.path.join(d, "csv"), exist_ok=True)
    write(os.path.join(d, "csv", "rows.csv"),
          "1,0.5,1.0,ff\n2,1.5,2.0,a\n3,2.5,abc,b\n4,3.5,4.0,c\n5,4.5,5.0,d\n6,5.5,6.0,e\n")
    write(os.path.join(d, "csv", "short.csv"), "1,0.5,1.0,ff\n2,1.5,2.0\n")
    cols = """    columns:
      - {name: id, type: i64}
      - {name: x, type: f32}
      - {name: junk, type: f32}
      - {name: n, type: hex32}
"""
    for name, files, policy, keep in (("csv-skip", "rows.csv", "skip", "[id, x]"),
                                      ("csv-fail", "rows.csv", "fail", "[id, x]"),
                                      ("csv-all", "rows.csv", "skip", "[id, x, junk]"),
                                      ("short", "short.csv", "fail", "[id, x]")):
        write(os.path.join(d, "csv", name + ".yaml"),
              "pipeline: %s\nsource:\n  csv:\n    files: %s\n    on_error: %s\n%s"
              "steps:\n  - select: %s\n  - batch: 10\n" % (name.replace("-", "_"), files, policy, cols, keep))

    os.makedirs(os.path.join(d, "tfr"), exist_ok=True)
    with open(os.path.join(d, "tfr", "data.tfrecord"), "wb") as f:
        for i in range(5):
            data = example(i, i * 0.25, i == 2)
            length = struct.pack("<Q", len(data))
            f.write(length + struct.pack("<I", masked(length)) + data +
                    struct.pack("<I", masked(data)))
    for name, keep in (("label", "[label]"), ("both", "[label, value]")):
        write(os.path.join(d, "tfr", name + ".yaml"), """pipeline: tfr_%s
source:
  tfrecord:
    files: data.tfrecord
    on_error: skip
    features:
      - {name: label, type: i64}
      - {name: value, type: f32}
steps:
  - select: %s
  - batch: 10
""" % (name, keep))

    for cls, names in (("a", ["1.png", "2.png"]), ("b", ["1.png", "2.jpg"])):
        os.makedirs(os.path.join(d, "img", "data", cls), exist_ok=True)
        for i, n in enumerate(names):
            with open(os.path.join(d, "img", "data", cls, n), "wb") as f:
                if n.endswith(".jpg"):
                    f.write(b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00" + b"\x00" * 40)
                else:
                    f.write(png(40 + i, 36, i))
    write(os.path.join(d, "img", "label.yaml"), """pipeline: labels_only
source:
  image_folder: {root: data, on_error: skip}
steps:
  - decode_image: {field: data, as: image}
  - filter: {where: "label >= 0"}
  - select: [label]
  - batch: 10
""")


if __name__ == "__main__":
    main(sys.argv[1])
