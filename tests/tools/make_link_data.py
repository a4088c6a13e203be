#!/usr/bin/env python3
"""Writes an image folder whose class directories hold dangling symbolic
links, plus specs, for tests/examples/dangling-links.test.
Usage: make_link_data.py DIR

  DIR/img/a/    real.png and 20 dangling links l00.png .. l19.png (whichever
                of them readdir returns last, a link is often the last
                entry), and a dangling notes.txt (not an image: ignored)
  DIR/img/b/    one real PNG
  DIR/img/{fail,skip}.yaml    image_folder over DIR/img
  DIR/img/files-{fail,skip}.yaml    the `files` source over img/*/*.png
  DIR/img/csv.yaml    a csv source whose glob matches a dangling link
  DIR/img/glob.yaml   a csv glob through glob/shut/, a directory of mode 000
"""
import io
import os
import sys

from PIL import Image

d = os.path.join(sys.argv[1], "img")


def png(seed):
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (seed * 40, 100, 200)).save(buf, format="PNG")
    return buf.getvalue()


for c, seed in (("a", 1), ("b", 2)):
    os.makedirs(os.path.join(d, c))
    with open(os.path.join(d, c, "real.png"), "wb") as f:
        f.write(png(seed))
for i in range(20):
    os.symlink("missing-%02d.png" % i, os.path.join(d, "a", "l%02d.png" % i))
os.symlink("missing.txt", os.path.join(d, "a", "notes.txt"))
for on_error in ("fail", "skip"):
    with open(os.path.join(d, "%s.yaml" % on_error), "w") as f:
        f.write("pipeline: img_%s\nsource:\n  image_folder: {root: ., on_error: %s}\n"
                "steps:\n  - decode_image: {field: data, as: image}\n"
                "  - select: [image, label]\n" % (on_error, on_error))
    with open(os.path.join(d, "files-%s.yaml" % on_error), "w") as f:
        f.write("pipeline: files_%s\nsource:\n  files: {files: '*/*.png', on_error: %s}\n"
                % (on_error, on_error))
os.makedirs(os.path.join(d, "csv"))
with open(os.path.join(d, "csv", "1.csv"), "w") as f:
    f.write("1\n2\n")
os.symlink("gone.csv", os.path.join(d, "csv", "2.csv"))
with open(os.path.join(d, "csv.yaml"), "w") as f:
    f.write("pipeline: csv\nsource:\n  csv: {files: 'csv/*.csv', columns: [{name: x, type: i64}]}\n")

# A glob through a directory that cannot be listed (mode 000; the test runs
# sluice as an unprivileged user, since root lists it anyway).
for sub, rows in (("open", "1\n2\n"), ("shut", "3\n4\n")):
    os.makedirs(os.path.join(d, "glob", sub))
    with open(os.path.join(d, "glob", sub, "%s.csv" % sub), "w") as f:
        f.write(rows)
os.chmod(os.path.join(d, "glob", "shut"), 0)
with open(os.path.join(d, "glob.yaml"), "w") as f:
    f.write("pipeline: glob\nsource:\n  csv: {files: 'glob/*/*.csv', columns: [{name: x, type: i64}]}\n")
