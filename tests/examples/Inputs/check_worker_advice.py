"""Checks the `workers` entries of `sluice tune --demand` reports against
their own figures (tune-workers.test): the first report's demand is met by
the local cores, the second's needs remote workers."""
import json
import math
import sys

low, high = (json.load(open(p)) for p in sys.argv[1:3])
for r in (low, high):
    w = r["workers"]
    demand = w["demand_records_per_second"]
    local = w["local_records_per_second"]
    worker = w["worker_records_per_second"]
    assert w["demand_from"] == "--demand", w
    assert local > 0 and worker > 0, w
    # The local share is the tuned schedule's prediction for the budget.
    assert math.isclose(local, r["predicted"]["records_per_second"],
                        rel_tol=1e-9), (local, r["predicted"])
    want = 0 if demand <= local else math.ceil((demand - local) / worker)
    assert w["remote_workers"] == want, (w, want)
    assert w["workers_without_local"] == math.ceil(demand / worker), w
    cpu = (r["measured"] or {}).get("cpu_seconds_per_record") \
        or r["profile_cpu_seconds_per_record"]
    assert math.isclose(w["cpu_cores"], demand * cpu, rel_tol=1e-6), (w, cpu)
    # The output bytes per record come from the profile's last step, which
    # a short probe on a loaded host may see no output of: then the advice
    # leaves the network out rather than say 0 bytes.
    assert w["wire_bytes_per_record"] >= 0, w
    assert ("cross the network" in w["advice"]) == \
        (w["wire_bytes_per_record"] > 0), w
    assert w["advice"], w
assert low["workers"]["remote_workers"] == 0, low["workers"]
assert low["workers"]["cores_per_worker"] == 2
assert low["workers"]["worker_records_per_second"] == \
    low["workers"]["local_records_per_second"]
h = high["workers"]
assert h["remote_workers"] >= 1 and h["cores_per_worker"] == 1, h
# One core makes no more than two (the solver's optimum over a subset).
assert h["worker_records_per_second"] <= \
    h["local_records_per_second"] * 1.01, h
print("worker advice ok:", low["workers"]["remote_workers"],
      h["remote_workers"])
