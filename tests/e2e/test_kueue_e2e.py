"""End to end with Kueue: kubesim with Kueue's real CRDs and its admission controller, the
local runtime, the real roles.

A ClusterQueue with 4 GPUs of the 2-GPU flavor ``gpu-h100-2`` and the LocalQueue ``torchdev``
in the test namespace (created here directly, as the DevUser role would): two 2-GPU
DevServers run, the third stays Queued (status.queue.position 1, its pod scheduling-gated)
and starts when one of the first two is deleted. The flavors become ResourceFlavors through
the devserverflavor role. tests/e2e/test_devserver_e2e.py covers the cluster without Kueue.
"""
from __future__ import annotations

import time
import uuid

import pytest

from _e2e_helpers import (GROUP, ROOT, VERSION, condition, devserver, get_ds, load, new_namespace, remove_all,
                          wait_degraded, wait_ready)
from kubesim import kueue as kq
from ansible_collections.torchdev.operator.plugins.module_utils.startup import describe as describe_startup

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


FLAVOR = "gpu-h100-2"
QUEUE_LABEL, PRIORITY_LABEL = kq.QUEUE_LABEL, kq.PRIORITY_LABEL
KQ = ("kueue.x-k8s.io", "v1beta2")


# Kueue (its real CRDs and kubesim's admission controller; the real Kueue on the real tier):
# tests/_cluster.py's `sim` reads this.
KUEUE = True


@pytest.fixture(scope="module")
def priority_classes(kube):
    """config/kueue's WorkloadPriorityClasses (already there when the modules that import this
    fixture share a real tier's cluster)."""
    from kubernetes.client.exceptions import ApiException

    for wpc in load_all(ROOT / "config" / "kueue" / "workloadpriorityclasses.yaml"):
        try:
            kube["custom"].create_cluster_custom_object(*KQ, "workloadpriorityclasses", wpc)
        except ApiException as exc:
            if exc.status != 409:
                raise


@pytest.fixture
def ns(kube, sim):
    """A fresh namespace; afterwards its DevServers are deleted and their pods waited away, so
    the GPUs of the one p5 node are free for the next test (they would otherwise leak across tests
    and leave a later server unschedulable, whatever Kueue admits)."""
    name = new_namespace(kube)
    yield name
    remove_all(sim, kube, name)


def load_all(path):
    import yaml

    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def queue_for(kube, ns, gpus=4):
    """ClusterQueue `cq-<ns>` with `gpus` GPUs of FLAVOR (cpu, memory, storage ample) and
    LocalQueue `torchdev` in `ns`; the name of the ClusterQueue."""
    cq = f"cq-{ns}"
    quota = {"cpu": 192, "memory": "2000Gi", "ephemeral-storage": "4Ti", "nvidia.com/gpu": gpus}
    kube["custom"].create_cluster_custom_object(*KQ, "clusterqueues", {
        "apiVersion": kq.API_VERSION, "kind": "ClusterQueue", "metadata": {"name": cq},
        "spec": {"namespaceSelector": {}, "queueingStrategy": "BestEffortFIFO", "resourceGroups": [{
            "coveredResources": list(quota),
            "flavors": [{"name": FLAVOR, "resources": [{"name": k, "nominalQuota": v} for k, v in quota.items()]}]}]}})
    kube["custom"].create_namespaced_custom_object(*KQ, ns, "localqueues", {
        "apiVersion": kq.API_VERSION, "kind": "LocalQueue", "metadata": {"name": "torchdev", "namespace": ns},
        "spec": {"clusterQueue": cq}})
    return cq


def create(kube, ns, name, flavor=FLAVOR, **spec):
    kube["custom"].create_namespaced_custom_object(GROUP, VERSION, ns, "devservers",
                                                   devserver(name, flavor, **spec))


def wait_queued(sim, kube, ns, name, position, timeout=90):
    def queued():
        obj = get_ds(kube, ns, name)
        st = obj.get("status") or {}
        ok = (st.get("phase") == "Queued" and (st.get("queue") or {}).get("position") == position
              and st.get("observedGeneration") == obj["metadata"]["generation"])
        return obj if ok else None
    return sim.wait_for(queued, timeout, interval=0.1, message=f"{ns}/{name} Queued at {position}")


