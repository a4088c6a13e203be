#!/usr/bin/python3
"""Checks sluice's map/filter expressions against numpy with NEP 50 promotion.

Usage: expr_vs_numpy.py WORKDIR

For every dtype (bool too) it writes an .npy of random values plus the hard
cases (NaN with quiet and signaling payloads, +-inf, -0, denormals and
subnormal halves, integer extremes, 0.7, 2.5, ...), a spec with one
`map: {as: rK}` step per expression, runs `sluice run` three times (all graph
passes on, with sluice-fuse-map-batch off, and with the generated kernels off:
`--no-jit`, the interpreter), and compares:
  - each result with numpy's, computed with np._set_promotion_state("weak")
    (NEP 50 as in numpy 2; numpy 1.24 has it behind that switch): bit-exact,
    NaN compared as NaN (payloads are not numpy's contract), except the
    transcendental functions, which may differ by ULP_BOUND units in the last
    place (numpy's own SIMD/SVML f32 and f64 kernels are not correctly
    rounded; sluice computes them in f64 with libm and rounds once);
  - the three runs byte for byte, NaN payloads included.
`filter` on the f16 and bool arrays checks which elements survive; then
`filter` over a CSV with several typed columns (a bool one too) checks
mixed-type promotion (u8 + i8 -> i16, i64 vs f32 -> f64, ...) record by
record, run as csv record runs, per record (the generated filter kernel)
and with --no-jit.
"""
import math
import os
import subprocess
import sys
import warnings

import numpy as np

np._set_promotion_state("weak")
warnings.simplefilter("ignore")

ULP_BOUND = 4
SLUICE = os.environ.get("SLUICE", "sluice")
N_RANDOM = 3000
BATCH = 512


def specials(dt):
    dt = np.dtype(dt)
    if dt.kind == "b":
        return np.array([False, True, True, False], dtype=bool)
    if dt.kind == "f":
        fi = np.finfo(dt)
        v = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 0.7, -0.7, 2.5, -2.5,
             0.5, 1.5, -1.5, 3.5, 1.0, -1.0, 7.0, -7.0, 1e-3, 100.0,
             float(fi.max), float(-fi.max), float(fi.tiny), float(-fi.tiny),
             float(fi.smallest_subnormal), float(-fi.smallest_subnormal),
             float(fi.tiny) / 3, 3.0, -3.0, 65504.0]
        a = np.array(v, dtype=np.float64).astype(dt)
        # NaNs with payloads, quiet and signaling, both signs
        ut = {2: np.uint16, 4: np.uint32, 8: np.uint64}[dt.itemsize]
        pay = {2: [0x7E01, 0xFE23, 0x7C01],
               4: [0x7FC00001, 0xFFC12345, 0x7F800123],
               8: [0x7FF8000000000001, 0xFFF8000012345678,
                   0x7FF0000000000123]}[dt.itemsize]
        return np.concatenate([a, np.array(pay, dtype=ut).view(dt)])
    ii = np.iinfo(dt)
    v = [0, 1, 2, 3, 7, 100, 127, 200, 255, ii.max, ii.min, ii.max - 1,
         ii.min + 1, -1, -7, -3, -128]
    return np.array([x for x in v if ii.min <= x <= ii.max], dtype=dt)


