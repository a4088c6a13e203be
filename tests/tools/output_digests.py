#!/usr/bin/python3
"""Runs every example and bench spec and checks the SHA-256 of every output
file against the digests kept in tests/examples/Inputs/output-digests.txt.

  output_digests.py --sluice BIN --work DIR [--update] [--only NAME...]

Refactorings must not change a byte of what a pipeline emits: this keeps
the digests of each spec's `--sink npy:` directory (every batch .npy and
index.json) from before a change, and fails with the files whose bytes
differ after it. The bench specs read small data sets made here by
bench/gen_data.py, bench/gen_photos.py and jpegtran (tests/tools/
jpegtran_copy.py); their digests are kept too, so a change of the
generators (or of the libraries behind them) is reported as such rather
than as a changed output.

--update rewrites the digest file from this run (do it only for a change
that is meant to change outputs, and say why in the commit).
"""
import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DIGESTS = os.path.join(SRC, "tests", "examples", "Inputs", "output-digests.txt")
BENCH_PREFIX = "/tmp/sluice-bench-data"

# name, spec (relative to the source tree), --epochs (None: the spec's own).
# Epochs are capped where the spec's own would write hundreds of MB.
CASES = [
    ("criteo", "examples/criteo.yaml", None),
    ("fashion_mnist", "examples/fashion_mnist.yaml", 1),
    ("fashion_mnist_test", "examples/fashion_mnist_test.yaml", None),
    ("imagenet", "examples/imagenet.yaml", None),
    ("text", "examples/text.yaml", None),
    ("criteo_bench", "bench/specs/criteo_bench.yaml", None),
    ("criteo_filter_bench", "bench/specs/criteo_filter_bench.yaml", None),
    ("imagenet_bench", "bench/specs/imagenet_bench.yaml", None),
    ("photos_bench", "bench/specs/photos_bench.yaml", None),
    ("photos_auto_bench", "bench/specs/photos_auto_bench.yaml", None),
    ("photos_rst_bench", "bench/specs/photos_rst_bench.yaml", None),
    ("photos_rst_auto_bench", "bench/specs/photos_rst_auto_bench.yaml", None),
    ("autotune_cached_prefix", "bench/specs/autotune/cached_prefix.yaml", 2),
    ("autotune_selective_filter", "bench/specs/autotune/selective_filter.yaml", None),
    ("autotune_slow_stage", "bench/specs/autotune/slow_stage.yaml", None),
]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def tree_digests(root, prefix):
    """{prefix/relative path: sha256} of every file under root."""
    out = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            p = os.path.join(dirpath, f)
            rel = os.path.relpath(p, root).replace(os.sep, "/")
            out[prefix + "/" + rel] = sha256(p)
    return out


def make_bench_data(data):
    """The small bench data sets, deterministic from their seeds."""
    py = sys.executable
    subprocess.run([py, os.path.join(SRC, "bench", "gen_data.py"), "--out", data,
                    "--images", "24", "--rows", "3000", "--criteo-files", "2",
                    "--seed", "42"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([py, os.path.join(SRC, "bench", "gen_photos.py"), "--out", data,
                    "--images", "16", "--seed", "42"], check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run([py, os.path.join(SRC, "tests", "tools", "jpegtran_copy.py"),
                    os.path.join(data, "photos", "train"),
                    os.path.join(data, "photos_rst", "train"),
                    "-restart", "1B", "-optimize"], check=True,
                   stdout=subprocess.DEVNULL)
    digests = {}
    for part in ("imagenet", "criteo", "photos/train", "photos_rst/train"):
        digests.update(tree_digests(os.path.join(data, part), "input:" + part))
    return digests


def uses_bench_data(spec):
    return BENCH_PREFIX in open(os.path.join(SRC, spec)).read()


def run_case(sluice, work, data, name, spec, epochs):
    # The examples name their data relative to their own folder and run in
    # place; the bench specs are copied with their data prefix rewritten.
    spec_path = os.path.join(SRC, spec)
    if uses_bench_data(spec):
        # The small data sets fill few batches of the bench specs' sizes
        # (128 images, with drop_remainder), so the copies batch by 8.
        text = open(spec_path).read().replace(BENCH_PREFIX, data)
        text = re.sub(r"batch: \{size: \d+, drop_remainder", "batch: {size: 8, drop_remainder", text)
        spec_path = os.path.join(work, name + ".yaml")
        with open(spec_path, "w") as f:
            f.write(text)
    out = os.path.join(work, "out", name)
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sluice, "run", spec_path, "--quiet", "--sink", "npy:" + out]
    if epochs is not None:
        cmd += ["--epochs", str(epochs)]
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=600)
    except subprocess.TimeoutExpired:
        sys.exit("%s: `%s` ran for more than 10 minutes" % (name, " ".join(cmd)))
    if r.returncode != 0:
        sys.exit("%s: `%s` failed (exit %d):\n%s" % (name, " ".join(cmd), r.returncode,
                                                    r.stderr))
    d = tree_digests(out, name)
    if not any(k.endswith(".npy") for k in d):
        sys.exit("%s: no .npy output in %s" % (name, out))
    shutil.rmtree(out)
    return d


def read_digests(path):
    out = {}
    for line in open(path):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, digest = line.rsplit(" ", 1)
        out[key] = digest
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sluice", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--digests", default=DIGESTS)
    ap.add_argument("--update", action="store_true")
    ap.add_argument("--only", nargs="*", help="case names (default: all)")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    data = os.path.join(args.work, "data")
    shutil.rmtree(data, ignore_errors=True)
    cases = [c for c in CASES if not args.only or c[0] in args.only]
    if args.only and len(cases) != len(args.only):
        sys.exit("unknown case in %s; cases: %s" % (args.only, [c[0] for c in CASES]))
    got = {}
    bench = any(uses_bench_data(c[1]) for c in cases)
    if bench:
        got.update(make_bench_data(data))
    for name, spec, epochs in cases:
        got.update(run_case(args.sluice, args.work, data, name, spec, epochs))
    if args.update:
        with open(args.digests, "w") as f:
            f.write("# SHA-256 of every output file of every example and bench spec\n"
                    "# (tests/tools/output_digests.py; input:* lines are the bench data\n"
                    "# it generates). Regenerate only for a change meant to change outputs.\n")
            for k in sorted(got):
                f.write("%s %s\n" % (k, got[k]))
        print("wrote %d digests to %s" % (len(got), args.digests))
        return
    want = read_digests(args.digests)
    names = {c[0] for c in cases}
    want = {k: v for k, v in want.items()
            if k.split("/", 1)[0] in names or (bench and k.startswith("input:"))}
    inputs_bad = sorted(k for k in set(want) | set(got)
                        if k.startswith("input:") and want.get(k) != got.get(k))
    if inputs_bad:
        sys.exit("the generated bench data differs from the data the digests were made from "
                 "(%d files, e.g. %s): bench/gen_data.py, gen_photos.py or the libraries behind "
                 "them changed; check that, then regenerate with --update" %
                 (len(inputs_bad), inputs_bad[0]))
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    differ = sorted(k for k in set(want) & set(got) if want[k] != got[k])
    if missing or extra or differ:
        for k in differ[:20]:
            print("differs: %s" % k)
        for k in missing[:20]:
            print("missing: %s (in the digests, not written by this run)" % k)
        for k in extra[:20]:
            print("new: %s (written by this run, not in the digests)" % k)
        sys.exit("%d output files differ, %d missing, %d new, against %s" %
                 (len(differ), len(missing), len(extra), args.digests))
    print("same: %d output files of %d specs" % (len(got), len(cases)))


if __name__ == "__main__":
    main()