def resource_flavor(kube, name):
    from kubernetes.client.exceptions import ApiException

    try:
        return kube["custom"].get_cluster_custom_object(*KQ, "resourceflavors", name)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def test_flavors_become_resource_flavors(sim, kube, runtime):
    rf = sim.wait_for(lambda: resource_flavor(kube, FLAVOR), 60, message="ResourceFlavor gpu-h100-2")
    flavor = kube["custom"].get_cluster_custom_object(GROUP, VERSION, "devserverflavors", FLAVOR)
    assert rf["spec"]["nodeLabels"] == flavor["spec"]["nodeSelector"]
    assert "tolerations" not in rf["spec"]  # Kueue would add them to every pod's (docs/api.md "Kueue")
    assert rf["spec"]["nodeTaints"] == [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]
    assert [(r["kind"], r["uid"]) for r in rf["metadata"]["ownerReferences"]] == [
        ("DevServerFlavor", flavor["metadata"]["uid"])]
    for sample in sorted((ROOT / "config" / "samples").glob("*devserverflavor*.yaml")):
        name = load(sample)["metadata"]["name"]
        sim.wait_for(lambda: resource_flavor(kube, name), 60, message=f"ResourceFlavor {name}")

    # an unchanged flavor re-reconciles without writing (its ResourceFlavor included)
    assert runtime.wait_idle(180)
    done = lambda: [r for r in runtime.history("DevServerFlavor") if r.name == FLAVOR]  # noqa: E731
    sim.reset_metrics()
    mark = time.time()
    runtime.enqueue("DevServerFlavor", "", FLAVOR)
    sim.wait_for(lambda: [r for r in done() if r.started >= mark], 120, message="a reconcile of the unchanged flavor")
    assert [r for r in sim.requests() if r["verb"] in ("create", "update", "patch", "delete")] == []
    record = [r for r in done() if r.started >= mark][-1]
    assert record.ok and record.ansible.get("changed", 0) == 0, record

    # a new flavor gets its ResourceFlavor; deleting the flavor deletes it
    name = f"tmp-{uuid.uuid4().hex[:6]}"
    tmp = load(ROOT / "config" / "samples" / "torchdev_v1alpha1_devserverflavor_cpu-small.yaml")
    tmp["metadata"] = {"name": name}
    kube["custom"].create_cluster_custom_object(GROUP, VERSION, "devserverflavors", tmp)
    sim.wait_for(lambda: resource_flavor(kube, name), 60, message=f"ResourceFlavor {name}")
    kube["custom"].delete_cluster_custom_object(GROUP, VERSION, "devserverflavors", name)
    sim.wait_for(lambda: resource_flavor(kube, name) is None, 60, message=f"ResourceFlavor {name} deleted")


