"""Table-driven tests of plugins/module_utils/ephemeralaccelerationjob_status.py: the run's
phases from the pod, failures named by the runner's exit code with its termination message,
the pod and volume deleted at their TTLs through requeues at those times, a settled job
costing nothing, the plan and the status."""

import pytest

from ansible_collections.torchdev.operator.plugins.module_utils import ephemeralaccelerationjob_status as es

UID = "job-uid"
NOW = "2026-01-01T00:10:00Z"
FINISHED = "2026-01-01T00:09:00Z"


def _eaj(status=None, **spec):
    body = {"model": "resnet50", "input": {"type": "image", "path": "/artifacts/in.jpg"}}
    body.update(spec)
    return {"apiVersion": "torchdev.io/v1alpha1", "kind": "EphemeralAccelerationJob",
            "metadata": {"name": "j", "namespace": "ns", "uid": UID, "generation": 2},
            "spec": body, "status": status or {}}


def _owned(kind, name, owner=UID, deleting=False, **extra):
    meta = {"name": name, "namespace": "ns", "ownerReferences": [{"uid": owner, "controller": True}] if owner else []}
    if deleting:
        meta["deletionTimestamp"] = NOW
    return dict({"apiVersion": "v1", "kind": kind, "metadata": meta}, **extra)


def _pod(phase="Running", owner=UID, waiting=None, code=None, message=None, deleting=False, scheduled=None):
    cs = {"name": "inference"}
    if waiting:
        cs["state"] = {"waiting": {"reason": waiting, "message": "back-off"}}
    elif code is not None:
        term = {"exitCode": code, "reason": "Error" if code else "Completed",
                "startedAt": "2026-01-01T00:08:00Z", "finishedAt": FINISHED}
        if message:
            term["message"] = message
        cs["state"] = {"terminated": term}
    elif phase == "Running":
        cs["state"] = {"running": {"startedAt": "2026-01-01T00:08:30Z"}}
    status = {"phase": phase, "containerStatuses": [cs] if phase != "Pending" or waiting else []}
    if scheduled:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": scheduled}]
    return _owned("Pod", "ephemeralaccelerationjob-j", owner, deleting, status=status)


def _claim(phase="Bound", owner=UID, deleting=False):
    return _owned("PersistentVolumeClaim", "artifacts-j", owner, deleting, status={"phase": phase})


def _runner(owner=UID):
    return _owned("ConfigMap", "j-infer", owner)


def _done(phase="Succeeded", reason="InferenceSucceeded", **extra):
    status = {"phase": phase, "finishedAt": FINISHED, "startedAt": "2026-01-01T00:08:00Z",
              "conditions": [{"type": phase, "status": "True", "reason": reason}]}
    status.update(extra)
    return status


