"""A TrainingJob's status can be patched by its trainer token (issue 25.7): what the operator
decides -- the state, the restarts, the deadline -- must not change with what that token
writes there.  The operator's record of the run is the annotation torchdev.io/run
(trainingjob_status.ledger), which a status patch cannot touch.

Each case: a run as the operator recorded it (the annotation, and the status as the operator
wrote it), the live Job, and a forged status (every field the trainer token could write) --
the decision must be the one the honest status gives."""
import json

import pytest

from ansible_collections.torchdev.operator.plugins.module_utils import trainingjob_status as ts
from ansible_collections.torchdev.operator.plugins.module_utils.constants import TRAINING_RUN_ANNOTATION

NOW = "2026-01-01T01:00:00Z"
FUTURE = "2999-12-31T23:59:59Z"
DECIDES = ("run", "state", "reason", "restartCount", "attempt", "startTime", "lastRestartTime", "completionTime",
           "failureReason", "requeue")


def tj(record, forged=None, **spec):
    body = {"model": "m", "dataset": "d", "numWorkers": 2, "gpusPerWorker": 1,
            "failurePolicy": {"backoffLimit": 3, "activeDeadlineSeconds": 3600}}
    body.update(spec)
    honest = dict(record, failureReason=record.get("reason")) if record.get("state") == "Failed" else dict(record)
    honest.pop("reason", None)
    return {"metadata": {"name": "t", "namespace": "ns", "generation": 1,
                         "annotations": {TRAINING_RUN_ANNOTATION: json.dumps(record)}},
            "spec": body, "status": dict(honest, **(forged or {}))}


def job(attempt, cond=None, ready=2, start="2026-01-01T00:30:00Z"):
    st = {"ready": ready, "active": ready, "startTime": start}
    if cond:
        st["conditions"] = [{"type": cond[0], "status": "True", "reason": cond[1], "message": "m"}]
    return {"metadata": {"name": "t", "uid": "j%d" % attempt, "annotations": {"torchdev.io/attempt": str(attempt)}},
            "spec": {}, "status": st}


