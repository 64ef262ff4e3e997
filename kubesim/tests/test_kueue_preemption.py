"""Kueue v0.19.2's preemption within a ClusterQueue (kubesim/controllers/kueue.py, kueue_job.py,
kubesim/kueue.py): the candidates and their order, the victim Workload's conditions with Kueue's
texts, the victim Job suspended and requeued, the preemptor admitted once the quota is free, the
victim re-admitted later ("Previously: ..."), and a StatefulSet's pods stopped and gated again."""
from __future__ import annotations

import itertools
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest

from kubesim import kueue as kq
from kubesim.controllers._util import fmt_time
from kubesim.controllers.kueue import workload_name as sts_workload_name
from kubesim.controllers.kueue_job import workload_name
from kubesim.testing import KubeSim

from .test_kueue import cond, create, get, setup_queue

NODES = "gpu:2x{cpu:256,memory:1024Gi,nvidia.com/gpu:64}"
_ids = itertools.count()
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


# -- pure functions (kubesim/kueue.py) ---------------------------------------------------------
def wl(name, prio=0, gpus=2, created=0, reserved=None, evicted=False, uid=None):
    """A Workload admitted to flavor `f` with `gpus` GPUs (reserved: seconds after T0 of its
    QuotaReserved transition; None: not admitted)."""
    conds = []
    status = {}
    if reserved is not None:
        conds.append({"type": "QuotaReserved", "status": "True",
                      "lastTransitionTime": fmt_time(T0 + timedelta(seconds=reserved))})
        status["admission"] = {"clusterQueue": "cq", "podSetAssignments": [{
            "name": "main", "count": 1, "flavors": {"nvidia.com/gpu": "f"},
            "resourceUsage": {"nvidia.com/gpu": str(gpus)}}]}
    if evicted:
        conds.append({"type": "Evicted", "status": "True", "reason": "Preempted"})
    status["conditions"] = conds
    return {"metadata": {"name": name, "uid": uid or f"uid-{name}",
                         "labels": {kq.JOB_UID_LABEL: f"job-{name}"},
                         "creationTimestamp": fmt_time(T0 + timedelta(seconds=created))},
            "spec": {"priority": prio, "podSets": [{"name": "main", "count": 1, "template": {
                "spec": {"containers": [{"name": "c", "resources": {"requests": {
                    "nvidia.com/gpu": str(gpus)}}}]}}}]},
            "status": status}