RUN_CASES = [
    # (name, eaj, pod, claim, runner, expected subset)
    ("new: create everything", _eaj(), None, None, None,
     {"phase": "Pending", "ensure": ["claim", "runner", "pod"], "delete": [], "requeue": 2.0,
      "message": "creating the volume artifacts-j"}),
    ("a volume devctl created is adopted", _eaj(), None, _claim(owner=None), None,
     {"phase": "Pending", "ensure": ["claim", "runner", "pod"], "message": "creating the inference pod"}),
    ("unschedulable", _eaj(), _pod("Pending", scheduled="0/2 nodes are available: insufficient nvidia.com/gpu"),
     _claim(), _runner(),
     {"phase": "Pending", "message": "the inference pod is not scheduled: 0/2 nodes are available: insufficient nvidia.com/gpu"}),
    ("volume not bound", _eaj(), _pod("Pending"), _claim("Pending"), _runner(),
     {"phase": "Pending", "message": "waiting for the volume artifacts-j to bind"}),
    ("running", _eaj(), _pod(), _claim(), _runner(),
     {"phase": "Running", "startedAt": "2026-01-01T00:08:30Z", "requeue": 10.0, "delete": []}),
    ("an earlier job's pod is still going", _eaj(), _pod(owner="old-uid", deleting=True), _claim(), _runner(),
     {"phase": "Pending", "ensure": [], "requeue": 1.0,
      "message": "waiting for the Pod of an earlier job named j to be deleted"}),
    # the run that sees the end deletes nothing: its status records the end first, the next run
    # (a second later) deletes what is due
    ("succeeded, pod TTL 0: the end is recorded first", _eaj(), _pod("Succeeded", code=0), _claim(), _runner(),
     {"phase": "Succeeded", "reason": "InferenceSucceeded", "finishedAt": FINISHED, "exitCode": 0,
      "ensure": [], "delete": [], "artifactsExpireAt": "2026-01-01T01:09:00Z", "requeue": 1.0,
      "artifacts": {"status": "True", "reason": "Bound",
                    "message": "artifacts-j is kept until 2026-01-01T01:09:00Z (pvcTTLSecondsAfterFinished)"}}),
    ("succeeded, pod TTL 300: requeue at the pod's TTL", _eaj(ttlSecondsAfterFinished=300), _pod("Succeeded", code=0),
     _claim(), _runner(), {"phase": "Succeeded", "delete": [], "requeue": 240.0}),
    ("the runner's failure names the reason", _eaj(),
     _pod("Failed", code=3, message="input image /artifacts/in.jpg does not exist\n"), _claim(), _runner(),
     {"phase": "Failed", "reason": "InputNotFound", "message": "input image /artifacts/in.jpg does not exist",
      "exitCode": 3, "delete": [], "requeue": 1.0}),
    ("an unknown exit code without a message", _eaj(), _pod("Failed", code=137), _claim(), _runner(),
     {"phase": "Failed", "reason": "PodFailed", "message": "the inference container exited with code 137"}),
    ("image pull", _eaj(image="nope:1"), _pod("Pending", waiting="ImagePullBackOff"), _claim(), _runner(),
     {"phase": "Failed", "reason": "ImagePullFailed", "message": "cannot pull the image nope:1: ImagePullBackOff (back-off)",
      "finishedAt": NOW, "delete": [], "requeue": 1.0}),
    ("the running pod disappeared", _eaj({"phase": "Running", "startedAt": "2026-01-01T00:08:00Z"}), None, _claim(),
     _runner(), {"phase": "Failed", "reason": "PodDeleted", "delete": [], "requeue": 1.0}),
    ("the pod is being deleted", _eaj({"phase": "Running"}), _pod(deleting=True), _claim(), _runner(),
     {"phase": "Failed", "reason": "PodDeleted"}),
    # finished jobs (the end recorded): only TTLs
    ("recorded end, pod TTL 0: the pod goes now", _eaj(_done()), _pod("Succeeded", code=0), _claim(), _runner(),
     {"phase": "Succeeded", "delete": ["runner", "pod"], "requeue": 3540.0}),
    ("the end seen late, every TTL passed: still recorded first", _eaj(pvcTTLSecondsAfterFinished=0),
     _pod("Succeeded", code=0), _claim(), _runner(), {"phase": "Succeeded", "delete": [], "requeue": 1.0}),
    ("finished, waiting for the volume's TTL", _eaj(_done()), None, _claim(), None,
     {"phase": "Succeeded", "reason": "InferenceSucceeded", "delete": [], "requeue": 3540.0, "ensure": []}),
    ("finished, the volume's TTL passed", _eaj(_done(), pvcTTLSecondsAfterFinished=30), None, _claim(), None,
     {"delete": ["claim"], "requeue": None,
      "artifacts": {"status": "False", "reason": "Expired",
                    "message": "artifacts-j was deleted at 2026-01-01T00:09:30Z (pvcTTLSecondsAfterFinished)"}}),
    ("finished, both TTLs passed", _eaj(_done("Failed", "UnknownModel"), ttlSecondsAfterFinished=10,
                                        pvcTTLSecondsAfterFinished=20),
     _pod("Failed", code=5), _claim(), _runner(),
     {"phase": "Failed", "reason": "UnknownModel", "delete": ["claim", "runner", "pod"], "requeue": None}),
    ("a failed pod's volume survives until its TTL", _eaj(_done("Failed", "InputUnreadable"), ttlSecondsAfterFinished=10),
     _pod("Failed", code=4), _claim(), _runner(), {"delete": ["runner", "pod"], "requeue": 3540.0}),
    ("the volume was deleted by hand", _eaj(_done()), None, None, None,
     {"delete": [], "requeue": None, "artifacts": {"status": "False", "reason": "Deleted",
                                                   "message": "artifacts-j was deleted before its TTL"}}),
    ("a volume being deleted is left alone", _eaj(_done(), pvcTTLSecondsAfterFinished=0), None, _claim(deleting=True),
     None, {"delete": [], "requeue": None}),
    ("a volume the job does not control is left alone", _eaj(_done(), pvcTTLSecondsAfterFinished=0), None,
     _claim(owner=None), None, {"delete": [], "requeue": None}),
]


