"""Table-driven tests of a TrainingJob that Kueue evicts (issue 26 item 5): the decision
(plugins/module_utils/trainingjob_status.py decide: Queued while evicted, each eviction counted
once, the usage of each admission), the Evicted condition and status fields, the one Warning
Event per eviction, and the operator's record (ledger) of a run never evicted left as it was.

The Workloads are what Kueue v0.19.2 writes (pkg/workload/evict/evict.go SetEvictedCondition,
pkg/scheduler/preemption/preemption.go preemptionMessage, pkg/workload/workload.go
resetActiveCondition: Evicted and Preempted turn False, reason QuotaReserved, message
"Previously: ...", when it admits the Workload again)."""

import json

import pytest

from ansible_collections.torchdev.operator.plugins.module_utils import trainingjob_status as ts
from ansible_collections.torchdev.operator.plugins.module_utils.constants import TRAINING_RUN_ANNOTATION

NOW = "2026-01-01T00:10:00Z"
START = "2026-01-01T00:01:00Z"      # the Job first started
EVICTED = "2026-01-01T00:05:00Z"    # Kueue evicted it
AGAIN = "2026-01-01T00:07:00Z"      # Kueue admitted it again
EVICTED_2 = "2026-01-01T00:09:00Z"  # and evicted it again
PREEMPTION = ("Preempted to accommodate a workload (UID: wl-2, JobUID: job-2) due to prioritization in the "
              "ClusterQueue; preemptor path: /team-a; preemptee path: /team-a")


def _tj(ledger=None, status=None):
    meta = {"name": "t", "namespace": "ns", "generation": 3}
    if ledger is not None:
        meta["annotations"] = {TRAINING_RUN_ANNOTATION: json.dumps(ledger)}
    return {"metadata": meta, "spec": {"model": "m", "dataset": "d", "numWorkers": 2, "gpusPerWorker": 4},
            "status": status or {}}


def _job(suspend=False, **status):
    return {"metadata": {"name": "t", "uid": "j1", "annotations": {"torchdev.io/attempt": "0"}},
            "spec": {"suspend": suspend}, "status": dict(status)}


def _cond(ctype, status, reason, message, when):
    return {"type": ctype, "status": status, "reason": reason, "message": message, "lastTransitionTime": when}


def _wl(*conds):
    return {"workload": {"metadata": {"name": "job-t-1a2b3", "ownerReferences": [{"uid": "j1"}]},
                         "status": {"conditions": list(conds)}}}


# What Kueue's Workload says at each step
PREEMPTED_NOW = _wl(_cond("QuotaReserved", "False", "Preempted", PREEMPTION, EVICTED),
                    _cond("Evicted", "True", "Preempted", PREEMPTION, EVICTED),
                    _cond("Preempted", "True", "InClusterQueue", PREEMPTION, EVICTED),
                    _cond("Requeued", "True", "Preempted", PREEMPTION, EVICTED))
TIMED_OUT = _wl(_cond("Evicted", "True", "PodsReadyTimeout",
                      "Exceeded the PodsReady timeout default/job-t-1a2b3", EVICTED))
ADMITTED_AGAIN = _wl(_cond("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue team-a", AGAIN),
                     _cond("Admitted", "True", "Admitted", "The workload is admitted", AGAIN),
                     _cond("Evicted", "False", "QuotaReserved", "Previously: " + PREEMPTION, AGAIN),
                     _cond("Preempted", "False", "QuotaReserved", "Previously: " + PREEMPTION, AGAIN))
PREEMPTED_AGAIN = _wl(_cond("Evicted", "True", "Preempted", PREEMPTION, EVICTED_2),
                      _cond("Preempted", "True", "InCohortReclamation", PREEMPTION, EVICTED_2))

RUNNING = {"state": "Running", "restartCount": 0, "startTime": START}
COUNTED = dict(RUNNING, state="Queued", evictions=1, lastEvictionTime=EVICTED, lastEvictionReason="Preempted")
READMITTED = dict(COUNTED, state="Running", usageStartTime=AGAIN)

