"""Issue 26.5, the namespace quota of an evicted DevServer: its gated pods are released while it
waits (plugins/module_utils/eviction.py server_release, cluster_queue_room; server_evictions
with the live StatefulSet: the status's Evicted condition holds until the readmission;
devserver_status's Queued phase while evicted).

The StatefulSet controller re-creates the pods Kueue stopped, gated, and the namespace's
ResourceQuota counts them, so the preemptor's pods could be refused.  The decision: scale the
StatefulSet to 0 (annotation torchdev.io/released-eviction = the eviction's time), and back up
once its pods are gone, its Workload is gone (kubesim) or on hold (Kueue v0.19.2), and its
ClusterQueue has room; a Workload Kueue admits at 0 replicas is put on hold through
torchdev.io/kueue-hold.  Each row is one situation a reconcile finds."""
from __future__ import annotations

import copy
import pathlib

import pytest
import yaml

from ansible_collections.torchdev.operator.plugins.module_utils import conditions
from ansible_collections.torchdev.operator.plugins.module_utils import devserver_status as ds
from ansible_collections.torchdev.operator.plugins.module_utils import eviction as ev

ROOT = pathlib.Path(__file__).resolve().parents[2]
FLAVOR = yaml.safe_load((ROOT / "config" / "samples" / "torchdev_v1alpha1_devserverflavor_gpu-h100-2.yaml")
                        .read_text())["spec"]
T0, T1, T2, T3 = "2026-11-27T10:00:00Z", "2026-11-27T11:00:00Z", "2026-11-27T11:30:00Z", "2026-11-27T12:00:00Z"
EXPIRES = "2026-11-27T18:00:00Z"
REL, HOLD = "torchdev.io/released-eviction", "torchdev.io/kueue-hold"
KUEUE_SAID = ("Preempted to accommodate a workload (UID: u1, JobUID: j1) due to prioritization in the "
              "ClusterQueue; preemptor path: /cq; preemptee path: /cq")
RUNNING = {"startedAt": T0, "expiresAt": EXPIRES, "queuedAt": T0}
QUEUE = {"admitted": False, "name": "torchdev", "clusterQueue": "cq-jane", "position": None,
         "message": "waiting for quota in ClusterQueue cq-jane"}


def cond(ctype, status, reason, when, message=""):
    return {"type": ctype, "status": status, "reason": reason, "lastTransitionTime": when, "message": message}


def workload(*conds, deleting=False):
    meta = {"name": "statefulset-box-1a2b3", "uid": "w-1"}
    if deleting:
        meta["deletionTimestamp"] = T2
    return {"metadata": meta, "status": {"conditions": list(conds)}}


EVICTED = [cond("Evicted", "True", "Preempted", T1, "Preempted"), cond("Preempted", "True", "InClusterQueue", T1,
                                                                       KUEUE_SAID)]
W_EVICTED = workload(cond("QuotaReserved", "True", "QuotaReserved", T0), cond("Admitted", "True", "Admitted", T0),
                     *EVICTED)
W_REQUEUED = workload(cond("QuotaReserved", "False", "Pending", T1), cond("Admitted", "False", "NoReservation", T1),
                      *EVICTED)
W_ON_HOLD = workload(cond("QuotaReserved", "False", "OnHold", T1), cond("Admitted", "False", "NoReservation", T1),
                     *EVICTED)
# Kueue admitted the Workload of the StatefulSet at 0 replicas (released after Kueue had given the quota up)
W_ADMITTED_AT_0 = workload(cond("QuotaReserved", "True", "QuotaReserved", T2), cond("Admitted", "True", "Admitted", T2),
                           cond("Evicted", "False", "QuotaReserved", T2, "Previously: Preempted"),
                           cond("Preempted", "False", "QuotaReserved", T2, "Previously: " + KUEUE_SAID))
W_NEW_PENDING = workload(cond("QuotaReserved", "False", "Pending", T2, "couldn't assign flavors"))
W_NEW_ADMITTED = workload(cond("QuotaReserved", "True", "QuotaReserved", T3), cond("Admitted", "True", "Admitted", T3))
W_READMITTED = workload(cond("QuotaReserved", "True", "QuotaReserved", T3), cond("Admitted", "True", "Admitted", T3),
                        cond("Evicted", "False", "QuotaReserved", T3, "Previously: Preempted"))
