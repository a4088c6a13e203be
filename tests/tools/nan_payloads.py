#!/usr/bin/python3
"""NaN payloads survive sluice-fuse-map-batch, sluice-fuse-maps and the JIT:
on and off give the same bytes.

Usage: nan_payloads.py WORKDIR

Writes f16/f32/f64 .npy arrays full of NaNs with payloads (quiet and
signaling, both signs) among ordinary values and infinities, runs every
value-wise step that the pass moves after `batch` (fill_missing, map, clamp,
cast, normalize, bucketize) and runs of them that sluice-fuse-maps fuses
(normalize before and after map, cast, clamp, fill_missing) with each pass
on and off, and with the generated kernels off (`--no-jit`: the interpreter
and the runtime's kernels), and compares the npy outputs byte for byte. Also checks the documented payload rule on the
unfused output: `map: x` returns each NaN with its payload (f16/f32 quieted
when widened, f64 untouched).
"""
import os
import subprocess
import sys

import numpy as np

SLUICE = os.environ.get("SLUICE", "sluice")

PAYLOADS = {
    "f16": (np.uint16, [0x7E01, 0xFE23, 0x7C01, 0xFC02, 0x7E00, 0xFE00]),
    "f32": (np.uint32, [0x7FC00001, 0xFFC12345, 0x7F800123, 0xFF812345,
                        0x7FC00000, 0xFFC00000]),
    "f64": (np.uint64, [0x7FF8000000000001, 0xFFF8000012345678,
                        0x7FF0000000000123, 0xFFF0000000000456,
                        0x7FF8000000000000]),
}
NPT = {"f16": np.float16, "f32": np.float32, "f64": np.float64}

STEPS = [
    ("map_id", "map: {field: x, as: r, expr: \"x\"}"),
    ("map_arith", "map: {field: x, as: r, expr: \"log(max(x, 0) + 1) * 2 - x\"}"),
    ("map_neg", "map: {field: x, as: r, expr: \"-abs(x) + round(x) // 3 % 5\"}"),
    ("map_cond", "map: {field: x, as: r, expr: \"x > 0 ? sqrt(x) : min(x, -1)\"}"),
    ("map_dtype", "map: {field: x, as: r, expr: \"x * 3\", dtype: f16}"),
    ("map_f64", "map: {field: x, as: r, expr: \"x * 3\", dtype: f64}"),
    ("fill", "fill_missing: {field: x, as: r, value: 1.5}"),
    ("clamp", "clamp: {field: x, min: -1, max: 2}"),
    ("cast16", "cast: {field: x, dtype: f16}"),
    ("cast32", "cast: {field: x, dtype: f32}"),
    ("cast64", "cast: {field: x, dtype: f64}"),
    ("normalize", "normalize: {field: x, mean: [0.5, 1, 2], std: [3, 0.25, 1]}"),
    ("bucketize", "bucketize: {field: x, boundaries: [-1, 0, 1]}"),
    # Runs sluice-fuse-maps fuses (per batch, and per record with
    # sluice-fuse-map-batch off).
    ("map_norm", "map: {field: x, expr: \"x * 2 + 1\"}\n"
                 "  - normalize: {field: x, mean: [0.5, 1, 2], std: [3, 0.25, 1]}"),
    ("cast_norm_clamp", "cast: {field: x, dtype: f32}\n"
                        "  - normalize: {field: x, mean: [0.5, 1, 2], std: [3, 0.25, 1]}\n"
                        "  - clamp: {field: x, min: -1, max: 2}"),
    ("norm_cast16", "normalize: {field: x, mean: [-1], std: [0.75]}\n"
                    "  - cast: {field: x, dtype: f16}"),
    ("norm_cast64", "normalize: {field: x, mean: [0.5, 1, 2], std: [3, 0.25, 1]}\n"
                    "  - cast: {field: x, dtype: f64}"),
    ("fill_norm_map", "fill_missing: {field: x, value: 1.5}\n"
                      "  - normalize: {field: x, mean: [0.5, 1, 2], std: [3, 0.25, 1]}\n"
                      "  - map: {field: x, expr: \"log(max(x, 0) + 1) - x\"}"),
]


