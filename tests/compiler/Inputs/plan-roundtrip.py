"""For each spec: the Plan `sluice explain --ir plan` derives straight after
the graph passes, and the Plan `sluice-opt --sluice-print-plan` derives from
the optimized module printed with its locations, parsed back by sluice-opt
and printed again. Prints "same plan: SPEC" or the difference (exit 1).

Usage: plan-roundtrip.py OUTDIR [--no-locations] [--disable-pass NAME] SPEC...
--no-locations prints the module without its locations (the control: the
plan then loses what the spec wrote, and differs).
"""
import difflib
import os
import subprocess
import sys


def run(args, stdin=None):
    r = subprocess.run(args, input=stdin, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("%s failed (%d):\n%s" % (" ".join(args), r.returncode,
                                           r.stderr))
    return r.stdout


def main():
    out, args = sys.argv[1], sys.argv[2:]
    flags, debuginfo = [], ["--mlir-print-debuginfo"]
    if args and args[0] == "--no-locations":
        debuginfo = []
        args = args[1:]
    while args and args[0] == "--disable-pass":
        flags += args[:2]
        args = args[2:]
    ok = True
    for i, spec in enumerate(args):
        direct = run(["sluice", "explain", "--ir", "plan"] + flags + [spec])
        module = run(["sluice", "explain", "--locations"] + flags + [spec])
        reparsed = run(["sluice-opt"] + debuginfo, module)
        path = os.path.join(out, "reparsed-%d.mlir" % i)
        with open(path, "w") as f:
            f.write(reparsed)
        roundtrip = run(["sluice-opt", "--sluice-print-plan", path])
        with open(os.path.join(out, "roundtrip-%d.json" % i), "w") as f:
            f.write(roundtrip)
        if direct == roundtrip:
            print("same plan: " + spec)
            continue
        ok = False
        print("different plans: " + spec)
        sys.stdout.writelines(difflib.unified_diff(
            direct.replace(",", ",\n").splitlines(True),
            roundtrip.replace(",", ",\n").splitlines(True), "direct",
            "round trip"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
