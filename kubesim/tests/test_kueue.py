"""Kueue admission controller (kubesim/controllers/kueue.py) against Kueue's real CRDs."""
from __future__ import annotations

import itertools
from decimal import Decimal

import pytest

from kubesim import kueue as kq
from kubesim.controllers.kueue import workload_name
from kubesim.errors import ApiError
from kubesim.testing import KubeSim

from .conftest import Http, assert_status


NODES = "gpu:2x{cpu:256,memory:1024Gi,nvidia.com/gpu:64}"  # quota, not nodes, limits
_ids = itertools.count()


@pytest.fixture(scope="module")
def sim():
    with KubeSim(nodes=NODES, kueue=True) as s:
        yield s


def create(sim, resource, obj, ns=None):
    return sim.call(sim.api.create, resource, obj, namespace=ns)


def get(sim, resource, ns, name):
    return sim.call(sim.api.get, resource, ns, name)


def setup_queue(sim, gpus=4, strategy=None):
    """A namespace, a ClusterQueue with `gpus` GPUs, a ResourceFlavor and a LocalQueue."""
    i = next(_ids)
    ns, cq, lq, flavor = f"kq-{i}", f"cq-{i}", "lq", f"flavor-{i}"
    create(sim, "namespaces", {"apiVersion": "v1", "kind": "Namespace",
                               "metadata": {"name": ns}})
    create(sim, kq.RESOURCE_FLAVORS, {"apiVersion": kq.API_VERSION, "kind": "ResourceFlavor",
                                      "metadata": {"name": flavor}, "spec": {}})
    spec = {"namespaceSelector": {}, "resourceGroups": [{
        "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
        "flavors": [{"name": flavor, "resources": [
            {"name": "cpu", "nominalQuota": 64}, {"name": "memory", "nominalQuota": "256Gi"},
            {"name": "nvidia.com/gpu", "nominalQuota": gpus}]}]}]}
    if strategy:
        spec["queueingStrategy"] = strategy
    create(sim, kq.CLUSTER_QUEUES, {"apiVersion": kq.API_VERSION, "kind": "ClusterQueue",
                                    "metadata": {"name": cq}, "spec": spec})
    create(sim, kq.LOCAL_QUEUES, {"apiVersion": kq.API_VERSION, "kind": "LocalQueue",
                                  "metadata": {"name": lq, "namespace": ns},
                                  "spec": {"clusterQueue": cq}})
    return ns, cq, lq


def statefulset(sim, ns, name, gpus=2, replicas=1, queue="lq", priority_class=None,
                policy="Parallel"):
    labels = {kq.QUEUE_LABEL: queue} if queue else {}
    if priority_class:
        labels[kq.PRIORITY_LABEL] = priority_class
    obj = {"apiVersion": "apps/v1", "kind": "StatefulSet",
           "metadata": {"name": name, "namespace": ns, "labels": labels},
           "spec": {"replicas": replicas, "serviceName": name, "podManagementPolicy": policy,
                    "selector": {"matchLabels": {"app": name}},
                    "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{
                        "name": "main", "image": "busybox",
                        "resources": {"requests": {"cpu": "1", "memory": "1Gi",
                                                   "nvidia.com/gpu": str(gpus)},
                                      "limits": {"nvidia.com/gpu": str(gpus)}}}]}}}}
    return create(sim, "statefulsets.apps", obj, ns)


def workload(sim, ns, name):
    sts = get(sim, "statefulsets.apps", ns, name)
    return get(sim, kq.WORKLOADS, ns, workload_name(sts))


def cond(obj, type_):
    return next((c for c in (obj.get("status") or {}).get("conditions") or []
                 if c["type"] == type_), None)


def pods_of(sim, ns, name):
    return [p for p in sim.call(sim.api.list, "pods", ns)["items"]
            if p["metadata"]["name"].startswith(name + "-")]


def running(sim, ns, name, n=1):
    pods = pods_of(sim, ns, name)
    return len(pods) == n and all(p["status"].get("phase") == "Running" for p in pods)


def gated(sim, ns, name, n=1):
    pods = pods_of(sim, ns, name)
    return len(pods) == n and all(
        p["spec"].get("schedulingGates") == [{"name": kq.ADMISSION_GATE}, {"name": kq.TOPOLOGY_GATE}]
        and (cond(p, "PodScheduled") or {}).get("reason") == "SchedulingGated" for p in pods)