def cq_obj(policy, gpus=4):
    spec = {"resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
        {"name": "f", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": gpus}]}]}]}
    if policy:
        spec["preemption"] = {"withinClusterQueue": policy}
    return {"metadata": {"name": "cq"}, "spec": spec}


@pytest.mark.parametrize("policy, preemptor, candidate, ok", [
    ("LowerPriority", wl("p", 10), wl("c", 5), True),
    ("LowerPriority", wl("p", 10), wl("c", 10, created=5), False),
    ("LowerPriority", wl("p", 5), wl("c", 10), False),
    ("LowerOrNewerEqualPriority", wl("p", 10), wl("c", 5), True),
    ("LowerOrNewerEqualPriority", wl("p", 10, created=0), wl("c", 10, created=1), True),
    ("LowerOrNewerEqualPriority", wl("p", 10, created=1), wl("c", 10, created=1), False),
    ("LowerOrNewerEqualPriority", wl("p", 10, created=2), wl("c", 10, created=1), False),
    ("LowerOrNewerEqualPriority", wl("p", 5), wl("c", 10, created=9), False),
    ("Never", wl("p", 10), wl("c", 5), False),
    (None, wl("p", 10), wl("c", 5), False),
    ("Bogus", wl("p", 10), wl("c", 5), False),
])
def test_satisfies_policy(policy, preemptor, candidate, ok):
    assert kq.satisfies_policy(policy, preemptor, candidate) is ok


def test_candidates_in_order():
    """Evicted first, then lowest priority, then the most recent quota reservation, then UID."""
    cands = [wl("old-low", 1, reserved=10), wl("new-low", 1, reserved=20),
             wl("mid", 5, reserved=30), wl("evicted-high", 50, reserved=5, evicted=True),
             wl("tie-b", 1, reserved=10, uid="b"), wl("tie-a", 1, reserved=10, uid="a")]
    assert [w["metadata"]["name"] for w in kq.candidates_in_order(cands)] == \
        ["evicted-high", "new-low", "tie-a", "tie-b", "old-low", "mid"]


@pytest.mark.parametrize("policy, quota, preemptor, admitted, victims", [
    # the lowest priority goes first, only as many as needed
    ("LowerPriority", 4, wl("p", 100, gpus=2), [wl("a", 50, reserved=1), wl("b", 10, reserved=2)],
     ["b"]),
    # equal priority, most recently admitted first
    ("LowerPriority", 4, wl("p", 100, gpus=2), [wl("a", 10, reserved=1), wl("b", 10, reserved=2)],
     ["b"]),
    # two needed
    ("LowerPriority", 4, wl("p", 100, gpus=4), [wl("a", 50, reserved=1), wl("b", 10, reserved=2)],
     ["a", "b"]),
    # fill back: removing the 1-GPU workload first does not suffice, the 3-GPU one does alone
    ("LowerPriority", 4, wl("p", 100, gpus=3),
     [wl("small", 1, gpus=1, reserved=1), wl("big", 2, gpus=3, reserved=2)], ["big"]),
    # nothing of lower priority: no preemption
    ("LowerPriority", 4, wl("p", 10, gpus=2), [wl("a", 10, reserved=1), wl("b", 20, reserved=2)],
     []),
    # even evicting every candidate would not make room: no preemption
    ("LowerPriority", 4, wl("p", 100, gpus=4), [wl("a", 10, reserved=1), wl("b", 200, reserved=2)],
     []),
    # more than the nominal quota: never fits
    ("LowerPriority", 4, wl("p", 100, gpus=6), [wl("a", 10, reserved=1)], []),
    ("Never", 4, wl("p", 100, gpus=2), [wl("a", 10, reserved=1), wl("b", 10, reserved=2)], []),
    ("LowerOrNewerEqualPriority", 4, wl("p", 10, gpus=2, created=0),
     [wl("a", 10, created=1, reserved=1), wl("b", 10, created=2, reserved=3)], ["b"]),
    ("LowerOrNewerEqualPriority", 4, wl("p", 10, gpus=2, created=5),
     [wl("a", 10, created=1, reserved=1), wl("b", 10, created=2, reserved=3)], []),
    # an evicted workload still holding its quota comes first (a preemption under way)
    ("LowerPriority", 4, wl("p", 100, gpus=2),
     [wl("a", 10, reserved=1, evicted=True), wl("b", 5, reserved=2)], ["a"]),
])
def test_preemption_targets(policy, quota, preemptor, admitted, victims):
    cq = cq_obj(policy, quota)
    used: dict = {}
    for w in admitted:
        for fl, res in kq.admission_usage(w).items():
            for r, q in res.items():
                used.setdefault(fl, {})[r] = used.get(fl, {}).get(r, Decimal(0)) + q
    got = kq.preemption_targets(cq, preemptor, kq.workload_requests(preemptor), used, admitted,
                                {"f": {"metadata": {"name": "f"}, "spec": {}}}, None)
    assert sorted(w["metadata"]["name"] for w in got) == victims


def test_preemption_message_and_status_texts():
    p = wl("p", 100)
    msg = kq.preemption_message(p, "team-a")
    assert msg == ("Preempted to accommodate a workload (UID: uid-p, JobUID: job-p) due to "
                   "prioritization in the ClusterQueue; preemptor path: /team-a; "
                   "preemptee path: /team-a")
    victim = wl("v", 1, reserved=0)
    victim["status"]["conditions"].append({"type": "Admitted", "status": "True",
                                           "reason": "Admitted"})
    st = kq.evict_status(victim["status"], msg, "t1")
    assert [(c["type"], c["status"], c.get("reason"), c.get("message"))
            for c in st["conditions"]] == [
        ("QuotaReserved", "True", None, None), ("Admitted", "True", "Admitted", None),
        ("Preempted", "True", "InClusterQueue", msg), ("Evicted", "True", "Preempted", msg)]
    st = kq.requeue_status(st, "t2")
    assert "admission" not in st
    assert [(c["type"], c["status"], c.get("reason"), c.get("message"))
            for c in st["conditions"]] == [
        ("QuotaReserved", "False", "Pending", msg),
        ("Admitted", "False", "NoReservation", "The workload has no reservation"),
        ("Preempted", "True", "InClusterQueue", msg), ("Evicted", "True", "Preempted", msg),
        ("Requeued", "True", "Preempted", msg)]
    conds = kq.readmit_conditions(st["conditions"], "t3")
    assert {c["type"]: (c["status"], c.get("reason"), c.get("message")) for c in conds
            if c["type"] in ("Evicted", "Preempted")} == {
        "Evicted": ("False", "QuotaReserved", "Previously: " + msg),
        "Preempted": ("False", "QuotaReserved", "Previously: " + msg)}
    assert kq.readmit_conditions(conds, "t4") == conds  # only True conditions are reset


def test_hostile_input_does_not_raise():
    junk = {"metadata": {}, "spec": {"priority": "high"}, "status": {"conditions": [{}]}}
    assert kq.satisfies_policy("LowerOrNewerEqualPriority", junk, junk) is False
    assert kq.candidates_in_order([junk, wl("a", reserved=1)])[0] is junk
    assert kq.preemption_targets(cq_obj("LowerPriority"), junk, {}, {}, [junk]) == []
    assert kq.preemption_message({}, "") == (
        "Preempted to accommodate a workload (UID: UNKNOWN, JobUID: UNKNOWN) due to "
        "prioritization in the ClusterQueue; preemptor path: UNKNOWN; preemptee path: UNKNOWN")


# -- against the simulator -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def sim():
    with KubeSim(nodes=NODES, kueue=True) as s:
        yield s


def queue(sim, policy, gpus=2):
    """test_kueue's namespace, ClusterQueue of `gpus` GPUs (its withinClusterQueue set to
    `policy`; None: the field left out) and LocalQueue `lq`, and the WorkloadPriorityClasses
    low-<i> (10), mid-<i> (100) and high-<i> (1000). Returns (namespace, ClusterQueue, i)."""
    ns, cq, _ = setup_queue(sim, gpus=gpus)
    if policy:
        sim.call(sim.api.patch, kq.CLUSTER_QUEUES, None, cq,
                 {"spec": {"preemption": {"withinClusterQueue": policy}}})
    i = next(_ids)
    for name, value in (("low", 10), ("mid", 100), ("high", 1000)):
        create(sim, kq.PRIORITY_CLASSES, {"apiVersion": kq.API_VERSION,
                                          "kind": "WorkloadPriorityClass",
                                          "metadata": {"name": f"{name}-{i}"}, "value": value})
    return ns, cq, i


def local_queue(sim, ns, name, cq):
    create(sim, kq.LOCAL_QUEUES, {"apiVersion": kq.API_VERSION, "kind": "LocalQueue",
                                  "metadata": {"name": name, "namespace": ns},
                                  "spec": {"clusterQueue": cq}})


def job(sim, ns, name, priority_class, gpus=2, queue_name="lq", seconds=None):
    """A one-pod Job on `queue_name`; it runs `seconds` then succeeds (None: runs on)."""
    annotations = {"kubesim.io/succeed-after": str(seconds)} if seconds else {}
    return create(sim, "jobs.batch", {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": ns,
                     "labels": {kq.QUEUE_LABEL: queue_name, kq.PRIORITY_LABEL: priority_class}},
        "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 0, "template": {
            "metadata": {"annotations": annotations},
            "spec": {"restartPolicy": "Never", "nodeSelector": {"kubesim.io/pool": "gpu"}, "containers": [{
                "name": "main", "image": "busybox",
                "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": str(gpus)},
                              "limits": {"nvidia.com/gpu": str(gpus)}}}]}}}}, ns)


