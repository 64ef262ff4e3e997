"""Table-driven tests of plugins/module_utils/trainingjob_status.py: the lifecycle decision
(whole-group restart with back-off, deadline, permanent failures, suspend, Kueue) and the
status the operator writes (never the library's fields)."""

import pytest

from ansible_collections.torchdev.operator.plugins.module_utils import trainingjob_status as ts
from ansible_collections.torchdev.operator.plugins.module_utils.constants import TRAINING_LIBRARY_STATUS_FIELDS

NOW = "2026-01-01T00:10:00Z"


def _tj(status=None, **spec):
    body = {"model": "m", "dataset": "d", "numWorkers": 2, "gpusPerWorker": 1}
    body.update(spec)
    return {"metadata": {"name": "t", "namespace": "ns", "generation": 3}, "spec": body, "status": status or {}}


def _job(attempt=0, uid="j1", suspend=False, cond=None, **status):
    st = dict(status)
    if cond:
        st["conditions"] = [{"type": cond[0], "status": "True", "reason": cond[1], "message": cond[2] if len(cond) > 2 else ""}]
    return {"metadata": {"name": "t", "uid": uid, "annotations": {"torchdev.io/attempt": str(attempt)}},
            "spec": {"suspend": suspend}, "status": st}


def _pod(index, phase="Failed", code=1, uid="j1", waiting=None):
    cs = {"name": "trainer", "image": "img"}
    if waiting:
        cs["state"] = {"waiting": {"reason": waiting}}
    elif phase == "Failed":
        cs["state"] = {"terminated": {"exitCode": code, "reason": "Error"}}
    else:
        cs["state"] = {"running": {}}
    return {"metadata": {"name": "t-%d-abcde" % index, "ownerReferences": [{"uid": uid}],
                         "annotations": {"batch.kubernetes.io/job-completion-index": str(index)}},
            "status": {"phase": phase, "containerStatuses": [cs]}}