def admitted(sim, ns, name):
    c = cond(workload(sim, ns, name), "Admitted")
    return c and c["status"] == "True"


def pending(sim, ns, name):
    c = cond(workload(sim, ns, name), "QuotaReserved")
    return c and c["status"] == "False" and c["reason"] == "Pending"


# -- tests ------------------------------------------------------------------------------
@pytest.mark.parametrize("resource", [kq.CLUSTER_QUEUES, kq.LOCAL_QUEUES, kq.WORKLOADS,
                                      kq.RESOURCE_FLAVORS, kq.PRIORITY_CLASSES,
                                      "admissionchecks.kueue.x-k8s.io", "cohorts.kueue.x-k8s.io"])
def test_crds_installed_and_served(sim, resource):
    rt = sim.api.registry.find(resource)
    assert rt is not None and rt.version == "v1beta2"
    assert sim.call(sim.api.list, resource)["items"] is not None


def test_quota_admits_two_then_queues_third_until_one_goes(sim):
    ns, cq, lq = setup_queue(sim, gpus=4)
    for n in ("a", "b"):
        statefulset(sim, ns, n)
    for n in ("a", "b"):
        sim.wait_for(lambda: running(sim, ns, n), message=f"{n} running")
    wl = workload(sim, ns, "a")
    assert wl["spec"]["queueName"] == lq and wl["spec"]["podSets"][0]["count"] == 1
    assert wl["metadata"]["ownerReferences"][0]["kind"] == "StatefulSet"
    assert cond(wl, "QuotaReserved")["status"] == "True"
    assert wl["status"]["admission"]["clusterQueue"] == cq
    assert wl["status"]["admission"]["podSetAssignments"][0]["resourceUsage"][
        "nvidia.com/gpu"] == "2"

    statefulset(sim, ns, "c")
    sim.wait_for(lambda: gated(sim, ns, "c") and pending(sim, ns, "c"), message="c gated")
    wl = workload(sim, ns, "c")
    assert "nvidia.com/gpu" in cond(wl, "QuotaReserved")["message"]
    assert wl["metadata"]["annotations"][kq.POSITION_ANNOTATION] == "1"
    sim.wait_for(lambda: get(sim, kq.CLUSTER_QUEUES, None, cq).get("status", {}).get(
        "pendingWorkloads") == 1, message="cq status")
    st = get(sim, kq.CLUSTER_QUEUES, None, cq)["status"]
    assert st["admittedWorkloads"] == 2
    gpu = next(r for r in st["flavorsReservation"][0]["resources"] if r["name"] == "nvidia.com/gpu")
    assert gpu["total"] == "4"
    lqs = get(sim, kq.LOCAL_QUEUES, ns, lq)["status"]
    assert (lqs["pendingWorkloads"], lqs["admittedWorkloads"]) == (1, 2)

    sim.call(sim.api.delete, "statefulsets.apps", ns, "a")
    sim.wait_for(lambda: running(sim, ns, "c"), message="c running after a deleted")
    wl = workload(sim, ns, "c")
    assert cond(wl, "Admitted")["status"] == "True"
    assert kq.POSITION_ANNOTATION not in wl["metadata"].get("annotations", {})


def test_scale_to_zero_releases_quota(sim):
    ns, _, _ = setup_queue(sim, gpus=2)
    statefulset(sim, ns, "a")
    sim.wait_for(lambda: running(sim, ns, "a"), message="a running")
    statefulset(sim, ns, "b")
    sim.wait_for(lambda: gated(sim, ns, "b"), message="b gated")
    sim.call(sim.api.patch, "statefulsets.apps", ns, "a", {"spec": {"replicas": 0}})
    sim.wait_for(lambda: running(sim, ns, "b"), message="b running after a scaled to 0")