def job_wl(sim, ns, j):
    return get(sim, kq.WORKLOADS, ns, workload_name(j))


def is_true(obj, type_):
    c = cond(obj, type_)
    return bool(c and c["status"] == "True")


def live_pods(sim, ns, name):
    return [p for p in sim.call(sim.api.list, "pods", ns, label_selector=f"job-name={name}")["items"]
            if not p["metadata"].get("deletionTimestamp")]


def running_job(sim, ns, j):
    """Wait until the Job's Workload is admitted and its pod runs."""
    name = j["metadata"]["name"]
    sim.wait_for(lambda: is_true(job_wl(sim, ns, j), "Admitted"), 15, message=f"{name} admitted")
    sim.wait_for(lambda: [p for p in live_pods(sim, ns, name)
                          if p["status"].get("phase") == "Running"], 15,
                 message=f"{name}'s pod running")


def newer_second(ts):
    """Wait until the clock is past the second `ts` (a creationTimestamp), so that what is
    created next is strictly newer, as Kueue compares creation timestamps."""
    sim_now = lambda: fmt_time(datetime.now(timezone.utc))  # noqa: E731
    return sim_now() > ts


def test_low_priority_job_preempted_requeued_and_readmitted(sim):
    ns, cq, i = queue(sim, "LowerPriority")
    events: list = []
    snapshots: list = []

    def record(event_type, resource, obj, old):
        if resource == kq.WORKLOADS and obj["metadata"].get("namespace") == ns:
            events.append((obj["metadata"]["name"], is_true(obj, "QuotaReserved")))
            snapshots.append(obj)
    sim.call(sim.api.subscribe, record)

    low = job(sim, ns, "low", f"low-{i}")
    running_job(sim, ns, low)
    high = job(sim, ns, "high", f"high-{i}", seconds=1)
    high_wl = sim.wait_for(lambda: job_wl(sim, ns, high), 10, message="high's Workload")

    # the victim: Preempted, then Evicted, with Kueue's message
    msg = (f"Preempted to accommodate a workload (UID: {high_wl['metadata']['uid']}, JobUID: "
           f"{high['metadata']['uid']}) due to prioritization in the ClusterQueue; "
           f"preemptor path: /{cq}; preemptee path: /{cq}")
    sim.wait_for(lambda: is_true(job_wl(sim, ns, low), "Evicted"), 15, message="low evicted")
    first = next(o for o in snapshots if o["metadata"]["name"] == workload_name(low)
                 and is_true(o, "Evicted"))  # one write: Preempted and Evicted, quota still held
    assert [(c["type"], c["status"], c.get("reason"), c.get("message"))
            for c in first["status"]["conditions"]] == [
        ("QuotaReserved", "True", "QuotaReserved", f"Quota reserved in ClusterQueue {cq}"),
        ("Admitted", "True", "Admitted", "The workload is admitted"),
        ("Preempted", "True", "InClusterQueue", msg),
        ("Evicted", "True", "Preempted", msg)]
    # its Job suspended, its pod gone, then its quota released and the Workload requeued
    sim.wait_for(lambda: get(sim, "jobs.batch", ns, "low")["spec"].get("suspend") is True, 10,
                 message="low suspended")
    sim.wait_for(lambda: not live_pods(sim, ns, "low"), 10, message="low's pod deleted")
    sim.wait_for(lambda: is_true(job_wl(sim, ns, low), "Requeued"), 10, message="low requeued")
    # as the job's reconciler wrote it (the scheduler's next look rewrites QuotaReserved's message)
    w = next(o for o in snapshots if o["metadata"]["name"] == workload_name(low)
             and is_true(o, "Requeued"))
    assert "admission" not in w["status"]
    assert [(c["type"], c["status"], c.get("reason"), c.get("message"))
            for c in w["status"]["conditions"]] == [
        ("QuotaReserved", "False", "Pending", msg),
        ("Admitted", "False", "NoReservation", "The workload has no reservation"),
        ("Preempted", "True", "InClusterQueue", msg),
        ("Evicted", "True", "Preempted", msg),
        ("Requeued", "True", "Preempted", msg)]
    low_job = get(sim, "jobs.batch", ns, "low")
    suspended = cond(low_job, "Suspended")
    assert (suspended["status"], suspended["reason"], suspended["message"]) == \
        ("True", "JobSuspended", "Job suspended")
    assert not low_job["status"].get("active") and "startTime" not in low_job["status"]
    assert low_job["spec"]["template"]["spec"]["nodeSelector"] == {"kubesim.io/pool": "gpu"}

    # the preemptor is admitted, only after the victim released its quota
    running_job(sim, ns, high)
    high_name = workload_name(high)
    first_high = next(k for k, (name, qr) in enumerate(events) if name == high_name and qr)
    low_name = workload_name(low)
    low_admitted = next(k for k, (name, qr) in enumerate(events) if name == low_name and qr)
    low_released = next(k for k, (name, qr) in enumerate(events)
                        if name == low_name and not qr and k > low_admitted)
    assert low_released < first_high
    flavor = get(sim, kq.CLUSTER_QUEUES, None, cq)["spec"]["resourceGroups"][0]["flavors"][0]["name"]
    waiting = [cond(o, "QuotaReserved")["message"] for o in snapshots
               if o["metadata"]["name"] == high_name and cond(o, "QuotaReserved")
               and cond(o, "QuotaReserved")["status"] == "False"]
    assert waiting and waiting[0] == (
        f"couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu "
        f"in flavor {flavor}, 2 more needed. Pending the preemption of 1 workload(s)")

    # the victim waits behind it, then is admitted again once the high one finished
    w = job_wl(sim, ns, low)
    assert (cond(w, "QuotaReserved")["status"], cond(w, "QuotaReserved")["reason"]) == \
        ("False", "Pending")
    assert get(sim, "jobs.batch", ns, "low")["spec"]["suspend"] is True
    sim.wait_for(lambda: is_true(get(sim, "jobs.batch", ns, "high"), "Complete"), 15,
                 message="high complete")
    running_job(sim, ns, low)
    assert get(sim, "jobs.batch", ns, "low")["spec"]["suspend"] is False
    w = job_wl(sim, ns, low)
    for type_ in ("Evicted", "Preempted"):
        c = cond(w, type_)
        assert (c["status"], c["reason"], c["message"]) == ("False", "QuotaReserved",
                                                            "Previously: " + msg)
    assert (cond(w, "QuotaReserved")["message"], cond(w, "Requeued")["status"]) == \
        (f"Quota reserved in ClusterQueue {cq}", "True")


