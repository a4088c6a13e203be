#!/usr/bin/python3
"""Usage: same_outputs.py DIR_A DIR_B -- the two npy sink directories hold the
same files with the same bytes (all .npy files and index.json); exits 1 with
the first difference otherwise. Also fails on an empty output."""
import os
import sys

a, b = sys.argv[1], sys.argv[2]
fa, fb = sorted(os.listdir(a)), sorted(os.listdir(b))
if fa != fb:
    sys.exit("different files: %s vs %s" % (sorted(set(fa) ^ set(fb))[:5], ""))
if not any(f.endswith(".npy") for f in fa):
    sys.exit("no .npy outputs in " + a)
for f in fa:
    if open(os.path.join(a, f), "rb").read() != open(os.path.join(b, f), "rb").read():
        sys.exit("%s differs between %s and %s" % (f, a, b))
print("same: %d files" % len(fa))