@pytest.mark.parametrize("policy,gated_pods", [
    ("Parallel", 2),
    ("OrderedReady", 1),  # pod 1 waits for pod 0; it is created ungated once admitted
])
def test_gang_is_all_or_nothing(sim, policy, gated_pods):
    ns, _, _ = setup_queue(sim, gpus=4, strategy="StrictFIFO")
    statefulset(sim, ns, "small")
    sim.wait_for(lambda: running(sim, ns, "small"), message="small running")
    statefulset(sim, ns, "gang", gpus=2, replicas=2, policy=policy)
    sim.wait_for(lambda: gated(sim, ns, "gang", n=gated_pods) and pending(sim, ns, "gang"),
                 message="gang fully gated")
    assert workload(sim, ns, "gang")["spec"]["podSets"][0]["count"] == 2
    sim.call(sim.api.delete, "statefulsets.apps", ns, "small")
    sim.wait_for(lambda: running(sim, ns, "gang", n=2), message="gang running")
    usage = workload(sim, ns, "gang")["status"]["admission"]["podSetAssignments"][0]
    assert usage["count"] == 2 and usage["resourceUsage"]["nvidia.com/gpu"] == "4"


@pytest.mark.parametrize("strategy,late_small_admitted", [
    ("StrictFIFO", False),       # the big head blocks everything behind it
    ("BestEffortFIFO", True),    # a smaller workload behind it may go first
])
def test_queueing_strategy(sim, strategy, late_small_admitted):
    ns, _, _ = setup_queue(sim, gpus=4, strategy=strategy)
    statefulset(sim, ns, "first", gpus=2)
    sim.wait_for(lambda: running(sim, ns, "first"), message="first running")
    statefulset(sim, ns, "big", gpus=4)
    sim.wait_for(lambda: pending(sim, ns, "big"), message="big pending")
    statefulset(sim, ns, "late", gpus=2)
    if late_small_admitted:
        sim.wait_for(lambda: running(sim, ns, "late"), message="late running")
    else:
        sim.wait_for(lambda: pending(sim, ns, "late") and gated(sim, ns, "late"),
                     message="late pending")
        assert workload(sim, ns, "late")["metadata"]["annotations"][
            kq.POSITION_ANNOTATION] == "2"
    assert pending(sim, ns, "big")


def test_priority_orders_the_queue(sim):
    ns, _, _ = setup_queue(sim, gpus=2, strategy="StrictFIFO")
    i = next(_ids)
    create(sim, kq.PRIORITY_CLASSES, {"apiVersion": kq.API_VERSION,
                                      "kind": "WorkloadPriorityClass",
                                      "metadata": {"name": f"high-{i}"}, "value": 1000})
    statefulset(sim, ns, "holder")
    sim.wait_for(lambda: running(sim, ns, "holder"), message="holder running")
    statefulset(sim, ns, "low")
    sim.wait_for(lambda: pending(sim, ns, "low"), message="low pending")
    statefulset(sim, ns, "high", priority_class=f"high-{i}")
    sim.wait_for(lambda: pending(sim, ns, "high"), message="high pending")
    wl = workload(sim, ns, "high")
    assert wl["spec"]["priority"] == 1000
    assert wl["spec"]["priorityClassRef"]["name"] == f"high-{i}"
    sim.wait_for(lambda: workload(sim, ns, "high")["metadata"]["annotations"].get(
        kq.POSITION_ANNOTATION) == "1", message="high first in line")
    sim.call(sim.api.delete, "statefulsets.apps", ns, "holder")
    sim.wait_for(lambda: running(sim, ns, "high"), message="high running")
    assert pending(sim, ns, "low") and gated(sim, ns, "low")


@pytest.mark.parametrize("queue,expect", [
    (None, "running"),              # no queue label: Kueue leaves it alone
    ("missing", "inadmissible"),    # no such LocalQueue: gated, Inadmissible
])
def test_unqueued_and_unknown_queue(sim, queue, expect):
    ns, _, _ = setup_queue(sim, gpus=4)
    statefulset(sim, ns, "s", queue=queue)
    if expect == "running":
        sim.wait_for(lambda: running(sim, ns, "s"), message="s running")
        assert not pods_of(sim, ns, "s")[0]["spec"].get("schedulingGates")
        assert not [w for w in sim.call(sim.api.list, kq.WORKLOADS, ns)["items"]]
    else:
        def inadmissible():
            c = cond(workload(sim, ns, "s"), "QuotaReserved")
            return c and c["reason"] == "Inadmissible" and "LocalQueue missing" in c["message"]
        sim.wait_for(lambda: inadmissible() and gated(sim, ns, "s"), message="inadmissible")
        # pointing it at a queue that exists (allowed while no replica is ready) admits it
        sim.call(sim.api.patch, "statefulsets.apps", ns, "s",
                 {"metadata": {"labels": {kq.QUEUE_LABEL: "lq"}}})
        sim.wait_for(lambda: running(sim, ns, "s"), message="s running once in a queue")