CASES = [
    # (name, ledger, job, kueue, expected subset of the decision)
    ("never evicted: one open record from the first start", RUNNING, _job(active=2, ready=2, startTime=START), _wl(),
     {"state": "Running", "evictions": 0, "eviction": None, "usage": {"startedAt": START}}),
    ("preempted: Queued, counted, the record closed at the eviction", RUNNING, _job(suspend=True), PREEMPTED_NOW,
     {"state": "Queued", "run": True, "requeue": None, "evictions": 1, "lastEvictionTime": EVICTED,
      "lastEvictionReason": "Preempted",
      "usage": {"startedAt": START, "endedAt": EVICTED, "endReason": "Preempted"}}),
    ("evicted but not yet suspended: Queued already", RUNNING, _job(active=2, ready=2, startTime=START), PREEMPTED_NOW,
     {"state": "Queued", "evictions": 1, "requeue": None}),
    ("the same eviction is counted once", COUNTED, _job(suspend=True), PREEMPTED_NOW,
     {"state": "Queued", "evictions": 1, "lastEvictionTime": EVICTED,
      "usage": {"startedAt": START, "endedAt": EVICTED, "endReason": "Preempted"}}),
    ("another reason: endReason Evicted", RUNNING, _job(suspend=True), TIMED_OUT,
     {"state": "Queued", "evictions": 1, "lastEvictionReason": "PodsReadyTimeout",
      "usage": {"startedAt": START, "endedAt": EVICTED, "endReason": "Evicted"}}),
    ("admitted again: a new record from the readmission", COUNTED, _job(active=2, ready=2, startTime=AGAIN),
     ADMITTED_AGAIN,
     {"state": "Running", "evictions": 1, "eviction": None, "usageStartTime": AGAIN, "startTime": START,
      "usage": {"startedAt": AGAIN}}),
    ("admitted again, recorded: nothing changes", READMITTED, _job(active=2, ready=2, startTime=AGAIN), ADMITTED_AGAIN,
     {"state": "Running", "evictions": 1, "usageStartTime": AGAIN, "usage": {"startedAt": AGAIN}}),
    ("evicted again: the second record closed", READMITTED, _job(suspend=True), PREEMPTED_AGAIN,
     {"state": "Queued", "evictions": 2, "lastEvictionTime": EVICTED_2,
      "usage": {"startedAt": AGAIN, "endedAt": EVICTED_2, "endReason": "Preempted"}}),
    # the operator missed the eviction and the readmission (it was down): the open record is
    # closed at the readmission, the eviction counted, and the next record starts there
    ("a missed eviction closes the open record", RUNNING, _job(active=2, ready=2, startTime=AGAIN), ADMITTED_AGAIN,
     {"state": "Running", "evictions": 1, "lastEvictionTime": AGAIN, "lastEvictionReason": "Preempted",
      "usageStartTime": AGAIN, "usage": {"startedAt": START, "endedAt": AGAIN, "endReason": "Preempted"}}),
    ("after a missed eviction: the next record opens",
     dict(RUNNING, evictions=1, lastEvictionTime=AGAIN, lastEvictionReason="Preempted", usageStartTime=AGAIN),
     _job(active=2, ready=2, startTime=AGAIN), ADMITTED_AGAIN,
     {"state": "Running", "evictions": 1, "usage": {"startedAt": AGAIN}}),
    ("completed after a readmission: the last record closed", READMITTED,
     _job(startTime=AGAIN, conditions=[{"type": "Complete", "status": "True"}]), ADMITTED_AGAIN,
     {"state": "Completed", "usage": {"startedAt": AGAIN, "endedAt": NOW, "endReason": "Succeeded"}}),
    ("evicted before it ever started: counted, no record", {"state": "Queued"}, _job(suspend=True), PREEMPTED_NOW,
     {"state": "Queued", "evictions": 1, "usage": None}),
    ("no Kueue: as before", RUNNING, _job(active=2, ready=2, startTime=START), None,
     {"state": "Running", "evictions": 0, "usage": {"startedAt": START}}),
]


