"""Issue 26.5, the namespace quota: a DevServer that Kueue preempts releases what the namespace's
ResourceQuota counts while it waits, so the preemption Kueue decided takes effect.

The namespace's ResourceQuota has room for one 2-GPU server (requests.nvidia.com/gpu 2, and cpu
and memory for one), as the DevUser role sizes it from the user's quota; the ClusterQueue has the
same 2 GPUs and `withinClusterQueue: LowerPriority`.  A running low-priority server is preempted
by a high-priority one in the same namespace.  Kueue stops the victim's pods and the StatefulSet
controller makes them again, gated: the quota counts them, and before the operator released
them the urgent server's pods were refused (PodCreateRefused) until the victim was stopped by
hand.  Now the victim's StatefulSet goes to 0 (home claim kept) while it waits: the urgent server
runs, the victim is Queued with Evicted True (Kueue's reason and words, re-queued), its usage
record closed at the eviction and one Warning Event; once the urgent server is deleted the
victim is queued again, admitted and runs with the same home claim, Evicted False Readmitted,
a new usage record from the readmission.

Tier-neutral (kube client and the `sim`, `kube`, `runtime` fixtures only).  On kubesim its quota
admission refuses the pods (kubesim/controllers/resourcequota.py) and its Kueue model preempts
within the ClusterQueue; on the real tier kube-apiserver's quota and Kueue v0.19.2.
"""
from __future__ import annotations

import time

import pytest

from _e2e_helpers import condition, get_ds, set_quota, usage_records, wait_ready, warning_events
from e2e.test_devserver_preemption_e2e import preempting_queue
from e2e.test_kueue_e2e import create, ns, priority_classes  # noqa: F401 (fixtures)

# Two servers' lifecycles one after the other, each through several reconciles and Kueue admissions:
# on a busy 2-core machine more than the suite's default 300 s.
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(900)]

KUEUE = True  # tests/_cluster.py's `sim` reads this
# Room for one server of gpu-h100-2 (cpu 44, memory 440Gi, 2 GPUs a pod), not two.
QUOTA = {"requests.nvidia.com/gpu": "2", "requests.cpu": "64", "requests.memory": "512Gi"}


def home_uid(kube, namespace, name):
    return kube["core"].read_namespaced_persistent_volume_claim(f"home-{name}-0", namespace).metadata.uid


def pods_of(kube, namespace, name):
    return [p for p in kube["core"].list_namespaced_pod(namespace).items
            if (p.metadata.labels or {}).get("app.kubernetes.io/instance") == name and not p.metadata.deletion_timestamp]


def assert_its_looks_write_nothing(sim, runtime, namespace, name, looks=2):
    """A server waiting in Kueue's queue is looked at again by its own requeues: ``looks`` of them,
    successful, after the status the caller has seen, write nothing.  (No enqueue of a run of our
    own: the real ansible-operator v1.39 ends a reconcile at its requeue_after while the playbook
    goes on, and a run started on top of that lost its kubeconfig.)"""
    def runs():
        return [r for r in runtime.history("DevServer") if r.name == name and r.namespace == namespace]

    sim.wait_for(lambda: runs() and not runtime.reconciling("DevServer", namespace, name), 120,
                 message=f"no reconcile of {name} running")
    sim.reset_metrics()
    mark = time.time()
    sim.wait_for(lambda: len([r for r in runs() if r.started >= mark and r.ok]) >= looks
                 and not runtime.reconciling("DevServer", namespace, name), 300, message=f"{looks} looks at {name}")
    writes = [r for r in sim.requests() if r["verb"] in ("create", "update", "patch", "delete")]
    assert writes == [], writes


