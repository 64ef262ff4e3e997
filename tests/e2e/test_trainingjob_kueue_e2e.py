"""End to end with Kueue: TrainingJobs queue behind quota as whole gangs.

A ClusterQueue with 4 GPUs and the LocalQueue ``torchdev`` in the test namespace (as the
DevUser role makes them). Two 2-worker x 2-GPU TrainingJobs: the first is admitted and runs,
the second stays Queued (its Job suspended, no pod, status.queue) and starts when the first
completes (Kueue's Workload Finished releases the quota). With a preemption policy, a
high-priority job preempts a running low-priority one, which says so, bills what it ran and
comes back."""
from __future__ import annotations

import pytest

from _e2e_helpers import GROUP, VERSION, new_namespace, remove_all
from kubesim import kueue as kq
from test_trainingjob_e2e import annotate_workers, batch, create, get_tj, tj, wait_state, workers

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
KQ = ("kueue.x-k8s.io", "v1beta2")


# Kueue (its real CRDs and kubesim's admission controller; the real Kueue on the real tier):
# tests/_cluster.py's `sim` reads this.
KUEUE = True


@pytest.fixture
def ns(kube, sim):
    """A fresh namespace; afterwards its TrainingJobs are deleted and their workers waited away
    (the 8 GPUs of the two GPU nodes free for the next test)."""
    name = new_namespace(kube)
    yield name
    remove_all(sim, kube, name, "trainingjobs")


def queue_for(kube, ns, gpus=4, preemption=None):
    cq, flavor = f"cq-{ns}", f"rf-{ns}"
    kube["custom"].create_cluster_custom_object(*KQ, "resourceflavors", {
        "apiVersion": kq.API_VERSION, "kind": "ResourceFlavor", "metadata": {"name": flavor}, "spec": {}})
    quota = {"cpu": 64, "memory": "512Gi", "nvidia.com/gpu": gpus}
    kube["custom"].create_cluster_custom_object(*KQ, "clusterqueues", {
        "apiVersion": kq.API_VERSION, "kind": "ClusterQueue", "metadata": {"name": cq},
        "spec": {"namespaceSelector": {}, "queueingStrategy": "BestEffortFIFO", **(
                 {"preemption": preemption} if preemption else {}), "resourceGroups": [{
            "coveredResources": list(quota),
            "flavors": [{"name": flavor, "resources": [{"name": k, "nominalQuota": v} for k, v in quota.items()]}]}]}})
    kube["custom"].create_namespaced_custom_object(*KQ, ns, "localqueues", {
        "apiVersion": kq.API_VERSION, "kind": "LocalQueue", "metadata": {"name": "torchdev", "namespace": ns},
        "spec": {"clusterQueue": cq}})
    return cq


def gpu_tj(name):
    return tj(name, gpusPerWorker=2, networking={"backend": "nccl"},
              resources={"requests": {"cpu": "1", "memory": "1Gi"}})


def test_second_job_queues_behind_quota_as_a_gang(sim, kube, runtime, ns):
    cq = queue_for(kube, ns)
    create(kube, ns, gpu_tj("first"))
    obj = wait_state(sim, kube, ns, "first", "Running")
    assert obj["status"]["allocatedGPUs"] == 4
    job = batch(kube).read_namespaced_job("first", ns)
    assert job.metadata.labels[kq.QUEUE_LABEL] == "torchdev" and job.spec.suspend is False

    create(kube, ns, gpu_tj("second"))
    obj = wait_state(sim, kube, ns, "second", "Queued")
    assert obj["status"]["queue"]["name"] == "torchdev" and obj["status"]["queue"]["clusterQueue"] == cq
    assert not obj["status"]["queue"]["admitted"]
    assert batch(kube).read_namespaced_job("second", ns).spec.suspend is True
    assert not workers(kube, ns, "second")  # nothing starts before the whole gang is admitted

    annotate_workers(kube, ns, "first", {"kubesim.io/succeed-after": "0"})
    wait_state(sim, kube, ns, "first", "Completed")
    obj = wait_state(sim, kube, ns, "second", "Running", timeout=120)
    assert len(workers(kube, ns, "second")) == 2 and "queue" not in obj["status"]
    # an unchanged queued-then-admitted job: the operator does not fight Kueue over spec.suspend
    assert batch(kube).read_namespaced_job("second", ns).spec.suspend is False


def test_suspend_releases_the_quota(sim, kube, runtime, ns):
    queue_for(kube, ns)
    create(kube, ns, gpu_tj("hold"))
    wait_state(sim, kube, ns, "hold", "Running")
    create(kube, ns, gpu_tj("wait"))
    wait_state(sim, kube, ns, "wait", "Queued")
    kube["custom"].patch_namespaced_custom_object(GROUP, VERSION, ns, "trainingjobs", "hold", {"spec": {"suspend": True}})
    wait_state(sim, kube, ns, "hold", "Suspended")
    wait_state(sim, kube, ns, "wait", "Running", timeout=120)
    kube["custom"].patch_namespaced_custom_object(GROUP, VERSION, ns, "trainingjobs", "hold", {"spec": {"suspend": False}})
    obj = wait_state(sim, kube, ns, "hold", "Queued")  # resumed: back in the queue behind "wait"
    assert obj["status"]["queue"]["position"] in (1, None)


