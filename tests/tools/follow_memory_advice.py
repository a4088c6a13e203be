#!/usr/bin/env python3
"""Follows the runtime's memory advice and checks that it works, with and
without `schedule: auto`. Usage: follow_memory_advice.py SLUICE SPEC_TEMPLATE
WORKDIR BUFFER. SPEC_TEMPLATE holds @BUFFER@ (the shuffle buffer) and
@SCHEDULE@ (a `schedule:` line). Prints one line per run for FileCheck:

  fixed BUFFER: exit CODE [advice: lower shuffle.buffer to <= N]
  auto BUFFER: exit CODE
  fixed N: exit CODE
  auto N: exit CODE

A spec the fixed schedule runs must run under `schedule: auto` at the same
budget; when the fixed schedule is refused, its advice, followed, must run
with both."""
import os
import re
import subprocess
import sys

sluice, template, work, buffer = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
text = open(template).read()
env = dict(os.environ, SLUICE_NO_SCHEDULE_CACHE="1", NO_COLOR="1")


def run(buf, auto):
    spec = os.path.join(work, "spec-%d-%s.yaml" % (buf, "auto" if auto else "fixed"))
    with open(spec, "w") as f:
        f.write(text.replace("@BUFFER@", str(buf)).replace(
            "@SCHEDULE@", "schedule: auto" if auto else ""))
    r = subprocess.run([sluice, "run", spec, "-q"], capture_output=True,
                       text=True, env=env, timeout=600)
    advice = re.search(r"lower shuffle\.buffer to <= (\d+)", r.stderr)
    line = "%s %d: exit %d" % ("auto" if auto else "fixed", buf, r.returncode)
    if advice:
        line += " [advice: lower shuffle.buffer to <= %s]" % advice.group(1)
    print(line, flush=True)
    if r.returncode != 0 and not advice:
        sys.stderr.write(r.stderr)
    return r.returncode, int(advice.group(1)) if advice else None


code, n = run(buffer, False)
run(buffer, True)
if n is not None:
    run(n, False)
    run(n, True)
