"""Table-driven tests of plugins/module_utils/devserver_status.py."""

import pytest

from ansible_collections.torchdev.operator.plugins.module_utils import conditions, devserver_status

NOW = "2026-01-01T00:00:00Z"


def _sts(ready=0, replicas=1, gen=1, observed=1, updated=None, cur="r1", upd="r1"):
    return {"metadata": {"generation": gen},
            "status": {"readyReplicas": ready, "replicas": replicas, "observedGeneration": observed,
                       "updatedReplicas": replicas if updated is None else updated,
                       "currentRevision": cur, "updateRevision": upd}}


def _running_sts(replicas, ready):
    return dict(_sts(ready, replicas), spec={"replicas": replicas})


def _cr(status=None, generation=2, **spec):
    return {"metadata": {"name": "x", "namespace": "ns", "generation": generation}, "spec": spec,
            "status": status or {}}


def _progressing_since(ts, phase="Provisioning"):
    return {"phase": phase, "conditions": [
        {"type": "Progressing", "status": "True", "reason": "Provisioning", "lastTransitionTime": ts}]}


def _queued_with_eta(eta, since="2026-01-01T00:00:00Z"):
    return dict(_progressing_since(since, "Queued"), queue={"position": 1, "estimatedStartTime": eta})


def _running(restarts=0):
    return {"state": {"running": {"startedAt": NOW}}, "ready": True, "restartCount": restarts, "name": "dev"}


def _pod(index, phase="Running", ready=True, node="cpu-0", containers=None, name="x", deleting=False, label=True):
    meta = {"name": "%s-%d" % (name, index), "labels": {"apps.kubernetes.io/pod-index": str(index)} if label else {}}
    if deleting:
        meta["deletionTimestamp"] = NOW
    return {"metadata": meta, "spec": {"nodeName": node} if node else {},
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                       "containerStatuses": containers if containers is not None else [_running()]}}


CRASH = {"name": "dev", "ready": False, "restartCount": 3,
         "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}},
         "lastState": {"terminated": {"exitCode": 1}}}