W_EVICTED_AGAIN = workload(cond("QuotaReserved", "True", "QuotaReserved", T2), cond("Admitted", "True", "Admitted", T2),
                           cond("Evicted", "True", "PodsReadyTimeout", T3, "Exceeded the PodsReady timeout"))


def cluster_queue(gpus_reserved, nominal=2):
    return {"metadata": {"name": "cq-jane"},
            "spec": {"resourceGroups": [{"coveredResources": ["cpu", "memory", "nvidia.com/gpu"], "flavors": [
                {"name": "gpu-h100-2", "resources": [{"name": "cpu", "nominalQuota": 192},
                                                     {"name": "memory", "nominalQuota": "2000Gi"},
                                                     {"name": "nvidia.com/gpu", "nominalQuota": nominal}]}]}]},
            "status": {"flavorsReservation": [{"name": "gpu-h100-2", "resources": [
                {"name": "cpu", "total": "44" if gpus_reserved else "0"},
                {"name": "memory", "total": "440Gi" if gpus_reserved else "0"},
                {"name": "nvidia.com/gpu", "total": str(gpus_reserved)}]}]}}


CQ_FULL, CQ_FREE = cluster_queue(2), cluster_queue(0)


def kueue(wl=None, cq=None, served=True):
    return {"served": served, "workload": wl, "cluster_queue": cq}


def status_evicted(**extra):
    """The status the run that saw the eviction at T1 wrote (devserver_status with the eviction)."""
    decision = {"eviction": {"reason": "Preempted", "message": KUEUE_SAID, "time": T1}, "evictions": 1}
    evicted = ev.evicted_condition(decision, {"clusterQueue": "cq-jane", "position": 1}, ds.SERVER_RESUME, 1)
    out = {"phase": "Queued", "reservation": RUNNING, "evictions": 1, "lastEvictionTime": T1,
           "lastEvictionReason": "Preempted", "conditions": [evicted]}
    out.update(extra)
    return out


def server(status=None, suspend=False):
    spec = {"owner": "jane@example.com", "flavor": "gpu-h100-2"}
    if suspend:
        spec["suspend"] = True
    return {"apiVersion": "torchdev.io/v1alpha1", "kind": "DevServer",
            "metadata": {"name": "box", "namespace": "dev-jane", "generation": 1, "creationTimestamp": T0},
            "spec": spec, "status": status if status is not None else {"phase": "Running", "reservation": RUNNING}}


def sts(replicas=1, pods=None, released=None, hold=None, queued=True):
    meta = {"name": "box", "namespace": "dev-jane", "uid": "sts-1", "labels": {}, "annotations": {}}
    if queued:
        meta["labels"]["kueue.x-k8s.io/queue-name"] = "torchdev"
    if released:
        meta["annotations"][REL] = released
    if hold:
        meta["annotations"][HOLD] = hold
    return {"metadata": meta, "spec": {"replicas": replicas},
            "status": {"replicas": replicas if pods is None else pods}}


RUNNING_CR, EVICTED_CR = server(), server(status_evicted())