# -- visibility on-demand API -------------------------------------------------------------
VIS = f"/apis/{kq.VISIBILITY_GROUP}"


def positions(summary):
    return [(i["metadata"]["name"], i["positionInClusterQueue"], i["positionInLocalQueue"])
            for i in summary["items"]]


def test_visibility_discovery(sim):
    http = Http(sim)
    code, groups = http.get("/apis")
    vis = next(g for g in groups["groups"] if g["name"] == kq.VISIBILITY_GROUP)
    assert [v["version"] for v in vis["versions"]] == ["v1beta2", "v1beta1"]
    assert vis["preferredVersion"]["version"] == "v1beta2"
    code, group = http.get(VIS)
    assert code == 200 and group["kind"] == "APIGroup"
    for version in kq.VISIBILITY_VERSIONS:
        code, res = http.get(f"{VIS}/{version}")
        assert code == 200 and res["groupVersion"] == f"{kq.VISIBILITY_GROUP}/{version}"
        by_name = {r["name"]: r for r in res["resources"]}
        assert by_name["localqueues/pendingworkloads"]["namespaced"] is True
        assert by_name["localqueues/pendingworkloads"]["verbs"] == ["get"]
        assert by_name["clusterqueues/pendingworkloads"]["namespaced"] is False
    # the official client's discovery (what kubernetes.core's DynamicClient uses) copes
    from kubernetes.dynamic import DynamicClient

    from .conftest import api_client

    dyn = DynamicClient(api_client(sim))
    lq = dyn.resources.get(api_version=f"{kq.VISIBILITY_GROUP}/v1beta2", kind="LocalQueue")
    assert lq.namespaced and "pendingworkloads" in lq.subresources


def test_visibility_pending_workloads_in_order(sim):
    """Two admitted, three pending (one of them high priority and last to come, one in a
    second LocalQueue of the same ClusterQueue): positions follow the admission order,
    0-based, per ClusterQueue and per LocalQueue; offset and limit page the answer."""
    http = Http(sim)
    ns, cq, lq = setup_queue(sim, gpus=4, strategy="StrictFIFO")
    create(sim, kq.LOCAL_QUEUES, {"apiVersion": kq.API_VERSION, "kind": "LocalQueue",
                                  "metadata": {"name": "other", "namespace": ns},
                                  "spec": {"clusterQueue": cq}})
    i = next(_ids)
    create(sim, kq.PRIORITY_CLASSES, {"apiVersion": kq.API_VERSION,
                                      "kind": "WorkloadPriorityClass",
                                      "metadata": {"name": f"urgent-{i}"}, "value": 500})
    for n in ("a", "b"):
        statefulset(sim, ns, n)
        sim.wait_for(lambda: running(sim, ns, n), message=f"{n} running")
    statefulset(sim, ns, "c")
    sim.wait_for(lambda: pending(sim, ns, "c"), message="c pending")
    statefulset(sim, ns, "d", queue="other")
    sim.wait_for(lambda: pending(sim, ns, "d"), message="d pending")
    statefulset(sim, ns, "e", priority_class=f"urgent-{i}")
    sim.wait_for(lambda: pending(sim, ns, "e"), message="e pending")
    wl = {n: workload(sim, ns, n)["metadata"]["name"] for n in "cde"}

    code, summary = http.get(f"{VIS}/v1beta2/clusterqueues/{cq}/pendingworkloads")
    assert code == 200, summary
    assert summary["kind"] == "PendingWorkloadsSummary"
    assert summary["apiVersion"] == f"{kq.VISIBILITY_GROUP}/v1beta2"
    assert positions(summary) == [(wl["e"], 0, 0), (wl["c"], 1, 1), (wl["d"], 2, 0)]
    first = summary["items"][0]
    assert first["priority"] == 500 and first["localQueueName"] == lq
    assert first["metadata"]["namespace"] == ns
    assert first["metadata"]["ownerReferences"][0]["kind"] == "StatefulSet"
    assert set(first["metadata"]["ownerReferences"][0]) == {"apiVersion", "kind", "name", "uid"}

    code, mine = http.get(f"{VIS}/v1beta2/namespaces/{ns}/localqueues/{lq}/pendingworkloads")
    assert code == 200 and positions(mine) == [(wl["e"], 0, 0), (wl["c"], 1, 1)]
    code, other = http.get(f"{VIS}/v1beta1/namespaces/{ns}/localqueues/other/pendingworkloads")
    assert code == 200 and other["apiVersion"] == f"{kq.VISIBILITY_GROUP}/v1beta1"
    assert positions(other) == [(wl["d"], 2, 0)]
    code, page = http.get(f"{VIS}/v1beta2/namespaces/{ns}/localqueues/{lq}/pendingworkloads"
                          "?offset=1&limit=5")
    assert positions(page) == [(wl["c"], 1, 1)]
    code, page = http.get(f"{VIS}/v1beta2/clusterqueues/{cq}/pendingworkloads?limit=1")
    assert positions(page) == [(wl["e"], 0, 0)]
    # the kubesim annotation agrees (1-based)
    assert workload(sim, ns, "c")["metadata"]["annotations"][kq.POSITION_ANNOTATION] == "2"

    sim.call(sim.api.delete, "statefulsets.apps", ns, "a")
    sim.wait_for(lambda: running(sim, ns, "e"), message="e admitted first")
    code, summary = http.get(f"{VIS}/v1beta2/clusterqueues/{cq}/pendingworkloads")
    assert positions(summary) == [(wl["c"], 0, 0), (wl["d"], 1, 0)]