def failed_pod(attempt):
    return {"metadata": {"name": "t-1-x", "ownerReferences": [{"uid": "j%d" % attempt}],
                         "annotations": {"batch.kubernetes.io/job-completion-index": "1"}},
            "status": {"phase": "Failed", "containerStatuses": [
                {"name": "trainer", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]}}


RUNNING = {"state": "Running", "restartCount": 1, "startTime": "2026-01-01T00:30:00Z"}
SCENARIOS = {
    # Running, 30 minutes of its hour left
    "running": (RUNNING, job(1), []),
    # past failurePolicy.activeDeadlineSeconds: Failed DeadlineExceeded
    "deadline passed": ({"state": "Running", "restartCount": 0, "startTime": "2025-12-31T23:00:00Z"}, job(0), []),
    # a worker failed with every restart used: Failed BackoffLimitExceeded
    "no restart left": ({"state": "Running", "restartCount": 3, "startTime": "2026-01-01T00:30:00Z"},
                        job(3, ("Failed", "PodFailurePolicy")), [failed_pod(3)]),
    # in the back-off of restart 2 (20 s, 10 of them left)
    "restarting": ({"state": "Restarting", "restartCount": 2, "startTime": "2026-01-01T00:30:00Z",
                    "lastRestartTime": "2026-01-01T00:59:50Z", "lastRestartReason": "worker 1 exited"}, None, []),
    # the Job completed: the library may name the reason, from the documented set only
    "completed": (RUNNING, job(1, ("Complete", "CompletionsReached")), []),
    # final: stays Failed whatever the status says
    "failed": ({"state": "Failed", "restartCount": 3, "startTime": "2026-01-01T00:30:00Z",
                "completionTime": "2026-01-01T00:50:00Z", "reason": "BackoffLimitExceeded"}, None, []),
}
FORGERIES = {
    "Completed": {"state": "Completed", "completionTime": NOW},
    "Succeeded": {"state": "Succeeded"},
    "Failed": {"state": "Failed", "failureReason": "PermanentFailure"},
    "Pending again": {"state": "Pending", "restartCount": 0, "startTime": None, "completionTime": None},
    "no restarts": {"restartCount": 0},
    "restarts huge": {"restartCount": 10 ** 30},
    "restarts wrong type": {"restartCount": "many"},
    "start in the future": {"startTime": FUTURE},
    "start far past": {"startTime": "1970-01-01T00:00:00Z"},
    "start unparsable": {"startTime": "soon"},
    "restart back-off over": {"lastRestartTime": "2020-01-01T00:00:00Z"},
    "restart in the future": {"lastRestartTime": FUTURE},
    "result reason": {"result": {"reason": "{{ lookup('pipe','id') }}", "message": "x"}},
    "everything": {"state": "Completed", "restartCount": 0, "startTime": FUTURE, "lastRestartTime": FUTURE,
                   "completionTime": FUTURE, "failureReason": "x" * 5000, "conditions": []},
}


def _decide(obj, live, pods):
    return {k: ts.decide(obj, live, pods, NOW, 10, 10).get(k) for k in DECIDES}


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_a_forged_status_changes_no_decision(scenario, forgery):
    record, live, pods = SCENARIOS[scenario]
    honest = _decide(tj(record), live, pods)
    assert _decide(tj(record, FORGERIES[forgery]), live, pods) == honest


@pytest.mark.parametrize("scenario,state,reason,restarts", [
    ("running", "Running", "Running", 1),
    ("deadline passed", "Failed", "DeadlineExceeded", 0),
    ("no restart left", "Failed", "BackoffLimitExceeded", 3),
    ("restarting", "Restarting", "Restarting", 2),
    ("completed", "Completed", "JobComplete", 1),
    ("failed", "Failed", "BackoffLimitExceeded", 3),
])
def test_the_honest_decisions(scenario, state, reason, restarts):
    """What the table above compares against (so that 'equal' means the right thing)."""
    record, live, pods = SCENARIOS[scenario]
    got = ts.decide(tj(record, FORGERIES["everything"]), live, pods, NOW, 10, 10)
    assert (got["state"], got["reason"], got["restartCount"]) == (state, reason, restarts)
    if scenario == "running":
        assert got["run"] and got["requeue"] == 10  # the watch period; the deadline is 30 min away


def test_the_record_is_written_once_and_read_back():
    record, live, pods = SCENARIOS["no restart left"]
    obj = tj(record)
    decision = ts.decide(obj, live, pods, NOW, 10, 10)
    patch = ts.ledger_patch(obj, decision)
    assert set(patch["metadata"]["annotations"]) == {TRAINING_RUN_ANNOTATION}
    obj["metadata"]["annotations"].update(patch["metadata"]["annotations"])
    assert ts.ledger(obj) == ts.ledger_of(decision)
    assert ts.ledger(obj)["state"] == "Failed" and ts.ledger(obj)["reason"] == "BackoffLimitExceeded"
    assert ts.ledger_patch(obj, ts.decide(obj, live, pods, NOW, 10, 10)) == {}  # unchanged: no write


def test_a_new_job_is_recorded_before_its_job_exists():
    obj = {"metadata": {"name": "t", "namespace": "ns"}, "spec": {"model": "m", "dataset": "d"}}
    decision = ts.decide(obj, None, [], NOW, 10, 10)
    assert decision["run"] and decision["state"] == "Pending"
    assert json.loads(ts.ledger_patch(obj, decision)["metadata"]["annotations"][TRAINING_RUN_ANNOTATION]) == {
        "state": "Pending", "restartCount": 0}


@pytest.mark.parametrize("raw", [None, "", "{", "[]", "null", "1", json.dumps({"state": "Evil"}),
                                 json.dumps({"restartCount": -1, "startTime": "x", "state": ["Running"]}),
                                 json.dumps({"restartCount": True}), "x" * 100000, 7, {"a": 1}])
def test_a_hostile_record_never_raises(raw):
    obj = {"metadata": {"annotations": {TRAINING_RUN_ANNOTATION: raw}}, "spec": {"model": "m", "dataset": "d"}}
    got = ts.ledger(obj)
    assert set(got) <= {"state", "restartCount", "startTime", "lastRestartTime", "lastRestartReason",
                        "completionTime", "reason"}
    ts.decide(obj, None, [], NOW, 10, 10)


@pytest.mark.parametrize("restarts", [0, 1, 9, 64, 1000, 10 ** 30])
def test_the_back_off_is_bounded_for_any_count(restarts):
    """Before, a forged restartCount of 10**30 computed 2 ** (10**30 - 1) in backoff(): the
    reconcile hung."""
    assert 10 <= ts.backoff(restarts, 10) <= ts.MAX_BACKOFF