CASES = [
    # (name, tj, job, pods, expected subset)
    ("new", _tj(), None, [], {"run": True, "state": "Pending", "requeue": 2.0}),
    ("queued by kueue", _tj(), _job(suspend=True), [], {"run": True, "state": "Queued", "requeue": None}),
    ("starting", _tj(), _job(active=2, ready=1, startTime="2026-01-01T00:09:00Z"), [],
     {"run": True, "state": "Initializing", "startTime": "2026-01-01T00:09:00Z", "requeue": 15.0}),
    # starting: looked at every 2 s at first, then a quarter of the time since the Job started,
    # at most 30 s (workers refused by a quota, or pending, are not polled every 2 s for ever)
    ("just started", _tj(), _job(active=0, ready=0, startTime="2026-01-01T00:09:56Z"), [],
     {"state": "Initializing", "requeue": 2.0}),
    ("starting for long", _tj(), _job(active=0, ready=0, startTime="2026-01-01T00:00:00Z"), [],
     {"state": "Initializing", "requeue": 30.0}),
    ("starting, no start time", _tj(), _job(active=0, ready=0), [], {"state": "Initializing", "requeue": 2.0}),
    ("starting, odd start time", _tj(), _job(active=0, ready=0, startTime="yesterday"), [],
     {"state": "Initializing", "requeue": 2.0}),
    ("running", _tj(), _job(active=2, ready=2), [], {"run": True, "state": "Running", "requeue": 30.0}),
    ("suspended", _tj(suspend=True), _job(active=2, ready=2), [], {"run": False, "state": "Suspended"}),
    ("complete, library result", _tj({"state": "Running", "result": {"reason": "EarlyStopped", "message": "no gain"}}),
     _job(cond=("Complete", "CompletionsReached")), [],
     {"run": True, "state": "Completed", "reason": "EarlyStopped", "completionTime": NOW}),
    ("complete, no library", _tj({"state": "Running"}), _job(cond=("Complete", "CompletionsReached")), [],
     {"state": "Completed", "reason": "JobComplete"}),
    ("rank failure restarts the group", _tj({"state": "Running", "restartCount": 0}),
     _job(cond=("Failed", "PodFailurePolicy")), [_pod(1, code=1), _pod(0, phase="Running")],
     {"run": False, "state": "Restarting", "restartCount": 1, "attempt": 1, "lastRestartTime": NOW, "requeue": 10.0}),
    ("second restart doubles the back-off", _tj({"state": "Running", "restartCount": 1}),
     _job(attempt=1, cond=("Failed", "PodFailurePolicy")), [_pod(0)],
     {"state": "Restarting", "restartCount": 2, "requeue": 20.0}),
    ("backoff limit", _tj({"state": "Running", "restartCount": 3}),
     _job(attempt=3, cond=("Failed", "PodFailurePolicy")), [_pod(0)],
     {"run": True, "state": "Failed", "reason": "BackoffLimitExceeded", "failureReason": "BackoffLimitExceeded"}),
    ("restartPolicy Never", _tj({"state": "Running"}, failurePolicy={"restartPolicy": "Never"}),
     _job(cond=("Failed", "PodFailurePolicy")), [_pod(0)], {"state": "Failed", "reason": "WorkerFailed"}),
    ("permanent exit code", _tj({"state": "Running"}), _job(cond=("Failed", "PodFailurePolicy")), [_pod(1, code=3)],
     {"state": "Failed", "reason": "PermanentFailure", "restartCount": 0}),
    ("command not found", _tj({"state": "Running"}), _job(cond=("Failed", "PodFailurePolicy")), [_pod(0, code=127)],
     {"state": "Failed", "reason": "PermanentFailure"}),
    ("bad image", _tj({"state": "Initializing"}), _job(active=2), [_pod(0, phase="Pending", waiting="ErrImagePull")],
     {"run": False, "state": "Failed", "reason": "ImagePullFailed"}),
    ("job deadline", _tj({"state": "Running"}), _job(cond=("Failed", "DeadlineExceeded")), [],
     {"state": "Failed", "reason": "DeadlineExceeded"}),
    ("deadline passed", _tj({"state": "Running", "startTime": "2026-01-01T00:00:00Z"},
                            failurePolicy={"activeDeadlineSeconds": 600}), _job(active=2, ready=2), [],
     {"run": False, "state": "Failed", "reason": "DeadlineExceeded"}),
    ("deadline ahead is a requeue", _tj({"state": "Running", "startTime": "2026-01-01T00:00:00Z"},
                                        failurePolicy={"activeDeadlineSeconds": 900}), _job(active=2, ready=2), [],
     {"run": True, "state": "Running", "requeue": 30.0}),
    ("deadline sooner than the watch", _tj({"state": "Running", "startTime": "2026-01-01T00:00:00Z"},
                                           failurePolicy={"activeDeadlineSeconds": 610}), _job(active=2, ready=2), [],
     {"run": True, "state": "Running", "requeue": 10.0}),
    ("backoff pending", _tj({"state": "Restarting", "restartCount": 1, "lastRestartTime": "2026-01-01T00:09:55Z"}),
     None, [], {"run": False, "state": "Restarting", "requeue": 5.0}),
    ("backoff over", _tj({"state": "Restarting", "restartCount": 1, "lastRestartTime": "2026-01-01T00:09:00Z"}),
     None, [], {"run": True, "state": "Pending", "attempt": 1}),
    ("old attempt still there", _tj({"state": "Restarting", "restartCount": 1, "lastRestartTime": "2026-01-01T00:00:00Z"}),
     _job(attempt=0, cond=("Failed", "PodFailurePolicy")), [], {"run": False, "state": "Restarting", "restartCount": 1}),
    ("final stays final", _tj({"state": "Completed", "completionTime": "2026-01-01T00:05:00Z"}),
     None, [], {"run": False, "state": "Completed", "completionTime": "2026-01-01T00:05:00Z"}),
    ("final keeps its job", _tj({"state": "Failed", "failureReason": "BackoffLimitExceeded"}),
     _job(cond=("Failed", "PodFailurePolicy")), [], {"run": True, "state": "Failed"}),
    # a later look at a finished job (a resync, an operator restart) keeps why it finished
    ("final keeps its reason", _tj({"state": "Completed", "conditions": [
        {"type": "Succeeded", "status": "True", "reason": "JobComplete", "message": "all 2 workers succeeded"}]}),
     _job(cond=("Complete", "")), [], {"state": "Completed", "reason": "JobComplete",
                                       "message": "all 2 workers succeeded"}),
    # the library's result landed after the run that saw the Job complete: taken once, later
    ("completed takes the library's later result", _tj({"state": "Completed", "result": {
        "reason": "EarlyStopped", "message": "no gain"}, "conditions": [
        {"type": "Succeeded", "status": "True", "reason": "JobComplete", "message": "all 2 workers succeeded"}]}),
     _job(cond=("Complete", "")), [], {"state": "Completed", "reason": "EarlyStopped", "message": "no gain"}),
    ("an undocumented later result is not taken", _tj({"state": "Completed", "result": {
        "reason": "Hacked", "message": "x"}, "conditions": [
        {"type": "Succeeded", "status": "True", "reason": "JobComplete", "message": "all 2 workers succeeded"}]}),
     _job(cond=("Complete", "")), [], {"state": "Completed", "reason": "JobComplete",
                                       "message": "all 2 workers succeeded"}),
    ("failed keeps its reason", _tj({"state": "Failed", "failureReason": "WorkerFailed", "conditions": [
        {"type": "Failed", "status": "True", "reason": "WorkerFailed", "message": "worker 1 exited 1"}]}),
     None, [], {"state": "Failed", "reason": "WorkerFailed", "message": "worker 1 exited 1"}),
]