@pytest.mark.parametrize("path,code,reason,message", [
    ("/v1beta2/namespaces/{ns}/localqueues/nope/pendingworkloads", 404, "NotFound",
     'localqueue.visibility.kueue.x-k8s.io "nope" not found'),
    ("/v1beta2/clusterqueues/nope/pendingworkloads", 404, "NotFound", '"nope" not found'),
    ("/v1alpha1/clusterqueues/{cq}/pendingworkloads", 404, "NotFound", ""),
    ("/v1beta2/clusterqueues/{cq}/pendingworkloads?limit=x", 400, "BadRequest", "limit"),
    ("/v1beta2/clusterqueues/{cq}", 405, "MethodNotAllowed", ""),
    ("/v1beta2/clusterqueues/{cq}/running", 404, "NotFound", ""),
])
def test_visibility_errors(sim, path, code, reason, message):
    ns, cq, _ = setup_queue(sim)
    got, body = Http(sim).get(VIS + path.format(ns=ns, cq=cq))
    assert got == code
    assert_status(body, code, reason, message)


def test_visibility_is_read_only(sim):
    _, cq, _ = setup_queue(sim)
    code, body = Http(sim).post(f"{VIS}/v1beta2/clusterqueues/{cq}/pendingworkloads", {})
    assert_status(body, 405, "MethodNotAllowed")


