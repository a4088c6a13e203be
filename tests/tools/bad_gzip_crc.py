#!/usr/bin/env python3
"""Copies a gzip file with its CRC-32 trailer damaged (the data intact).

usage: bad_gzip_crc.py IN.gz OUT.gz
Re-compresses IN's data with Python's gzip module (one member) and inverts
the trailer's CRC-32, so inflating succeeds and only the check at the end
of the stream fails, as for a file damaged in that one place.
"""
import gzip
import sys

data = gzip.open(sys.argv[1]).read()
out = bytearray(gzip.compress(data, mtime=0))
for k in range(len(out) - 8, len(out) - 4):
    out[k] ^= 0xFF
open(sys.argv[2], "wb").write(out)
