#!/usr/bin/env python3
"""Copies a folder of pictures, rewriting every JPEG with Debian's jpegtran.

  jpegtran_copy.py SRC DST ARG...   each SRC/**/*.jpg -> DST/**/*.jpg through
                                    `jpegtran ARG... -copy all` (lossless:
                                    the same DCT coefficients); other files
                                    are copied as they are

The restart-interval window decode reads files that another tool wrote:
`jpegtran -restart 1B` puts a restart marker after every MCU.
"""
import os
import shutil
import subprocess
import sys


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    src, dst, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    n = 0
    for root, _, files in os.walk(src):
        out = os.path.join(dst, os.path.relpath(root, src))
        os.makedirs(out, exist_ok=True)
        for f in sorted(files):
            a, b = os.path.join(root, f), os.path.join(out, f)
            if f.lower().endswith((".jpg", ".jpeg")):
                with open(b, "wb") as o:
                    subprocess.run(["jpegtran"] + args + ["-copy", "all", a],
                                   stdout=o, check=True)
                n += 1
            else:
                shutil.copyfile(a, b)
    print("rewrote %d JPEGs" % n)


if __name__ == "__main__":
    main()
