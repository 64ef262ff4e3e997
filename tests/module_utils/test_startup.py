"""status.startup: the time to Ready of a start, by phase (issue 13.2)."""
import pytest

from ansible_collections.torchdev.operator.plugins.module_utils.startup import describe, startup

CREATED = "2026-01-01T00:00:00Z"


def t(seconds):
    return "2026-01-01T00:%02d:%02dZ" % divmod(seconds, 60)


def pod(i, created=None, scheduled=None, sandbox=None, started=None, ready=None, deleting=False):
    conds = []
    for ctype, when in (("PodScheduled", scheduled), ("PodReadyToStartContainers", sandbox), ("Ready", ready)):
        if when is not None:
            conds.append({"type": ctype, "status": "True", "lastTransitionTime": t(when)})
    meta = {"name": "x-%d" % i, "creationTimestamp": t(created if created is not None else 0)}
    if deleting:
        meta["deletionTimestamp"] = t(99)
    state = {"running": {"startedAt": t(started)}} if started is not None else {"waiting": {"reason": "ContainerCreating"}}
    return {"metadata": meta, "status": {"conditions": conds, "containerStatuses": [{"name": "dev", "state": state}]}}


def cr(old=None, suspend=False):
    return {"metadata": {"name": "x", "creationTimestamp": CREATED}, "spec": {"suspend": suspend},
            "status": {"startup": old} if old else {}}


ADMITTED = {"admitted": True, "admittedAt": t(10)}
FULL = [pod(0, 1, 12, 14, 30, 33), pod(1, 1, 11, 16, 25, 35)]
COMPLETE = {"startedAt": CREATED, "readyAt": t(35), "totalSeconds": 35, "complete": True,
            "phases": {"queued": 10, "scheduled": 2, "volumes": 4, "containers": 14, "ready": 5}}


@pytest.mark.parametrize("name,obj,pods,replicas,running,queue,now,expected", [
    ("queued: nothing reached yet", cr(), [pod(0), pod(1)], 2, False, {"admitted": False}, t(5),
     {"startedAt": CREATED, "phases": {}, "complete": False}),
    ("admitted, one pod scheduled of two", cr(), [pod(0, 1, 12), pod(1)], 2, False, ADMITTED, t(13),
     {"startedAt": CREATED, "phases": {"queued": 10}, "complete": False}),
    ("each phase until the last replica", cr(), FULL, 2, True, ADMITTED, t(40), COMPLETE),
    ("not queued: queued is 0", cr(), FULL, 2, True, None, t(40),
     dict(COMPLETE, phases={"queued": 0, "scheduled": 12, "volumes": 4, "containers": 14, "ready": 5})),
    ("Ready pods but not Running yet: no ready phase", cr(), FULL, 2, False, ADMITTED, t(40),
     {"startedAt": CREATED, "complete": False,
      "phases": {"queued": 10, "scheduled": 2, "volumes": 4, "containers": 14}}),
    ("a complete one is kept while its pods run", cr(COMPLETE), FULL, 2, True, None, t(60), COMPLETE),
    ("a start that completed between two reconciles (a pod created after the last Ready)", cr(COMPLETE),
     [pod(0, 50, 51, 52, 53, 54)], 1, True, None, t(60),
     {"startedAt": t(50), "readyAt": t(54), "totalSeconds": 4, "complete": True,
      "phases": {"queued": 0, "scheduled": 1, "volumes": 1, "containers": 1, "ready": 1}}),
    ("and while stopped", cr(COMPLETE, suspend=True), [], 1, False, None, t(60), COMPLETE),
    ("a new start begins at its oldest pod", cr(COMPLETE), [pod(0, 50, 51, 52, 55)], 1, False, None, t(56),
     {"startedAt": t(50), "phases": {"queued": 0, "scheduled": 1, "volumes": 1, "containers": 3},
      "complete": False}),
    ("a rolling update: the old pod is still there, so the last start stays", cr(COMPLETE),
     [pod(0, 1, 12, 14, 30, 33)], 1, False, None, t(50), COMPLETE),
    ("... until the new pod exists, even one created before this run's now", cr(COMPLETE),
     [pod(0, 48, 49)], 1, False, None, t(50),
     {"startedAt": t(48), "phases": {"queued": 0, "scheduled": 1}, "complete": False}),
    ("a start a moment ago without pods yet and no queue: the last start stays", cr(COMPLETE), [], 1, False, None,
     t(70), COMPLETE),
    ("a new start without pods yet begins now", cr(COMPLETE), [], 1, False, {"admitted": False}, t(70),
     {"startedAt": t(70), "phases": {}, "complete": False}),
    ("an incomplete start keeps its beginning", cr({"startedAt": t(50), "phases": {}, "complete": False}),
     [pod(0, 52, 53, 54, 55, 56)], 1, True, None, t(57),
     {"startedAt": t(50), "readyAt": t(56), "totalSeconds": 6, "complete": True,
      "phases": {"queued": 0, "scheduled": 3, "volumes": 1, "containers": 1, "ready": 1}}),
    ("a terminating pod does not count", cr(), [pod(0, 1, 2, 3, 4, 5, deleting=True)], 1, False, None, t(6),
     {"startedAt": CREATED, "phases": {"queued": 0}, "complete": False}),
    ("out-of-order stamps never give a negative phase", cr(), [pod(0, 1, 12, 11, 11, 13)], 1, True, None, t(20),
     {"startedAt": CREATED, "readyAt": t(13), "totalSeconds": 13, "complete": True,
      "phases": {"queued": 0, "scheduled": 12, "volumes": 0, "containers": 0, "ready": 1}}),
])
def test_startup(name, obj, pods, replicas, running, queue, now, expected):
    assert startup(obj, pods, replicas, running, queue=queue, now=now) == expected, name


@pytest.mark.parametrize("value,text", [
    (COMPLETE, "35s (queued 10s, scheduled 2s, volumes 4s, containers 14s, ready 5s)"),
    ({"startedAt": CREATED, "phases": {"queued": 3}, "complete": False}, "starting (queued 3s so far)"),
    ({"startedAt": CREATED, "phases": {}, "complete": False}, "starting"),
    (None, "starting"),
])
def test_describe(value, text):
    assert describe(value) == text


def test_a_node_without_pod_ready_to_start_containers_uses_initialized():
    """A kubelet before 1.29, a virtual kubelet (Fargate, kwok) never reports
    PodReadyToStartContainers: the volumes phase ends at Initialized, and the start completes
    (it stayed incomplete for ever on the real tier's kwok nodes, issue 26.4)."""
    p = pod(0, 1, 12, None, 30, 33)
    p["status"]["conditions"].append({"type": "Initialized", "status": "True", "lastTransitionTime": t(20)})
    got = startup(cr(), [p], 1, True, None, t(40))
    assert got["complete"] and got["phases"] == {"queued": 0, "scheduled": 12, "volumes": 8, "containers": 10,
                                                 "ready": 3}, got
    # a node that reports it but has not reached it yet: not Initialized's time
    p = pod(0, 1, 12, None, None, None)
    p["status"]["conditions"] += [{"type": "Initialized", "status": "True", "lastTransitionTime": t(20)},
                                  {"type": "PodReadyToStartContainers", "status": "False"}]
    assert startup(cr(), [p], 1, False, None, t(40))["phases"] == {"queued": 0, "scheduled": 12}