@pytest.mark.parametrize("name,obj,pod,claim,runner,expected", RUN_CASES, ids=[c[0] for c in RUN_CASES])
def test_decide(name, obj, pod, claim, runner, expected):
    out = es.decide(obj, pod, claim, runner, NOW, 10)
    assert {k: out[k] for k in expected} == expected, out


def test_a_new_pod_is_created_but_a_live_one_never_reapplied():
    decision = es.decide(_eaj(), None, None, None, NOW)
    desired = [_owned("PersistentVolumeClaim", "artifacts-j"), _owned("ConfigMap", "j-infer"),
               _owned("Pod", "ephemeralaccelerationjob-j")]
    plan = es.converge(desired, decision)
    assert [o["kind"] for o in plan["to_apply"]] == ["PersistentVolumeClaim", "ConfigMap", "Pod"]
    live_pod = _pod()  # differs from the rendered one: still not applied (a pod's spec is immutable)
    plan = es.converge(desired, decision, claim=desired[0], runner=desired[1], pod=live_pod)
    assert plan["to_apply"] == [] and plan["to_prune"] == []


def test_the_plan_prunes_what_the_decision_deletes():
    decision = es.decide(_eaj(_done(), pvcTTLSecondsAfterFinished=30), _pod("Succeeded", code=0), _claim(), _runner(), NOW)
    plan = es.converge([], decision, claim=_claim(), runner=_runner(), pod=_pod("Succeeded", code=0))
    assert plan["to_apply"] == []
    assert [(o["kind"], o["metadata"]["name"]) for o in plan["to_prune"]] == [  # the pod before its volume
        ("Pod", "ephemeralaccelerationjob-j"), ("ConfigMap", "j-infer"), ("PersistentVolumeClaim", "artifacts-j")]


def _cond(status, ctype):
    return next(c for c in status["conditions"] if c["type"] == ctype)


def test_status_of_a_success_and_a_failure():
    ok = es.status(_eaj(output={"path": "/artifacts/r/out.json"}),
                   es.decide(_eaj(), _pod("Succeeded", code=0), _claim(), _runner(), NOW))
    assert ok["phase"] == "Succeeded" and ok["artifactPath"] == "/artifacts/r/out.json" and ok["exitCode"] == 0
    assert ok["podName"] == "ephemeralaccelerationjob-j" and ok["finishedAt"] == FINISHED
    assert ok["startedAt"] == "2026-01-01T00:08:00Z" and ok["observedGeneration"] == 2
    assert _cond(ok, "Succeeded")["status"] == "True" and _cond(ok, "Failed")["reason"] == "Succeeded"
    assert _cond(ok, "ArtifactsAvailable")["status"] == "True" and _cond(ok, "Degraded")["reason"] == "AsExpected"
    bad = es.status(_eaj(), es.decide(_eaj(), _pod("Failed", code=5, message="unknown model"), _claim(), _runner(), NOW))
    assert bad["phase"] == "Failed" and bad["artifactPath"] is None and bad["message"] == "unknown model"
    assert _cond(bad, "Failed") == {"type": "Failed", "status": "True", "reason": "UnknownModel",
                                     "message": "unknown model", "observedGeneration": 2}
    running = es.status(_eaj(), es.decide(_eaj(), _pod(), _claim(), _runner(), NOW))
    assert running["finishedAt"] is None and running["artifactsExpireAt"] is None and running["exitCode"] is None
    assert _cond(running, "Succeeded")["reason"] == "Running"