def test_third_server_queues_until_quota_frees(sim, kube, runtime, ns, priority_classes):
    cq = queue_for(kube, ns, gpus=4)
    sim.wait_for(lambda: resource_flavor(kube, FLAVOR), 60, message="ResourceFlavor gpu-h100-2")
    for name in ("one", "two"):
        create(kube, ns, name)
    for name in ("one", "two"):
        obj = wait_ready(sim, kube, ns, name)
        assert obj["status"]["phase"] == "Running"
        assert obj["status"]["queue"] == {"name": "torchdev", "clusterQueue": cq,
                                          "workload": obj["status"]["queue"]["workload"]}

    create(kube, ns, "three", priorityClassName="torchdev-high")
    obj = wait_queued(sim, kube, ns, "three", 1)
    queue = obj["status"]["queue"]
    assert queue["name"] == "torchdev" and queue["clusterQueue"] == cq and queue["workload"]
    ready = condition(obj, "Ready")
    assert ready["status"] == "False" and ready["reason"] == "Queued"
    assert f"ClusterQueue {cq} at position 1" in ready["message"] and "nvidia.com/gpu" in ready["message"]
    assert condition(obj, "Progressing")["reason"] == "Queued"
    assert condition(obj, "Degraded")["status"] == "False"

    # Kueue's view: the StatefulSet (only it) carries the queue, its pod is gated
    sts = kube["apps"].read_namespaced_stateful_set("three", ns)
    assert sts.metadata.labels[QUEUE_LABEL] == "torchdev"
    assert sts.metadata.labels[PRIORITY_LABEL] == "torchdev-high"
    assert QUEUE_LABEL not in (sts.spec.template.metadata.labels or {})
    pod = kube["core"].read_namespaced_pod("three-0", ns)
    assert [g.name for g in pod.spec.scheduling_gates or []] == [kq.ADMISSION_GATE, kq.TOPOLOGY_GATE]
    assert pod.spec.node_name is None
    wl = kube["custom"].get_namespaced_custom_object(*KQ, ns, "workloads", queue["workload"])
    assert wl["spec"]["priority"] == 10000 and wl["spec"]["podSets"][0]["count"] == 1

    # an unchanged queued server re-reconciles with reads only
    assert_reconcile_writes_nothing(sim, runtime, ns, "three")

    kube["custom"].delete_namespaced_custom_object(GROUP, VERSION, ns, "devservers", "one")
    obj = wait_ready(sim, kube, ns, "three", timeout=120)
    assert obj["status"]["phase"] == "Running"
    assert obj["status"]["queue"] == {"name": "torchdev", "clusterQueue": cq, "workload": queue["workload"]}
    assert condition(obj, "Ready")["reason"] == "ServerReady"
    pod = kube["core"].read_namespaced_pod("three-0", ns)
    assert not pod.spec.scheduling_gates and pod.spec.node_name.startswith("p5-")

    # an unchanged admitted server too
    assert_reconcile_writes_nothing(sim, runtime, ns, "three")


def assert_reconcile_writes_nothing(sim, runtime, ns, name):
    """The caller has seen the status it expects; once no reconcile of the server is queued
    or running (the one that wrote that status has finished), another one writes nothing."""
    def done():
        return [r for r in runtime.history("DevServer") if r.name == name and r.namespace == ns]

    def settled():
        return done() and not runtime.reconciling("DevServer", ns, name)

    sim.wait_for(settled, 120, message=f"no reconcile of {name} queued or running")
    sim.reset_metrics()
    mark = time.time()  # a reconcile that started after the enqueue (the history is bounded)
    runtime.enqueue("DevServer", ns, name)
    sim.wait_for(lambda: any(r.started >= mark for r in done()) and settled(), 120,
                 message=f"a reconcile of unchanged {name}")
    writes = [r for r in sim.requests() if r["verb"] in ("create", "update", "patch", "delete")]
    assert writes == [], writes
    record = [r for r in done() if r.started >= mark][-1]
    assert record.ok and record.ansible.get("changed", 0) == 0, record


def test_unknown_priority_class_is_invalid_spec(sim, kube, runtime, ns, priority_classes):
    queue_for(kube, ns, gpus=2)
    create(kube, ns, "vip", priorityClassName="torchdev-urgent")
    obj = wait_degraded(sim, kube, ns, "vip", "InvalidSpec")
    assert "WorkloadPriorityClass torchdev-urgent" in condition(obj, "Degraded")["message"]
    assert obj["status"]["phase"] == "Failed"
    from kubernetes.client.exceptions import ApiException

    with pytest.raises(ApiException) as err:  # nothing was created
        kube["apps"].read_namespaced_stateful_set("vip", ns)
    assert err.value.status == 404

    # fixing the spec recovers it (the generation changes)
    kube["custom"].patch_namespaced_custom_object(GROUP, VERSION, ns, "devservers", "vip",
                                                  {"spec": {"priorityClassName": "torchdev-low"}})
    obj = wait_ready(sim, kube, ns, "vip")
    sts = kube["apps"].read_namespaced_stateful_set("vip", ns)
    assert sts.metadata.labels[PRIORITY_LABEL] == "torchdev-low"


def test_namespace_without_local_queue_is_not_queued(sim, kube, runtime, ns):
    create(kube, ns, "free", flavor="cpu-small")
    obj = wait_ready(sim, kube, ns, "free")
    assert "queue" not in obj["status"]
    sts = kube["apps"].read_namespaced_stateful_set("free", ns)
    assert QUEUE_LABEL not in (sts.metadata.labels or {})
    assert not [w for w in kube["custom"].list_namespaced_custom_object(*KQ, ns, "workloads")["items"]]


