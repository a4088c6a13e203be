#!/usr/bin/env python3
"""Writes inputs that used to lose records without a word, plus specs, for
tests/examples/silent-drops.test. Usage: make_drop_data.py DIR

  DIR/img/      image_folder, classes a b c with one PNG each; class b is
                made unreadable (mode 000) so listing it fails for a
                non-root user (the test runs sluice as one)
  DIR/text/     bad.txt: line 2 has bytes that are not UTF-8
  DIR/csv/      rows.csv: row 2's string column is not UTF-8
  DIR/empty/    zero-byte a.csv, a.tfrecord, a.tar, a.txt next to good ones
"""
import io
import os
import sys
import tarfile

from PIL import Image

d = sys.argv[1]


def write(rel, data, mode="wb"):
    path = os.path.join(d, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, mode) as f:
        f.write(data)
    return path


def png(seed):
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (seed * 40, 100, 200)).save(buf, format="PNG")
    return buf.getvalue()


for i, c in enumerate("abc"):
    write("img/%s/1.png" % c, png(i))
for on_error in ("fail", "skip"):
    write("img/%s.yaml" % on_error,
          ("pipeline: img_%s\nsource:\n  image_folder: {root: ., on_error: %s}\n"
           "steps:\n  - decode_image: {field: data, as: image}\n"
           "  - select: [image, label]\n" % (on_error, on_error)).encode())
os.chmod(os.path.join(d, "img/b"), 0)

write("text/bad.txt", b"first\nbad \xff\xfe here\nthird\n")
for enc in ("strict", "replace"):
    for on_error in ("fail", "skip"):
        write("text/%s-%s.yaml" % (enc, on_error),
              ("pipeline: text\nsource:\n  text_lines: {files: bad.txt, encoding: %s,"
               " on_error: %s}\n" % (enc, on_error)).encode())

write("csv/rows.csv", b"1,ok\n2,b\xc3(d\n3,fine\n")
for enc in ("strict", "replace"):
    write("csv/%s.yaml" % enc,
          ("pipeline: csv\nsource:\n  csv:\n    files: rows.csv\n    encoding: %s\n"
           "    columns: [{name: id, type: i64}, {name: s, type: string}]\n" % enc).encode())

write("empty/a.csv", b"")
write("empty/b.csv", b"1\n2\n")
write("empty/a.txt", b"")
write("empty/a.tfrecord", b"")
write("empty/a.tar", b"")
tar = io.BytesIO()
with tarfile.open(fileobj=tar, mode="w") as t:
    data = b"hello"
    info = tarfile.TarInfo("k1.txt")
    info.size = len(data)
    t.addfile(info, io.BytesIO(data))
write("empty/b.tar", tar.getvalue())
write("empty/csv.yaml", b"pipeline: e\nsource:\n  csv: {files: '*.csv', columns: [{name: x, type: i64}]}\n")
write("empty/text.yaml", b"pipeline: e\nsource:\n  text_lines: {files: '*.txt'}\n")
write("empty/tfr.yaml", b"pipeline: e\nsource:\n  tfrecord: {files: '*.tfrecord', features: [{name: x, type: i64}]}\n")
write("empty/tar.yaml", b"pipeline: e\nsource:\n  webdataset: {shards: '*.tar', fields: [{ext: txt}]}\n")
write("missing.yaml", b"pipeline: m\nsource:\n  csv: {files: 'nowhere/*.csv', columns: [{name: x, type: i64}]}\n")
write("missing-root.yaml", b"pipeline: m\nsource:\n  image_folder: {root: no/such/dir}\n")
