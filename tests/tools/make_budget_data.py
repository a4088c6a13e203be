#!/usr/bin/env python3
"""Writes the inputs of the memory-budget tests (tests/examples/budget.test):
records and specs whose sizes cannot fit their budget, each of which must end
in a located error (or a counted skip), never an abort or an allocation of
the declared size. Usage: make_budget_data.py DIR

  DIR/png/     image_folder with one 16000x16000 RGB PNG (~750 KB on disk,
               732 MiB decoded) and one small PNG
  DIR/jpg/     image_folder with three small PNGs (for resize/pad/one_hot)
  DIR/tar/     shard-000.tar: one member whose header declares ~8 GiB in a
               2 KB file; lie-000.tar.gz / huge-000.tar.gz: ~200 MiB / ~8 GiB
               declared, 1.5 KB inside gzip; big-000.tar: a real 3 MiB
               member, then a small one
  DIR/*.yaml   the specs (see budget.test)
Only the standard library is used, so the PNG is written row by row.
"""
import gzip
import os
import struct
import sys
import zlib


def chunk(kind, data):
    return (struct.pack(">I", len(data)) + kind + data +
            struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))


def write_png(path, width, height, rgb=(10, 20, 30)):
    """An 8-bit RGB PNG, compressed a row at a time (little memory)."""
    comp = zlib.compressobj(9)
    row = b"\x00" + bytes(rgb) * width
    parts = []
    for _ in range(height):
        parts.append(comp.compress(row))
    parts.append(comp.flush())
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n")
        f.write(chunk(b"IHDR", ihdr))
        f.write(chunk(b"IDAT", b"".join(parts)))
        f.write(chunk(b"IEND", b""))


def tar_header(name, size):
    h = bytearray(512)
    h[0:len(name)] = name.encode()
    h[100:108] = b"0000644\0"
    h[108:116] = b"0000000\0"
    h[116:124] = b"0000000\0"
    h[124:136] = ("%011o\0" % size).encode()
    h[136:148] = b"00000000000\0"
    h[156:157] = b"0"
    h[257:263] = b"ustar\0"
    h[263:265] = b"00"
    h[148:156] = b"        "
    h[148:156] = ("%06o\0 " % sum(h)).encode()
    return bytes(h)


def tar_member(name, data):
    pad = (512 - len(data) % 512) % 512
    return tar_header(name, len(data)) + data + b"\0" * pad


def spec(path, text):
    with open(path, "w") as f:
        f.write(text)


def main():
    d = sys.argv[1]
    for sub in ("png/c", "jpg/a", "tar"):
        os.makedirs(os.path.join(d, sub), exist_ok=True)
    write_png(os.path.join(d, "png/c/0-big.png"), 16000, 16000)
    write_png(os.path.join(d, "png/c/1-small.png"), 40, 30)
    for i in range(3):
        write_png(os.path.join(d, "jpg/a/%d.png" % i), 48 + i, 32 + i,
                  (i * 40, 100, 200 - i * 30))
    # ~8 GiB declared, 2 KB on disk.
    with open(os.path.join(d, "tar/shard-000.tar"), "wb") as f:
        f.write(tar_header("000.bin", (8 << 30) - 512) + b"x" * 1536)
    # The same lies inside a .tar.gz, where the bytes left are unknown until
    # inflated: ~200 MiB declared (less than the budget) and ~8 GiB (more),
    # each with 1.5 KB of data.
    for name, size in (("lie-000.tar.gz", 200 << 20),
                       ("huge-000.tar.gz", (8 << 30) - 512)):
        with gzip.open(os.path.join(d, "tar", name), "wb") as f:
            f.write(tar_header("000.bin", size) + b"x" * 1536)
    # A real 3 MiB member (more than the 2 MiB budget) and a small sample.
    with open(os.path.join(d, "tar/big-000.tar"), "wb") as f:
        f.write(tar_member("000.bin", b"\x01" * (3 << 20)))
        f.write(tar_member("001.bin", b"small"))
        f.write(b"\0" * 1024)

    images = """pipeline: %(name)s
source:
  image_folder: {root: %(root)s, extensions: [png]%(onerr)s}
steps:
  - decode_image: {field: data, as: image, channels: 3}
%(step)s  - select: [image, label]
%(budget)s"""
    budget = "budget: {cores: 2, memory: 256MiB}\n"
    spec(os.path.join(d, "png-fail.yaml"), images % dict(
        name="png", root="png", onerr="", budget=budget,
        step="  - resize: {field: image, size: [64, 64]}\n"))
    spec(os.path.join(d, "png-skip.yaml"), images % dict(
        name="png", root="png", onerr=", on_error: skip", budget=budget,
        step="  - resize: {field: image, size: [64, 64]}\n"))
    spec(os.path.join(d, "resize.yaml"), images % dict(
        name="resize", root="jpg", onerr="", budget=budget,
        step="  - resize: {field: image, size: [30000, 30000]}\n"))
    spec(os.path.join(d, "pad.yaml"), images % dict(
        name="pad", root="jpg", onerr="", budget="",
        step="  - pad: {field: image, padding: 1000000000}\n"))
    spec(os.path.join(d, "pad-budget.yaml"), images % dict(
        name="pad", root="jpg", onerr="", budget=budget,
        step="  - pad: {field: image, padding: 10000}\n"))
    spec(os.path.join(d, "onehot.yaml"), """pipeline: onehot
source:
  image_folder: {root: jpg, extensions: [png]}
steps:
  - one_hot: {field: label, depth: 1099511627776}
  - select: [label]
""")
    tar = """pipeline: tar
source:
  webdataset:
    shards: tar/%(glob)s
    fields:
      - {ext: bin, name: data}%(onerr)s
budget: {cores: 1, memory: %(mem)s}
"""
    spec(os.path.join(d, "tar-declared.yaml"),
         tar % dict(glob="shard-*.tar", onerr="", mem="256MiB"))
    spec(os.path.join(d, "tar-gz-lie.yaml"),
         tar % dict(glob="lie-*.tar.gz", onerr="", mem="512MiB"))
    spec(os.path.join(d, "tar-gz-huge.yaml"),
         tar % dict(glob="huge-*.tar.gz", onerr="", mem="256MiB"))
    spec(os.path.join(d, "tar-big-fail.yaml"),
         tar % dict(glob="big-*.tar", onerr="", mem="2MiB"))
    spec(os.path.join(d, "tar-big-skip.yaml"),
         tar % dict(glob="big-*.tar", onerr="\n    on_error: skip", mem="2MiB"))


if __name__ == "__main__":
    main()