# (id, DevServer, kueue, live StatefulSet, expected {replicas, annotations, released})
RELEASES = [
    ("never evicted: as wanted, no annotation",
     RUNNING_CR, kueue(W_NEW_ADMITTED), sts(), (1, {}, False)),
    ("no kueue at all", RUNNING_CR, None, sts(queued=False), (1, {}, False)),
    ("evicted now: released, the eviction's time on the StatefulSet",
     RUNNING_CR, kueue(W_EVICTED), sts(), (0, {REL: T1}, True)),
    ("evicted and requeued by Kueue before the run: released",
     RUNNING_CR, kueue(W_REQUEUED), sts(), (0, {REL: T1}, True)),
    ("an operator upgraded while the server waited with its gated pods: released",
     EVICTED_CR, kueue(W_REQUEUED), sts(), (0, {REL: T1}, True)),
    ("released, its pods still going: stays at 0",
     EVICTED_CR, kueue(None, CQ_FREE), sts(0, pods=1, released=T1), (0, {REL: T1}, True)),
    ("released, Workload gone (kubesim), the preemptor holds the quota: stays at 0",
     EVICTED_CR, kueue(None, CQ_FULL), sts(0, released=T1), (0, {REL: T1}, True)),
    ("released, Workload gone, room again: queued again",
     EVICTED_CR, kueue(None, CQ_FREE), sts(0, released=T1), (1, {REL: T1}, False)),
    ("released, Workload gone, the ClusterQueue unknown: queued again (Kueue decides)",
     EVICTED_CR, kueue(None, None), sts(0, released=T1), (1, {REL: T1}, False)),
    ("released, Workload on hold (Kueue v0.19.2), preemptor holds the quota: stays at 0",
     EVICTED_CR, kueue(W_ON_HOLD, CQ_FULL), sts(0, released=T1), (0, {REL: T1}, True)),
    ("released, Workload on hold, room again: scaled up (Kueue takes it off hold)",
     EVICTED_CR, kueue(W_ON_HOLD, CQ_FREE), sts(0, released=T1), (1, {REL: T1}, False)),
    ("released, Workload still queued (not on hold): the webhook refuses a scale up, it waits",
     EVICTED_CR, kueue(W_REQUEUED, CQ_FREE), sts(0, released=T1), (0, {REL: T1}, True)),
    ("released, Workload being deleted: waits",
     EVICTED_CR, kueue(workload(*EVICTED, deleting=True), CQ_FREE), sts(0, released=T1), (0, {REL: T1}, True)),
    ("released, Kueue admitted the Workload at 0 replicas: asks Kueue to put it on hold",
     EVICTED_CR, kueue(W_ADMITTED_AT_0, CQ_FULL), sts(0, released=T1), (0, {REL: T1, HOLD: T2}, True)),
    ("released and queued again, a new Workload waits: not released twice",
     EVICTED_CR, kueue(W_NEW_PENDING, CQ_FULL), sts(1, pods=0, released=T1), (1, {REL: T1}, False)),
    ("queued again, Kueue's Workload still says Evicted (v0.19.2 until readmission): not released twice",
     EVICTED_CR, kueue(W_REQUEUED, CQ_FULL), sts(1, pods=0, released=T1), (1, {REL: T1}, False)),
    ("queued again, no Workload yet: waits with its replicas",
     EVICTED_CR, kueue(None, CQ_FULL), sts(1, pods=0, released=T1), (1, {REL: T1}, False)),
    ("readmitted (a new Workload admitted): the annotation goes",
     EVICTED_CR, kueue(W_NEW_ADMITTED), sts(1, released=T1), (1, {}, False)),
    ("readmitted (the same Workload, Previously): the annotation goes",
     EVICTED_CR, kueue(W_READMITTED), sts(1, released=T1), (1, {}, False)),
    ("evicted again after a readmission: released for the new eviction",
     server(status_evicted(conditions=[])), kueue(W_EVICTED_AGAIN), sts(1, released=T1), (0, {REL: T3}, True)),
    ("stopped while released: 0, the annotation kept (no write)",
     server(status_evicted(), suspend=True), kueue(W_ON_HOLD), sts(0, released=T1), (0, {REL: T1}, False)),
    ("stopped, never evicted", server(suspend=True), kueue(None), sts(0), (0, {}, False)),
    ("Kueue no longer served: the status's eviction is over",
     EVICTED_CR, kueue(None, None, served=False), sts(0, released=T1), (1, {}, False)),
    ("a StatefulSet without a queue: nothing to wait for",
     EVICTED_CR, kueue(None, CQ_FULL), sts(0, released=T1, queued=False), (1, {}, False)),
    ("the StatefulSet deleted while released: created at 0",
     EVICTED_CR, kueue(None, CQ_FULL), None, (0, {REL: T1}, True)),
    ("a forged annotation is not a release: released for the real eviction",
     RUNNING_CR, kueue(W_EVICTED), sts(released="{{ lookup('pipe', 'id') }}"), (0, {REL: T1}, True)),
]


@pytest.mark.parametrize("cr,kueue_,live,want", [pytest.param(*c[1:], id=c[0]) for c in RELEASES])
def test_server_release(cr, kueue_, live, want):
    got = ev.server_release(copy.deepcopy(cr), copy.deepcopy(kueue_), copy.deepcopy(live), 1, FLAVOR)
    assert (got["replicas"], got["annotations"], got["released"]) == want


