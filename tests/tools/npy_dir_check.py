#!/usr/bin/env python3
"""Checks an npy sink folder against its index.json and prints a summary.

Usage: npy_dir_check.py DIR. Prints, one per line: whether index.json exists,
its status/complete/count/reason, whether every listed file exists and loads
with numpy, how many .npy/.bin files the index does not list, and how many
temporary (.tmp) files are left. Lit tests FileCheck this output: a folder
must never hold an output the index does not account for.
"""
import json
import os
import sys


def check(d):
    lines = []
    path = os.path.join(d, "index.json")
    names = sorted(os.listdir(d)) if os.path.isdir(d) else []
    tmp = [n for n in names if n.endswith(".tmp")]
    if not os.path.exists(path):
        lines.append("index: missing")
        lines.append("tmp files: %d" % len(tmp))
        return lines
    with open(path) as f:
        index = json.load(f)
    lines.append("index: present")
    lines.append("status: %s" % index.get("status"))
    lines.append("complete: %s" % str(index.get("complete")).lower())
    lines.append("count: %d" % index.get("count", -1))
    if "reason" in index:
        lines.append("reason: %s" % index["reason"])
    listed = set()
    missing = 0
    for out in index.get("outputs", []):
        for field in out["fields"].values():
            for key in ("file", "lengths"):
                if key in field:
                    listed.add(field[key])
                    if not os.path.exists(os.path.join(d, field[key])):
                        missing += 1
    if len(index.get("outputs", [])) != index.get("count"):
        lines.append("count mismatch: %d outputs listed" % len(index["outputs"]))
    try:
        import numpy
        bad = 0
        for name in sorted(listed):
            if name.endswith(".npy"):
                try:
                    numpy.load(os.path.join(d, name))
                except Exception:
                    bad += 1
        lines.append("unloadable listed files: %d" % bad)
    except ImportError:
        pass
    unlisted = [n for n in names if (n.endswith(".npy") or n.endswith(".bin")) and n not in listed]
    lines.append("missing listed files: %d" % missing)
    lines.append("unlisted files: %d" % len(unlisted))
    lines.append("tmp files: %d" % len(tmp))
    return lines


if __name__ == "__main__":
    print("\n".join(check(sys.argv[1])))