def test_missing_priority_class_fails_with_the_reason(sim, kube, runtime, ns):
    queue_for(kube, ns)
    body = gpu_tj("nopc")
    body["spec"]["scheduling"] = {"priority": "does-not-exist"}
    create(kube, ns, body)
    obj = wait_state(sim, kube, ns, "nopc", "Failed")
    st = obj["status"]
    assert st["failureReason"] == "InvalidSpec"
    degraded = next(c for c in st["conditions"] if c["type"] == "Degraded")
    assert degraded["status"] == "True" and "does-not-exist" in degraded["message"]
    assert not workers(kube, ns, "nopc")


def priority_classes(kube, ns):
    """Two WorkloadPriorityClasses of this test's own (cluster-scoped: named after the namespace)."""
    names = {}
    for level, value in (("low", 100), ("high", 10000)):
        names[level] = f"{ns}-{level}"
        kube["custom"].create_cluster_custom_object(*KQ, "workloadpriorityclasses", {
            "apiVersion": kq.API_VERSION, "kind": "WorkloadPriorityClass", "metadata": {"name": names[level]},
            "value": value, "description": f"{level} priority of the test namespace {ns}"})
    return names


def prioritized(body, priority_class):
    body["spec"]["scheduling"] = {"priority": priority_class}
    return body


def condition_of(obj, ctype):
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == ctype), None)


def test_a_preempted_job_says_why_bills_what_it_ran_and_resumes(sim, kube, runtime, ns):
    """Issue 26.5: Kueue preempts a running low-priority TrainingJob for a high-priority one in the
    same ClusterQueue (withinClusterQueue: LowerPriority, as the DevUser role's ClusterQueues): the
    victim's Job is suspended, its workers go, the TrainingJob says Queued with condition Evicted
    (reason Preempted, Kueue's message), one Warning Event, its UsageRecord closed with endReason
    Preempted; once the high-priority job completed it is admitted again and runs (the library
    resumes it from its newest checkpoint), with a new UsageRecord."""
    from _e2e_helpers import bill_to, usage_records, warning_events

    bill_to(kube, ns, "jane@example.com")
    queue_for(kube, ns, preemption={"withinClusterQueue": "LowerPriority"})
    pc = priority_classes(kube, ns)
    create(kube, ns, prioritized(gpu_tj("victim"), pc["low"]))
    wait_state(sim, kube, ns, "victim", "Running")

    def records(closed):
        got = [r for r in usage_records(kube, ns) if r["spec"]["server"] == "victim"]
        return [r for r in got if bool(r["spec"].get("endedAt")) == closed]

    [first] = sim.wait_for(lambda: records(False), 60, interval=0.2, message="the victim's open usage record")

    create(kube, ns, prioritized(gpu_tj("urgent"), pc["high"]))
    evicted = sim.wait_for(lambda: (lambda o: o if (condition_of(o, "Evicted") or {}).get("status") == "True"
                                    and o["status"].get("state") == "Queued" else None)(get_tj(kube, ns, "victim")),
                           180, interval=0.2, message="victim Evicted and Queued")
    cond = condition_of(evicted, "Evicted")
    assert cond["reason"] == "Preempted", cond
    assert "prioritization in the ClusterQueue" in cond["message"], cond  # Kueue's own words
    assert batch(kube).read_namespaced_job("victim", ns).spec.suspend is True
    sim.wait_for(lambda: not workers(kube, ns, "victim"), 120, interval=0.2, message="the victim's workers gone")
    wait_state(sim, kube, ns, "urgent", "Running", timeout=180)
    [closed] = sim.wait_for(lambda: records(True), 60, interval=0.2, message="the victim's record closed")
    assert closed["metadata"]["name"] == first["metadata"]["name"]
    assert closed["spec"]["endReason"] == "Preempted", closed["spec"]
    sim.wait_for(lambda: warning_events(kube, ns, "victim", "Preempted"), 60, interval=0.2,
                 message="the victim's Warning Event Preempted")

    annotate_workers(kube, ns, "urgent", {"kubesim.io/succeed-after": "0"})
    wait_state(sim, kube, ns, "urgent", "Completed", timeout=120)
    again = wait_state(sim, kube, ns, "victim", "Running", timeout=180)
    assert (condition_of(again, "Evicted") or {}).get("status") != "True", condition_of(again, "Evicted")
    assert batch(kube).read_namespaced_job("victim", ns).spec.suspend is False
    [second] = sim.wait_for(lambda: records(False), 60, interval=0.2, message="the victim's second usage record")
    assert second["metadata"]["name"] != first["metadata"]["name"]
    assert second["spec"]["startedAt"] >= closed["spec"]["endedAt"]
    assert len(warning_events(kube, ns, "victim", "Preempted")) == 1  # one per eviction, not per reconcile