EXIT_2 = {"name": "dev", "ready": False, "restartCount": 1, "state": {"terminated": {"exitCode": 2, "reason": "Error"}}}
EXIT_0 = {"name": "dev", "ready": False, "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}
CREATING = {"name": "dev", "ready": False, "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}}}
ENDPOINT = "x-0.x.ns.svc.cluster.local:29500"
PROBLEM = {"reason": "InvalidSpec", "message": "spec.env: TORCHDEV_NAME is reserved for the operator"}


@pytest.mark.parametrize("desired,sts,suspended,failed,phase", [
    (1, None, False, False, "Pending"),
    (1, _sts(0), False, False, "Provisioning"),
    (1, _sts(1), False, False, "Running"),
    (1, _sts(1, gen=2, observed=1), False, False, "Provisioning"),
    (1, _sts(1, upd="r2"), False, False, "Provisioning"),
    (0, _sts(0, 0), True, False, "Suspended"),
    (1, _sts(1), False, True, "Failed"),
])
def test_phase(desired, sts, suspended, failed, phase):
    assert devserver_status.phase(desired, sts, suspended, failed) == phase


@pytest.mark.parametrize("cr,sts,replicas,phase,ready_reason,progress_reason", [
    (_cr(), _sts(1), 1, "Running", "ServerReady", "Reconciled"),
    (_cr(), _sts(0), 1, "Provisioning", "PodsNotReady", "Provisioning"),
    (_cr({"phase": "Running"}), _sts(0, upd="r2"), 1, "Provisioning", "PodsNotReady", "RollingUpdate"),
    (_cr(suspend=True), _sts(0, 0), 0, "Suspended", "Suspended", "Reconciled"),
])
def test_devserver_status(cr, sts, replicas, phase, ready_reason, progress_reason):
    status = devserver_status.devserver_status(cr, sts, replicas, "h", "x-ssh", now=NOW)
    conds = {c["type"]: c for c in status["conditions"]}
    assert status["phase"] == phase
    assert conds["Ready"]["reason"] == ready_reason and conds["Progressing"]["reason"] == progress_reason
    assert conds["Degraded"] == {"type": "Degraded", "status": "False", "reason": "AsExpected", "message": "",
                                 "observedGeneration": 2}
    assert status["observedGeneration"] == 2 and status["flavorSpecHash"] == "h"
    assert status["ready"] == "%d/%d" % (status["readyReplicas"], replicas)
    assert status["sshEndpoint"] == "x-ssh.ns.svc.cluster.local:22" and status["sshCommand"] == "devctl ssh x -n ns"


def test_start_time_is_kept_while_running():
    assert devserver_status.devserver_status(_cr(), _sts(1), 1, "h", now="2026-01-01T00:01:00Z")["startTime"] == "2026-01-01T00:01:00Z"
    running = _cr({"phase": "Running", "startTime": "2026-01-01T00:00:30Z"})
    assert devserver_status.devserver_status(running, _sts(1), 1, "h", now="2026-01-01T00:01:00Z")["startTime"] == "2026-01-01T00:00:30Z"
    assert "startTime" not in devserver_status.devserver_status(_cr(), _sts(0), 1, "h", now="2026-01-01T00:01:00Z")


@pytest.mark.parametrize("status,now,expected", [
    (_progressing_since("2026-01-01T00:00:00Z"), "2026-01-01T00:00:01Z", "2s"),      # just started
    (_progressing_since("2026-01-01T00:00:00Z"), "2026-01-01T00:01:00Z", "15s"),     # backing off
    (_progressing_since("2026-01-01T00:00:00Z"), "2026-01-01T02:00:00Z", "60s"),     # capped
    (_progressing_since("2026-01-01T00:00:00Z", "Pending"), "2026-01-01T00:00:20Z", "5s"),
    (_progressing_since("2026-01-01T00:00:00Z", "Queued"), "2026-01-01T00:00:08Z", "2s"),  # polls for admission
    (_progressing_since("2026-01-01T00:00:00Z", "Queued"), "2026-01-01T05:00:00Z", "60s"),
    # a queued server with an ETA: looked at at that second, then backing off from it
    (_queued_with_eta("2026-01-01T05:00:30Z"), "2026-01-01T05:00:00Z", "30s"),
    (_queued_with_eta("2026-01-01T07:00:00Z"), "2026-01-01T05:00:00Z", "60s"),   # far off: the backoff
    (_queued_with_eta("2026-01-01T05:00:01Z"), "2026-01-01T05:00:00Z", "2s"),    # the minimum
    (_queued_with_eta("2026-01-01T05:00:00Z"), "2026-01-01T05:00:01Z", "2s"),    # just passed
    (_queued_with_eta("2026-01-01T05:00:00Z"), "2026-01-01T05:00:40Z", "10s"),   # a quarter of the time since
    (_queued_with_eta("2026-01-01T00:00:00Z"), "2026-01-01T05:00:00Z", "60s"),   # capped
    ({"phase": "Provisioning"}, "2026-01-01T00:00:00Z", "2s"),                         # no condition yet
    (dict(_progressing_since("2026-01-01T00:00:00Z", "Running"), reservation={"startedAt": "2026-01-01T00:00:00Z"}),
     "2026-01-01T00:00:01Z", ""),
    # Running without a reservation under way: the replicas became ready during the run (the
    # lifecycle saw them starting, the apply's answer ready); the next run starts it
    (_progressing_since("2026-01-01T00:00:00Z", "Running"), "2026-01-01T00:00:01Z", "2s"),
    (dict(_progressing_since("2026-01-01T00:00:00Z", "Running"),
          reservation={"startedAt": "2026-01-01T00:00:00Z", "endedAt": "2026-01-01T00:00:00Z"}), "2026-01-01T00:00:01Z", "2s"),
    ({"phase": "Suspended"}, None, ""),
    ({}, None, ""),
    # a home the role may not grow yet: looked at every 10 minutes (the StorageClass is not watched)
    ({"phase": "Running", "reservation": {"startedAt": "2026-01-01T00:00:00Z"},
      "conditions": [{"type": "HomeResized", "status": "False", "reason": "ResizeNotSupported"}]}, None, "600s"),
    ({"phase": "Running", "reservation": {"startedAt": "2026-01-01T00:00:00Z"},
      "conditions": [{"type": "HomeResized", "status": "True", "reason": "AsRequested"}]}, None, ""),
    (dict(_progressing_since("2026-01-01T00:00:00Z"), conditions=[
        {"type": "HomeResized", "status": "False", "reason": "ResizePending"},
        {"type": "Progressing", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]),
     "2026-01-01T00:00:01Z", "2s"),                                                 # the sooner wins
    ({"phase": "Running", "conditions": ["junk", None]}, "2026-01-01T00:00:01Z", "2s"),
])
def test_requeue_period(status, now, expected):
    assert devserver_status.requeue_period(status, now) == expected


def test_requeue_period_rejects_bad_time():
    with pytest.raises(Exception, match="RFC 3339"):
        devserver_status.requeue_period(_progressing_since("yesterday"), "2026-01-01T00:00:00Z")


@pytest.mark.parametrize("pod,expected", [
    (_pod(0), None),
    (_pod(0, containers=[CREATING], ready=False), None),
    (_pod(0, phase="Pending", ready=False, node=None, containers=[]), None),
    (_pod(0, containers=[CRASH], ready=False), "CrashLoopBackOff, 3 restarts"),
    (_pod(0, containers=[EXIT_2], ready=False), "container dev exited with code 2 (Error), 1 restart"),
    (_pod(0, containers=[EXIT_0], ready=False), None),
    (_pod(0, phase="Failed", ready=False, containers=[EXIT_2]), "pod Failed, 1 restart"),
    (dict(_pod(0, containers=[dict(CREATING, state={"waiting": {"reason": "ImagePullBackOff"}})], ready=False)),
     "ImagePullBackOff, 0 restarts"),
    ({}, None),
])
def test_pod_failure(pod, expected):
    assert devserver_status.pod_failure(pod) == expected


@pytest.mark.parametrize("name,pods,replicas,expected", [
    ("no pods yet", [], 2, [{"index": 0, "podName": "x-0", "ready": False},
                            {"index": 1, "podName": "x-1", "ready": False}]),
    ("all running", [_pod(1, node="n1"), _pod(0, node="n0")], 2,
     [{"index": 0, "podName": "x-0", "ready": True, "phase": "Running", "nodeName": "n0", "restarts": 0},
      {"index": 1, "podName": "x-1", "ready": True, "phase": "Running", "nodeName": "n1", "restarts": 0}]),
    ("pending unscheduled", [_pod(0, phase="Pending", ready=False, node=None)], 1,
     [{"index": 0, "podName": "x-0", "ready": False, "phase": "Pending", "restarts": 0}]),
    ("index from the name", [_pod(0, label=False)], 1,
     [{"index": 0, "podName": "x-0", "ready": True, "phase": "Running", "nodeName": "cpu-0", "restarts": 0}]),
    ("restarts summed over containers", [_pod(0, containers=[CRASH, EXIT_2], ready=False)], 1,
     [{"index": 0, "podName": "x-0", "ready": False, "phase": "Running", "nodeName": "cpu-0", "restarts": 4}]),
    ("scaling down: extra ordinal ignored", [_pod(0), _pod(1)], 1,
     [{"index": 0, "podName": "x-0", "ready": True, "phase": "Running", "nodeName": "cpu-0", "restarts": 0}]),
    ("suspended", [_pod(0)], 0, []),
    ("deleting pod is not the replica", [_pod(0, deleting=True)], 1, [{"index": 0, "podName": "x-0", "ready": False}]),
])
def test_replica_statuses(name, pods, replicas, expected):
    assert devserver_status.replica_statuses("x", pods, replicas) == expected, name


@pytest.mark.parametrize("name,cr,sts,replicas,pods,endpoint,phase,degraded,message", [
    ("ready distributed", _cr(mode="distributed"), _sts(4, 4), 4, [_pod(i) for i in range(4)], ENDPOINT,
     "Running", "AsExpected", ""),
    ("starting", _cr(mode="distributed"), _sts(1, 4), 4, [_pod(0)], ENDPOINT, "Provisioning", "AsExpected", ""),
    ("crash looping replica", _cr(mode="distributed"), _sts(3, 4), 4,
     [_pod(0), _pod(1), _pod(2, containers=[CRASH], ready=False), _pod(3)], ENDPOINT,
     "Provisioning", "PodFailed", "replica 2 (pod x-2): CrashLoopBackOff, 3 restarts"),
    ("two failing replicas", _cr(mode="distributed"), _sts(2, 4), 4,
     [_pod(0), _pod(1), _pod(3, phase="Failed", ready=False, containers=[EXIT_2]),
      _pod(2, containers=[EXIT_2], ready=False)], ENDPOINT, "Provisioning", "PodFailed",
     "replica 2 (pod x-2): container dev exited with code 2 (Error), 1 restart; "
     "replica 3 (pod x-3): pod Failed, 1 restart"),
    ("standalone crash", _cr(), _sts(0, 1), 1, [_pod(0, containers=[CRASH], ready=False)], "",
     "Provisioning", "PodFailed", "replica 0 (pod x-0): CrashLoopBackOff, 3 restarts"),
    ("failing pod of a removed ordinal is ignored", _cr(mode="distributed"), _sts(2, 2), 2,
     [_pod(0), _pod(1), _pod(2, containers=[CRASH], ready=False)], ENDPOINT, "Running", "AsExpected", ""),
    ("suspended", _cr(suspend=True), _sts(0, 0), 0, [_pod(0, containers=[CRASH], ready=False)], "",
     "Suspended", "AsExpected", ""),
])
def test_devserver_status_replicas_and_pod_failed(name, cr, sts, replicas, pods, endpoint, phase, degraded, message):
    status = devserver_status.devserver_status(cr, sts, replicas, "h", None, NOW, pods, endpoint)
    conds = {c["type"]: c for c in status["conditions"]}
    assert status["phase"] == phase, name
    assert conds["Degraded"]["reason"] == degraded and conds["Degraded"]["message"] == message, name
    assert conds["Degraded"]["status"] == ("True" if degraded == "PodFailed" else "False"), name
    assert [r["index"] for r in status["replicaStatuses"]] == list(range(replicas)), name
    assert status["rendezvousEndpoint"] == (endpoint or None), name


def test_unchanged_status_needs_no_write():
    """What the apiserver stores reads back equal: an unchanged Ready server writes nothing."""
    pods = [_pod(i) for i in range(4)]
    desired = devserver_status.devserver_status(_cr(mode="distributed"), _sts(4, 4), 4, "h", None, NOW, pods, ENDPOINT)
    live = dict(desired, conditions=[dict(c, lastTransitionTime="T0") for c in desired["conditions"]])
    live = {k: v for k, v in live.items() if v is not None}
    assert conditions.status_changes(live, desired, desired["conditions"], 2) is None
    standalone = devserver_status.devserver_status(_cr(), _sts(1, 1), 1, "h", "x-ssh", NOW, [_pod(0)], "")
    live = {k: v for k, v in standalone.items() if v is not None}
    live["conditions"] = [dict(c, lastTransitionTime="T0") for c in standalone["conditions"]]
    assert conditions.status_changes(live, standalone, standalone["conditions"], 2) is None


@pytest.mark.parametrize("sts,pods,phase,ready,ready_reason", [
    # never created: Failed, nothing runs
    (None, [], "Failed", "False", "ReconcileFailed"),
    # running: the rejected change does not take the running server down
    (_running_sts(2, 2), [_pod(0), _pod(1)], "Running", "True", "ServerReady"),
    # still starting when the change came: as the pods say
    (_running_sts(2, 1), [_pod(0), _pod(1, ready=False)], "Provisioning", "False", "PodsNotReady"),
    # suspended (scaled to 0): stays Suspended
    (_running_sts(0, 0), [], "Suspended", "False", "Suspended"),
])
def test_rejected_spec_status(sts, pods, phase, ready, ready_reason):
    cr = _cr({"phase": "Running", "sshEndpoint": "x-ssh.ns.svc.cluster.local:22"}, mode="distributed",
             distributed={"worldSize": 2})
    status = devserver_status.rejected_spec_status(cr, PROBLEM, sts, pods, now="2026-01-01T00:00:00Z")
    conds = {c["type"]: c for c in status["conditions"]}
    assert status["phase"] == phase and status["observedGeneration"] == 2
    assert (conds["Ready"]["status"], conds["Ready"]["reason"]) == (ready, ready_reason)
    assert (conds["Degraded"]["status"], conds["Degraded"]["reason"]) == ("True", "InvalidSpec")
    assert "TORCHDEV_NAME" in conds["Degraded"]["message"]
    if sts:
        assert conds["Progressing"]["reason"] == "SpecRejected" and conds["Progressing"]["status"] == "False"
        assert len(status["replicaStatuses"]) == sts["spec"]["replicas"]
    # what came from the last applied spec is left as it is (not in the patch)
    assert set(status) <= {"phase", "observedGeneration", "conditions", "replicas", "readyReplicas", "ready",
                           "replicaStatuses", "startTime"}


# --- an image without sshd (the entrypoint exits IMAGE_LACKS_SSH_EXIT_CODE with a message) -------
LACKS = "torchdev: the image has no /usr/sbin/sshd: install openssh-server in it, use the torchdev devserver image, " \
        "or set spec.enableSSH false"
SAID = ("image pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime has no /usr/sbin/sshd: install openssh-server in it, "
        "use the torchdev devserver image, or set spec.enableSSH false")
IMAGE = "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"


def _ended(code=78, message=LACKS, where="state", ready=False, image=IMAGE):
    term = {"terminated": {"exitCode": code, "reason": "Error", "message": message}}
    cs = {"name": "dev", "ready": ready, "restartCount": 2, "image": image}
    if where == "state":
        cs["state"] = term
    else:
        cs.update(state={"waiting": {"reason": "CrashLoopBackOff"}} if where == "crashloop"
                  else {"running": {"startedAt": NOW}}, lastState=term)
    return cs


@pytest.mark.parametrize("name,pod,expected", [
    ("terminated now", _pod(0, ready=False, containers=[_ended()]), SAID),
    ("crash loop: the last state", _pod(0, ready=False, containers=[_ended(where="crashloop")]), SAID),
    ("restarted, not ready yet", _pod(0, ready=False, containers=[_ended(where="running")]), SAID),
    ("ready now: an old last state does not count", _pod(0, containers=[_ended(where="running", ready=True)]), None),
    ("another exit code", _pod(0, ready=False, containers=[_ended(code=1)]), None),
    ("exit code as a string", _pod(0, ready=False, containers=[_ended(code="78")]), SAID),
    ("exit code not a number", _pod(0, ready=False, containers=[_ended(code="x")]), None),
    ("another message", _pod(0, ready=False, containers=[_ended(message="sshd: no hostkeys available")]), None),
    ("logs under FallbackToLogsOnError: the last line",
     _pod(0, ready=False, containers=[_ended(message="some output\n" + LACKS + "\n\n")]), SAID),
    ("message too long", _pod(0, ready=False, containers=[_ended(message=LACKS + "x" * 600)]), None),
    ("control characters", _pod(0, ready=False, containers=[_ended(message=LACKS + "\x1b[31m")]), None),
    ("no message", _pod(0, ready=False, containers=[_ended(message=None)]), None),
    ("image from the pod spec", dict(_pod(0, ready=False, containers=[_ended(image="")]),
                                     spec={"containers": [{"name": "dev", "image": IMAGE}]}), SAID),
    ("hostile image bounded, no spaces", _pod(0, ready=False, containers=[_ended(image="a b\n" + "c" * 400)]),
     "image ab" + "c" * 254 + " has no /usr/sbin/sshd: install openssh-server in it, use the torchdev devserver "
     "image, or set spec.enableSSH false"),
    ("no image at all", _pod(0, ready=False, containers=[_ended(image=None)]),
     "image (unknown) has no /usr/sbin/sshd: install openssh-server in it, use the torchdev devserver image, "
     "or set spec.enableSSH false"),
    ("running", _pod(0), None),
    ("hostile: not a dict", "pod", None),
    ("hostile: statuses not dicts", {"status": {"containerStatuses": ["x", None]}, "spec": "y"}, None),
    ("hostile: terminated not a dict", _pod(0, ready=False, containers=[{"state": {"terminated": "x"}}]), None),
])
def test_image_lacks_ssh(name, pod, expected):
    assert devserver_status.image_lacks_ssh(pod) == expected, name


@pytest.mark.parametrize("name,cr,pods,phase,ready,progressing,degraded,message", [
    ("standalone: Failed, Degraded ImageLacksSSH", _cr(), [_pod(0, ready=False, containers=[_ended(where="crashloop")])],
     "Failed", ("False", "PodsNotReady"), ("False", "Reconciled"), ("True", "ImageLacksSSH"),
     "replica 0 (pod x-0): " + SAID),
    ("distributed: every replica named", _cr(mode="distributed"),
     [_pod(0, ready=False, containers=[_ended()]), _pod(1, ready=False, containers=[_ended(where="crashloop")])],
     "Failed", ("False", "PodsNotReady"), ("False", "Reconciled"), ("True", "ImageLacksSSH"),
     "replica 0 (pod x-0): " + SAID + "; replica 1 (pod x-1): " + SAID),
    ("another crash stays PodFailed", _cr(), [_pod(0, ready=False, containers=[CRASH])],
     "Provisioning", ("False", "PodsNotReady"), ("True", "Provisioning"), ("True", "PodFailed"),
     "replica 0 (pod x-0): CrashLoopBackOff, 3 restarts"),
    ("suspended: nothing reported", _cr(suspend=True), [_pod(0, ready=False, containers=[_ended()])],
     "Suspended", ("False", "PodsNotReady"), ("False", "Reconciled"), ("False", "AsExpected"), ""),
])
def test_devserver_status_image_lacks_ssh(name, cr, pods, phase, ready, progressing, degraded, message):
    replicas = 0 if cr["spec"].get("suspend") else len(pods)
    status = devserver_status.devserver_status(cr, _sts(0, replicas), replicas, "h", None, NOW, pods, "")
    conds = {c["type"]: c for c in status["conditions"]}
    assert status["phase"] == phase, name
    assert (conds["Degraded"]["status"], conds["Degraded"]["reason"]) == degraded, name
    assert conds["Degraded"]["message"] == message, name
    assert (conds["Progressing"]["status"], conds["Progressing"]["reason"]) == progressing, name
    assert conds["Ready"]["status"] == ready[0], name
    # Failed is no reason to poll: the next look is the next change (the image or enableSSH).
    if phase == "Failed":
        assert devserver_status.requeue_period(status, now=NOW) == "", name


def _degraded(reason, status="True", message="m"):
    return {"conditions": [{"type": "Ready", "status": "False", "reason": "PodsNotReady"},
                           {"type": "Degraded", "status": status, "reason": reason, "message": message}]}


@pytest.mark.parametrize("name,old,new,expected", [
    ("news: one Event", _degraded("AsExpected", "False"), _degraded("ImageLacksSSH"),
     {"reason": "ImageLacksSSH", "message": "m"}),
    ("first status ever", {}, _degraded("ImageLacksSSH"), {"reason": "ImageLacksSSH", "message": "m"}),
    ("from PodFailed", _degraded("PodFailed"), _degraded("ImageLacksSSH"), {"reason": "ImageLacksSSH", "message": "m"}),
    ("still the same: no Event", _degraded("ImageLacksSSH"), _degraded("ImageLacksSSH", message="other"), None),
    ("PodFailed is not announced", _degraded("AsExpected", "False"), _degraded("PodFailed"), None),
    ("recovered", _degraded("ImageLacksSSH"), _degraded("AsExpected", "False"), None),
    ("hostile old", "x", _degraded("ImageLacksSSH"), {"reason": "ImageLacksSSH", "message": "m"}),
    ("hostile new", {}, {"conditions": ["x", None]}, None),
    ("none", None, None, None),
])
def test_degraded_event(name, old, new, expected):
    assert devserver_status.degraded_event(old, new) == expected, name


# --- a pod admission refused: Degraded PodCreateRefused (issue 26 item 5) ----------------------

QUOTA_WHY = ("exceeded quota: compute, requested: requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=1, "
             "limited: requests.nvidia.com/gpu=1")
LIMIT_WHY = "maximum cpu usage per Container is 2, but limit is 4"
PSA_WHY = 'violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false'


def _refused_sts(uid="sts-uid", created="2026-01-01T00:00:00Z", replicas=1):
    sts = _sts(0, 0)
    sts["metadata"].update(name="x", uid=uid, creationTimestamp=created)
    sts["spec"] = {"replicas": replicas}
    return sts


def _failed_create(pod="x-0", why=QUOTA_WHY, when="2026-01-01T00:05:00Z", uid="sts-uid", **changes):
    event = {"type": "Warning", "reason": "FailedCreate", "lastTimestamp": when,
             "involvedObject": {"kind": "StatefulSet", "name": "x", "uid": uid, "namespace": "ns"},
             "message": 'create Pod %s in StatefulSet x failed error: pods "%s" is forbidden: %s' % (pod, pod, why)}
    event.update(changes)
    return event


@pytest.mark.parametrize("name,events,pods,replicas,expected", [
    ("quota", [_failed_create()], [], 1, ["replica 0 (pod x-0): refused by ResourceQuota: " + QUOTA_WHY]),
    ("limit range", [_failed_create(why=LIMIT_WHY)], [], 1, ["replica 0 (pod x-0): refused by LimitRange: " + LIMIT_WHY]),
    ("pod security", [_failed_create(why=PSA_WHY)], [], 1, ["replica 0 (pod x-0): refused by PodSecurity: " + PSA_WHY]),
    ("another webhook", [_failed_create(why='admission webhook "x" denied the request: no')], [], 1,
     ['replica 0 (pod x-0): refused by admission: admission webhook "x" denied the request: no']),
    ("the newest of a replica counts",
     [_failed_create(why=PSA_WHY, when="2026-01-01T00:09:00Z"), _failed_create(when="2026-01-01T00:02:00Z")], [], 1,
     ["replica 0 (pod x-0): refused by PodSecurity: " + PSA_WHY]),
    ("eventTime (events.k8s.io) when no lastTimestamp",
     [_failed_create(lastTimestamp=None, eventTime="2026-01-01T00:05:00.123456Z")], [], 1,
     ["replica 0 (pod x-0): refused by ResourceQuota: " + QUOTA_WHY]),
    ("each replica, in order", [_failed_create(pod="x-1"), _failed_create(pod="x-0")], [], 2,
     ["replica 0 (pod x-0): refused by ResourceQuota: " + QUOTA_WHY,
      "replica 1 (pod x-1): refused by ResourceQuota: " + QUOTA_WHY]),
    ("the pod exists now: cleared", [_failed_create()], [_pod(0, ready=False)], 1, []),
    ("a pod being deleted does not clear it", [_failed_create()], [_pod(0, deleting=True)], 1,
     ["replica 0 (pod x-0): refused by ResourceQuota: " + QUOTA_WHY]),
    ("older than the StatefulSet: stale", [_failed_create(when="2025-12-31T23:59:59Z")], [], 1, []),
    ("another StatefulSet of that name (uid)", [_failed_create(uid="old-uid")], [], 1, []),
    ("an ordinal not wanted (scaled down)", [_failed_create(pod="x-1")], [], 1, []),
    ("another StatefulSet's pod", [_failed_create(pod="y-0")], [], 1, []),
    ("leading zero is no ordinal", [_failed_create(pod="x-00")], [], 1, []),
    ("not a Warning", [_failed_create(type="Normal")], [], 1, []),
    ("another reason", [_failed_create(reason="SuccessfulCreate")], [], 1, []),
    ("about a Job", [_failed_create(involvedObject={"kind": "Job", "name": "x"})], [], 1, []),
    ("no time at all", [_failed_create(lastTimestamp=None)], [], 1, []),
    ("an odd time", [_failed_create(when="yesterday")], [], 1, []),
    ("no forbidden pod in the message", [_failed_create(message="create Pod x-0 failed: timeout")], [], 1, []),
    ("a message that is not text", [_failed_create(message={"a": 1})], [], 1, []),
    ("huge message: bounded", [_failed_create(why="exceeded quota: " + "q" * 100000)], [], 1,
     [("replica 0 (pod x-0): refused by ResourceQuota: exceeded quota: " + "q" * 512)[:509] + "..."]),
    ("control characters and Jinja shown flat", [_failed_create(why="{{ lookup('env', 'HOME') }}\n\x1b[31mno")], [], 1,
     ["replica 0 (pod x-0): refused by admission: {{ lookup('env', 'HOME') }} [31mno"]),
    ("hostile entries", [None, "x", 3, {"involvedObject": "x"}, {"reason": "FailedCreate", "type": "Warning"},
                         _failed_create(involvedObject=None), _failed_create(series="x", metadata=5)], [None, {"metadata": 3}],
     1, ["replica 0 (pod x-0): refused by ResourceQuota: " + QUOTA_WHY]),
    ("no events", None, [], 1, []),
    ("odd replicas", [_failed_create()], [], "many", []),
])
def test_pod_create_refusals(name, events, pods, replicas, expected):
    got = devserver_status.pod_create_refusals("x", _refused_sts(), events, pods, replicas)
    assert got == expected, name
    assert all(len(line) <= 512 for line in got), name


def test_pod_create_refusals_without_a_statefulset():
    assert devserver_status.pod_create_refusals("x", None, [_failed_create()], [], 1) == []
    assert devserver_status.pod_create_refusals(None, _refused_sts(), [_failed_create()], [], 1) == []


@pytest.mark.parametrize("name,cr,events,pods,ready_n,degraded,phase", [
    ("refused: Degraded, not an endless Starting", _cr(), [_failed_create()], [], 0,
     ("True", "PodCreateRefused", "replica 0 (pod x-0): refused by ResourceQuota: " + QUOTA_WHY), "Provisioning"),
    ("created since: cleared", _cr(), [_failed_create()], [_pod(0, ready=False)], 0,
     ("False", "AsExpected", ""), "Provisioning"),
    ("running: cleared", _cr(), [_failed_create()], [_pod(0)], 1, ("False", "AsExpected", ""), "Running"),
    ("suspended: nothing to create", _cr(suspend=True), [_failed_create()], [], 0, ("False", "AsExpected", ""),
     "Suspended"),
])
def test_devserver_status_pod_create_refused(name, cr, events, pods, ready_n, degraded, phase):
    sts = _refused_sts()
    sts["status"].update(readyReplicas=ready_n, replicas=len(pods), updatedReplicas=len(pods) or 1)
    replicas = 0 if cr["spec"].get("suspend") else 1
    status = devserver_status.devserver_status(cr, sts, replicas, "h", None, NOW, pods, "", events=events)
    conds = {c["type"]: c for c in status["conditions"]}
    assert status["phase"] == phase, name
    assert (conds["Degraded"]["status"], conds["Degraded"]["reason"], conds["Degraded"]["message"]) == degraded, name
    if degraded[0] == "True":
        assert (conds["Ready"]["status"], conds["Progressing"]["status"]) == ("False", "True"), name
        # One Warning Event when it is news, none while it holds.
        event = devserver_status.degraded_event({}, status)
        assert event == {"reason": "PodCreateRefused", "message": degraded[2]}, name
        assert devserver_status.degraded_event(status, status) is None, name
        # Still looked at again while it waits for admission (the quota may be raised).
        assert devserver_status.requeue_period(status, now=NOW), name


# --- a home the StorageClass cannot grow: HomeResized (issue 26 item 5) -------------------------

NOT_SUPPORTED = {"claim": "home-x-0", "storageClass": "fixed", "from": "10Gi", "to": "20Gi",
                 "reason": "ResizeNotSupported", "message": "claim home-x-0 cannot grow from 10Gi to 20Gi: no"}
PENDING = {"claim": "home-x-1", "storageClass": "fixed", "from": "10Gi", "to": "20Gi",
           "reason": "ResizePending", "message": "claim home-x-1 is Pending, not bound: it grows once bound"}


@pytest.mark.parametrize("refused, expected", [
    ([], ("True", "AsRequested", "every home claim requests spec.persistentHomeSize")),
    ([NOT_SUPPORTED], ("False", "ResizeNotSupported", NOT_SUPPORTED["message"])),
    ([PENDING], ("False", "ResizePending", PENDING["message"])),
    # not supported wins: it needs an admin, the other passes by itself
    ([PENDING, NOT_SUPPORTED], ("False", "ResizeNotSupported", NOT_SUPPORTED["message"])),
    ([NOT_SUPPORTED, dict(NOT_SUPPORTED, claim="home-x-1", message="m2")],
     ("False", "ResizeNotSupported", NOT_SUPPORTED["message"] + "; m2")),
    ([dict(NOT_SUPPORTED, message="y" * 5000)], ("False", "ResizeNotSupported", "y" * 1024)),
    # hostile: odd entries, reasons, messages
    (None, ("True", "AsRequested", "every home claim requests spec.persistentHomeSize")),
    ("x", ("True", "AsRequested", "every home claim requests spec.persistentHomeSize")),
    ([None, 3, "x"], ("True", "AsRequested", "every home claim requests spec.persistentHomeSize")),
    ([{"reason": "Odd", "message": None}], ("False", "ResizeNotSupported", "a home claim cannot grow")),
    ([dict(NOT_SUPPORTED, message=None)], ("False", "ResizeNotSupported", "a home claim cannot grow")),
])
def test_home_resized_condition(refused, expected):
    cond = devserver_status.home_resized_condition(refused, 4)
    assert (cond["type"], cond["status"], cond["reason"], cond["message"], cond["observedGeneration"]) == (
        ("HomeResized",) + expected + (4,))


def test_devserver_status_home_resized_is_not_degraded_and_events_once():
    sts = _running_sts(1, 1)
    status = devserver_status.devserver_status(_cr(), sts, 1, "h", None, NOW, [_pod(0)], "", home_refused=[NOT_SUPPORTED])
    conds = {c["type"]: c for c in status["conditions"]}
    assert status["phase"] == "Running" and conds["Ready"]["status"] == "True"
    assert (conds["Degraded"]["status"], conds["Degraded"]["reason"]) == ("False", "AsExpected")
    assert (conds["HomeResized"]["status"], conds["HomeResized"]["reason"]) == ("False", "ResizeNotSupported")
    # ONE Event when it is news, none while it holds, none for a pending claim or when it clears
    assert devserver_status.status_events({}, status) == [{"reason": "ResizeNotSupported",
                                                           "message": NOT_SUPPORTED["message"]}]
    assert devserver_status.status_events(status, status) == []
    pending = devserver_status.devserver_status(_cr(), sts, 1, "h", None, NOW, [_pod(0)], "", home_refused=[PENDING])
    assert devserver_status.status_events({}, pending) == []
    cleared = devserver_status.devserver_status(_cr(), sts, 1, "h", None, NOW, [_pod(0)], "", home_refused=[])
    assert {c["type"]: c for c in cleared["conditions"]}["HomeResized"]["reason"] == "AsRequested"
    assert devserver_status.status_events(status, cleared) == []
    # again after it cleared: news again
    assert len(devserver_status.status_events(cleared, status)) == 1
    # without the argument (callers that do not observe claims) the condition is left out
    plain = devserver_status.devserver_status(_cr(), sts, 1, "h", None, NOW, [_pod(0)], "")
    assert "HomeResized" not in {c["type"] for c in plain["conditions"]}
    # no further requeue for it: a server at rest is not run again (zero writes, no retry loop)
    assert devserver_status.requeue_period(status, now=NOW) == devserver_status.requeue_period(cleared, now=NOW)


@pytest.mark.parametrize("old, new", [
    (None, None), ("x", []), ({"conditions": "x"}, {"conditions": [None, 1, {"type": "HomeResized"}]}),
    ({}, {"conditions": [{"type": "HomeResized", "status": "False", "reason": "ResizeNotSupported", "message": 5}]}),
])
def test_status_events_hostile(old, new):
    events = devserver_status.status_events(old, new)
    assert isinstance(events, list) and all(isinstance(e["message"], str) for e in events)


def test_status_events_both_at_once():
    degraded = {"type": "Degraded", "status": "True", "reason": "PodCreateRefused", "message": "q"}
    home = {"type": "HomeResized", "status": "False", "reason": "ResizeNotSupported", "message": "c"}
    assert devserver_status.status_events({}, {"conditions": [degraded, home]}) == [
        {"reason": "PodCreateRefused", "message": "q"}, {"reason": "ResizeNotSupported", "message": "c"}]


# --- status.ssh: the direct address of a NodePort / LoadBalancer <name>-ssh Service (issue 27.6) ---
NODE_PORT = {"serviceType": "NodePort", "host": "203.0.113.7", "port": 30022, "command": "ssh -p 30022 dev@203.0.113.7"}
LB_PENDING = {"serviceType": "LoadBalancer", "message": "waiting for the load balancer's address"}


def _stored(status):
    """The status as the API server stores it after the merge patch: no null values."""
    def prune(value):
        if isinstance(value, dict):
            return {k: prune(v) for k, v in value.items() if v is not None}
        return value
    return prune(dict(status, conditions=[dict(c, lastTransitionTime="T0") for c in status["conditions"]]))


@pytest.mark.parametrize("old_ssh,new_ssh,patch", [
    # a direct address appears: every key, those not set as null (the merge patch removes them)
    (None, NODE_PORT, dict(NODE_PORT, message=None)),
    # the same address: no write
    (NODE_PORT, NODE_PORT, None),
    # the load balancer got its address: the message goes
    (LB_PENDING, {"serviceType": "LoadBalancer", "host": "lb.example.com", "port": 22, "command": "ssh -p 22 dev@lb.example.com"},
     {"serviceType": "LoadBalancer", "host": "lb.example.com", "port": 22, "command": "ssh -p 22 dev@lb.example.com",
      "message": None}),
    # back to ClusterIP: status.ssh goes
    (NODE_PORT, None, None),
    # ClusterIP all along: nothing written
    (None, None, "absent"),
])
def test_status_ssh(old_ssh, new_ssh, patch):
    pods = [_pod(0)]
    before = devserver_status.devserver_status(_cr(), _sts(1, 1), 1, "h", "x-ssh", NOW, pods, "", ssh=old_ssh)
    live = _stored(before)
    assert ("ssh" in live) == (old_ssh is not None)
    desired = devserver_status.devserver_status(_cr(), _sts(1, 1), 1, "h", "x-ssh", NOW, pods, "", ssh=new_ssh)
    changes = conditions.status_changes(live, desired, desired["conditions"], 2)
    if patch == "absent" or (old_ssh == new_ssh):
        assert changes is None
    elif new_ssh is None:
        assert changes == {"ssh": None}
    else:
        assert changes == {"ssh": patch}