def test_a_distributed_server_comes_back_with_all_its_replicas_when_all_fit():
    two = cluster_queue(0, nominal=4)
    assert ev.server_release(EVICTED_CR, kueue(None, two), sts(0, released=T1), 2, FLAVOR)["replicas"] == 2
    one_free = cluster_queue(2, nominal=4)  # room for one 2-GPU replica, not for both
    assert ev.server_release(EVICTED_CR, kueue(None, one_free), sts(0, released=T1), 2, FLAVOR)["replicas"] == 0


# (id, ClusterQueue, flavor, replicas, expected)
ROOMS = [
    ("free", CQ_FREE, "gpu-h100-2", 1, True),
    ("full", CQ_FULL, "gpu-h100-2", 1, False),
    ("two replicas need 4 GPUs", CQ_FREE, "gpu-h100-2", 2, False),
    ("another flavor: cannot tell", CQ_FREE, "gpu-a10g-1", 1, None),
    ("no ClusterQueue", None, "gpu-h100-2", 1, None),
    ("no status yet: nothing reserved", dict(CQ_FULL, status={}), "gpu-h100-2", 1, True),
    ("flavorsUsage when flavorsReservation is absent",
     dict(CQ_FULL, status={"flavorsUsage": CQ_FULL["status"]["flavorsReservation"]}), "gpu-h100-2", 1, False),
    ("a resource the ClusterQueue does not cover is not counted (ephemeral-storage)", CQ_FREE, "gpu-h100-2", 1, True),
    ("an unreadable quantity: cannot tell",
     dict(CQ_FREE, status={"flavorsReservation": [{"name": "gpu-h100-2", "resources": [
         {"name": "nvidia.com/gpu", "total": "lots"}]}]}), "gpu-h100-2", 1, None),
    ("cpu short although GPUs are free",
     dict(CQ_FREE, status={"flavorsReservation": [{"name": "gpu-h100-2", "resources": [
         {"name": "cpu", "total": "160"}, {"name": "nvidia.com/gpu", "total": "0"}]}]}), "gpu-h100-2", 1, False),
    ("hostile shapes", {"spec": {"resourceGroups": "x"}, "status": [1]}, "gpu-h100-2", 1, None),
]


@pytest.mark.parametrize("cq,flavor,replicas,want", [pytest.param(*c[1:], id=c[0]) for c in ROOMS])
def test_cluster_queue_room(cq, flavor, replicas, want):
    assert ev.cluster_queue_room(cq, flavor, FLAVOR, replicas) is want


# (id, DevServer, kueue, live StatefulSet, evicted now, usageStartTime)
LEDGER = [
    ("released, Workload gone: the status's eviction holds", EVICTED_CR, kueue(None), sts(0, released=T1), True, None),
    ("released, on hold", EVICTED_CR, kueue(W_ON_HOLD), sts(0, released=T1), True, None),
    ("queued again with a new Workload", EVICTED_CR, kueue(W_NEW_PENDING), sts(1, pods=0, released=T1), True, None),
    ("admitted at 0 replicas is no readmission (no pod may run)",
     EVICTED_CR, kueue(W_ADMITTED_AT_0), sts(0, released=T1), True, None),
    ("a new Workload admitted with replicas: readmitted at its admission",
     EVICTED_CR, kueue(W_NEW_ADMITTED), sts(1, released=T1), False, T3),
    ("the same Workload admitted again (Previously): readmitted at the later admission",
     EVICTED_CR, kueue(W_READMITTED), sts(1, released=T1), False, T3),
    ("an admission stamped before the eviction: readmitted at the eviction",
     EVICTED_CR, kueue(workload(cond("Admitted", "True", "Admitted", T0))), sts(1, released=T1), False, T1),
    ("stopped: the status's eviction does not hold", server(status_evicted(), suspend=True), kueue(None), sts(0),
     False, None),
    ("without the live StatefulSet the Workload alone decides (finalize.yml: no kueue)", EVICTED_CR, None, None,
     False, None),
]


@pytest.mark.parametrize("cr,kueue_,live,evicted_now,since", [pytest.param(*c[1:], id=c[0]) for c in LEDGER])
def test_the_status_eviction_holds_until_the_readmission(cr, kueue_, live, evicted_now, since):
    got = ev.server_evictions(cr, kueue_, None, live)
    assert bool(got.get("eviction")) == evicted_now
    assert (got["evictions"], got["lastEvictionTime"], got["lastEvictionReason"]) == (1, T1, "Preempted")  # once
    assert got["usageStartTime"] == since
    if evicted_now:
        # Kueue's words, read back from the condition the eviction wrote
        assert got["eviction"]["reason"] == "Preempted" and got["eviction"]["message"] == KUEUE_SAID
        assert got["eviction"]["time"] == T1
        # its usage record stays closed at the eviction
        assert ev.server_usage_reservation(RUNNING, got) == dict(RUNNING, endedAt=T1, endReason="Preempted")


