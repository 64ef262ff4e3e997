"""Table-driven tests of plugins/module_utils/kueue.py and of a Queued DevServer's status
(module_utils/devserver_status.py)."""

import pytest

from ansible_collections.torchdev.operator.plugins.module_utils import devserver_status, kueue as kq

NOW = "2026-01-01T00:00:00Z"

QUEUE, PRIORITY = "kueue.x-k8s.io/queue-name", "kueue.x-k8s.io/priority-class"
LQ = {"metadata": {"name": "torchdev", "namespace": "dev-jane"}, "spec": {"clusterQueue": "torchdev-jane"}}


def sts(queue=None, uid="u1", pod_group=None, ready=0):
    labels = {QUEUE: queue} if queue else {}
    template_labels = {"kueue.x-k8s.io/pod-group-name": pod_group} if pod_group else {}
    return {"metadata": {"name": "x", "uid": uid, "labels": labels, "generation": 1},
            "spec": {"template": {"metadata": {"labels": template_labels}}},
            "status": {"readyReplicas": ready, "replicas": 1, "updatedReplicas": 1, "observedGeneration": 1}}


def workload(name="statefulset-x-abcde", owner_uid=None, job_uid=None, admitted=False, reserved_message=None):
    meta = {"name": name, "labels": {}}
    if owner_uid:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "x", "uid": owner_uid}]
    if job_uid:
        meta["labels"]["kueue.x-k8s.io/job-uid"] = job_uid
    conds = []
    if admitted:
        conds += [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "ok"},
                  {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "ok",
                   "lastTransitionTime": "2026-01-01T00:00:07Z"}]
    elif reserved_message:
        conds += [{"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": reserved_message}]
    return {"metadata": meta, "status": {"conditions": conds}}


def pending(name="statefulset-x-abcde", in_cq=0):
    return {"metadata": {"name": name}, "positionInClusterQueue": in_cq, "positionInLocalQueue": 0}


@pytest.mark.parametrize("name,workloads,owner,expected", [
    ("owner reference (kubesim, Kueue)", [workload("w0", owner_uid="other"), workload("w1", owner_uid="u1")],
     sts("q"), "w1"),
    ("job-uid label", [workload("w2", job_uid="u1")], sts("q"), "w2"),
    ("pod group name in the template", [workload("statefulset-x-1a2b3")], sts("q", pod_group="statefulset-x-1a2b3"),
     "statefulset-x-1a2b3"),
    ("someone else's", [workload("w3", owner_uid="u2", job_uid="u2")], sts("q"), None),
    ("none", [], sts("q"), None),
    ("no owner", [workload("w1", owner_uid="u1")], None, None),
])
def test_workload_of(name, workloads, owner, expected):
    got = kq.workload_of(workloads, owner)
    assert (got or {}).get("metadata", {}).get("name") == expected, name


@pytest.mark.parametrize("entry,expected", [
    (pending(in_cq=0), 1), (pending(in_cq=4), 5), (None, None), ({"metadata": {"name": "x"}}, None)])
def test_position_is_one_based(entry, expected):
    assert kq.position(entry) == expected


def test_pending_entry_and_admitted():
    summary = {"items": [pending("a", 0), pending("b", 1)]}
    assert kq.pending_entry(summary, "b")["positionInClusterQueue"] == 1
    assert kq.pending_entry(summary, "c") is None and kq.pending_entry(None, "a") is None
    assert kq.admitted(workload(admitted=True)) and not kq.admitted(workload()) and not kq.admitted(None)


