"""Issue 26.5: a DevServer that Kueue evicts (plugins/module_utils/eviction.py server_evictions,
server_usage_reservation; usage.usage_record and usage_record_name with evictions;
devserver_status's Evicted condition and fields; status_events' one Warning Event)."""
from __future__ import annotations

import pytest

from ansible_collections.torchdev.operator.plugins.module_utils import devserver_status as ds
from ansible_collections.torchdev.operator.plugins.module_utils import eviction as ev
from ansible_collections.torchdev.operator.plugins.module_utils import usage

T0, T1, T2, T3 = "2026-11-27T10:00:00Z", "2026-11-27T11:00:00Z", "2026-11-27T11:30:00Z", "2026-11-27T12:00:00Z"
EXPIRES = "2026-11-27T18:00:00Z"
KUEUE_SAID = ("Preempted to accommodate a workload (UID: u1, JobUID: j1) due to prioritization in the "
              "ClusterQueue; preemptor path: /cq; preemptee path: /cq")


def workload(evicted=None, preempted=None):
    conds = []
    if evicted:
        conds.append(dict({"type": "Evicted"}, **evicted))
    if preempted:
        conds.append(dict({"type": "Preempted"}, **preempted))
    return {"metadata": {"name": "statefulset-box"}, "status": {"conditions": conds}}


EVICTED_AT_T1 = workload({"status": "True", "reason": "Preempted", "lastTransitionTime": T1, "message": "Preempted"},
                         {"status": "True", "reason": "InClusterQueue", "lastTransitionTime": T1, "message": KUEUE_SAID})
READMITTED_AT_T2 = workload(
    {"status": "False", "reason": "QuotaReserved", "lastTransitionTime": T2, "message": "Previously: Preempted"},
    {"status": "False", "reason": "QuotaReserved", "lastTransitionTime": T2, "message": "Previously: Preempted"})
ADMITTED = workload()


def server(reservation=None, **status):
    status = dict(status)
    if reservation is not None:
        status["reservation"] = reservation
    return {"apiVersion": "torchdev.io/v1alpha1", "kind": "DevServer",
            "metadata": {"name": "box", "namespace": "dev-jane", "generation": 1, "creationTimestamp": T0},
            "spec": {"owner": "jane@example.com", "flavor": "gpu-a10g-1", "replicas": 1}, "status": status}


RUNNING = {"startedAt": T0, "expiresAt": EXPIRES, "queuedAt": T0}
EVICTED_STATUS = {"evictions": 1, "lastEvictionTime": T1, "lastEvictionReason": "Preempted"}
READMITTED_STATUS = {"evictions": 1, "lastEvictionTime": T1, "lastEvictionReason": "Preempted", "usageStartTime": T2}

# (id, DevServer, kueue, expected: the decision's ledger fields and whether it is evicted now)
CASES = [
    ("never-evicted", server(RUNNING), {"workload": ADMITTED},
     {"evictions": None, "lastEvictionTime": None, "lastEvictionReason": None, "usageStartTime": None}, False),
    ("no-kueue", server(RUNNING), None,
     {"evictions": None, "lastEvictionTime": None, "lastEvictionReason": None, "usageStartTime": None}, False),
    ("evicted-now", server(RUNNING), {"workload": EVICTED_AT_T1},
     {"evictions": 1, "lastEvictionTime": T1, "lastEvictionReason": "Preempted", "usageStartTime": None}, True),
    ("still-evicted-counts-once", server(RUNNING, **EVICTED_STATUS), {"workload": EVICTED_AT_T1},
     {"evictions": 1, "lastEvictionTime": T1, "lastEvictionReason": "Preempted", "usageStartTime": None}, True),
    ("readmitted", server(RUNNING, **EVICTED_STATUS), {"workload": READMITTED_AT_T2},
     {"evictions": 1, "lastEvictionTime": T1, "lastEvictionReason": "Preempted", "usageStartTime": T2}, False),
    ("readmitted-stays", server(RUNNING, **READMITTED_STATUS), {"workload": READMITTED_AT_T2},
     {"evictions": 1, "lastEvictionTime": T1, "lastEvictionReason": "Preempted", "usageStartTime": T2}, False),
    ("evicted-before-the-reservation-started", server(None), {"workload": EVICTED_AT_T1},
     {"evictions": 1, "lastEvictionTime": T1, "lastEvictionReason": "Preempted", "usageStartTime": None}, True),
    ("a-new-reservation-starts-its-own-record", server(dict(RUNNING, startedAt=T3), **READMITTED_STATUS),
     {"workload": ADMITTED},
     {"evictions": 1, "lastEvictionTime": T1, "lastEvictionReason": "Preempted", "usageStartTime": None}, False),
    ("ended-reservation-has-no-usage-start", server(dict(RUNNING, endedAt=T3, endReason="Expired"), **READMITTED_STATUS),
     {"workload": ADMITTED},
     {"evictions": 1, "lastEvictionTime": T1, "lastEvictionReason": "Preempted", "usageStartTime": None}, False),
    ("hostile-status-values-are-dropped", server(RUNNING, evictions="9", lastEvictionTime="{{ lookup('pipe','id') }}",
                                                 lastEvictionReason="not a reason!", usageStartTime=7),
     {"workload": ADMITTED},
     {"evictions": None, "lastEvictionTime": None, "lastEvictionReason": None, "usageStartTime": None}, False),
]