def test_the_status_of_an_unchanged_run_is_the_same():
    """Written once, only on change: nothing in it moves with the clock between two looks."""
    obj = _eaj(_done(), ttlSecondsAfterFinished=60)
    first = es.status(obj, es.decide(obj, _pod("Succeeded", code=0), _claim(), _runner(), NOW))
    later = es.status(obj, es.decide(obj, _pod("Succeeded", code=0), _claim(), _runner(), "2026-01-01T00:09:50Z"))
    assert first == later


def test_rejected_status():
    st = es.rejected_status(_eaj(), {"reason": "InvalidSpec", "message": "spec.model: nope"})
    assert st["phase"] == "Failed" and st["message"] == "spec.model: nope"
    assert _cond(st, "Degraded")["status"] == "True" and _cond(st, "Failed")["reason"] == "InvalidSpec"


@pytest.mark.parametrize("status,spec,now,expected", [
    (_done(conditions=[{"type": "ArtifactsAvailable", "status": "False", "reason": "Expired"}]), {}, NOW, True),
    (_done(conditions=[{"type": "ArtifactsAvailable", "status": "True", "reason": "Bound"}]), {}, NOW, False),
    (_done(conditions=[{"type": "ArtifactsAvailable", "status": "False", "reason": "Deleted"}]),
     {"ttlSecondsAfterFinished": 600}, NOW, False),  # the pod's TTL has not passed
    (_done(conditions=[{"type": "ArtifactsAvailable", "status": "False", "reason": "Deleted"}]),
     {"ttlSecondsAfterFinished": 600}, "2026-01-01T00:19:00Z", True),
    ({"phase": "Running", "conditions": [{"type": "ArtifactsAvailable", "status": "False", "reason": "Expired"}]},
     {}, NOW, False),
    ({}, {}, NOW, False),
])
def test_settled(status, spec, now, expected):
    assert es.settled(_eaj(status, **spec), now) is expected


@pytest.mark.parametrize("requeue,period", [(None, ""), (0.2, "1s"), (239.5, "240s"), (3540.0, "3540s")])
def test_requeue(requeue, period):
    assert es.requeue({"requeue": requeue}) == period


# --- a pod admission refuses (Degraded PodCreateRefused, a requeue that backs off) -------------
QUOTA = "exceeded quota: compute, requested: pods=1, used: pods=1, limited: pods=1"
REFUSAL = "pod ephemeralaccelerationjob-j refused by ResourceQuota: " + QUOTA


def _status_body(message, code=403, reason="Forbidden"):
    import json

    return json.dumps({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                       "message": message, "reason": reason, "details": {"name": "ephemeralaccelerationjob-j",
                                                                          "kind": "pods"}, "code": code},
                      separators=(",", ":"))


def _failed(body, as_bytes=True):
    # kubernetes.core.k8s: "Failed to apply object: {exc.body}" (the body bytes as Python shows them)
    shown = repr((body + "\n").encode("utf-8")) if as_bytes else body
    return {"failed": True, "msg": "Failed to apply object: %s" % shown, "reason": "Forbidden"}