@pytest.mark.parametrize("policy, victim_class, preemptor_class, preemptor_older, preempts", [
    ("LowerPriority", "low", "high", False, True),
    (None, "low", "high", False, False),                        # the field's default: Never
    ("Never", "low", "high", False, False),
    ("LowerPriority", "mid", "mid", True, False),               # equal priority
    ("LowerOrNewerEqualPriority", "mid", "mid", True, True),    # the victim is newer
    ("LowerOrNewerEqualPriority", "mid", "mid", False, False),  # the victim is older
    ("LowerOrNewerEqualPriority", "high", "mid", True, False),  # the victim is higher
])
def test_policy(sim, policy, victim_class, preemptor_class, preemptor_older, preempts):
    """One Job admitted and running, a second Job needing the same quota comes to the queue:
    preempted or not, as the ClusterQueue's withinClusterQueue policy says. An older preemptor
    is created first on a LocalQueue that does not exist yet, and queued once it does."""
    ns, cq, i = queue(sim, policy)
    if preemptor_older:
        preemptor = job(sim, ns, "p", f"{preemptor_class}-{i}", queue_name="later")
        p_wl = sim.wait_for(lambda: job_wl(sim, ns, preemptor), 10, message="p's Workload")
        sim.wait_for(lambda: newer_second(p_wl["metadata"]["creationTimestamp"]), 5,
                     message="the next second")
        victim = job(sim, ns, "v", f"{victim_class}-{i}")
        running_job(sim, ns, victim)
        local_queue(sim, ns, "later", cq)
    else:
        victim = job(sim, ns, "v", f"{victim_class}-{i}")
        running_job(sim, ns, victim)
        sim.wait_for(lambda: newer_second(victim["metadata"]["creationTimestamp"]), 5,
                     message="the next second")
        preemptor = job(sim, ns, "p", f"{preemptor_class}-{i}")
    if preempts:
        sim.wait_for(lambda: is_true(job_wl(sim, ns, victim), "Evicted"), 15, message="v evicted")
        running_job(sim, ns, preemptor)
        assert get(sim, "jobs.batch", ns, "v")["spec"]["suspend"] is True
        assert cond(job_wl(sim, ns, victim), "Preempted")["reason"] == "InClusterQueue"
    else:
        # the preemptor was looked at (pending for want of quota, no preemption under way)
        c = sim.wait_for(lambda: (lambda c: c if c and c["status"] == "False" and c["message"]
                                  .startswith("couldn't assign flavors") else None)(
            cond(job_wl(sim, ns, preemptor), "QuotaReserved")), 15, message="p pending")
        assert "Pending the preemption" not in c["message"]
        w = job_wl(sim, ns, victim)
        assert is_true(w, "Admitted") and cond(w, "Evicted") is None
        assert get(sim, "jobs.batch", ns, "v")["spec"]["suspend"] is False