@pytest.mark.parametrize("tj,job,pods,want", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_decide(tj, job, pods, want):
    got = ts.decide(tj, job, pods, NOW, backoff_base=10, watch_period=30)
    assert {k: got[k] for k in want} == want, got


def test_rank_failure_message_names_worker_and_exit_code():
    got = ts.decide(_tj({"state": "Running"}), _job(cond=("Failed", "PodFailurePolicy")),
                    [_pod(0, phase="Running"), _pod(1, code=137)], NOW)
    assert got["lastRestartReason"] == "worker 1 (pod t-1-abcde) exited with code 137 (Error)"


@pytest.mark.parametrize("restarts,base,want", [(1, 10, 10), (2, 10, 20), (3, 10, 40), (10, 10, 300), (1, 2, 2)])
def test_backoff(restarts, base, want):
    assert ts.backoff(restarts, base) == want


@pytest.mark.parametrize("start,end,want", [("2026-01-01T00:00:00Z", "2026-01-01T01:02:03Z", "1h2m3s"),
                                            ("2026-01-01T00:00:00Z", "2026-01-01T00:00:09Z", "9s"), (None, NOW, "")])
def test_duration(start, end, want):
    assert ts.duration(start, end) == want


def test_status_never_writes_library_fields():
    tj = _tj({"state": "Running", "progress": "50%", "metrics": {"loss": 1.0}, "currentEpoch": 3})
    job = _job(active=2, ready=2)
    st = ts.status(tj, ts.decide(tj, job, [], NOW), job, None)
    assert not set(TRAINING_LIBRARY_STATUS_FIELDS) & set(st)
    assert st["state"] == "Running" and st["workers"] == {"active": 2, "succeeded": 0, "failed": 0}
    assert st["allocatedGPUs"] == 2 and st["totalEpochs"] == 1 and st["observedGeneration"] == 3
    conds = {c["type"]: c for c in st["conditions"]}
    assert conds["Running"]["status"] == "True" and conds["Failed"]["status"] == "False"
    assert st["completionTime"] is None and st["duration"] is None


def test_status_final_and_queued():
    tj = _tj({"state": "Running", "startTime": "2026-01-01T00:00:00Z"}, failurePolicy={"activeDeadlineSeconds": 60})
    st = ts.status(tj, ts.decide(tj, _job(active=2, ready=2), [], NOW), None, None)
    assert st["state"] == "Failed" and st["failureReason"] == "DeadlineExceeded" and st["duration"] == "10m0s"
    assert {c["type"]: c["status"] for c in st["conditions"]}["Failed"] == "True"
    queue = {"name": "torchdev", "position": 2, "admitted": False, "message": "waiting for quota in ClusterQueue cq at position 2"}
    job = _job(suspend=True)
    st = ts.status(_tj(), ts.decide(_tj(), job, [], NOW), job, queue)
    assert st["state"] == "Queued" and st["queue"]["position"] == 2
    assert "position 2" in {c["type"]: c for c in st["conditions"]}["Running"]["message"]


def test_rejected_status():
    st = ts.rejected_status(_tj(), {"reason": "InvalidSpec", "message": "spec.env: NODE_RANK is set by the operator"})
    assert st["state"] == "Failed" and st["failureReason"] == "InvalidSpec"
    conds = {c["type"]: c for c in st["conditions"]}
    assert conds["Degraded"]["status"] == "True" and "NODE_RANK" in conds["Failed"]["message"]


@pytest.mark.parametrize("requeue,want", [(None, ""), (0.2, "1s"), (9.5, "10s"), (300.0, "300s")])
def test_requeue(requeue, want):
    assert ts.requeue({"requeue": requeue}) == want


MISSING = {"served": True, "priority_class": {"name": "nope", "source": "spec.scheduling.priority", "exists": False}}


PROBLEMS = [
    ("a Job to run, no Kueue", _tj(), None, None),
    ("a Job to run, its class missing", _tj(), MISSING,
     "WorkloadPriorityClass nope (from spec.scheduling.priority) does not exist"),
    ("a Job to run, its class exists", _tj(), dict(MISSING, priority_class={"name": "high", "exists": True}), None),
    ("final: nothing runs, nothing to admit", _tj({"state": "Completed", "completionTime": NOW}), MISSING, None),
]


@pytest.mark.parametrize("tj,kueue,problem", [c[1:] for c in PROBLEMS], ids=[c[0] for c in PROBLEMS])
def test_decide_reports_a_missing_priority_class_of_a_job_to_run(tj, kueue, problem):
    got = ts.decide(tj, None, [], NOW, kueue=kueue)
    if problem is None:
        assert got["problem"] is None
    else:
        assert got["run"] and got["problem"]["reason"] == "InvalidSpec" and problem in got["problem"]["message"]


# --- a Job whose pods admission refuses (Degraded PodCreateRefused) ---------------------------
BORN = "2026-01-01T00:05:00Z"
QUOTA = "exceeded quota: compute, requested: pods=1, used: pods=1, limited: pods=1"
REFUSED_0 = "worker 0: refused by ResourceQuota: " + QUOTA


def _live_job(uid="j1", name="t"):
    return {"metadata": {"name": name, "uid": uid, "creationTimestamp": BORN}, "spec": {}, "status": {}}


def _refusal(pod="t-0-abcde", why=QUOTA, uid="j1", kind="Job", name="t", at="2026-01-01T00:06:00Z", **extra):
    event = {"type": "Warning", "reason": "FailedCreate", "lastTimestamp": at,
             "involvedObject": {"kind": kind, "name": name, "uid": uid},
             "message": 'Error creating: pods "%s" is forbidden: %s' % (pod, why)}
    event.update(extra)
    return event


REFUSAL_CASES = [
    ("one worker refused", [_refusal()], [], REFUSED_0),
    ("aggregated by the event recorder", [_refusal(message='(combined from similar events): Error creating: pods '
                                                             '"t-0-zzzzz" is forbidden: ' + QUOTA)], [], REFUSED_0),
    ("workers refused alike share a line", [_refusal(), _refusal("t-1-bcdef"), _refusal("t-3-cdefg")], [],
     "workers 0-1,3: refused by ResourceQuota: " + QUOTA),
    ("different refusals, one line each", [_refusal(), _refusal("t-1-bcdef", why='violates PodSecurity '
                                                                                 '"restricted:latest": runAsNonRoot')],
     [], REFUSED_0 + '; worker 1: refused by PodSecurity: violates PodSecurity "restricted:latest": runAsNonRoot'),
    ("LimitRange", [_refusal(why="maximum cpu usage per Container is 1, but limit is 2")], [],
     "worker 0: refused by LimitRange: maximum cpu usage per Container is 1, but limit is 2"),
    ("another admission", [_refusal(why="admission webhook said no")], [],
     "worker 0: refused by admission: admission webhook said no"),
    ("the newest Event of a worker counts", [_refusal(why="old", at="2026-01-01T00:06:00Z"),
                                             _refusal(at="2026-01-01T00:07:00Z"),
                                             _refusal(why="older", at="2026-01-01T00:05:30Z")], [], REFUSED_0),
    ("eventTime and series count", [_refusal(lastTimestamp=None, eventTime="2026-01-01T00:06:00.123456Z")], [],
     REFUSED_0),
    ("the worker's pod exists: cleared", [_refusal()], [_pod(0, phase="Running")], ""),
    ("a pod being deleted does not clear it", [_refusal()],
     [dict(_pod(0, phase="Running"), metadata=dict(_pod(0)["metadata"], deletionTimestamp=NOW))], REFUSED_0),
    ("another Job's pod of that index does not clear it", [_refusal()], [_pod(0, phase="Running", uid="other")],
     REFUSED_0),
    ("an Event older than the Job (an earlier attempt)", [_refusal(at="2026-01-01T00:04:00Z")], [], ""),
    ("an Event of another Job uid", [_refusal(uid="j0")], [], ""),
    ("an Event without a uid still names the Job", [_refusal(uid=None)], [], REFUSED_0),
    ("an Event about another Job", [_refusal(name="u", pod="u-0-abcde")], [], ""),
    ("an Event about a StatefulSet", [_refusal(kind="StatefulSet")], [], ""),
    ("a pod of another job named in the message", [_refusal(pod="tt-0-abcde")], [], ""),
    ("a worker past numWorkers", [_refusal(pod="t-2-abcde")], [], ""),
    ("a Normal Event", [_refusal(type="Normal")], [], ""),
    ("another reason", [_refusal(reason="FailedScheduling")], [], ""),
    ("no time", [_refusal(lastTimestamp=None)], [], ""),
    ("a time that is not one", [_refusal(at="yesterday")], [], ""),
    ("a message that is not text", [_refusal(message=["pods"])], [], ""),
    ("no forbidden pod in the message", [_refusal(message="Error creating: the server was unable to respond")],
     [], ""),
    ("control characters and Jinja are shown as text", [_refusal(why="no\x1b[31m {{ lookup('env','HOME') }}\n")],
     [], "worker 0: refused by admission: no [31m {{ lookup('env','HOME') }}"),
    ("a huge message is bounded", [_refusal(why="x" * 100000)], [], "worker 0: refused by admission: " + "x" * 477 + "..."),
    ("odd entries are skipped", [None, 3, "x", {}, {"involvedObject": "Job"}, _refusal()], [None, {"metadata": 1}],
     REFUSED_0),
]


@pytest.mark.parametrize("name,events,pods,expected", REFUSAL_CASES, ids=[c[0] for c in REFUSAL_CASES])
def test_job_pod_refusals(name, events, pods, expected):
    # numWorkers 4 in the "share a line" row, else 2
    workers = 4 if "share" in name else 2
    assert ts.job_pod_refusals(_live_job(), events, pods, workers) == expected


def test_a_long_job_name_is_cut_in_its_pods_names():
    name = "a" * 60
    prefix = name[:58 - 3]   # names.MaxGeneratedNameLength 58, "-0-" kept
    event = _refusal(pod=prefix + "-0-abcde", name=name)
    assert ts.job_pod_refusals(_live_job(name=name), [event], [], 1) == REFUSED_0
    assert ts.job_pod_refusals(_live_job(name=name), [_refusal(pod="a" * 20 + "-0-abcde", name=name)], [], 1) == ""


@pytest.mark.parametrize("job,events,pods,workers", [
    (None, [_refusal()], [], 2), ({"metadata": "x"}, [_refusal()], [], 2), (_live_job(), None, [], 2),
    (_live_job(), "events", [], 2), (_live_job(), [_refusal()], "pods", 2), (_live_job(), [_refusal()], [], "two"),
    (_live_job(), [_refusal()], [], None), ({"metadata": {"name": 3}}, [_refusal()], [], 2)])
def test_job_pod_refusals_of_odd_input(job, events, pods, workers):
    assert ts.job_pod_refusals(job, events, pods, workers) in ("", REFUSED_0)


def test_the_status_shows_refused_workers_while_the_job_starts_and_clears():
    tj, job = _tj(), _live_job()
    starting = ts.decide(tj, job, [], NOW)
    assert starting["state"] == "Initializing" and starting["run"]
    refused = ts.status(tj, starting, job, events=[_refusal()], pods=[])
    degraded = [c for c in refused["conditions"] if c["type"] == "Degraded"][0]
    assert (degraded["status"], degraded["reason"], degraded["message"]) == ("True", "PodCreateRefused", REFUSED_0)
    assert refused["state"] == "Initializing"
    # the same Events again: the same status (no write, no second Event)
    assert ts.status(tj, starting, job, events=[_refusal()], pods=[]) == refused
    # the pod exists: cleared
    created = ts.status(tj, starting, job, events=[_refusal()], pods=[_pod(0, phase="Running")])
    assert [c for c in created["conditions"] if c["type"] == "Degraded"][0]["reason"] == "AsExpected"
    # a queued (suspended) Job or a Job not run shows none
    queued = ts.decide(tj, dict(job, spec={"suspend": True}), [], NOW)
    assert [c for c in ts.status(tj, queued, job, events=[_refusal()], pods=[])["conditions"]
            if c["type"] == "Degraded"][0]["reason"] == "AsExpected"