POD_REFUSAL_CASES = [
    ("quota, the body as bytes", _failed(_status_body('pods "ephemeralaccelerationjob-j" is forbidden: ' + QUOTA)),
     REFUSAL),
    ("quota, the body as text", _failed(_status_body('pods "ephemeralaccelerationjob-j" is forbidden: ' + QUOTA),
                                        as_bytes=False), REFUSAL),
    ("Pod Security, quotes and non-ASCII in the words",
     _failed(_status_body('pods "ephemeralaccelerationjob-j" is forbidden: violates PodSecurity "restricted:latest": '
                          'runAsNonRoot != true (container "inference" must set ´runAsNonRoot´)')),
     'pod ephemeralaccelerationjob-j refused by PodSecurity: violates PodSecurity "restricted:latest": runAsNonRoot '
     '!= true (container "inference" must set ´runAsNonRoot´)'),
    ("LimitRange", _failed(_status_body('pods "ephemeralaccelerationjob-j" is forbidden: maximum memory usage per '
                                        'Container is 1Gi, but limit is 2Gi')),
     "pod ephemeralaccelerationjob-j refused by LimitRange: maximum memory usage per Container is 1Gi, but limit "
     "is 2Gi"),
    ("control characters shown as text", _failed(_status_body('pods "ephemeralaccelerationjob-j" is forbidden: '
                                                              "no\x1b[2J\u2028{{ 7*7 }}")),
     "pod ephemeralaccelerationjob-j refused by admission: no [2J {{ 7*7 }}"),
    ("huge words bounded", _failed(_status_body('pods "ephemeralaccelerationjob-j" is forbidden: ' + "y" * 9000)),
     "pod ephemeralaccelerationjob-j refused by admission: " + "y" * 456 + "..."),
    ("another pod named", _failed(_status_body('pods "ephemeralaccelerationjob-k" is forbidden: ' + QUOTA)), ""),
    ("another object refused", _failed(_status_body('persistentvolumeclaims "artifacts-j" is forbidden: ' + QUOTA)),
     ""),
    ("not a 403", _failed(_status_body('pods "ephemeralaccelerationjob-j" is forbidden: ' + QUOTA, code=422)), ""),
    ("a conflict", _failed(_status_body("Operation cannot be fulfilled", code=409, reason="Conflict")), ""),
    ("a broken connection", {"failed": True, "msg": "Failed to apply object: ('Connection aborted.', "
                                                    "RemoteDisconnected('Remote end closed connection'))"}, ""),
    ("not JSON", {"failed": True, "msg": "Failed to apply object: b'{not json}'"}, ""),
    ("as the tasks after the apply read it (failed_when cleared failed)",
     dict(_failed(_status_body('pods "ephemeralaccelerationjob-j" is forbidden: ' + QUOTA)), failed=False), REFUSAL),
    ("a success", {"changed": True, "result": {}}, ""),
    ("skipped", {"skipped": True, "changed": False}, ""),
    ("odd msg", {"failed": True, "msg": ["x"]}, ""),
    ("none", None, ""),
]


@pytest.mark.parametrize("name,register,expected", POD_REFUSAL_CASES, ids=[c[0] for c in POD_REFUSAL_CASES])
def test_pod_refusal(name, register, expected):
    assert es.pod_refusal(register, "j") == expected


def _refused_since(since):
    return _eaj({"phase": "Pending", "conditions": [
        {"type": "Degraded", "status": "True", "reason": "PodCreateRefused", "lastTransitionTime": since}]})


@pytest.mark.parametrize("obj,requeue", [
    (_eaj(), 5.0),                                   # news: look again in 5 s
    (_refused_since("2026-01-01T00:09:50Z"), 10.0),  # refused for 10 s: as long again
    (_refused_since("2026-01-01T00:09:58Z"), 5.0),   # at least 5 s
    (_refused_since("2026-01-01T00:00:00Z"), 60.0),  # at most 60 s
    (_refused_since("2026-01-01T00:20:00Z"), 5.0),   # a transition in the future
    (_refused_since("soon"), 5.0), (_refused_since(None), 5.0),
])
def test_a_refused_pod_keeps_the_job_pending_and_backs_off(obj, requeue):
    pending = es.decide(obj, None, _owned("PersistentVolumeClaim", "artifacts-j"), None, NOW, 1)
    assert pending["phase"] == "Pending" and pending["requeue"] == 1
    decision = es.refused(pending, REFUSAL, obj, NOW)
    assert decision["requeue"] == requeue and decision["message"] == "the inference " + REFUSAL
    status = es.status(obj, decision)
    assert status["phase"] == "Pending" and status["message"] == "the inference " + REFUSAL
    degraded = [c for c in status["conditions"] if c["type"] == "Degraded"][0]
    assert (degraded["status"], degraded["reason"], degraded["message"]) == ("True", "PodCreateRefused", REFUSAL)
    assert es.requeue(decision) == "%ds" % requeue


def test_no_refusal_changes_nothing():
    pending = es.decide(_eaj(), None, None, None, NOW, 1)
    assert es.refused(pending, "", _eaj(), NOW) is pending
    running = dict(pending, phase="Running")
    assert es.refused(running, REFUSAL, _eaj(), NOW) is running
    assert [c for c in es.status(_eaj(), pending)["conditions"] if c["type"] == "Degraded"][0]["reason"] == \
        "AsExpected"