def quieted(bits, dt):
    return bits | {"f16": 0x0200, "f32": 0x00400000, "f64": 0x0008000000000000}[dt]


def main():
    work = sys.argv[1]
    os.makedirs(work, exist_ok=True)
    rng = np.random.default_rng(3)
    failures = 0
    runs = 0
    for dt, (ut, pays) in PAYLOADS.items():
        x = (rng.standard_normal((1000, 3)) * 4).astype(NPT[dt])
        bits = x.view(ut)
        mask = rng.random(x.shape) < 0.2
        bits[mask] = rng.choice(np.array(pays, dtype=ut), mask.sum())
        x[rng.random(x.shape) < 0.03] = np.inf
        np.save(os.path.join(work, "x_%s.npy" % dt), x)
        for name, step in STEPS:
            spec = os.path.join(work, "%s_%s.yaml" % (dt, name))
            with open(spec, "w") as f:
                f.write("pipeline: nan_%s\nsource:\n  npy: {files: x_%s.npy, field: x}\n"
                        "steps:\n  - %s\n  - batch: {size: 96}\n" % (dt, dt, step))
            outs = []
            for mode, extra in (("on", []), ("off", ["--disable-pass", "sluice-fuse-map-batch"]),
                                ("nojit", ["--no-jit"]),
                                ("unfused", ["--disable-pass", "sluice-fuse-maps"])):
                out = os.path.join(work, "%s_%s_%s" % (dt, name, mode))
                p = subprocess.run([SLUICE, "run", spec, "--quiet", "--sink", "npy:" + out] + extra,
                                   capture_output=True, text=True)
                if p.returncode != 0:
                    sys.exit("sluice failed on %s:\n%s" % (spec, p.stderr))
                outs.append(out)
            runs += 1
            names = sorted(f for f in os.listdir(outs[0]) if f.endswith(".npy"))
            if names != sorted(f for f in os.listdir(outs[1]) if f.endswith(".npy")):
                print("FAIL %s %s: different output files" % (dt, name))
                failures += 1
                continue
            if names != sorted(f for f in os.listdir(outs[2]) if f.endswith(".npy")):
                print("FAIL %s %s: different output files with --no-jit" % (dt, name))
                failures += 1
                continue
            for fn in names:
                a = open(os.path.join(outs[0], fn), "rb").read()
                b = open(os.path.join(outs[1], fn), "rb").read()
                c = open(os.path.join(outs[2], fn), "rb").read()
                d = open(os.path.join(outs[3], fn), "rb").read()
                if a != b:
                    print("FAIL %s %s: %s differs with fuse-map-batch on vs off" % (dt, name, fn))
                    failures += 1
                if a != c:
                    print("FAIL %s %s: %s differs with the JIT on vs off" % (dt, name, fn))
                    failures += 1
                if a != d:
                    print("FAIL %s %s: %s differs with fuse-maps on vs off" % (dt, name, fn))
                    failures += 1
            if name == "map_id":
                got = np.concatenate([np.load(os.path.join(outs[1], f))
                                      for f in names if f.endswith(".r.npy")])
                want = x.view(ut).copy()
                nan = np.isnan(x)
                # f16/f32 NaNs are quieted when widened; f64 ones untouched
                if dt != "f64":
                    want[nan] = quieted(want[nan], dt)
                if got.view(ut).tobytes() != want.tobytes():
                    print("FAIL %s: map x does not return each NaN with its payload" % dt)
                    failures += 1
    if failures:
        sys.exit("%d NaN payload checks failed" % failures)
    print("ok: %d specs byte-identical with sluice-fuse-map-batch on and off, "
          "with sluice-fuse-maps on and off and with the JIT on and off" % runs)


if __name__ == "__main__":
    main()