def test_quota_math():
    from decimal import Decimal

    cq = {"spec": {"resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
        {"name": "a100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 2}]},
        {"name": "h100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 8}]}]}]}}
    need = {"nvidia.com/gpu": Decimal(4)}
    assert kq.assign_flavors(cq, need, {}) == ({"nvidia.com/gpu": "h100"}, "")
    got, why = kq.assign_flavors(cq, need, {"h100": {"nvidia.com/gpu": Decimal(6)}})
    assert got is None and "2 more needed" in why
    got, why = kq.assign_flavors(cq, {"cpu": Decimal(1)}, {})
    assert got is None and "cpu unavailable" in why
    assert kq.assign_flavors(cq, need, {}, flavors_exist=["a100"])[0] is None


def test_inert_without_kueue_crds():
    with KubeSim(nodes=NODES) as s:
        assert s.api.registry.find(kq.WORKLOADS) is None
        ctrl = s.cluster.manager.get("kueue")
        assert ctrl is not None
        create(s, "statefulsets.apps", {
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "q", "namespace": "default", "labels": {kq.QUEUE_LABEL: "lq"}},
            "spec": {"replicas": 1, "serviceName": "q", "selector": {"matchLabels": {"app": "q"}},
                     "template": {"metadata": {"labels": {"app": "q"}},
                                  "spec": {"containers": [{"name": "c", "image": "x"}]}}}},
            "default")
        s.wait_for(lambda: running(s, "default", "q"), message="q running")
        assert not pods_of(s, "default", "q")[0]["spec"].get("schedulingGates")
        assert ctrl.queue.empty() and not ctrl._timers
        # no Kueue, no visibility API either
        http = Http(s)
        _, groups = http.get("/apis")
        assert kq.VISIBILITY_GROUP not in {g["name"] for g in groups["groups"]}
        code, body = http.get(f"{VIS}/v1beta2/clusterqueues/x/pendingworkloads")
        assert code == 404


def test_cli_flag():
    from kubesim.__main__ import build_parser

    assert build_parser().parse_args(["--kubeconfig", "k", "--kueue"]).kueue is True
    assert build_parser().parse_args(["--kubeconfig", "k"]).kueue is False


# -- flavor eligibility (kueue's flavor assigner) -----------------------------------------

@pytest.mark.parametrize("pod_spec, ok", [
    ({}, False),  # untolerated taint
    ({"nodeSelector": {"pool": "h100"}}, False),
    ({"nodeSelector": {"pool": "a10g"}}, False),  # untolerated taint
    ({"nodeSelector": {"pool": "a10g"}, "tolerations": [{"key": "gpu", "operator": "Exists"}]}, True),
    ({"nodeSelector": {"other": "x"}, "tolerations": [{"operator": "Exists"}]}, True),
    ({"tolerations": [{"key": "gpu", "operator": "Equal", "value": "no", "effect": "NoSchedule"}]}, False),
    ({"tolerations": [{"key": "gpu", "operator": "Equal", "value": "yes"}]}, True),
])
def test_flavor_mismatch(pod_spec, ok):
    flavor = {"metadata": {"name": "a10g"},
              "spec": {"nodeLabels": {"pool": "a10g"},
                       "nodeTaints": [{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]}}
    assert (kq.flavor_mismatch(flavor, pod_spec) is None) is ok


def test_flavor_tolerations_count_as_the_pods():
    """Kueue adds a ResourceFlavor's own spec.tolerations to the pod's before it checks the
    flavor's nodeTaints (v0.19.2 flavorassigner.go checkFlavorForPodSets): a flavor that
    carries tolerations for its taints takes any pod (found on the real Kueue, issue 26.2)."""
    flavor = {"metadata": {"name": "a10g"},
              "spec": {"nodeLabels": {"pool": "a10g"},
                       "nodeTaints": [{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]}}
    assert kq.flavor_mismatch(flavor, {}) is not None
    flavor["spec"]["tolerations"] = [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert kq.flavor_mismatch(flavor, {}) is None


def test_assign_flavors_skips_flavors_the_pod_cannot_use():
    def rf(name, pool):
        return {"metadata": {"name": name}, "spec": {"nodeLabels": {"pool": pool}}}
    cq = {"spec": {"resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
        {"name": n, "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 4}]}
        for n in ("a10g", "h100")]}]}}
    flavors = {"a10g": rf("a10g", "a10g"), "h100": rf("h100", "h100")}
    need = {"nvidia.com/gpu": Decimal(2)}
    got, _ = kq.assign_flavors(cq, need, {}, flavors, {"nodeSelector": {"pool": "h100"}})
    assert got == {"nvidia.com/gpu": "h100"}
    got, why = kq.assign_flavors(cq, need, {"h100": {"nvidia.com/gpu": Decimal(4)}}, flavors,
                                 {"nodeSelector": {"pool": "h100"}})
    assert got is None and "doesn't match node affinity" in why and "insufficient" in why


# -- plain pods (kueue's pod integration) ---------------------------------------------------
def plain_pod(sim, ns, name, gpus=2, queue="lq", owner=None):
    meta = {"name": name, "namespace": ns, "labels": {kq.QUEUE_LABEL: queue} if queue else {}}
    if owner:
        meta["ownerReferences"] = [owner]
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {
        "restartPolicy": "Never", "containers": [{
            "name": "main", "image": "busybox",
            "resources": {"requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": str(gpus)},
                          "limits": {"nvidia.com/gpu": str(gpus)}}}]}}
    return create(sim, "pods", obj, ns)


def pod_workload(sim, ns, name):
    from kubesim.controllers.kueue import pod_workload_name
    return get(sim, kq.WORKLOADS, ns, pod_workload_name(get(sim, "pods", ns, name)))


def _pod_gated(sim, ns, name):
    return get(sim, "pods", ns, name)["spec"].get("schedulingGates") == [
        {"name": kq.ADMISSION_GATE}, {"name": kq.TOPOLOGY_GATE}]


def _pod_phase(sim, ns, name):
    return (get(sim, "pods", ns, name).get("status") or {}).get("phase")


def test_plain_pod_queues_behind_full_quota_and_runs_when_it_frees(sim):
    ns, cq, lq = setup_queue(sim, gpus=2)
    statefulset(sim, ns, "holder", gpus=2)
    sim.wait_for(lambda: running(sim, ns, "holder"), message="holder running")
    # controlled by something that is not a StatefulSet or a Job (an EphemeralAccelerationJob in torchdev)
    cm = create(sim, "configmaps", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "job", "namespace": ns}},
                ns)
    owner = {"apiVersion": "v1", "kind": "ConfigMap", "name": "job", "uid": cm["metadata"]["uid"], "controller": True}
    plain_pod(sim, ns, "job-pod", gpus=1, owner=owner)
    sim.wait_for(lambda: _pod_gated(sim, ns, "job-pod") and cond(pod_workload(sim, ns, "job-pod"), "QuotaReserved")
                 and cond(pod_workload(sim, ns, "job-pod"), "QuotaReserved")["reason"] == "Pending",
                 message="the pod gated, its Workload pending")
    wl = pod_workload(sim, ns, "job-pod")
    assert wl["spec"]["queueName"] == lq and wl["spec"]["podSets"][0]["count"] == 1
    assert wl["metadata"]["ownerReferences"][0]["kind"] == "Pod"
    assert "nvidia.com/gpu" in cond(wl, "QuotaReserved")["message"]
    assert _pod_phase(sim, ns, "job-pod") == "Pending"

    sim.call(sim.api.delete, "statefulsets.apps", ns, "holder")
    sim.wait_for(lambda: not get(sim, "pods", ns, "job-pod")["spec"].get("schedulingGates")
                 and _pod_phase(sim, ns, "job-pod") == "Running", message="the pod admitted and running")
    assert cond(pod_workload(sim, ns, "job-pod"), "Admitted")["status"] == "True"