def test_the_lowest_priority_is_preempted_first(sim):
    ns, cq, i = queue(sim, "LowerPriority", gpus=4)
    mid = job(sim, ns, "mid", f"mid-{i}")
    low = job(sim, ns, "low", f"low-{i}")
    running_job(sim, ns, mid)
    running_job(sim, ns, low)
    high = job(sim, ns, "high", f"high-{i}")
    sim.wait_for(lambda: is_true(job_wl(sim, ns, low), "Evicted"), 15, message="low evicted")
    running_job(sim, ns, high)
    w = job_wl(sim, ns, mid)
    assert is_true(w, "Admitted") and cond(w, "Evicted") is None
    assert is_true(job_wl(sim, ns, low), "Requeued")


def test_statefulset_pods_are_stopped_and_gated_again(sim):
    """A StatefulSet's pod group preempted: its running pods get TerminationTarget and are
    deleted, the re-created pods wait gated, and run again once it is re-admitted."""
    ns, cq, i = queue(sim, "LowerPriority")
    create(sim, "statefulsets.apps", {
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "srv", "namespace": ns,
                     "labels": {kq.QUEUE_LABEL: "lq", kq.PRIORITY_LABEL: f"low-{i}"}},
        "spec": {"replicas": 1, "serviceName": "srv", "selector": {"matchLabels": {"app": "srv"}},
                 "template": {"metadata": {"labels": {"app": "srv"}}, "spec": {"containers": [{
                     "name": "main", "image": "busybox",
                     "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "2"},
                                   "limits": {"nvidia.com/gpu": "2"}}}]}}}}, ns)
    sts = get(sim, "statefulsets.apps", ns, "srv")
    name = sts_workload_name(sts)

    def pod():
        return next(iter(sim.call(sim.api.list, "pods", ns, label_selector="app=srv")["items"]),
                    None)
    sim.wait_for(lambda: (pod() or {}).get("status", {}).get("phase") == "Running", 15,
                 message="srv-0 running")
    first_uid = pod()["metadata"]["uid"]
    stopped: list = []

    def record(event_type, resource, obj, old):
        if resource == "pods" and obj["metadata"].get("uid") == first_uid and cond(
                obj, "TerminationTarget"):
            stopped.append(cond(obj, "TerminationTarget"))
    sim.call(sim.api.subscribe, record)

    high = job(sim, ns, "high", f"high-{i}", seconds=1)
    sim.wait_for(lambda: is_true(get(sim, kq.WORKLOADS, ns, name), "Requeued"), 15,
                 message="srv requeued")
    w = get(sim, kq.WORKLOADS, ns, name)
    assert cond(w, "Evicted")["reason"] == "Preempted" and "admission" not in w["status"]
    assert stopped and (stopped[0]["status"], stopped[0]["reason"]) == \
        ("True", "WorkloadEvictedDueToPreempted")
    assert stopped[0]["message"] == cond(w, "Evicted")["message"]
    new = sim.wait_for(lambda: (lambda p: p if p and p["metadata"]["uid"] != first_uid
                                and p["spec"].get("schedulingGates") else None)(pod()), 15,
                       message="srv-0 re-created, gated")
    assert {"name": kq.ADMISSION_GATE} in new["spec"]["schedulingGates"]
    running_job(sim, ns, high)
    sim.wait_for(lambda: is_true(get(sim, "jobs.batch", ns, "high"), "Complete"), 15,
                 message="high complete")
    sim.wait_for(lambda: (pod() or {}).get("status", {}).get("phase") == "Running"
                 and not pod()["spec"].get("schedulingGates"), 15, message="srv-0 runs again")
    assert cond(get(sim, kq.WORKLOADS, ns, name), "Evicted")["reason"] == "QuotaReserved"