@pytest.mark.parametrize("tolerations,taints", [
    ([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
     [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]),
    ([{"key": "pool", "operator": "Equal", "value": "gpu", "effect": "NoExecute", "tolerationSeconds": 30}],
     [{"key": "pool", "value": "gpu", "effect": "NoExecute"}]),
    ([{"key": "pool", "value": "gpu", "effect": "NoSchedule"}],           # operator defaults to Equal
     [{"key": "pool", "value": "gpu", "effect": "NoSchedule"}]),
    ([{"operator": "Exists"}], []),                                          # tolerates everything: no key
    ([{"key": "a", "operator": "Exists"}], []),                             # every effect: none to name
    ([{"key": "a", "operator": "Exists", "effect": "PreferNoSchedule"}], []),
    ([{"key": "a", "operator": "Exists", "effect": "NoSchedule"}] * 2, [{"key": "a", "effect": "NoSchedule"}]),
    (None, []),
])
def test_node_taints(tolerations, taints):
    assert kq.node_taints(tolerations) == taints


@pytest.mark.parametrize("spec,fragment", [
    ({"nodeSelector": {"k%d" % i: "v" for i in range(9)}}, "spec.nodeSelector: a Kueue ResourceFlavor allows at most 8 nodeLabels, the flavor has 9"),
    # the ResourceFlavor carries no tolerations (docs/api.md "Kueue"): only its nodeTaints are bounded
    ({"tolerations": [{"key": "k%d" % i, "operator": "Exists"} for i in range(9)]}, None),
    ({"tolerations": [{"key": "k%d" % i, "operator": "Exists", "effect": "NoSchedule"} for i in range(9)]},
     "spec.tolerations: a Kueue ResourceFlavor allows at most 8 nodeTaints, the flavor has 9"),
    ({"nodeSelector": {"k%d" % i: "v" for i in range(8)},
      "tolerations": [{"key": "k%d" % i, "operator": "Exists", "effect": "NoSchedule"} for i in range(8)]}, None),
    ({}, None),
])
def test_resource_flavor_errors(spec, fragment):
    errors = kq.resource_flavor_errors(spec)
    assert (fragment in "; ".join(errors)) if fragment else errors == []


SERVED = {"served": True, "local_queue": LQ}


@pytest.mark.parametrize("name,kueue,live,expected", [
    ("no Kueue", {"served": False}, None, {}),
    ("no observation (render without a cluster)", None, None, {}),
    ("Kueue without the LocalQueue", {"served": True, "local_queue": None}, None, {}),
    ("new StatefulSet, LocalQueue", SERVED, None, {QUEUE: "torchdev"}),
    ("new, with a priority class", dict(SERVED, priority_class={"name": "torchdev-high", "exists": True}), None,
     {QUEUE: "torchdev", PRIORITY: "torchdev-high"}),
    ("live and queued keeps its queue", SERVED, sts("torchdev"), {QUEUE: "torchdev"}),
    ("live, queued, LocalQueue gone: queue name is immutable", {"served": True, "local_queue": None},
     sts("torchdev"), {QUEUE: "torchdev"}),
    ("live from before the LocalQueue stays unqueued", SERVED, sts(None), {}),
    ("live and queued, priority class from the DevUser",
     dict(SERVED, priority_class={"name": "torchdev-low", "exists": None}), sts("torchdev"),
     {QUEUE: "torchdev", PRIORITY: "torchdev-low"}),
])
def test_queue_labels(name, kueue, live, expected):
    assert kq.queue_labels(kueue, live, "torchdev") == expected, name


@pytest.mark.parametrize("priority,problem", [
    (None, None),
    ({"name": "torchdev-high", "exists": True}, None),
    ({"name": "torchdev-high", "exists": None}, None),
    ({"name": "nope", "source": "spec.priorityClassName", "exists": False},
     "WorkloadPriorityClass nope (from spec.priorityClassName) does not exist"),
])
def test_queue_problem(priority, problem):
    got = kq.queue_problem({"served": True, "priority_class": priority})
    assert (got is None) if problem is None else (got["reason"] == "InvalidSpec" and problem in got["message"])


WHY = "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor gpu-h100-2"


@pytest.mark.parametrize("name,kueue,live,expected", [
    ("not queued", SERVED, sts(None), None),
    ("pending with a position", dict(SERVED, workload=workload(reserved_message=WHY), pending=pending(in_cq=0)),
     sts("torchdev"),
     {"name": "torchdev", "clusterQueue": "torchdev-jane", "workload": "statefulset-x-abcde", "position": 1,
      "estimatedStartTime": None, "admitted": False, "admittedAt": None,
      "message": "waiting for quota in ClusterQueue torchdev-jane at position 1: " + WHY}),
    ("no Workload yet", SERVED, sts("torchdev"),
     {"name": "torchdev", "clusterQueue": "torchdev-jane", "workload": None, "position": None, "estimatedStartTime": None, "admitted": False, "admittedAt": None,
      "message": "waiting for quota in ClusterQueue torchdev-jane"}),
    ("no visibility API: no position", dict(SERVED, workload=workload()), sts("torchdev"),
     {"name": "torchdev", "clusterQueue": "torchdev-jane", "workload": "statefulset-x-abcde", "position": None,
      "estimatedStartTime": None, "admitted": False, "admittedAt": None, "message": "waiting for quota in ClusterQueue torchdev-jane"}),
    ("admitted", dict(SERVED, workload=workload(admitted=True)), sts("torchdev"),
     {"name": "torchdev", "clusterQueue": "torchdev-jane", "workload": "statefulset-x-abcde", "position": None,
      "estimatedStartTime": None, "admitted": True, "admittedAt": "2026-01-01T00:00:07Z", "message": "waiting for quota in ClusterQueue torchdev-jane"}),
    # the Workload observed is the one of the StatefulSet this run deleted and created again
    # (kueue_reshape): the new one is not queued yet
    ("another StatefulSet's Workload", dict(SERVED, workload=workload(owner_uid="old", reserved_message=WHY),
                                           pending=pending(in_cq=0)), sts("torchdev"),
     {"name": "torchdev", "clusterQueue": "torchdev-jane", "workload": None, "position": None, "estimatedStartTime": None,
      "admitted": False, "admittedAt": None, "message": "waiting for quota in ClusterQueue torchdev-jane"}),
    ("its own Workload by job-uid", dict(SERVED, workload=workload(job_uid="u1", reserved_message=WHY),
                                        pending=pending(in_cq=0)), sts("torchdev"),
     {"name": "torchdev", "clusterQueue": "torchdev-jane", "workload": "statefulset-x-abcde", "position": 1,
      "estimatedStartTime": None, "admitted": False, "admittedAt": None,
      "message": "waiting for quota in ClusterQueue torchdev-jane at position 1: " + WHY}),
    ("LocalQueue gone", {"served": True, "local_queue": None}, sts("torchdev"),
     {"name": "torchdev", "clusterQueue": None, "workload": None, "position": None, "estimatedStartTime": None, "admitted": False, "admittedAt": None,
      "message": "waiting for quota in LocalQueue torchdev"}),
])
def test_queue_status(name, kueue, live, expected):
    assert kq.queue_status(kueue, live, "torchdev") == expected, name


def _cr(status=None, **spec):
    return {"metadata": {"name": "x", "namespace": "dev-jane", "generation": 2}, "spec": spec, "status": status or {}}


def test_queued_devserver_status():
    queue = kq.queue_status(dict(SERVED, workload=workload(reserved_message=WHY), pending=pending(in_cq=1)),
                            sts("torchdev"), "torchdev")
    status = devserver_status.devserver_status(_cr(), sts("torchdev"), 1, "h", "x-ssh", NOW, [], None, queue)
    conds = {c["type"]: c for c in status["conditions"]}
    assert status["phase"] == "Queued"
    assert status["queue"] == {"name": "torchdev", "clusterQueue": "torchdev-jane",
                               "workload": "statefulset-x-abcde", "position": 2,
                                      "estimatedStartTime": None}
    assert conds["Ready"]["status"] == "False" and conds["Ready"]["reason"] == "Queued"
    assert "ClusterQueue torchdev-jane at position 2" in conds["Ready"]["message"]
    assert conds["Progressing"]["status"] == "True" and conds["Progressing"]["reason"] == "Queued"
    assert conds["Degraded"]["reason"] == "AsExpected"
    assert devserver_status.requeue_period(status, "2026-01-01T00:00:00Z")  # keeps polling for the admission


@pytest.mark.parametrize("name,cr,live,queue_input,phase,queue", [
    ("admitted and ready", _cr(), sts("torchdev", ready=1), dict(SERVED, workload=workload(admitted=True)),
     "Running", {"name": "torchdev", "clusterQueue": "torchdev-jane", "workload": "statefulset-x-abcde",
                 "position": None, "estimatedStartTime": None}),
    ("admitted, pods starting", _cr(), sts("torchdev"), dict(SERVED, workload=workload(admitted=True)),
     "Provisioning", {"name": "torchdev", "clusterQueue": "torchdev-jane", "workload": "statefulset-x-abcde",
                      "position": None, "estimatedStartTime": None}),
    ("suspended: no queue", _cr(suspend=True), sts("torchdev"), dict(SERVED, workload=workload()),
     "Suspended", None),
    ("without Kueue", _cr(), sts(None, ready=1), {"served": False}, "Running", None),
])
def test_devserver_status_with_kueue(name, cr, live, queue_input, phase, queue):
    replicas = 0 if cr["spec"].get("suspend") else 1
    status = devserver_status.devserver_status(cr, live, replicas, "h", None, NOW, [], None,
                                kq.queue_status(queue_input, live, "torchdev"))
    assert status["phase"] == phase, name
    assert status["queue"] == queue, name


# -- reshape: a change Kueue's StatefulSet webhook refuses ---------------------------------------
FLAVOR = "torchdev.io/flavor"


def shaped(flavor="gpu-h100-2", gpus="2", replicas=1, queue="torchdev", policy="Retain", node=None, uid="s1",
           deleting=False, image="img:1"):
    labels = {FLAVOR: flavor}
    if queue:
        labels[QUEUE] = queue
    meta = {"name": "x", "uid": uid, "labels": labels}
    if deleting:
        meta["deletionTimestamp"] = NOW
    pod = {"containers": [{"name": "main", "image": image,
                           "resources": {"requests": {"cpu": "8", "nvidia.com/gpu": gpus},
                                         "limits": {"nvidia.com/gpu": gpus}}}]}
    if node:
        pod["nodeSelector"] = {"torchdev.io/gpu-type": node}
    return {"metadata": meta, "spec": {"replicas": replicas, "template": {"spec": pod},
                                       "persistentVolumeClaimRetentionPolicy": {"whenDeleted": policy}}}


GATED = {"metadata": {"name": "x-0"}, "spec": {"schedulingGates": [{"name": "kueue.x-k8s.io/admission"}]}}
ADMITTED = {"metadata": {"name": "x-0"}, "spec": {}}
HOME = {"metadata": {"name": "home-x-0"}}
OWNED_HOME = {"metadata": {"name": "home-x-0", "ownerReferences": [{"kind": "StatefulSet", "uid": "s1"}]}}
SHAPE = "Kueue does not let a queued StatefulSet change its pods' shape or size"
REQUEUED = ("spec.flavor changed from gpu-h100-2 to gpu-a10g-1 while queued: " + SHAPE
            + ", so it was re-created and queued again (the home volume is kept)")


@pytest.mark.parametrize("desired,live,pvcs,pods,want", [
    # nothing Kueue refuses
    (shaped(), None, [], [], None),                                                # a new StatefulSet
    (shaped(gpus="1"), shaped(queue=None), [], [], None),                          # not queued
    (shaped(gpus="1"), shaped(deleting=True), [], [], None),                       # being deleted
    (shaped(image="img:2"), shaped(), [HOME], [GATED], None),                      # same shape
    (shaped(gpus="2000m"), shaped(), [HOME], [GATED], None),                       # the same quantity
    (shaped(replicas=0), shaped(), [HOME], [GATED], None),                         # a stop
    (shaped(replicas=2), shaped(replicas=0), [HOME], [], None),                    # a start
    # a new flavor while queued: re-created
    (shaped("gpu-a10g-1", gpus="1", node="a10g"), shaped(), [HOME], [GATED],
     {"action": "recreate", "reason": "Requeued", "type": "Normal", "message": REQUEUED}),
    # while admitted: re-created, the pods restart
    (shaped("gpu-a10g-1", gpus="1"), shaped(), [HOME], [ADMITTED],
     {"action": "recreate", "reason": "Requeued", "type": "Normal",
      "message": "spec.flavor changed from gpu-h100-2 to gpu-a10g-1 while running: " + SHAPE
                 + ", so it was re-created (its pods restarted) and queued again (the home volume is kept)"}),
    # a new flavor while stopped (replicas 0): Kueue refuses the new shape all the same
    (shaped("gpu-a10g-1", gpus="1", replicas=0), shaped(replicas=0), [HOME], [],
     {"action": "recreate", "reason": "Requeued", "type": "Normal",
      "message": "spec.flavor changed from gpu-h100-2 to gpu-a10g-1 while stopped: " + SHAPE
                 + ", so it was re-created (the home volume is kept)"}),
    # a new worldSize (distributed mode): N -> M
    (shaped(replicas=4), shaped(replicas=2), [HOME], [GATED],
     {"action": "recreate", "reason": "Requeued", "type": "Normal",
      "message": "spec.worldSize changed from 2 to 4 while queued: " + SHAPE
                 + ", so it was re-created and queued again (the home volume is kept)"}),
    # another shape change (a nodeSelector), same flavor name
    (shaped(node="h100"), shaped(), [], [GATED],
     {"action": "recreate", "reason": "Requeued", "type": "Normal",
      "message": "the pods' shape changed while queued: " + SHAPE
                 + ", so it was re-created and queued again (the home volume is kept)"}),
    # the home claims would go with the StatefulSet: refused, nothing deleted
    (shaped("gpu-a10g-1", gpus="1"), shaped(policy="Delete"), [HOME], [GATED],
     {"action": "refuse", "reason": "InvalidSpec", "type": "Warning",
      "message": "spec.flavor changed from gpu-h100-2 to gpu-a10g-1, but " + SHAPE + ", and re-creating it would "
                 "delete the home volume (spec.homeRetentionPolicy Delete): undo the change, or delete the "
                 "DevServer and create it again"}),
    (shaped("gpu-a10g-1", gpus="1"), shaped(), [OWNED_HOME], [GATED],
     {"action": "refuse", "reason": "InvalidSpec", "type": "Warning",
      "message": "spec.flavor changed from gpu-h100-2 to gpu-a10g-1, but " + SHAPE + ", and re-creating it would "
                 "delete the home volume (spec.homeRetentionPolicy Delete: home-x-0): undo the change, or delete "
                 "the DevServer and create it again"}),
])
def test_reshape(desired, live, pvcs, pods, want):
    assert kq.reshape(desired, live, pvcs, pods) == want


@pytest.mark.parametrize("desired,live", [
    ("x", shaped()), (shaped(), "x"), ({"spec": []}, shaped()), (shaped(), {"metadata": {"labels": {QUEUE: 1}}}),
    ({"spec": {"replicas": True, "template": {"spec": {"containers": ["x", None]}}}}, shaped()),
    ({"spec": {"template": {"spec": {"containers": [{"resources": {"requests": {"cpu": "bad"}}}]}}}}, shaped()),
])
def test_reshape_never_raises(desired, live):
    result = kq.reshape(desired, live, pvcs=[None, "x", {"metadata": {"ownerReferences": "x"}}], pods=[None, 1])
    assert result is None or result["action"] in ("recreate", "refuse")