def test_a_preempted_server_releases_the_namespace_quota_while_it_waits(sim, kube, runtime, ns, priority_classes):  # noqa: F811
    set_quota(sim, kube, ns, QUOTA, create=True)
    cq = preempting_queue(kube, ns)
    create(kube, ns, "victim", priorityClassName="torchdev-low")
    wait_ready(sim, kube, ns, "victim", timeout=240)
    home = home_uid(kube, ns, "victim")

    def records(closed):
        got = [r for r in usage_records(kube, ns) if r["spec"]["server"] == "victim"]
        return [r for r in got if bool(r["spec"].get("endedAt")) == closed]

    [first] = sim.wait_for(lambda: records(False), 60, interval=0.2, message="the victim's open usage record")

    create(kube, ns, "urgent", priorityClassName="torchdev-high")
    # Before the operator released the victim's gated pods, the quota refused the urgent server's.
    urgent = wait_ready(sim, kube, ns, "urgent", timeout=300)
    assert condition(urgent, "Degraded").get("reason") != "PodCreateRefused", condition(urgent, "Degraded")

    def released():
        obj = get_ds(kube, ns, "victim")
        st = obj.get("status") or {}
        return obj if (condition(obj, "Evicted").get("status") == "True" and st.get("phase") == "Queued"
                       and kube["apps"].read_namespaced_stateful_set("victim", ns).spec.replicas == 0
                       and not pods_of(kube, ns, "victim")) else None

    obj = sim.wait_for(released, 120, interval=0.2, message="victim Queued, Evicted, its pods released")
    cond = condition(obj, "Evicted")
    assert cond["reason"] == "Preempted", cond
    assert "prioritization in the ClusterQueue" in cond["message"], cond  # Kueue's own words
    assert f"re-queued in ClusterQueue {cq}" in cond["message"] and "same home volume" in cond["message"], cond
    assert obj["status"]["evictions"] == 1 and obj["status"]["lastEvictionReason"] == "Preempted", obj["status"]
    assert obj["status"]["replicas"] == 1 and obj["status"]["ready"] == "0/1", obj["status"]
    [closed] = sim.wait_for(lambda: records(True), 60, interval=0.2, message="the victim's record closed")
    assert closed["metadata"]["name"] == first["metadata"]["name"]
    assert closed["spec"]["endReason"] == "Preempted", closed["spec"]
    assert closed["spec"]["endedAt"] == obj["status"]["lastEvictionTime"]
    sim.wait_for(lambda: warning_events(kube, ns, "victim", "Preempted"), 60, interval=0.2,
                 message="the victim's Warning Event Preempted")
    assert home_uid(kube, ns, "victim") == home  # scaled to 0, the home claim kept

    # While the urgent server holds the quota the victim stays released, and its looks write nothing.
    assert_its_looks_write_nothing(sim, runtime, ns, "victim")
    waiting = get_ds(kube, ns, "victim")
    assert waiting["status"]["phase"] == "Queued" and condition(waiting, "Evicted")["status"] == "True"
    assert kube["apps"].read_namespaced_stateful_set("victim", ns).spec.replicas == 0
    assert get_ds(kube, ns, "urgent")["status"]["phase"] == "Running"
    assert len(warning_events(kube, ns, "victim", "Preempted")) == 1

    kube["custom"].delete_namespaced_custom_object("torchdev.io", "v1alpha1", ns, "devservers", "urgent")
    again = wait_ready(sim, kube, ns, "victim", timeout=300)
    evicted = condition(again, "Evicted")
    assert (evicted.get("status"), evicted.get("reason")) == ("False", "Readmitted"), evicted
    assert again["status"]["evictions"] == 1, again["status"]
    assert kube["apps"].read_namespaced_stateful_set("victim", ns).spec.replicas == 1
    assert home_uid(kube, ns, "victim") == home
    [second] = sim.wait_for(lambda: records(False), 60, interval=0.2, message="the victim's second usage record")
    assert second["metadata"]["name"] != first["metadata"]["name"]
    assert second["spec"]["startedAt"] >= closed["spec"]["endedAt"]
    assert len(warning_events(kube, ns, "victim", "Preempted")) == 1  # one per eviction, not per reconcile