def test_queued_server_shows_an_eta_from_the_reservations_and_starts_near_it(sim, kube, runtime, ns, priority_classes):
    """Issue 12.6: the ETA of a queued server is when enough of the quota it waits for is freed
    by the expiring reservations that hold it; here the first one ends on time (its expiry).

    No race with a busy machine: the holders reserve hours while the queued server's ETA is
    checked; then the first holder's reservation is shortened to end SHORT seconds from then,
    the queued server is reconciled once (it would otherwise learn it at its next requeue), and
    its new ETA is that expiry, which it starts within 60 s of."""
    from datetime import datetime, timedelta, timezone

    def ts(value):
        return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)

    def eta_of(name, expected=None):
        def seen():
            o = get_ds(kube, ns, name)
            eta = ((o.get("status") or {}).get("queue") or {}).get("estimatedStartTime")
            return o if eta and (expected is None or eta == expected) else None
        return sim.wait_for(seen, 120, interval=0.2, message=f"the ETA of {name}" + (f" {expected}" if expected else ""))

    queue_for(kube, ns, gpus=4)
    sim.wait_for(lambda: resource_flavor(kube, FLAVOR), 60, message="ResourceFlavor gpu-h100-2")
    create(kube, ns, "short", lifecycle={"duration": "1h"})
    short = wait_ready(sim, kube, ns, "short")
    create(kube, ns, "long", lifecycle={"duration": "2h"})
    wait_ready(sim, kube, ns, "long")
    create(kube, ns, "waiting")
    obj = eta_of("waiting")
    assert obj["status"]["queue"]["estimatedStartTime"] == short["status"]["reservation"]["expiresAt"]
    assert "ETA " + obj["status"]["queue"]["estimatedStartTime"] in condition(obj, "Ready")["message"]

    # the first reservation now ends SHORT seconds from now (a duration counted from its start)
    SHORT = 90
    started_at = ts(short["status"]["reservation"]["startedAt"])
    now = datetime.now(timezone.utc).replace(microsecond=0)
    duration = int((now - started_at).total_seconds()) + SHORT
    kube["custom"].patch_namespaced_custom_object(GROUP, VERSION, ns, "devservers", "short",
                                                  {"spec": {"lifecycle": {"duration": f"{duration}s"}}})
    expires = (started_at + timedelta(seconds=duration)).strftime("%Y-%m-%dT%H:%M:%SZ")
    sim.wait_for(lambda: get_ds(kube, ns, "short")["status"]["reservation"]["expiresAt"] == expires, 60,
                 interval=0.2, message="the shortened reservation")
    runtime.enqueue("DevServer", ns, "waiting")
    eta = ts(eta_of("waiting", expires)["status"]["queue"]["estimatedStartTime"])

    obj = wait_ready(sim, kube, ns, "waiting", timeout=SHORT + 180)
    started = ts(obj["status"]["reservation"]["startedAt"])
    # near it: the holder's stop, Kueue's admission and the pods' readiness follow the expiry, each
    # a little later on a busy 2-core machine (62 s once, beside a second test run), not hours off
    assert abs((started - eta).total_seconds()) <= 90, (started, eta)
    assert get_ds(kube, ns, "short")["status"]["phase"] == "Expired"
    # issue 13.2: its time to Ready, by phase, from its creation; most of it queued
    startup = obj["status"]["startup"]
    assert startup["complete"] and startup["startedAt"] == obj["metadata"]["creationTimestamp"]
    # a map: kube-apiserver stores a custom resource's keys sorted, so readers order them (PHASES)
    assert sorted(startup["phases"]) == sorted(["queued", "scheduled", "volumes", "containers", "ready"])
    assert [p.split()[0] for p in describe_startup(startup).split("(")[1].rstrip(")").split(", ")] == [
        "queued", "scheduled", "volumes", "containers", "ready"]
    assert sum(startup["phases"].values()) == startup["totalSeconds"]
    assert ts(startup["readyAt"]) - ts(startup["startedAt"]) == timedelta(seconds=startup["totalSeconds"])
    assert startup["phases"]["queued"] >= 1 and startup["phases"]["queued"] == max(startup["phases"].values())
    assert get_ds(kube, ns, "short")["status"]["phase"] == "Expired"