@pytest.mark.parametrize("message", [None, 7, "", "something else", "evicted by Kueue (Preempted): no next step",
                                     "evicted by Kueue (Preempted); re-queued in ClusterQueue cq",
                                     "x" * 5000, "{{ lookup('pipe', 'id') }}"])
def test_odd_condition_messages_give_no_words_and_never_raise(message):
    status = status_evicted()
    status["conditions"][0]["message"] = message
    got = ev.server_evictions(server(status), kueue(None), None, sts(0, released=T1))
    assert got["eviction"]["time"] == T1 and got["eviction"]["message"] == ""


def _status(cr, kueue_, live, queue=QUEUE):
    evictions = ev.server_evictions(cr, kueue_, RUNNING, live)
    return ds.devserver_status(cr, live, 1, "hash", now=T2, pods=[], queue=queue, evictions=evictions)


def _cond(status, ctype):
    return next((c for c in status["conditions"] if c["type"] == ctype), None)


def test_a_released_server_is_queued_and_evicted_without_a_second_event():
    st = _status(EVICTED_CR, kueue(None), sts(0, released=T1))
    assert st["phase"] == "Queued" and st["replicas"] == 1 and st["ready"] == "0/1"
    cond_ = _cond(st, "Evicted")
    assert (cond_["status"], cond_["reason"]) == ("True", "Preempted")
    assert KUEUE_SAID in cond_["message"] and "re-queued in ClusterQueue cq-jane" in cond_["message"]
    assert "released while it waits" in cond_["message"] and "same home volume" in cond_["message"]
    assert (st["evictions"], st["lastEvictionTime"]) == (1, T1)
    assert ds.status_events(EVICTED_CR["status"], st) == []  # the eviction's one Event was sent already


def test_queued_even_while_kueue_holds_the_quota_of_the_workload_admitted_at_0():
    st = _status(EVICTED_CR, kueue(W_ADMITTED_AT_0), sts(0, released=T1), dict(QUEUE, admitted=True))
    assert st["phase"] == "Queued" and _cond(st, "Evicted")["status"] == "True"


def test_readmitted_the_condition_turns_false_once():
    st = _status(EVICTED_CR, kueue(W_NEW_ADMITTED), sts(1, released=T1), dict(QUEUE, admitted=True))
    cond_ = _cond(st, "Evicted")
    assert (cond_["status"], cond_["reason"]) == ("False", "Readmitted") and st["usageStartTime"] == T3
    assert ds.status_events(EVICTED_CR["status"], st) == []


def merge_patch(target, patch):
    """RFC 7386, as the API server applies the status patch: maps merge, None removes, the rest replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def test_a_released_server_waits_without_writing_its_status_again():
    """The run that releases the server writes its status once; the next ones, while it waits,
    compute what the API server stored.  Its new start's status.startup has no readyAt, totalSeconds
    or later phases yet: merged into the last complete one, they stayed, and every reconcile sent a
    status patch that changed nothing."""
    complete = {"startedAt": T0, "readyAt": "2026-11-27T10:00:08Z", "totalSeconds": 8, "complete": True,
                "phases": {"queued": 3, "scheduled": 2, "volumes": 1, "containers": 1, "ready": 1}}
    stored = dict(status_evicted(), startup=complete)
    for look in range(3):
        cr = server(copy.deepcopy(stored))
        new = ds.devserver_status(cr, sts(0, released=T1), 1, "hash", now=T2 if look == 0 else T3, pods=[],
                                  queue=QUEUE, evictions=ev.server_evictions(cr, kueue(None), RUNNING,
                                                                              sts(0, released=T1)))
        patch = conditions.status_changes(stored, new, new["conditions"], 1)
        if look:
            assert patch is None, patch
        stored = merge_patch(stored, patch) if patch else stored
    assert stored["startup"] == {"startedAt": T2, "phases": {}, "complete": False}
