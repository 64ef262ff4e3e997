"""A queued DevServer whose flavor changes is re-queued with its new shape, not stuck failing
(issue 26 item 5).

Kueue's StatefulSet webhook (vstatefulset.kb.io, Kueue v0.19.2) refuses any change of a queued
StatefulSet's pod shape (requests, nodeSelector, tolerations, ...) or of its replicas, with 403
`admission webhook "vstatefulset.kb.io" denied the request: ... field is immutable`. So applying
the new flavor to the StatefulSet fails at every reconcile. The role instead re-creates the
StatefulSet (its home claims kept: they are retained, the policy is Retain) so that Kueue queues
a new Workload with the new shape, says so (one Normal Event `Requeued` naming the change), and
no reconcile fails.

Here the ClusterQueue has 2 GPUs of gpu-h100-2, taken by the running server `holder`, and none of
gpu-a10g-1: `waiter` (gpu-h100-2) is Queued at position 1; its flavor becomes gpu-a10g-1; it ends
Queued under a new Workload whose pod set asks for the a10g's 1 GPU and nodeSelector, its home
claim the same object.

Tier-neutral: only the `sim`, `kube`, `runtime` and `ns` fixtures and kube API calls. On kubesim
the webhook is kubesim/controllers/kueue.py statefulset_update_errors; the lead runs this module on
the real tier too (TORCHDEV_E2E_TIER=real) with the real Kueue.
"""
from __future__ import annotations

import pytest

from _e2e_helpers import GROUP, VERSION, condition, devserver, get_ds, reconcile_again, wait_ready

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

# Kueue (its real CRDs and kubesim's admission controller; the real Kueue on the real tier).
KUEUE = True

KQ = ("kueue.x-k8s.io", "v1beta2")
OLD, NEW = "gpu-h100-2", "gpu-a10g-1"


def queue(kube, ns, old_gpus=2):
    """ClusterQueue `cq-<ns>`: `old_gpus` GPUs of OLD, none of NEW; LocalQueue `torchdev` in `ns`."""
    cq = f"cq-{ns}"
    flavors = []
    for flavor, gpus in ((OLD, old_gpus), (NEW, 0)):
        quota = {"cpu": 192, "memory": "2000Gi", "ephemeral-storage": "4Ti", "nvidia.com/gpu": gpus}
        flavors.append({"name": flavor, "resources": [{"name": k, "nominalQuota": v} for k, v in quota.items()]})
    kube["custom"].create_cluster_custom_object(*KQ, "clusterqueues", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": cq},
        "spec": {"namespaceSelector": {}, "queueingStrategy": "BestEffortFIFO", "resourceGroups": [{
            "coveredResources": ["cpu", "memory", "ephemeral-storage", "nvidia.com/gpu"], "flavors": flavors}]}})
    kube["custom"].create_namespaced_custom_object(*KQ, ns, "localqueues", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "torchdev", "namespace": ns},
        "spec": {"clusterQueue": cq}})
    return cq


def workloads(kube, ns):
    return kube["custom"].list_namespaced_custom_object(*KQ, ns, "workloads")["items"]


