"""Prints the JSON of `sluice explain --ir plan` one line per fact, for FileCheck.

    plan NAME seed=S epochs=E cores=C memory=M
    stage NAME op=OP kind=KIND loc=LINE:COL parallelism=P prefetch=F cache=C
      params KEY=VALUE ...     (VALUE* = not written in the spec: a default)
      in {field: elem[dims], ...}
      out {field: elem[dims], ...}
      fused NAME op=OP loc=LINE:COL   (the steps of a fused_map stage)
        params KEY=VALUE ...

Floats print with a '.', strings quoted, so kinds stay visible. Usage:
sluice explain SPEC --ir plan | plan-summary.py
"""
import json
import sys


def value(v):
    t, x = v["t"], v.get("v")
    if t == "null":
        return "null"
    if t == "bool":
        return "true" if x else "false"
    if t == "int":
        return str(x)
    if t == "float":
        return x if isinstance(x, str) else repr(float(x))
    if t == "str":
        return json.dumps(x)
    if t == "list":
        return "[" + ", ".join(value(i) for i in x) + "]"
    if t == "map":
        return "{" + ", ".join(k + ": " + value(i) for k, i in x) + "}"
    raise ValueError("unknown value kind " + t)


def record(fields):
    def field(f):
        dims = ", ".join("?" if d == -1 else str(d) for d in f["shape"])
        return f["name"] + ": " + f["elem"] + ("[" + dims + "]" if dims else "")
    return "{" + ", ".join(field(f) for f in fields) + "}"


def main():
    plan = json.load(sys.stdin)
    print("plan %s seed=%d epochs=%d cores=%d memory=%d" %
          (plan["name"], plan["seed"], plan["epochs"], plan["cores"],
           plan["memoryBytes"]))
    for s in [plan["source"]] + plan["stages"]:
        print("stage %s op=%s kind=%s loc=%d:%d parallelism=%d prefetch=%d "
              "cache=%s" % (s["name"], s["op"], s["kind"], s["loc"][0],
                            s["loc"][1], s["parallelism"], s["prefetch"],
                            json.dumps(s["cache"])))
        params = s["params"]
        assert params["t"] == "map", s["name"]
        print("  params" + "".join(
            " %s=%s%s" % (k, value(v), "" if "loc" in v else "*")
            for k, v in params["v"]))
        if s["kind"] != "source":
            print("  in " + record(s["inputType"]))
        print("  out " + record(s["outputType"]))
        for f in s.get("fused", []):
            print("  fused %s op=%s loc=%d:%d" % (f["name"], f["op"],
                                                f["loc"][0], f["loc"][1]))
            print("    params" + "".join(
                " %s=%s%s" % (k, value(v), "" if "loc" in v else "*")
                for k, v in f["params"]["v"]))


if __name__ == "__main__":
    main()
