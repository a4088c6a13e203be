"""Checks the `workers` entries of `sluice tune --demand` reports against
their own figures (tune-workers.test): the first report's demand is met by
the local cores; the second's needs remote workers and receiving is free
(--receive-cost 0); the third's needs remote workers whose outputs cost the
trainer's cores to receive; the fourth's cannot be received at all."""
import json
import math
import sys

low, high, recv, full = (json.load(open(p)) for p in sys.argv[1:5])
for r in (low, high, recv, full):
    w = r["workers"]
    demand = w["demand_records_per_second"]
    local = w["local_records_per_second"]
    worker = w["worker_records_per_second"]
    cores = w["local_cores"]
    assert w["demand_from"] == "--demand", w
    assert local > 0 and worker > 0, w
    # The local share is the tuned schedule's prediction for the budget.
    assert math.isclose(local, r["predicted"]["records_per_second"],
                        rel_tol=1e-9), (local, r["predicted"])
    # Receiving: the record's output bytes at the cost per byte.
    per_byte = w["receive_seconds_per_byte"]
    rcv = w["receive_seconds_per_record"]
    assert per_byte >= 0, w
    assert math.isclose(rcv, w["wire_bytes_per_record"] * per_byte,
                        rel_tol=1e-9, abs_tol=1e-30), w
    if rcv > 0:
        assert math.isclose(w["receive_limit_records_per_second"],
                            cores / rcv, rel_tol=1e-9), w
    # The split: remote X, the local worker L (1 - X r / c) on the cores
    # receiving leaves it; together the demand.
    if demand <= local:
        x = 0
    elif demand * rcv > cores or local * rcv >= cores:
        x = demand
    else:
        x = min(demand, (demand - local) / (1 - local * rcv / cores))
    assert math.isclose(w["remote_records_per_second"], x, rel_tol=1e-9,
                        abs_tol=1e-9), (w, x)
    if 0 < x < demand:
        made_here = local * (1 - x * rcv / cores)
        assert math.isclose(made_here + x, demand, rel_tol=1e-9), (w, x)
    assert math.isclose(w["receive_cores"], x * rcv, rel_tol=1e-9,
                        abs_tol=1e-12), w
    assert w["remote_workers"] == (math.ceil(x / worker) if x > 0 else 0), \
        (w, x)
    assert w["workers_without_local"] == math.ceil(demand / worker), w
    cpu = (r["measured"] or {}).get("cpu_seconds_per_record") \
        or r["profile_cpu_seconds_per_record"]
    assert math.isclose(w["cpu_cores"], demand * cpu, rel_tol=1e-6), (w, cpu)
    # The output bytes per record come from the profile's last step, which
    # a short probe on a loaded host may see no output of: then the advice
    # leaves the network (and receiving) out rather than say 0 bytes.
    assert w["wire_bytes_per_record"] >= 0, w
    assert ("cross the network" in w["advice"]) == \
        (w["wire_bytes_per_record"] > 0), w
    assert w["advice"], w
assert low["workers"]["remote_workers"] == 0, low["workers"]
assert low["workers"]["cores_per_worker"] == 2
assert low["workers"]["worker_records_per_second"] == \
    low["workers"]["local_records_per_second"]
if low["workers"]["wire_bytes_per_record"] > 0:
    # Modelled on this host: a memcpy's cost, never free.
    assert low["workers"]["receive_seconds_per_byte"] > 0, low["workers"]
h = high["workers"]
assert h["remote_workers"] >= 1 and h["cores_per_worker"] == 1, h
assert h["receive_seconds_per_byte"] == 0 and h["receive_cores"] == 0, h
# Receiving free: the remote workers make exactly what the local cores do
# not.
assert math.isclose(h["remote_records_per_second"],
                    h["demand_records_per_second"] -
                    h["local_records_per_second"], rel_tol=1e-9), h
# One core makes no more than two (the solver's optimum over a subset).
assert h["worker_records_per_second"] <= \
    h["local_records_per_second"] * 1.01, h
x = recv["workers"]
if x["wire_bytes_per_record"] > 0:
    # Receiving costs cores here, so the remote workers make more than
    # the local cores' shortfall.
    assert x["receive_cores"] > 0, x
    assert x["remote_records_per_second"] > \
        x["demand_records_per_second"] - x["local_records_per_second"], x
f = full["workers"]
if f["wire_bytes_per_record"] > 0:
    assert f["remote_records_per_second"] == f["demand_records_per_second"]
    assert "more than the 2 cores" in f["advice"], f
print("worker advice ok:", low["workers"]["remote_workers"],
      h["remote_workers"], x["remote_workers"], f["remote_workers"])