def random_values(dt, rng):
    dt = np.dtype(dt)
    if dt.kind == "b":
        return rng.random(N_RANDOM) < 0.5
    if dt.kind == "f":
        mag = 10.0 ** rng.uniform(-8, 6 if dt.itemsize > 2 else 4, N_RANDOM)
        return (rng.choice([-1, 1], N_RANDOM) * mag).astype(dt)
    ii = np.iinfo(dt)
    wide = rng.integers(ii.min, ii.max, N_RANDOM, dtype=np.int64, endpoint=True) \
        if dt.itemsize < 8 else rng.integers(ii.min, ii.max, N_RANDOM, dtype=dt)
    small = rng.integers(-20, 20, N_RANDOM // 4).clip(ii.min, ii.max)
    return np.concatenate([wide.astype(dt), small.astype(dt)])


def _round(a):
    return a if a.dtype.kind in "iu" else np.rint(a)


def _floorceil(f):
    return lambda a: a if a.dtype.kind in "iu" else f(a)


NS = {
    "np": np, "math": math, "log": np.log, "exp": np.exp, "sqrt": np.sqrt, "abs": np.abs,
    "min": np.minimum, "max": np.maximum, "floor": _floorceil(np.floor),
    "ceil": _floorceil(np.ceil), "round": _round, "pow": np.power,
    "clamp": lambda a, lo, hi: np.minimum(np.maximum(a, lo), hi),
    "sin": np.sin, "cos": np.cos, "tanh": np.tanh, "log1p": np.log1p,
    "sigmoid": lambda a: 1 / (1 + np.exp(-a)),
}

# (sluice expression, numpy expression or None for the same text, kinds,
#  transcendental?)  kinds: f = floats, i = signed ints, u = unsigned ints.
CASES = [
    ("x + 1", None, "fiu", False),
    ("x - 0.7", None, "fiu", False),
    ("x * 3", None, "fiu", False),
    ("x * 2", None, "fiu", False),
    ("x * 100", None, "fiu", False),
    ("x * x", None, "fiu", False),
    ("x * 0.1", None, "fiu", False),
    ("2 - x", None, "fi", False),
    ("x / 3", None, "fiu", False),
    ("x / x", None, "fiu", False),
    ("x / 0.7", None, "fiu", False),
    ("1 / x", None, "f", False),
    ("-x", None, "fiu", False),
    ("abs(x)", None, "fiu", False),
    ("x % 3", None, "fiu", False),
    ("x % 7", None, "fiu", False),
    ("x % -3", None, "fi", False),
    ("x % -2.5", None, "f", False),
    ("x % 0", None, "fiu", False),
    ("7 % x", None, "fiu", False),
    ("-7 % x", None, "fi", False),
    ("x // 3", None, "fiu", False),
    ("x // -2", None, "fi", False),
    ("x // 0", None, "fiu", False),
    ("x // 0.7", None, "f", False),
    ("x // x", None, "fiu", False),
    ("x % x", None, "fiu", False),
    ("round(x)", None, "fiu", False),
    ("round(x * 0.5)", None, "fiu", False),
    ("floor(x)", None, "fiu", False),
    ("ceil(x)", None, "fiu", False),
    ("max(x, 0)", None, "fiu", False),
    ("min(x, 1.5)", None, "fiu", False),
    ("max(x, 1e-3)", None, "f", False),
    ("clamp(x, -1, 100)", None, "fi", False),
    ("clamp(x, 1, 100)", None, "fiu", False),
    ("max(x, -x)", None, "fi", False),
    ("min(-x, x)", None, "fi", False),
    ("x == 0.7", None, "fiu", False),
    ("x < 0.7", None, "fiu", False),
    ("x != 0.7", None, "fiu", False),
    ("x >= -2.5", None, "fiu", False),
    ("x == 7", None, "fiu", False),
    ("x <= 100", None, "fiu", False),
    # numpy 2 compares Python ints exactly even out of the dtype's range
    # (numpy 1.24 raises); the reference does it in int64 / float64.
    ("x < 300", "x.astype(np.float64) < 300", "fiu", False),
    ("x > -1", "x.astype(np.float64) > -1", "u", False),
    ("x * 1e10", None, "f", False),
    ("x + 1e300", None, "f", False),
    ("x > 0 ? x : x * 0.01", "np.where(x > 0, x, x * 0.01)", "f", False),
    ("x > 0 ? x : 0", "np.where(x > 0, x, x.dtype.type(0))", "fiu", False),
    ("x > 0 and x < 1", "(x > 0) & (x < 1)", "fiu", False),
    ("not (x == 0) or x > 5", "(~(x == 0)) | (x > 5)", "fiu", False),
    ("pow(x, 2)", None, "fiu", True),
    ("pow(x, 3)", None, "iu", False),
    ("sqrt(x)", None, "fu", False),
    ("sqrt(abs(x))", None, "f", False),
    ("(x + 1) * (x - 1) / 3 - x", None, "fiu", False),
    ("log(max(x, 0) + 1)", None, "fiu", True),
    ("exp(x)", None, "f", True),
    ("exp(x / 100)", None, "fiu", True),
    ("log(x)", None, "fu", True),
    ("log1p(x)", None, "f", True),
    ("sin(x)", None, "f", True),
    ("cos(x)", None, "f", True),
    ("tanh(x)", None, "f", True),
    ("sigmoid(x)", None, "f", True),
    ("pow(x, 0.5)", None, "f", True),
    # a function of literals is a Python number (math.log), weak like them
    ("x * log(2)", "x * math.log(2)", "f", True),
]

# bool is a condition: arithmetic on it is a spec error (numpy's `-` and
# `abs` reject or reinterpret bools); logic, comparisons of bools and `?`.
BOOL_CASES = [
    ("x", None, "b", False),
    ("not x", "~x", "b", False),
    ("x ? 1 : 0", "np.where(x, 1, 0)", "b", False),
    ("x ? 2.5 : -1", "np.where(x, 2.5, -1.0)", "b", False),
    ("x == true", "x == True", "b", False),
    ("x != false", "x != False", "b", False),
    ("x and not x", "x & ~x", "b", False),
    ("x ? x : false", "np.where(x, x, False)", "b", False),
]
CASES += BOOL_CASES

DTYPES = ["f16", "f32", "f64", "u8", "i8", "u16", "i16", "i32", "i64", "bool"]


def np_dtype(name):
    return np.dtype({"f16": "float16", "f32": "float32", "f64": "float64",
                     "u8": "uint8", "i8": "int8", "u16": "uint16",
                     "i16": "int16", "i32": "int32", "i64": "int64",
                     "bool": "bool"}[name])


def applies(kinds, dt):
    return np_dtype(dt).kind in kinds


def ulp_diff(a, b):
    """Distance in units in the last place between two float arrays."""
    ut = {2: np.int16, 4: np.int32, 8: np.int64}[a.dtype.itemsize]
    ia = a.view(ut).astype(np.int64)
    ib = b.view(ut).astype(np.int64)
    # map sign-magnitude to a monotonic integer line
    top = np.int64(1) << (a.dtype.itemsize * 8 - 1)
    ia = np.where(ia < 0, -(ia + top), ia) if a.dtype.itemsize < 8 else \
        np.where(ia < 0, np.int64(-2**63) - ia, ia)
    ib = np.where(ib < 0, -(ib + top), ib) if a.dtype.itemsize < 8 else \
        np.where(ib < 0, np.int64(-2**63) - ib, ib)
    return np.abs(ia - ib)


def run(cmd, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True,
                       env=dict(os.environ, **env) if env else None)
    if p.returncode != 0:
        sys.exit("command failed: %s\n%s%s" % (" ".join(cmd), p.stdout, p.stderr))


def check_maps(work):
    rng = np.random.default_rng(20240917)
    failures = 0
    compared = 0
    for dt in DTYPES:
        ndt = np_dtype(dt)
        x = np.concatenate([specials(ndt), random_values(ndt, rng)])
        d = os.path.join(work, dt)
        os.makedirs(d, exist_ok=True)
        np.save(os.path.join(d, "x.npy"), x)
        cases = [c for c in CASES if applies(c[2], dt)]
        with open(os.path.join(d, "spec.yaml"), "w") as f:
            f.write("pipeline: expr_%s\nsource:\n  npy: {files: x.npy, field: x}\nsteps:\n" % dt)
            for k, c in enumerate(cases):
                f.write("  - map: {field: x, as: r%d, expr: \"%s\"}\n" % (k, c[0]))
            f.write("  - batch: {size: %d}\n" % BATCH)
        outs = []
        for name, extra in (("on", []), ("off", ["--disable-pass", "sluice-fuse-map-batch"]),
                            ("nojit", ["--no-jit"])):
            out = os.path.join(d, name)
            run([SLUICE, "run", os.path.join(d, "spec.yaml"), "--quiet",
                 "--sink", "npy:" + out] + extra)
            outs.append(out)
        nbatches = (len(x) + BATCH - 1) // BATCH
        for k, (expr, npexpr, _, transcendental) in enumerate(cases):
            parts = [[], [], []]
            for r, out in enumerate(outs):
                for b in range(nbatches):
                    parts[r].append(np.load(os.path.join(out, "%06d.r%d.npy" % (b, k))))
            got = np.concatenate(parts[0])
            off = np.concatenate(parts[1])
            nojit = np.concatenate(parts[2])
            if got.tobytes() != off.tobytes():
                print("FAIL %s on %s: fuse-map-batch on/off differ in bytes" % (expr, dt))
                failures += 1
            if got.tobytes() != nojit.tobytes():
                print("FAIL %s on %s: the JIT on/off differ in bytes" % (expr, dt))
                failures += 1
            ns = dict(NS)
            ns["x"] = x
            want = np.asarray(eval(npexpr or expr.replace("?", "if"), ns))
            if want.dtype != got.dtype:
                print("FAIL %s on %s: dtype %s, numpy %s" % (expr, dt, got.dtype, want.dtype))
                failures += 1
                continue
            compared += got.size
            if got.dtype.kind == "f":
                bad = ~((np.isnan(got) & np.isnan(want)) |
                        (got.view(np.uint8).reshape(len(got), -1) ==
                         want.view(np.uint8).reshape(len(want), -1)).all(axis=1))
                if transcendental:
                    both = ~np.isnan(got) & ~np.isnan(want)
                    close = both & (ulp_diff(got, want) <= ULP_BOUND)
                    bad &= ~close
            else:
                bad = got != want
            if bad.any():
                i = np.flatnonzero(bad)[:5]
                print("FAIL %s on %s: %d of %d differ, e.g. x=%s sluice=%s numpy=%s" % (
                    expr, dt, bad.sum(), len(got), x[i].tolist(), got[i].tolist(), want[i].tolist()))
                failures += 1
    return failures, compared


# filter on one f16 or bool field (the npy arrays of check_maps): numpy says
# which elements survive.
NPY_FILTERS = {
    "f16": [("x < 0.7", "x < np.float16(0.7)"), ("x == 0.7", "x == np.float16(0.7)"),
            ("x != x", "x != x"), ("x * 2 > 100", "x * 2 > 100"),
            ("max(x, 0) == 0", "np.maximum(x, 0) == 0"),
            ("round(x) == 2 or x // 3 == -1", "(np.rint(x) == 2) | (x // 3 == -1)"),
            ("x * 1000 >= 65504", "x * 1000 >= 65504")],
    "bool": [("x", "x"), ("not x", "~x"), ("x == false", "x == False")],
}


def check_npy_filters(work):
    failures = 0
    checked = 0
    for dt, filters in NPY_FILTERS.items():
        d = os.path.join(work, dt)
        x = np.load(os.path.join(d, "x.npy"))
        for k, (expr, npexpr) in enumerate(filters):
            spec = os.path.join(d, "filter%d.yaml" % k)
            with open(spec, "w") as f:
                f.write("pipeline: filter_%s\nsource:\n  npy: {files: x.npy, field: x}\n"
                        "steps:\n  - filter: {where: \"%s\"}\n  - batch: {size: %d}\n"
                        % (dt, expr, len(x)))
            outs = []
            for name, extra in (("on", []), ("nojit", ["--no-jit"])):
                out = os.path.join(d, "filter%d_%s" % (k, name))
                run([SLUICE, "run", spec, "--quiet", "--sink", "npy:" + out] + extra)
                path = os.path.join(out, "000000.x.npy")
                outs.append(np.load(path) if os.path.exists(path) else x[:0])
            ns = dict(NS)
            ns["x"] = x
            want = x[np.asarray(eval(npexpr, ns))]
            checked += 1
            if outs[0].tobytes() != want.tobytes():
                print("FAIL filter %s on %s: sluice kept %d elements, numpy %d" % (
                    expr, dt, len(outs[0]), len(want)))
                failures += 1
            if outs[0].tobytes() != outs[1].tobytes():
                print("FAIL filter %s on %s: the JIT on/off keep different elements" % (expr, dt))
                failures += 1
    return failures, checked


# Mixed dtypes: filter over a CSV with typed columns; numpy says which
# records survive.
MIXED = ["f32", "f64", "u8", "i8", "u16", "i16", "i32", "i64", "bool"]
FILTERS = [
    ("u8 + i8 > 100", "(u8 + i8) > 100"),
    ("u8 + i8 == -56", "(u8 + i8) == -56"),
    ("u16 * i16 < 0", "(u16 * i16) < 0"),
    ("i64 + f32 > 1e6", "(i64 + f32) > 1e6"),
    ("i32 * f32 == i32 * f64", "(i32 * f32) == (i32 * f64)"),
    ("f32 + 0.1 == f64 + 0.1", "(f32 + 0.1) == (f64 + 0.1)"),
    ("u8 * 2 < i8", "(u8 * 2) < i8"),
    ("i16 % u8 == 3", "(i16 % u8) == 3"),
    ("i8 // u8 < -1", "(i8 // u8) < -1"),
    ("u8 / i8 > 1", "(u8 / i8) > 1"),
    ("f32 == 0.7", "f32 == 0.7"),
    ("max(i8, u8) > 100", "np.maximum(i8, u8) > 100"),
    ("bool and i8 > 0", "bool & (i8 > 0)"),
    ("not bool or f32 == 0.7", "~bool | (f32 == 0.7)"),
    ("bool == (u8 > 100)", "bool == (u8 > 100)"),
    ("bool ? f32 < 0 : i16 > 7", "np.where(bool, f32 < 0, i16 > 7)"),
]


def check_filters(work):
    rng = np.random.default_rng(7)
    n = 4000
    cols = {}
    for dt in MIXED:
        ndt = np_dtype(dt)
        sp = specials(ndt)
        v = random_values(ndt, rng)[:n]
        v = np.concatenate([sp, v])[:n] if len(v) >= n else np.resize(np.concatenate([sp, v]), n)
        if ndt.kind == "f":  # the CSV reader has no NaN payloads to keep
            v = np.where(np.isnan(v), ndt.type(1.25), v).astype(ndt)
            v[rng.random(n) < 0.05] = ndt.type(0.7)
        rng.shuffle(v)
        cols[dt] = v.astype(ndt)
    d = os.path.join(work, "mixed")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "data.csv"), "w") as f:
        for i in range(n):
            f.write(",".join(repr(cols[dt][i].item()) if np_dtype(dt).kind == "f"
                             else str(int(cols[dt][i])) for dt in MIXED) + "\n")
    failures = 0
    for k, (expr, npexpr) in enumerate(FILTERS):
        spec = os.path.join(d, "f%d.yaml" % k)
        with open(spec, "w") as f:
            f.write("pipeline: mixed\nsource:\n  csv:\n    files: data.csv\n    columns:\n")
            for dt in MIXED:
                f.write("      - {name: %s, type: %s}\n" % (dt, dt))
            f.write("steps:\n  - filter: {where: \"%s\"}\n  - batch: {size: %d}\n" % (expr, n))
        ns = dict(NS)
        ns.update(cols)
        keep = np.asarray(eval(npexpr, ns))
        want = cols["i64"][keep]
        # As it runs (csv record runs), per record (the generated filter
        # kernel), and with the generated kernels off.
        for name, extra, env in (("", [], None),
                                 ("records", [], {"SLUICE_NO_RECORD_RUNS": "1"}),
                                 ("nojit", ["--no-jit"], {"SLUICE_NO_RECORD_RUNS": "1"})):
            out = os.path.join(d, "o%d%s" % (k, name))
            run([SLUICE, "run", spec, "--quiet", "--sink", "npy:" + out] + extra, env)
            path = os.path.join(out, "000000.i64.npy")
            got = np.load(path) if os.path.exists(path) else np.zeros(0, np.int64)
            if got.tobytes() != want.tobytes():
                print("FAIL filter %s (%s): sluice kept %d records, numpy %d" % (
                    expr, name or "record runs", len(got), len(want)))
                failures += 1
    return failures


def main():
    work = sys.argv[1]
    os.makedirs(work, exist_ok=True)
    failures, compared = check_maps(work)
    f, npy_filters = check_npy_filters(work)
    failures += f
    failures += check_filters(work)
    if failures:
        sys.exit("%d expression checks failed" % failures)
    print("ok: %d values compared with numpy, %d filters" % (compared, len(FILTERS) + npy_filters))


if __name__ == "__main__":
    main()
