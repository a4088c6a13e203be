"""`python -m sluice check|run|tune SPEC ...`: the command line of the
`sluice` driver for a pip-installed package, over the same library calls
(the spec is checked and compiled as `sluice` does; errors print the same
text and exit with the same codes: 0 ok, 1 a pipeline or data error, 2 a
usage or spec error). The driver has more commands (explain, compile,
bench, ops); these three are those a Python user needs.
"""
import argparse
import json
import sys
import time
from typing import List, Optional

from . import Pipeline, PipelineError, SpecError, check, tune


def _check(args: argparse.Namespace) -> int:
    stages = check(args.spec)
    width = max(len(s["name"]) for s in stages)
    for s in stages:
        record = ", ".join("%s: %s" % kv for kv in s["type"].items())
        print("%-*s  {%s}" % (width, s["name"], record))
    print("%s: ok (%d steps)" % (args.spec, len(stages) - 1))
    return 0


def _run(args: argparse.Namespace) -> int:
    kwargs = {"threads": args.threads, "jit": not args.no_jit}
    if args.epochs is not None:
        kwargs["epochs"] = args.epochs
    if args.schedule is not None:
        kwargs["schedule"] = args.schedule
    if args.memory is not None:
        kwargs["memory"] = args.memory
    start = time.monotonic()
    outputs = 0
    with Pipeline(args.spec, **kwargs) as pipe:
        for _ in pipe:
            outputs += 1
        stats = pipe.stats()
    seconds = time.monotonic() - start
    print("pipeline %s: %d outputs, %d records in %.3f s (%.1f records/s)"
          % (stats["pipeline"], outputs, stats["records"], seconds,
             stats["records"] / seconds if seconds > 0 else 0.0))
    c = stats["consumer"]
    print("consumer: first output after %.3f s; waited %.3f ms per output "
          "after it, %d stalls" % (c["first_wait_seconds"],
                                   c["mean_wait_seconds"] * 1e3, c["stalls"]))
    if args.stats:
        for s in stats["stages"]:
            print("  %-24s read %-10d emitted %-10d cpu %.3f s"
                  % (s["name"], s["read"], s["emitted"],
                     s.get("cpu_seconds", 0.0)))
    if args.stats_json:
        with open(args.stats_json, "w") as f:
            json.dump(stats, f, indent=2)
    return 0


def _tune(args: argparse.Namespace) -> int:
    kwargs = {"seconds": args.seconds, "jit": not args.no_jit}
    if args.cores is not None:
        kwargs["cores"] = args.cores
    if args.memory is not None:
        kwargs["memory"] = args.memory
    if args.report is not None:
        kwargs["report_dir"] = args.report
    r = tune(args.spec, **kwargs)
    print(r["schedule_yaml"], end="")
    if args.report:
        print("\nreports in %s/: schedule.yaml report.json report.md "
              "chart.svg" % args.report)
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m sluice",
        description="Check, run or tune a sluice pipeline spec.")
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check", help="validate; print the record type "
                       "after each step")
    c.add_argument("spec")
    c.set_defaults(func=_check)
    r = sub.add_parser("run", help="run the pipeline, count its outputs")
    r.add_argument("spec")
    r.add_argument("--epochs", type=int)
    r.add_argument("--threads", type=int, default=0)
    r.add_argument("--memory", help="budget, e.g. 512MiB")
    r.add_argument("--schedule", help="a schedule file from `tune`")
    r.add_argument("--no-jit", action="store_true")
    r.add_argument("--stats", action="store_true",
                   help="print per-stage counters")
    r.add_argument("--stats-json", metavar="FILE",
                   help="write the counters (stall meter included) as JSON")
    r.set_defaults(func=_run)
    t = sub.add_parser("tune", help="profile, solve and report a schedule")
    t.add_argument("spec")
    t.add_argument("--cores", type=int)
    t.add_argument("--memory")
    t.add_argument("--seconds", type=float, default=1.5)
    t.add_argument("--report", metavar="DIR")
    t.add_argument("--no-jit", action="store_true")
    t.set_defaults(func=_tune)
    args = p.parse_args(argv)
    try:
        return args.func(args)
    except SpecError as e:
        print(str(e), file=sys.stderr)
        return 2
    except (ValueError, TypeError) as e:
        print("sluice: error: %s" % e, file=sys.stderr)
        return 2
    except PipelineError as e:
        print(str(e), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
