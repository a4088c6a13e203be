"""Damages every kernel object in a sluice kernel cache directory, in place.

usage: damage_kernel_cache.py CACHE_DIR rodata|text

Finds the ELF object in each `kernels-*.o` entry (after any header), and
inverts every byte of its read-only constants (`.rodata`, `.rodata.cst*`;
not the `.rodata.str*` name strings: a trusted entry computes garbage) or of its code
(`.text*`: a trusted entry can fault with SIGILL). Prints how many bytes it
changed; fails if there was nothing to damage.
"""
import glob
import os
import struct
import sys

cache, which = sys.argv[1], sys.argv[2]
prefix = {"rodata": b".rodata", "text": b".text"}[which]
changed = 0
for path in glob.glob(os.path.join(cache, "kernels-*.o")):
    data = bytearray(open(path, "rb").read())
    elf = data.find(b"\x7fELF")
    assert elf >= 0, f"{path}: no ELF object in it"
    assert data[elf + 4] == 2 and data[elf + 5] == 1, "expected ELF64 LE"
    shoff, = struct.unpack_from("<Q", data, elf + 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, elf + 0x3A)

    def section(i):
        base = elf + shoff + i * shentsize
        name, _type, _flags, _addr, off, size = struct.unpack_from(
            "<IIQQQQ", data, base)
        return name, _type, off, size

    _, _, stroff, _ = section(shstrndx)
    for i in range(shnum):
        name, kind, off, size = section(i)
        end = data.index(b"\0", elf + stroff + name)
        section_name = bytes(data[elf + stroff + name:end])
        # The kernels' constants, not the kernel table's name strings (with
        # those damaged the kernels are not found and the runtime's own
        # code runs instead, which hides the damage).
        if not section_name.startswith(prefix) or section_name.startswith(b".rodata.str"):
            continue
        if kind == 8:  # SHT_NOBITS: no bytes in the file
            continue
        for k in range(elf + off, elf + off + size):
            data[k] ^= 0xFF
        changed += size
    open(path, "wb").write(data)
assert changed, f"no {which} bytes in {cache}"
print(f"damaged {changed} {which} bytes")
