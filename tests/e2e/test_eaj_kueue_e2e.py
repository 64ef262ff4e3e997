"""End to end with Kueue: an EphemeralAccelerationJob's GPU pod is queued like a DevServer's
(issue 25.3: it carried no queue label, so it took GPUs past the user's ClusterQueue).

kubesim with Kueue's CRDs and its admission controller (plain pods: Kueue's pod integration),
the local runtime running the EphemeralAccelerationJob watch (tests/e2e/test_eaj_e2e.py's
fixture), a ClusterQueue with 1 GPU and the LocalQueue `torchdev` in the test namespace (as the
DevUser role makes them). The first 1-GPU job runs; the second waits, its pod gated and its
Workload pending on the GPU quota, and runs once the first has ended."""
from __future__ import annotations

import pytest

from _e2e_helpers import GROUP, VERSION
from kubesim import kueue as kq
from test_eaj_e2e import PLURAL, WATCH_KINDS, WATCH_VARS, end_pod, job, pod_of, wait_phase  # noqa: F401 (the watches)
from test_trainingjob_kueue_e2e import KQ

# Kueue (tests/_cluster.py's `sim`); the EphemeralAccelerationJob watch alone (its `runtime`)
KUEUE = True

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def one_gpu_queue(kube, ns):
    """ResourceFlavor, ClusterQueue `eaj-<ns>` (1 GPU, cpu and memory ample), LocalQueue torchdev."""
    flavor, cq = f"any-{ns}", f"eaj-{ns}"
    kube["custom"].create_cluster_custom_object(*KQ, "resourceflavors", {
        "apiVersion": kq.API_VERSION, "kind": "ResourceFlavor", "metadata": {"name": flavor}, "spec": {}})
    quota = {"cpu": 64, "memory": "256Gi", "nvidia.com/gpu": 1}
    kube["custom"].create_cluster_custom_object(*KQ, "clusterqueues", {
        "apiVersion": kq.API_VERSION, "kind": "ClusterQueue", "metadata": {"name": cq},
        "spec": {"namespaceSelector": {}, "resourceGroups": [{
            "coveredResources": list(quota),
            "flavors": [{"name": flavor, "resources": [{"name": k, "nominalQuota": v} for k, v in quota.items()]}]}]}})
    kube["custom"].create_namespaced_custom_object(*KQ, ns, "localqueues", {
        "apiVersion": kq.API_VERSION, "kind": "LocalQueue", "metadata": {"name": "torchdev", "namespace": ns},
        "spec": {"clusterQueue": cq}})


def workload_of(kube, ns, pod):
    items = kube["custom"].list_namespaced_custom_object(*KQ, ns, "workloads")["items"]
    return next((w for w in items if any(r["uid"] == pod.metadata.uid for r in w["metadata"].get("ownerReferences") or [])),
                None)


def quota_reserved(workload):
    return next((c for c in (workload or {}).get("status", {}).get("conditions") or [] if c["type"] == "QuotaReserved"),
                None)


def test_a_gpu_job_waits_in_the_queue_behind_a_full_quota(sim, kube, runtime, ns):  # noqa: F811 (the fixtures)
    one_gpu_queue(kube, ns)
    kube["custom"].create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, job("first", resources={"gpu": 1}))
    wait_phase(sim, kube, ns, "first", "Running")
    first = pod_of(kube, ns, "first")
    assert first.metadata.labels[kq.QUEUE_LABEL] == "torchdev"
    assert first.spec.containers[0].resources.limits["nvidia.com/gpu"] == "1"
    assert (quota_reserved(workload_of(kube, ns, first)) or {}).get("status") == "True"

    kube["custom"].create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, job("second", resources={"gpu": 1}))
    second = sim.wait_for(lambda: pod_of(kube, ns, "second"), 90, interval=0.1, message="the second job's pod")
    assert second.metadata.labels[kq.QUEUE_LABEL] == "torchdev"
    waiting = sim.wait_for(lambda: (lambda c: c if c and c["reason"] == "Pending" else None)(
        quota_reserved(workload_of(kube, ns, second))), 60, interval=0.1, message="the second job's Workload pending")
    assert "nvidia.com/gpu" in waiting["message"]
    second = pod_of(kube, ns, "second")
    assert [g.name for g in second.spec.scheduling_gates or []] == [kq.ADMISSION_GATE, kq.TOPOLOGY_GATE]
    assert second.status.phase == "Pending"
    wait_phase(sim, kube, ns, "second", "Pending")

    end_pod(kube, ns, "first", **{"kubesim.io/succeed-after": "0"})
    wait_phase(sim, kube, ns, "first", "Succeeded")
    wait_phase(sim, kube, ns, "second", "Running")
    assert not pod_of(kube, ns, "second").spec.scheduling_gates


def test_without_a_local_queue_the_pod_is_not_queued(sim, kube, runtime, ns):  # noqa: F811 (the fixtures)
    kube["custom"].create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, job("plain", resources={"gpu": 1}))
    wait_phase(sim, kube, ns, "plain", "Running")
    assert kq.QUEUE_LABEL not in (pod_of(kube, ns, "plain").metadata.labels or {})