@pytest.mark.parametrize("cr,kueue,want,evicted_now", [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_server_evictions(cr, kueue, want, evicted_now):
    got = ev.server_evictions(cr, kueue)
    assert {k: got.get(k) for k in ev.SERVER_EVICTION_FIELDS} == want
    assert bool(got.get("eviction")) == evicted_now
    if evicted_now:
        assert got["eviction"]["reason"] == "Preempted" and "prioritization" in got["eviction"]["message"]


def test_the_reservation_this_run_decided_wins_over_the_status():
    """lifecycle.yml may start a new reservation (or end one) in this run: its record starts at
    its own startedAt, and usageStartTime of the last one is not written again."""
    cr = server(RUNNING, **READMITTED_STATUS)
    assert ev.server_evictions(cr, {"workload": READMITTED_AT_T2}, dict(RUNNING, startedAt=T3))["usageStartTime"] is None
    assert ev.server_evictions(cr, {"workload": ADMITTED}, dict(RUNNING, endedAt=T3, endReason="Stopped"))[
        "usageStartTime"] is None
    assert ev.server_evictions(cr, {"workload": READMITTED_AT_T2}, RUNNING)["usageStartTime"] == T2


def test_an_eviction_and_readmission_between_two_reconciles_closes_the_record_at_the_readmission():
    got = ev.server_evictions(server(RUNNING), {"workload": READMITTED_AT_T2})
    assert got["closeUsage"] == {"startedAt": T0, "endedAt": T2, "endReason": "Preempted"}
    assert got["evictions"] == 1 and got["usageStartTime"] == T2


# (id, reservation, evictions, expected reservation for the usage record)
RESERVATIONS = [
    ("no-evictions", RUNNING, None, RUNNING),
    ("evicted: closed at the eviction", RUNNING, ev.server_evictions(server(RUNNING), {"workload": EVICTED_AT_T1}),
     dict(RUNNING, endedAt=T1, endReason="Preempted")),
    ("readmitted: the admission's own start", RUNNING,
     ev.server_evictions(server(RUNNING, **EVICTED_STATUS), {"workload": READMITTED_AT_T2}),
     dict(RUNNING, startedAt=T2, queuedAt=T1)),
    ("readmitted then expired", dict(RUNNING, endedAt=T3, endReason="Expired"),
     ev.server_evictions(server(RUNNING, **READMITTED_STATUS), {"workload": ADMITTED}),
     dict(RUNNING, startedAt=T2, queuedAt=T1, endedAt=T3, endReason="Expired")),
    ("expired while evicted: closed at the eviction", dict(RUNNING, endedAt=T3, endReason="Expired"),
     ev.server_evictions(server(RUNNING), {"workload": EVICTED_AT_T1}),
     dict(RUNNING, endedAt=T1, endReason="Preempted")),
    ("closed late", RUNNING, ev.server_evictions(server(RUNNING), {"workload": READMITTED_AT_T2}),
     dict(RUNNING, endedAt=T2, endReason="Preempted")),
    ("no reservation", None, {"usageStartTime": T2}, None),
]


@pytest.mark.parametrize("reservation,evictions,want", [pytest.param(*c[1:], id=c[0]) for c in RESERVATIONS])
def test_server_usage_reservation(reservation, evictions, want):
    assert ev.server_usage_reservation(reservation, evictions) == want


FLAVOR = {"gpu": {"count": 1, "type": "a10g"}, "pricePerHour": "1.0000"}


def test_the_usage_records_of_an_eviction_and_a_readmission():
    """The record of the first admission closes at the eviction (1 GPU-hour, Preempted); after
    the readmission the next record is named after it and open; the record name observe.yml
    reads follows status.usageStartTime."""
    first = usage.usage_record(server(RUNNING), None, FLAVOR, now=T1, user="jane@example.com",
                               evictions=ev.server_evictions(server(RUNNING), {"workload": EVICTED_AT_T1}))
    assert first["name"] == usage.record_name("box", T0)
    assert first["spec"]["endedAt"] == T1 and first["spec"]["endReason"] == "Preempted"
    assert first["spec"]["gpuHours"] == "1.0000"
    cr = server(RUNNING, **EVICTED_STATUS)
    second = usage.usage_record(cr, None, FLAVOR, now=T2, user="jane@example.com",
                                evictions=ev.server_evictions(cr, {"workload": READMITTED_AT_T2}))
    assert second["name"] == usage.record_name("box", T2) != first["name"]
    assert second["spec"]["startedAt"] == T2 and second["spec"]["queuedAt"] == T1 and "endedAt" not in second["spec"]
    assert usage.usage_record_name(server(RUNNING, **READMITTED_STATUS)) == second["name"]
    assert usage.usage_record_name(server(RUNNING, **EVICTED_STATUS)) == first["name"]
    # deleted after the readmission (finalize.yml: no Workload read): the second record closes
    deleted = server(RUNNING, **READMITTED_STATUS)
    deleted["metadata"]["deletionTimestamp"] = T3
    closed = usage.usage_record(deleted, None, FLAVOR, now=T3, user="jane@example.com",
                                evictions=ev.server_evictions(deleted, None))
    assert closed["name"] == second["name"] and closed["spec"]["endReason"] == "Deleted"
    assert closed["spec"]["gpuHours"] == "0.5000"


def _status(cr, evictions, queue=None):
    return ds.devserver_status(cr, None, 1, "hash", now=T2, pods=[], queue=queue, evictions=evictions)


def _cond(status, ctype):
    return next((c for c in status["conditions"] if c["type"] == ctype), None)


def test_the_status_of_an_evicted_server_says_why_and_where_it_waits():
    queue = {"admitted": False, "name": "torchdev", "clusterQueue": "cq-jane", "position": 2,
             "message": "waiting for quota"}
    st = _status(server(RUNNING), ev.server_evictions(server(RUNNING), {"workload": EVICTED_AT_T1}), queue)
    assert st["phase"] == "Queued"
    cond = _cond(st, "Evicted")
    assert cond["status"] == "True" and cond["reason"] == "Preempted"
    assert "prioritization in the ClusterQueue" in cond["message"] and "ClusterQueue cq-jane at position 2" in cond["message"]
    assert "same home volume" in cond["message"]
    assert (st["evictions"], st["lastEvictionTime"], st["lastEvictionReason"]) == (1, T1, "Preempted")
    assert ds.status_events({}, st) == [{"reason": "Preempted", "message": cond["message"]}]
    # the next reconcile, still evicted: no second Event
    assert ds.status_events(st, _status(server(RUNNING, **st), ev.server_evictions(
        server(RUNNING, **EVICTED_STATUS), {"workload": EVICTED_AT_T1}), queue)) == []


def test_readmitted_the_condition_turns_false():
    st = _status(server(RUNNING, **EVICTED_STATUS),
                 ev.server_evictions(server(RUNNING, **EVICTED_STATUS), {"workload": READMITTED_AT_T2}))
    cond = _cond(st, "Evicted")
    assert cond["status"] == "False" and cond["reason"] == "Readmitted" and "after 1 eviction" in cond["message"]
    assert st["usageStartTime"] == T2 and ds.status_events({}, st) == []


def test_a_server_never_evicted_has_no_evicted_condition_and_no_fields():
    st = _status(server(RUNNING), ev.server_evictions(server(RUNNING), {"workload": ADMITTED}))
    assert _cond(st, "Evicted") is None
    assert st["evictions"] is None and st["lastEvictionTime"] is None and st["usageStartTime"] is None


@pytest.mark.parametrize("hostile", [None, 7, "x", [], {"status": "nope"}, {"status": {"conditions": "no"}},
                                     {"status": {"conditions": [None, 3, {"type": "Evicted", "status": "True"}]}},
                                     {"status": {"conditions": [{"type": "Evicted", "status": "True",
                                                                 "lastTransitionTime": "never", "reason": 5}]}}])
def test_hostile_workloads_never_raise(hostile):
    got = ev.server_evictions(server(RUNNING), {"workload": hostile})
    assert got["usageStartTime"] is None and not got.get("eviction")
    assert ev.server_usage_reservation(RUNNING, got) == RUNNING