def test_plain_pod_that_ended_releases_its_quota(sim):
    ns, cq, _ = setup_queue(sim, gpus=1)
    plain_pod(sim, ns, "first", gpus=1)
    sim.wait_for(lambda: _pod_phase(sim, ns, "first") == "Running", message="first running")
    plain_pod(sim, ns, "second", gpus=1)
    sim.wait_for(lambda: _pod_gated(sim, ns, "second"), message="second gated")
    sim.call(sim.api.delete, "pods", ns, "first")
    sim.wait_for(lambda: _pod_phase(sim, ns, "second") == "Running", message="second running once first is gone")


def test_pods_of_a_statefulset_or_unlabelled_are_not_plain_pods(sim):
    from kubesim.controllers.kueue import plain_pod as is_plain
    sts_ref = {"kind": "StatefulSet", "name": "s", "uid": "u", "controller": True}
    assert is_plain({"metadata": {"labels": {kq.QUEUE_LABEL: "lq"}}})
    assert not is_plain({"metadata": {"labels": {kq.QUEUE_LABEL: "lq"}, "ownerReferences": [sts_ref]}})
    assert not is_plain({"metadata": {"labels": {kq.QUEUE_LABEL: "lq"},
                                      "ownerReferences": [dict(sts_ref, kind="Job")]}})
    assert not is_plain({"metadata": {"labels": {}}})
    ns, _, _ = setup_queue(sim, gpus=0)
    plain_pod(sim, ns, "unqueued", gpus=1, queue=None)
    sim.wait_for(lambda: _pod_phase(sim, ns, "unqueued") == "Running", message="an unlabelled pod is not gated")


# -- Kueue's StatefulSet webhook (vstatefulset.kb.io, v0.19.2 ValidateUpdate) -------------
WEBHOOK_DENIED = 'admission webhook "vstatefulset.kb.io" denied the request: '
GPU_REQUESTS = "spec.template.spec.containers[0].resources.requests"


def refusal(sim, ns, name, body):
    with pytest.raises(ApiError) as exc:
        sim.call(sim.api.patch, "statefulsets.apps", ns, name, body)
    return exc.value


