"""Issue 17, item 1: every kind converges while the API fails.

kubesim fails 20 % of the operator's requests -- writes with 409, 429, 500, a connection
dropped before the request is served or after it (the write happened, the answer is lost),
reads with 429, 500 or a dropped connection -- and adds latency to half of them. A burst of
DevServers (standalone and distributed, each home retention policy), DevUsers (each deletion
policy), TrainingJobs and EphemeralAccelerationJobs (each artifacts TTL) must reach their
expected state; then each must own exactly what its fault-free twin owns (no duplicates), be
deleted, and leave exactly what its twin left (no leftovers); and no volume holding user data
may have gone without the user asking (tests/_data_safety.py, over everything kubesim
deleted).

``make test`` runs a small burst (one or two objects of a kind); ``make soak`` the full size of the
issue: 50 DevServers (40 standalone, 10 distributed), 10 DevUsers, 10 TrainingJobs and 10
EphemeralAccelerationJobs."""
from __future__ import annotations

import time

import pytest

from _workload import Burst, compare, object_duplicates, wait_settled
from _reliability import check_data_safety, new_runtime, start_sim

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SMALL = {"servers": 2, "distributed": 1, "users": 1, "trainingjobs": 1, "eajs": 1}
FULL = {"servers": 40, "distributed": 10, "users": 10, "trainingjobs": 10, "eajs": 10}
# Twins of every shape: 6 servers of each mode cover both retentions in the three kinds of
# namespace (a user's deleted with it, a user's kept, a plain one); users and volume TTLs both.
TWINS = {"servers": 6, "distributed": 6, "users": 2, "trainingjobs": 1, "eajs": 2}
FAULT_RATE = 0.2
WRITES = "create,update,patch,delete,deletecollection"
READS = "get,list,watch"


def inject_faults(sim) -> None:
    sim.faults.seed(17)
    sim.faults.add(verb=WRITES, fraction=FAULT_RATE, code=[409, 429, 500, "drop", "drop-after"])
    sim.faults.add(verb=READS, fraction=FAULT_RATE, code=[429, 500, "drop"])
    sim.faults.add(fraction=0.5, code=None, latency_ms=20)


@pytest.mark.parametrize("size", [
    pytest.param(SMALL, id="small", marks=pytest.mark.timeout(900)),
    pytest.param(FULL, id="full", marks=[pytest.mark.soak, pytest.mark.timeout(5400)]),
])
def test_every_kind_converges_under_api_faults(size, figures):
    sim = start_sim()
    try:
        with new_runtime(sim, max_concurrent_reconciles=3) as rt:
            # the twins: one object of each shape of the burst (a server's shape: its kind, its
            # retention, what becomes of its namespace), without faults
            twins = Burst(sim, "twin", **{k: min(v, TWINS[k]) for k, v in size.items()})
            twins.create()
            twins.wait_converged(600)
            alive = {p.shape: c for p, c in twins.censuses().items()}
            twins.delete()
            twins.wait_gone(300)
            wait_settled(sim, twins.namespaces, 300)
            kept = {p.shape: c for p, c in twins.censuses().items()}
            assert rt.wait_idle(120)

            inject_faults(sim)
            sim.reset_metrics()
            burst = Burst(sim, "rel", **size)
            started = time.monotonic()
            burst.create()
            converge_s = burst.wait_converged(3600, rt)
            owns = compare(burst.censuses(), alive, "what it owns")
            assert owns == [], "\n".join(owns) + "\n" + burst.explain(rt, owns)
            assert object_duplicates(sim, burst.namespaces) == []

            deleting = time.monotonic()
            burst.delete()
            delete_s = burst.wait_gone(1800)
            wait_settled(sim, burst.namespaces, 600)
            left = compare(burst.censuses(), kept, "what its deletion left")
            assert left == [], "\n".join(left) + "\n" + burst.explain(rt, left)
            injected = sim.faults.injected()
            metrics = sim.metrics()
            sim.faults.clear()
            counters = rt.counters()
        safety = check_data_safety(sim)
        figures("item 1: API faults", {
            "objects": {k: v for k, v in size.items()}, "converge_s": round(converge_s, 1),
            "delete_s": round(delete_s, 1), "total_s": round(time.monotonic() - started, 1),
            "settle_after_delete_s": round(time.monotonic() - deleting - delete_s, 1),
            "requests": metrics["total"], "faults_injected": injected,
            "fault_fraction": round(sum(v for k, v in injected.items() if k != "latency") / max(metrics["total"], 1), 3),
            "reconciles": {k: {"ok": v["succeeded"], "failed": v["failed"]} for k, v in counters.items()},
            "duplicates": 0, "leftovers": 0, "user_volumes_deleted": safety["by_consent"],
            "wrongly_deleted_volumes": safety["violations"]})
    finally:
        sim.stop()