@pytest.mark.parametrize("ledger,job,kueue,want", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_decide_evictions(ledger, job, kueue, want):
    got = ts.decide(_tj(ledger), job, [], NOW, backoff_base=10, watch_period=30, kueue=kueue)
    assert {k: got[k] for k in want} == want, got


def test_a_deadline_still_counts_while_evicted():
    tj = _tj(RUNNING)
    tj["spec"]["failurePolicy"] = {"activeDeadlineSeconds": 900}
    got = ts.decide(tj, _job(suspend=True), [], NOW, kueue=PREEMPTED_NOW)
    assert (got["state"], got["requeue"]) == ("Queued", 360.0)  # started 00:01, now 00:10: 6 minutes left


@pytest.mark.parametrize("workload,want", [
    (PREEMPTED_NOW["workload"], {"reason": "Preempted", "message": PREEMPTION, "time": EVICTED,
                                 "preemption": "InClusterQueue"}),
    (TIMED_OUT["workload"], {"reason": "PodsReadyTimeout", "message": "Exceeded the PodsReady timeout default/job-t-1a2b3",
                             "time": EVICTED, "preemption": None}),
    # Kueue's reason with a cause (patching.ReasonWithCause)
    (_wl(_cond("Evicted", "True", "DeactivatedDueToRequeuingLimitExceeded", "m", EVICTED))["workload"],
     {"reason": "DeactivatedDueToRequeuingLimitExceeded", "message": "m", "time": EVICTED, "preemption": None}),
    # a reason the condition pattern refuses, a message with control characters
    (_wl(_cond("Evicted", "True", "no such reason!", "a\nb\x00c", EVICTED))["workload"],
     {"reason": "Evicted", "message": "a b c", "time": EVICTED, "preemption": None}),
    (ADMITTED_AGAIN["workload"], None),
    (_wl(_cond("Evicted", "True", "Preempted", "m", "yesterday"))["workload"], None),  # no time: no key
    (None, None), ({"status": {"conditions": "x"}}, None), ("workload", None),
])
def test_workload_eviction(workload, want):
    assert ts.workload_eviction(workload) == want


@pytest.mark.parametrize("workload,want", [
    (ADMITTED_AGAIN["workload"], {"time": AGAIN, "reason": "Preempted"}),
    (_wl(_cond("Evicted", "False", "QuotaReserved", "Previously: Exceeded the PodsReady timeout", AGAIN))["workload"],
     {"time": AGAIN, "reason": "Evicted"}),
    (PREEMPTED_NOW["workload"], None),
    (_wl(_cond("Evicted", "False", "QuotaReserved", "never evicted", AGAIN))["workload"], None),
    (None, None), ([], None),
])
def test_workload_readmission(workload, want):
    assert ts.workload_readmission(workload) == want


QUEUE = {"name": "default", "clusterQueue": "team-a", "position": 3, "admitted": False,
         "message": "waiting for quota in ClusterQueue team-a at position 3"}
CHECKPOINT = {"path": "/checkpoints/epoch-0004", "epoch": 4}


@pytest.mark.parametrize("decision,queue,checkpoint,want", [
    ({"evictions": 0}, QUEUE, CHECKPOINT, None),
    ({"evictions": 1, "eviction": {"reason": "Preempted", "message": PREEMPTION, "time": EVICTED}}, QUEUE, CHECKPOINT,
     {"type": "Evicted", "status": "True", "reason": "Preempted", "observedGeneration": 3,
      "message": "evicted by Kueue (Preempted): " + PREEMPTION + "; re-queued in ClusterQueue team-a at position 3; it "
                 "resumes from its newest checkpoint (/checkpoints/epoch-0004) when admitted again"}),
    ({"evictions": 1, "eviction": {"reason": "PodsReadyTimeout", "time": EVICTED,
                                   "message": "Exceeded the PodsReady timeout default/job-t-1a2b3"}}, {"name": "default"}, None,
     {"type": "Evicted", "status": "True", "reason": "PodsReadyTimeout", "observedGeneration": 3,
      "message": "evicted by Kueue (PodsReadyTimeout): Exceeded the PodsReady timeout default/job-t-1a2b3; re-queued in "
                 "LocalQueue default; it resumes from its newest checkpoint when admitted again"}),
    ({"evictions": 1, "eviction": {"reason": "Deactivated", "message": "", "time": EVICTED}}, QUEUE, CHECKPOINT,
     {"type": "Evicted", "status": "True", "reason": "Deactivated", "observedGeneration": 3,
      "message": "evicted by Kueue (Deactivated); the Workload is inactive (spec.active false): it is not queued until "
                 "it is active again; it resumes from its newest checkpoint (/checkpoints/epoch-0004) when admitted "
                 "again"}),
    ({"evictions": 2, "lastEvictionTime": EVICTED_2, "lastEvictionReason": "Preempted"}, None, None,
     {"type": "Evicted", "status": "False", "reason": "Readmitted", "observedGeneration": 3,
      "message": "admitted again after 2 evictions; the last at %s (Preempted)" % EVICTED_2}),
])
def test_evicted_condition(decision, queue, checkpoint, want):
    assert ts.evicted_condition(decision, queue, checkpoint, 3) == want


def _status(ledger, job, kueue, queue=QUEUE, library=None):
    tj = _tj(ledger, library)
    decision = ts.decide(tj, job, [], NOW, kueue=kueue)
    return ts.status(tj, decision, job, queue)


def test_status_while_evicted_and_after():
    evicted = _status(RUNNING, _job(suspend=True), PREEMPTED_NOW, library={"latestCheckpoint": CHECKPOINT})
    assert (evicted["state"], evicted["evictions"], evicted["lastEvictionTime"], evicted["lastEvictionReason"]) == \
        ("Queued", 1, EVICTED, "Preempted")
    assert evicted["queue"] == QUEUE
    conds = {c["type"]: c for c in evicted["conditions"]}
    assert (conds["Running"]["reason"], conds["Running"]["message"]) == ("Queued", QUEUE["message"])
    assert (conds["Evicted"]["status"], conds["Evicted"]["reason"]) == ("True", "Preempted")
    assert conds["Evicted"]["message"].endswith("(/checkpoints/epoch-0004) when admitted again")
    again = _status(COUNTED, _job(active=2, ready=2, startTime=AGAIN), ADMITTED_AGAIN, queue=None)
    conds = {c["type"]: c for c in again["conditions"]}
    assert (again["state"], again["evictions"]) == ("Running", 1)
    assert (conds["Evicted"]["status"], conds["Evicted"]["reason"]) == ("False", "Readmitted")


def test_a_run_never_evicted_has_no_eviction_fields():
    st = _status(RUNNING, _job(active=2, ready=2, startTime=START), _wl(), queue=None)
    assert (st["evictions"], st["lastEvictionTime"], st["lastEvictionReason"]) == (None, None, None)
    assert [c["type"] for c in st["conditions"]] == ["Running", "Succeeded", "Failed", "Degraded"]


def test_one_event_per_eviction():
    first = _status(RUNNING, _job(suspend=True), PREEMPTED_NOW)
    event = ts.eviction_event({"state": "Running"}, first)
    assert event["reason"] == "Preempted" and event["message"].startswith("evicted by Kueue (Preempted): Preempted to")
    assert ts.eviction_event(first, _status(COUNTED, _job(suspend=True), PREEMPTED_NOW)) is None  # the same eviction
    timed_out = _status(RUNNING, _job(suspend=True), TIMED_OUT)
    assert ts.eviction_event({}, timed_out)["reason"] == "Evicted"
    second = _status(READMITTED, _job(suspend=True), PREEMPTED_AGAIN)
    assert ts.eviction_event(first, second)["reason"] == "Preempted"  # a new eviction
    assert ts.eviction_event(first, _status(COUNTED, _job(active=2), ADMITTED_AGAIN, queue=None)) is None
    assert ts.eviction_event(None, "x") is None


def test_the_record_of_a_run_never_evicted_is_unchanged():
    """Existing TrainingJobs' annotation (and so their objects) do not change with this version."""
    decision = ts.decide(_tj(RUNNING), _job(active=2, ready=2, startTime=START), [], NOW, kueue=_wl())
    assert ts.ledger_of(decision) == RUNNING


def test_the_record_keeps_the_evictions():
    decision = ts.decide(_tj(COUNTED), _job(active=2, ready=2, startTime=AGAIN), [], NOW, kueue=ADMITTED_AGAIN)
    patch = ts.ledger_patch(_tj(COUNTED), decision)
    back = ts.ledger({"metadata": patch["metadata"]})
    assert back == READMITTED
    # written once: the next reconcile finds the record it would write
    assert ts.ledger_patch({"metadata": patch["metadata"]}, decision) == {}
    # a forged or broken count is dropped, not trusted
    assert "evictions" not in ts.ledger(_tj(dict(COUNTED, evictions=-1)))
    assert "evictions" not in ts.ledger(_tj(dict(COUNTED, evictions=True)))