@pytest.mark.parametrize("body,message", [
    ({"spec": {"template": {"spec": {"containers": [{
        "name": "main", "image": "busybox",
        "resources": {"requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"},
                      "limits": {"nvidia.com/gpu": "1"}}}]}}}},
     f'{GPU_REQUESTS}: Invalid value: {{"cpu":"1","memory":"1Gi","nvidia.com/gpu":"1"}}: field is immutable'),
    ({"spec": {"template": {"spec": {"nodeSelector": {"pool": "a100"}}}}},
     'spec.template.spec.nodeSelector: Invalid value: {"pool":"a100"}: field is immutable'),
    ({"spec": {"replicas": 2}}, "spec.replicas: Invalid value: 2: field is immutable"),
    ({"metadata": {"labels": {kq.QUEUE_LABEL: None}}},
     'metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value: "": field is immutable'),
    ({"spec": {"replicas": 3, "template": {"spec": {"nodeSelector": {"pool": "a100"}}}}},
     '[spec.template.spec.nodeSelector: Invalid value: {"pool":"a100"}: field is immutable, '
     'spec.replicas: Invalid value: 3: field is immutable]'),
])
def test_webhook_refuses_a_queued_statefulsets_new_shape(sim, body, message):
    ns, _, _ = setup_queue(sim, gpus=0)  # never admitted: queued
    statefulset(sim, ns, "s")
    sim.wait_for(lambda: gated(sim, ns, "s") and pending(sim, ns, "s"), message="s queued")
    before = get(sim, "statefulsets.apps", ns, "s")
    err = refusal(sim, ns, "s", body)
    assert (err.code, err.reason, err.message) == (403, "Forbidden", WEBHOOK_DENIED + message)
    assert get(sim, "statefulsets.apps", ns, "s")["metadata"]["resourceVersion"] == \
        before["metadata"]["resourceVersion"]


def test_webhook_allows_what_kueue_allows(sim):
    ns, _, _ = setup_queue(sim, gpus=2)
    statefulset(sim, ns, "s")
    sim.wait_for(lambda: get(sim, "statefulsets.apps", ns, "s").get("status", {}).get(
        "readyReplicas") == 1, message="s ready")
    # a queue-name change while a replica is ready: refused
    err = refusal(sim, ns, "s", {"metadata": {"labels": {kq.QUEUE_LABEL: "other"}}})
    assert err.message == WEBHOOK_DENIED + \
        'metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value: "other": field is immutable'
    # same shape: the image, env, a request written another way, limits
    sim.call(sim.api.patch, "statefulsets.apps", ns, "s", {"spec": {"template": {"spec": {
        "containers": [{"name": "main", "image": "busybox:2", "env": [{"name": "A", "value": "1"}],
                        "resources": {"requests": {"cpu": "1000m", "memory": "1Gi", "nvidia.com/gpu": "2"},
                                      "limits": {"nvidia.com/gpu": "2"}}}]}}}})
    # scale to 0 and back once the pods and the Workload are gone
    sim.call(sim.api.patch, "statefulsets.apps", ns, "s", {"spec": {"replicas": 0}})
    sim.wait_for(lambda: not pods_of(sim, ns, "s") and not sim.call(
        sim.api.list, kq.WORKLOADS, ns)["items"] and not get(
        sim, "statefulsets.apps", ns, "s").get("status", {}).get("replicas"), message="scaled to 0")
    sim.call(sim.api.patch, "statefulsets.apps", ns, "s", {"spec": {"replicas": 1}})
    sim.wait_for(lambda: running(sim, ns, "s"), message="s running again")
    # the same StatefulSet without the queue label is Kueue's no more: anything goes
    statefulset(sim, ns, "free", queue=None)
    sim.call(sim.api.patch, "statefulsets.apps", ns, "free", {"spec": {"replicas": 2}})


@pytest.mark.parametrize("status,workload,message", [
    ({"replicas": 1}, False, "spec.replicas: Forbidden: scaling down is still in progress"),
    ({}, True, "spec.replicas: Forbidden: workload from previous scale-down is still being deleted"),
    ({}, False, None),
])
def test_webhook_scale_up_from_zero(status, workload, message):
    from kubesim.controllers.kueue import statefulset_update_errors
    old = {"metadata": {"labels": {kq.QUEUE_LABEL: "lq"}}, "spec": {"replicas": 0}, "status": status}
    new = {"metadata": {"labels": {kq.QUEUE_LABEL: "lq"}}, "spec": {"replicas": 1}, "status": status}
    assert statefulset_update_errors(old, new, workload) == ([message] if message else [])
    # being deleted: only the queue-name rule
    new["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert statefulset_update_errors(old, new, workload) == []