def test_a_queued_servers_new_flavor_is_requeued_not_refused_forever(sim, kube, runtime, ns):
    cq = queue(kube, ns)
    try:
        for name in ("holder", "waiter"):
            kube["custom"].create_namespaced_custom_object(GROUP, VERSION, ns, "devservers", devserver(
                name, OLD, persistentHomeSize="10Gi"))
            if name == "holder":
                wait_ready(sim, kube, ns, name, timeout=180)

        def queued(flavor):
            obj = get_ds(kube, ns, "waiter")
            st = obj.get("status") or {}
            sts = kube["apps"].read_namespaced_stateful_set("waiter", ns)
            ok = (st.get("phase") == "Queued" and st.get("observedGeneration") == obj["metadata"]["generation"]
                  and (st.get("queue") or {}).get("workload")
                  and sts.spec.template.spec.node_selector.get("torchdev.io/gpu-type") == flavor)
            return obj if ok else None

        sim.wait_for(lambda: queued("nvidia-h100"), 120, interval=0.1, message="waiter Queued")
        old_sts = kube["apps"].read_namespaced_stateful_set("waiter", ns)
        claim = sim.wait_for(lambda: next((c for c in kube["core"].list_namespaced_persistent_volume_claim(ns).items
                                           if c.metadata.name == "home-waiter-0"), None), 60,
                             message="waiter's home claim")
        assert old_sts.spec.persistent_volume_claim_retention_policy.when_deleted == "Retain"
        old_wl = get_ds(kube, ns, "waiter")["status"]["queue"]["workload"]
        assert runtime.wait_idle(120)
        mark = len(runtime.history("DevServer"))

        kube["custom"].patch_namespaced_custom_object(GROUP, VERSION, ns, "devservers", "waiter",
                                                      {"spec": {"flavor": NEW}})
        obj = sim.wait_for(lambda: queued("nvidia-a10g"), 120, interval=0.1, message="waiter re-queued as a10g")
        new_sts = kube["apps"].read_namespaced_stateful_set("waiter", ns)
        assert new_sts.metadata.uid != old_sts.metadata.uid
        assert new_sts.spec.template.spec.containers[0].resources.requests["nvidia.com/gpu"] == "1"
        wl_name = obj["status"]["queue"]["workload"]
        assert wl_name != old_wl
        wl = next(w for w in workloads(kube, ns) if w["metadata"]["name"] == wl_name)
        requests = wl["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]["requests"]
        assert str(requests["nvidia.com/gpu"]) == "1"
        assert old_wl not in [w["metadata"]["name"] for w in workloads(kube, ns)]
        assert (condition(obj, "Progressing")["status"], condition(obj, "Progressing")["reason"]) == ("True", "Queued")
        assert condition(obj, "Degraded").get("status") != "True"

        # the home claim is the same object
        kept = kube["core"].read_namespaced_persistent_volume_claim("home-waiter-0", ns)
        assert kept.metadata.uid == claim.metadata.uid and kept.metadata.deletion_timestamp is None

        # one Event says what happened
        reconcile_again(sim, runtime, ns, "waiter")
        events = [e for e in kube["core"].list_namespaced_event(
            ns, field_selector="involvedObject.name=waiter").items if e.reason == "Requeued"]
        assert len(events) == 1 and events[0].type == "Normal" and (events[0].count or 1) == 1
        assert events[0].message == (f"spec.flavor changed from {OLD} to {NEW} while queued: Kueue does not let a "
                                     "queued StatefulSet change its pods' shape or size, so it was re-created and "
                                     "queued again (the home volume is kept)")
        # and no reconcile failed
        runs = [r for r in runtime.history("DevServer")[mark:] if r.name == "waiter"]
        assert runs and [(r.error, r.failed_tasks) for r in runs if not r.ok] == []
    finally:
        for name in ("holder", "waiter"):
            kube["custom"].delete_namespaced_custom_object(GROUP, VERSION, ns, "devservers", name)
        sim.wait_for(lambda: not kube["core"].list_namespaced_pod(ns).items, 180, interval=0.2,
                     message=f"the pods of {ns} gone")
        kube["custom"].delete_cluster_custom_object(*KQ, "clusterqueues", cq)


def test_a_new_flavor_that_would_lose_the_home_is_refused_once_not_retried(sim, kube, runtime, ns):
    """With spec.homeRetentionPolicy Delete the home claims go with the StatefulSet (the StatefulSet
    controller makes it their owner): no re-create;
    Degraded InvalidSpec with the reason, ONE Warning Event, the StatefulSet and its claim untouched.
    The ClusterQueue has no GPU: the server stays queued."""
    cq = queue(kube, ns, old_gpus=0)
    try:
        kube["custom"].create_namespaced_custom_object(GROUP, VERSION, ns, "devservers", devserver(
            "keeper", OLD, persistentHomeSize="10Gi", homeRetentionPolicy="Delete"))

        def queued():
            obj = get_ds(kube, ns, "keeper")
            st = obj.get("status") or {}
            return obj if st.get("phase") == "Queued" and (st.get("queue") or {}).get("workload") else None

        sim.wait_for(queued, 120, interval=0.1, message="keeper Queued")
        old_sts = kube["apps"].read_namespaced_stateful_set("keeper", ns)
        assert old_sts.spec.persistent_volume_claim_retention_policy.when_deleted == "Delete"
        claim = sim.wait_for(lambda: next((c for c in kube["core"].list_namespaced_persistent_volume_claim(ns).items
                                           if c.metadata.name == "home-keeper-0"), None), 60,
                             message="keeper's home claim")
        assert runtime.wait_idle(120)
        mark = len(runtime.history("DevServer"))

        kube["custom"].patch_namespaced_custom_object(GROUP, VERSION, ns, "devservers", "keeper",
                                                      {"spec": {"flavor": NEW}})

        def refused():
            obj = get_ds(kube, ns, "keeper")
            c = condition(obj, "Degraded")
            ok = (c.get("status") == "True" and c.get("reason") == "InvalidSpec"
                  and obj["status"].get("observedGeneration") == obj["metadata"]["generation"])
            return obj if ok else None

        obj = sim.wait_for(refused, 120, interval=0.1, message="keeper Degraded InvalidSpec")
        message = (f"spec.flavor changed from {OLD} to {NEW}, but Kueue does not let a queued StatefulSet change its "
                   "pods' shape or size, and re-creating it would delete the home volume (spec.homeRetentionPolicy "
                   "Delete: home-keeper-0): undo the change, or delete the DevServer and create it again")
        assert condition(obj, "Degraded")["message"] == message
        assert (condition(obj, "Progressing")["status"], condition(obj, "Progressing")["reason"]) == \
            ("False", "SpecRejected")
        reconcile_again(sim, runtime, ns, "keeper")
        events = [e for e in kube["core"].list_namespaced_event(
            ns, field_selector="involvedObject.name=keeper").items if e.reason == "InvalidSpec"]
        assert len(events) == 1 and events[0].type == "Warning" and events[0].message == message
        # the StatefulSet (its old shape) and the home claim are untouched; no reconcile failed
        sts = kube["apps"].read_namespaced_stateful_set("keeper", ns)
        assert sts.metadata.uid == old_sts.metadata.uid
        assert sts.metadata.resource_version == old_sts.metadata.resource_version
        kept = kube["core"].read_namespaced_persistent_volume_claim("home-keeper-0", ns)
        assert kept.metadata.uid == claim.metadata.uid and kept.metadata.deletion_timestamp is None
        runs = [r for r in runtime.history("DevServer")[mark:] if r.name == "keeper"]
        assert runs and [(r.error, r.failed_tasks) for r in runs if not r.ok] == []

        # undoing the change clears it
        kube["custom"].patch_namespaced_custom_object(GROUP, VERSION, ns, "devservers", "keeper",
                                                      {"spec": {"flavor": OLD}})
        sim.wait_for(lambda: condition(get_ds(kube, ns, "keeper"), "Degraded").get("status") == "False", 120,
                     interval=0.1, message="keeper no longer Degraded")
    finally:
        kube["custom"].delete_namespaced_custom_object(GROUP, VERSION, ns, "devservers", "keeper")
        sim.wait_for(lambda: not kube["core"].list_namespaced_pod(ns).items, 180, interval=0.2,
                     message=f"the pods of {ns} gone")
        kube["custom"].delete_cluster_custom_object(*KQ, "clusterqueues", cq)
