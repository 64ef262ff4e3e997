"""Issue 26.5: a DevServer that Kueue preempts says why, bills what it ran and starts again.

A ClusterQueue with room for one 2-GPU server and `withinClusterQueue: LowerPriority` (as the
DevUser role renders): a running low-priority server is preempted by a high-priority one. Kueue
evicts the low one's Workload and stops its pods; they come back gated and wait. The victim says
Queued with condition Evicted (reason Preempted, Kueue's message), one Warning Event Preempted,
its usage record closed at the eviction (endReason Preempted); once the high-priority server is
deleted, Kueue admits the victim again, it runs, Evicted goes False (Readmitted) and a new
record bills the new admission.
"""
from __future__ import annotations

import pytest

from _e2e_helpers import condition, get_ds, usage_records, wait_ready, warning_events
from e2e.test_kueue_e2e import FLAVOR, KQ, create, ns, priority_classes  # noqa: F401 (fixtures)
from kubesim import kueue as kq

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

KUEUE = True  # tests/_cluster.py's `sim` reads this


def preempting_queue(kube, namespace, gpus=2):
    cq = f"cq-{namespace}"
    quota = {"cpu": 192, "memory": "2000Gi", "ephemeral-storage": "4Ti", "nvidia.com/gpu": gpus}
    kube["custom"].create_cluster_custom_object(*KQ, "clusterqueues", {
        "apiVersion": kq.API_VERSION, "kind": "ClusterQueue", "metadata": {"name": cq},
        "spec": {"namespaceSelector": {}, "queueingStrategy": "BestEffortFIFO",
                 "preemption": {"withinClusterQueue": "LowerPriority"}, "resourceGroups": [{
                     "coveredResources": list(quota),
                     "flavors": [{"name": FLAVOR, "resources": [{"name": k, "nominalQuota": v}
                                                                for k, v in quota.items()]}]}]}})
    kube["custom"].create_namespaced_custom_object(*KQ, namespace, "localqueues", {
        "apiVersion": kq.API_VERSION, "kind": "LocalQueue", "metadata": {"name": "torchdev", "namespace": namespace},
        "spec": {"clusterQueue": cq}})
    return cq


def test_a_preempted_server_says_why_bills_what_it_ran_and_starts_again(sim, kube, runtime, ns, priority_classes):  # noqa: F811
    preempting_queue(kube, ns)
    create(kube, ns, "victim", priorityClassName="torchdev-low")
    wait_ready(sim, kube, ns, "victim", timeout=240)

    def records(closed):
        got = [r for r in usage_records(kube, ns) if r["spec"]["server"] == "victim"]
        return [r for r in got if bool(r["spec"].get("endedAt")) == closed]

    [first] = sim.wait_for(lambda: records(False), 60, interval=0.2, message="the victim's open usage record")

    create(kube, ns, "urgent", priorityClassName="torchdev-high")

    def evicted():
        obj = get_ds(kube, ns, "victim")
        return obj if (condition(obj, "Evicted").get("status") == "True"
                       and (obj.get("status") or {}).get("phase") == "Queued") else None

    obj = sim.wait_for(evicted, 180, interval=0.2, message="victim Evicted and Queued")
    cond = condition(obj, "Evicted")
    assert cond["reason"] == "Preempted", cond
    assert "prioritization in the ClusterQueue" in cond["message"], cond  # Kueue's own words
    assert obj["status"]["evictions"] == 1 and obj["status"]["lastEvictionReason"] == "Preempted", obj["status"]
    wait_ready(sim, kube, ns, "urgent", timeout=180)
    [closed] = sim.wait_for(lambda: records(True), 60, interval=0.2, message="the victim's record closed")
    assert closed["metadata"]["name"] == first["metadata"]["name"]
    assert closed["spec"]["endReason"] == "Preempted", closed["spec"]
    assert closed["spec"]["endedAt"] == obj["status"]["lastEvictionTime"]  # no GPU-hours while it waits
    sim.wait_for(lambda: warning_events(kube, ns, "victim", "Preempted"), 60, interval=0.2,
                 message="the victim's Warning Event Preempted")
    waiting = get_ds(kube, ns, "victim")["status"]
    assert waiting["phase"] == "Queued" and waiting["queue"]["clusterQueue"] == f"cq-{ns}", waiting

    kube["custom"].delete_namespaced_custom_object("torchdev.io", "v1alpha1", ns, "devservers", "urgent")
    again = wait_ready(sim, kube, ns, "victim", timeout=240)
    assert condition(again, "Evicted").get("status") == "False", condition(again, "Evicted")
    assert condition(again, "Evicted").get("reason") == "Readmitted", condition(again, "Evicted")
    [second] = sim.wait_for(lambda: records(False), 60, interval=0.2, message="the victim's second usage record")
    assert second["metadata"]["name"] != first["metadata"]["name"]
    assert second["spec"]["startedAt"] >= closed["spec"]["endedAt"]
    assert len(warning_events(kube, ns, "victim", "Preempted")) == 1  # one per eviction, not per reconcile