def test_a_plain_pod_is_stopped_and_its_workload_goes(sim):
    """A plain pod (Kueue's pod integration) preempted: TerminationTarget, deleted; its Workload
    goes with it, and the preemptor is admitted."""
    ns, cq, i = queue(sim, "LowerPriority")
    pod = create(sim, "pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "solo", "namespace": ns, "labels": {kq.QUEUE_LABEL: "lq"}}, "spec": {
        "restartPolicy": "Never", "containers": [{
            "name": "main", "image": "busybox",
            "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "2"},
                          "limits": {"nvidia.com/gpu": "2"}}}]}}, ns)
    sim.wait_for(lambda: get(sim, "pods", ns, "solo")["status"].get("phase") == "Running", 15,
                 message="solo running")
    stopped: list = []

    def record(event_type, resource, obj, old):
        if resource == "pods" and obj["metadata"].get("uid") == pod["metadata"]["uid"] and cond(
                obj, "TerminationTarget"):
            stopped.append(cond(obj, "TerminationTarget"))
    sim.call(sim.api.subscribe, record)
    high = job(sim, ns, "high", f"high-{i}")
    running_job(sim, ns, high)
    assert stopped and (stopped[0]["status"], stopped[0]["reason"]) == \
        ("True", "WorkloadEvictedDueToPreempted")
    assert "due to prioritization in the ClusterQueue" in stopped[0]["message"]
    sim.wait_for(lambda: not [w for w in sim.call(sim.api.list, kq.WORKLOADS, ns)["items"]
                              if w["metadata"]["name"].startswith("pod-solo-")], 10,
                 message="solo's Workload gone")
