"""UsageRecords of a TrainingJob that Kueue evicts (issue 26 item 5): one record per admission,
closed at the eviction (endReason Preempted, or Evicted for Kueue's other reasons) so that no
GPU-hours count while the job waits in the queue; the next admission opens its own record (its
own startedAt, so its own name); the DevUser role's prune and devctl usage's summary take the
new reasons.  The decisions are trainingjob_status.decide's, from what Kueue's Workload says
(tests/module_utils/test_trainingjob_eviction.py has the Workloads)."""

import pytest

from ansible_collections.torchdev.operator.plugins.module_utils import trainingjob_status as ts
from ansible_collections.torchdev.operator.plugins.module_utils import usage

from test_trainingjob_eviction import (
    ADMITTED_AGAIN, AGAIN, COUNTED, EVICTED, NOW, PREEMPTED_NOW, RUNNING, START, TIMED_OUT, _job, _tj)

USER = "jane@example.com"
START_S, AGAIN_S = 1767225660, 1767226020  # START and AGAIN as Unix seconds


def _record(ledger, job, kueue, now=NOW):
    tj = dict(_tj(ledger), metadata=dict(_tj(ledger)["metadata"], creationTimestamp="2026-01-01T00:00:00Z"))
    decision = ts.decide(tj, job, [], now, kueue=kueue)
    return usage.job_usage_record(tj, decision, USER, "TrainingJob", now)


def test_the_new_reasons_are_record_end_reasons():
    assert usage.RECORD_END_REASONS[-2:] == ("Preempted", "Evicted")


CASES = [
    ("running", RUNNING, _job(active=2, ready=2, startTime=START), None, "tj-t-%d" % START_S, {"startedAt": START}),
    ("preempted: closed at the eviction", RUNNING, _job(suspend=True), PREEMPTED_NOW, "tj-t-%d" % START_S,
     {"startedAt": START, "endedAt": EVICTED, "endReason": "Preempted", "gpuHours": "0.5333"}),  # 8 GPUs x 4 minutes
    ("evicted for another reason", RUNNING, _job(suspend=True), TIMED_OUT, "tj-t-%d" % START_S,
     {"endedAt": EVICTED, "endReason": "Evicted", "gpuHours": "0.5333"}),
    ("admitted again: a new record, open", COUNTED, _job(active=2, ready=2, startTime=AGAIN), ADMITTED_AGAIN,
     "tj-t-%d" % AGAIN_S, {"startedAt": AGAIN, "queuedAt": "2026-01-01T00:00:00Z"}),
]


@pytest.mark.parametrize("ledger,job,kueue,name,spec", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_one_record_per_admission(ledger, job, kueue, name, spec):
    record = _record(ledger, job, kueue)
    assert record["name"] == name
    assert {k: record["spec"].get(k) for k in spec} == spec
    if "endReason" not in spec:
        assert "endedAt" not in record["spec"]


def test_the_record_is_closed_once_and_the_next_one_opened():
    """What job_usage.yml writes: the open record closed at the eviction (once: a closed record
    is never written again), nothing while queued, then the next admission's own record."""
    opened = _record(RUNNING, _job(active=2, ready=2, startTime=START), None)
    live = {"metadata": {"name": opened["name"]}, "spec": opened["spec"]}
    closed = _record(RUNNING, _job(suspend=True), PREEMPTED_NOW)
    assert usage.usage_write_needed(live, closed)
    live = {"metadata": {"name": closed["name"]}, "spec": closed["spec"]}
    assert not usage.usage_write_needed(live, _record(COUNTED, _job(suspend=True), PREEMPTED_NOW))
    reopened = _record(COUNTED, _job(active=2, ready=2, startTime=AGAIN), ADMITTED_AGAIN)
    assert reopened["name"] != closed["name"] and usage.usage_write_needed(None, reopened)


def test_the_summary_counts_preempted_and_evicted_runs():
    preempted = _record(RUNNING, _job(suspend=True), PREEMPTED_NOW)["spec"]
    evicted = _record(RUNNING, _job(suspend=True), TIMED_OUT)["spec"]
    summary = usage.usage_summary([{"spec": preempted}, {"spec": evicted}])
    assert summary["total"]["ended"]["Preempted"] == 1 and summary["total"]["ended"]["Evicted"] == 1
    assert summary["total"]["gpuHours"] == "1.0666" and summary["byKind"][0]["key"] == "TrainingJob"


def test_the_devuser_prune_takes_the_new_reasons():
    """A closed Preempted record is kept, then deleted after its retention; the open record of
    a later admission (started after the job's creation) is not an orphan while the job exists."""
    closed = {"metadata": {"name": "tj-t-%d" % START_S}, "spec": _record(RUNNING, _job(suspend=True), PREEMPTED_NOW)["spec"]}
    reopened = _record(COUNTED, _job(active=2, ready=2, startTime=AGAIN), ADMITTED_AGAIN)
    opened = {"metadata": {"name": reopened["name"]}, "spec": reopened["spec"]}
    job = {"metadata": {"name": "t", "creationTimestamp": "2026-01-01T00:00:00Z"}}
    kept = usage.usage_prune([closed, opened], NOW, "90d", jobs={"TrainingJob": [job]})
    assert kept["delete"] == [] and kept["close"] == []
    later = usage.usage_prune([closed, opened], "2026-04-02T00:00:00Z", "90d", jobs={"TrainingJob": [job]})
    assert later["delete"] == [closed["metadata"]["name"]] and later["close"] == []
    gone = usage.usage_prune([closed, opened], NOW, "90d", jobs={"TrainingJob": []})
    assert [c["name"] for c in gone["close"]] == [opened["metadata"]["name"]]
    assert gone["close"][0]["spec"]["endReason"] == "Deleted"
