"""The built-in controllers, against the real ApiServer, in one event loop.

Each test starts a Cluster (default node pool: cpu-0/1 with 16 cpu, gpu-0/1 with 48 cpu,
4 nvidia.com/gpu and a nvidia.com/gpu=present:NoSchedule taint) and polls the API with
`wait_for` instead of sleeping.
"""
from __future__ import annotations

import copy
import asyncio
import logging
import time
from collections import Counter
from decimal import Decimal
from typing import Any, Callable

import pytest

from kubesim.cluster import Cluster
from kubesim.controllers.scheduler import (NodeUsage, choose_node, filter_node,
                                           match_node_selector_term, pod_requests, tolerates,
                                           unschedulable_message)
from kubesim.errors import ApiError
from kubesim.nodes import DEFAULT_NODES_SPEC, parse_nodes

NS = "default"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


# -- helpers -------------------------------------------------------------------------------
async def wait_for(predicate: Callable[[], Any], timeout: float = 60.0, what: str = "condition",
                   interval: float = 0.01) -> Any:
    """Poll predicate (404s count as falsy) until truthy; yields to the controllers."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = predicate()
        except ApiError as exc:
            if exc.code != 404:
                raise
            last = None
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")
        await asyncio.sleep(interval)


def gone(api, resource: str, ns: str | None, name: str) -> Callable[[], bool]:
    def check() -> bool:
        try:
            api.get(resource, ns, name)
        except ApiError as exc:
            return exc.code == 404
        return False
    return check


def cond(obj: dict, type_: str) -> dict | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or []
                 if c["type"] == type_), None)


def is_true(obj: dict, type_: str) -> bool:
    c = cond(obj, type_)
    return bool(c and c["status"] == "True")


def container(requests: dict | None = None, limits: dict | None = None, name: str = "main",
              **extra: Any) -> dict:
    c: dict[str, Any] = {"name": name, "image": "busybox:1.36", **extra}
    res = {}
    if requests:
        res["requests"] = requests
    if limits:
        res["limits"] = limits
    if res:
        c["resources"] = res
    return c


def pod(name: str, requests: dict | None = None, limits: dict | None = None,
        annotations: dict | None = None, **spec: Any) -> dict:
    meta: dict[str, Any] = {"name": name, "namespace": NS}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [container(requests, limits)], **spec}}


def template(labels: dict, annotations: dict | None = None, **spec: Any) -> dict:
    meta: dict[str, Any] = {"labels": labels}
    if annotations:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": {"containers": [container()], **spec}}


def pods_of(api, selector: str, ns: str = NS) -> list[dict]:
    return api.list("pods", ns, label_selector=selector)["items"]


def pod_is_ready(p: dict) -> bool:
    return p["status"].get("phase") == "Running" and is_true(p, "Ready")


@pytest.fixture(autouse=True)
def no_controller_errors(caplog):
    """A controller exception is logged (the simulator survives it): fail the test on one."""
    caplog.set_level(logging.ERROR, logger="kubesim")
    yield
    errors = [r for r in caplog.records
              if r.name.startswith("kubesim.controllers") and r.levelno >= logging.ERROR]
    assert not errors, "controller errors:\n" + "\n".join(
        r.getMessage() + "\n" + (r.exc_text or "") for r in errors)


@pytest.fixture
async def cluster():
    c = Cluster()
    await c.start()
    try:
        yield c
    finally:
        await c.stop()


@pytest.fixture
def api(cluster):
    return cluster.api


# -- scheduler: pure fit logic ----------------------------------------------------------------
NODES = {n["metadata"]["name"]: n for n in parse_nodes(DEFAULT_NODES_SPEC)}


@pytest.mark.parametrize("spec, expected", [
    ({"containers": [container({"cpu": "500m"})]}, {"cpu": Decimal("0.5")}),
    ({"containers": [container(limits={"cpu": "2", "nvidia.com/gpu": "1"})]},
     {"cpu": Decimal(2), "nvidia.com/gpu": Decimal(1)}),
    ({"containers": [container({"cpu": "1"}, {"cpu": "2"})]}, {"cpu": Decimal(1)}),
    ({"containers": [container({"cpu": "1"}), container({"cpu": "1", "memory": "1Gi"}, name="b")]},
     {"cpu": Decimal(2), "memory": Decimal(2 ** 30)}),
    ({"containers": [container({"cpu": "1"})],
      "initContainers": [container({"cpu": "3"}, name="i1"), container({"cpu": "2"}, name="i2")]},
     {"cpu": Decimal(3)}),
    ({"containers": [container({"cpu": "4"})], "initContainers": [container({"cpu": "3"}, name="i")]},
     {"cpu": Decimal(4)}),
    ({"containers": [container({"cpu": "1"})],
      "initContainers": [container({"cpu": "1"}, name="side", restartPolicy="Always"),
                         container({"cpu": "2"}, name="i")]},
     {"cpu": Decimal(3)}),
    ({"containers": [container({"cpu": "1"})], "overhead": {"cpu": "250m"}},
     {"cpu": Decimal("1.25")}),
    ({"containers": [container()]}, {}),
])
def test_pod_requests(spec, expected):
    assert pod_requests({"spec": spec}) == expected


@pytest.mark.parametrize("toleration, taint, ok", [
    ({"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"},
     {"key": "k", "value": "v", "effect": "NoSchedule"}, True),
    ({"key": "k", "value": "v"}, {"key": "k", "value": "v", "effect": "NoExecute"}, True),
    ({"key": "k", "value": "w"}, {"key": "k", "value": "v", "effect": "NoSchedule"}, False),
    ({"key": "k", "operator": "Exists"}, {"key": "k", "value": "v", "effect": "NoSchedule"}, True),
    ({"key": "k", "operator": "Exists", "effect": "NoExecute"},
     {"key": "k", "value": "v", "effect": "NoSchedule"}, False),
    ({"operator": "Exists"}, {"key": "anything", "effect": "NoExecute"}, True),
    ({"key": "", "operator": "Equal"}, {"key": "k", "effect": "NoSchedule"}, False),
    ({"key": "other", "operator": "Exists"}, {"key": "k", "effect": "NoSchedule"}, False),
    ({"key": "k", "operator": "Equal"}, {"key": "k", "effect": "NoSchedule"}, True),
])
def test_tolerates(toleration, taint, ok):
    assert tolerates(toleration, taint) is ok


@pytest.mark.parametrize("exprs, ok", [
    ([{"key": "kubesim.io/pool", "operator": "In", "values": ["gpu", "x"]}], True),
    ([{"key": "kubesim.io/pool", "operator": "NotIn", "values": ["gpu"]}], False),
    ([{"key": "nvidia.com/gpu.present", "operator": "Exists"}], True),
    ([{"key": "nvidia.com/gpu.present", "operator": "DoesNotExist"}], False),
    ([{"key": "missing", "operator": "NotIn", "values": ["a"]}], True),
    ([{"key": "kubesim.io/pool", "operator": "In", "values": ["gpu"]},
      {"key": "missing", "operator": "Exists"}], False),
    ([], False),
])
def test_node_selector_term(exprs, ok):
    assert match_node_selector_term({"matchExpressions": exprs}, NODES["gpu-0"]) is ok


def _fit_pod(requests=None, limits=None, **spec):
    return {"metadata": {"name": "p"}, "spec": {"containers": [container(requests, limits)], **spec}}


@pytest.mark.parametrize("p, node, reasons", [
    (_fit_pod({"cpu": "1"}), "cpu-0", []),
    (_fit_pod({"cpu": "17"}), "cpu-0", ["Insufficient cpu"]),
    (_fit_pod({"cpu": "17", "memory": "100Gi"}), "cpu-0", ["Insufficient cpu", "Insufficient memory"]),
    (_fit_pod(limits={"nvidia.com/gpu": "1"}), "cpu-0", ["Insufficient nvidia.com/gpu"]),
    (_fit_pod(limits={"nvidia.com/gpu": "1"}), "gpu-0",
     ["node(s) had untolerated taint {nvidia.com/gpu: present}"]),
    (_fit_pod(limits={"nvidia.com/gpu": "4"}, tolerations=[GPU_TOLERATION]), "gpu-0", []),
    (_fit_pod(limits={"nvidia.com/gpu": "5"}, tolerations=[GPU_TOLERATION]), "gpu-0",
     ["Insufficient nvidia.com/gpu"]),
    (_fit_pod(limits={"example.com/foo": "1"}), "cpu-0", ["Insufficient example.com/foo"]),
    (_fit_pod(nodeSelector={"kubesim.io/pool": "gpu"}), "cpu-0",
     ["node(s) didn't match Pod's node affinity/selector"]),
    (_fit_pod(tolerations=[{"operator": "Exists"}], nodeSelector={"kubesim.io/pool": "gpu"}),
     "gpu-0", []),
    (_fit_pod(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubesim.io/pool", "operator": "NotIn", "values": ["cpu"]}]}]}}}),
     "cpu-0", ["node(s) didn't match Pod's node affinity/selector"]),
])
def test_filter_node(p, node, reasons):
    assert filter_node(p, NODES[node], pod_requests(p), {}, 0) == reasons


def test_filter_node_counts_used_resources_and_pods():
    p = _fit_pod({"cpu": "4"})
    node = NODES["cpu-0"]
    assert filter_node(p, node, pod_requests(p), {"cpu": Decimal(12)}, 0) == []
    assert filter_node(p, node, pod_requests(p), {"cpu": Decimal("12.1")}, 0) == ["Insufficient cpu"]
    assert filter_node(p, node, pod_requests(p), {}, 110) == ["Too many pods"]


def test_choose_node_spreads_and_reports():
    nodes = list(NODES.values())
    usage = NodeUsage()
    usage.add("cpu-0", {"cpu": Decimal(8)})
    name, msg = choose_node(_fit_pod({"cpu": "1"}), nodes, usage)
    assert (name, msg) == ("cpu-1", "")
    name, msg = choose_node(_fit_pod(limits={"nvidia.com/gpu": "8"}), nodes, usage)
    assert name is None
    assert msg == ("0/4 nodes are available: 2 Insufficient nvidia.com/gpu, "
                   "2 node(s) had untolerated taint {nvidia.com/gpu: present}.")
    assert choose_node(_fit_pod(), [], usage) == (None, "no nodes available to schedule pods")
    assert unschedulable_message(3, Counter({"b": 1, "a": 2})) == \
        "0/3 nodes are available: 1 b, 2 a."


# -- scheduler + kubelet against the apiserver -------------------------------------------------
@pytest.mark.parametrize("spec, node_prefix, message", [
    ({"limits": {"nvidia.com/gpu": "2"}, "tolerations": [GPU_TOLERATION]}, "gpu-", None),
    ({"requests": {"cpu": "2"}}, "cpu-", None),
    ({"requests": {"cpu": "100m"}, "nodeSelector": {"torchdev.io/gpu-type": "nvidia-a10g"},
      "tolerations": [GPU_TOLERATION]}, "gpu-", None),
    ({"limits": {"nvidia.com/gpu": "1"}}, None,
     "0/4 nodes are available: 2 Insufficient nvidia.com/gpu, "
     "2 node(s) had untolerated taint {nvidia.com/gpu: present}."),
    ({"limits": {"nvidia.com/gpu": "8"}, "tolerations": [GPU_TOLERATION]}, None,
     "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."),
    ({"limits": {"nvidia.com/gpu": "1"}, "tolerations": [GPU_TOLERATION],
      "nodeSelector": {"node.kubernetes.io/instance-type": "m5.4xlarge"}}, None,
     "0/4 nodes are available: 2 Insufficient nvidia.com/gpu, "
     "2 node(s) didn't match Pod's node affinity/selector."),
    ({"limits": {"nvidia.com/gpu": "1"}, "tolerations": [GPU_TOLERATION],
      "nodeSelector": {"torchdev.io/gpu-type": "nvidia-h100"}}, None,
     "0/4 nodes are available: 4 node(s) didn't match Pod's node affinity/selector."),
    ({"requests": {"cpu": "64"}, "tolerations": [GPU_TOLERATION]}, None,
     "0/4 nodes are available: 4 Insufficient cpu."),
])
async def test_scheduling(api, spec, node_prefix, message):
    spec = dict(spec)
    p = pod("p", spec.pop("requests", None), spec.pop("limits", None), **spec)
    api.create("pods", p)
    if node_prefix:
        got = await wait_for(lambda: pod_is_ready(api.get("pods", NS, "p"))
                             and api.get("pods", NS, "p"), what="pod ready")
        assert got["spec"]["nodeName"].startswith(node_prefix)
        assert is_true(got, "PodScheduled")
        assert got["status"]["podIP"].startswith("10.244.")
        assert got["status"]["hostIP"].startswith("10.0.")
    else:
        got = await wait_for(lambda: (cond(api.get("pods", NS, "p"), "PodScheduled") or {}).get(
            "reason") == "Unschedulable" and api.get("pods", NS, "p"), what="Unschedulable")
        c = cond(got, "PodScheduled")
        assert c["status"] == "False"
        assert c["message"] == message
        assert not got["spec"].get("nodeName")
        assert got["status"]["phase"] == "Pending"
        events = [e for e in api.list("events", NS)["items"] if e["reason"] == "FailedScheduling"]
        assert events and events[0]["message"] == message


async def test_gpus_are_accounted_and_freed(api):
    for i in range(2):
        api.create("pods", pod(f"big-{i}", limits={"nvidia.com/gpu": "4"},
                               tolerations=[GPU_TOLERATION]))
    await wait_for(lambda: all(pod_is_ready(p) for p in api.list("pods", NS)["items"])
                   and len(api.list("pods", NS)["items"]) == 2, what="two GPU pods running")
    nodes = {p["spec"]["nodeName"] for p in api.list("pods", NS)["items"]}
    assert nodes == {"gpu-0", "gpu-1"}
    api.create("pods", pod("waiting", limits={"nvidia.com/gpu": "1"}, tolerations=[GPU_TOLERATION]))
    await wait_for(lambda: (cond(api.get("pods", NS, "waiting"), "PodScheduled") or {}).get(
        "reason") == "Unschedulable", what="Unschedulable")
    api.delete("pods", NS, "big-0")
    got = await wait_for(lambda: api.get("pods", NS, "waiting")["spec"].get("nodeName") and
                         api.get("pods", NS, "waiting"), what="rescheduled after delete")
    assert is_true(got, "PodScheduled")


async def test_scheduling_gates_and_scheduler_name(api):
    api.create("pods", pod("gated", schedulingGates=[{"name": "kueue.x-k8s.io/admission"}]))
    api.create("pods", pod("other", schedulerName="my-scheduler"))
    got = await wait_for(lambda: (cond(api.get("pods", NS, "gated"), "PodScheduled") or {}).get(
        "reason") == "SchedulingGated" and api.get("pods", NS, "gated"), what="SchedulingGated")
    assert not got["spec"].get("nodeName")
    assert not api.get("pods", NS, "other")["spec"].get("nodeName")
    got["spec"]["schedulingGates"] = []
    api.update("pods", got)
    await wait_for(lambda: pod_is_ready(api.get("pods", NS, "gated")), what="ungated pod running")
    assert not api.get("pods", NS, "other")["spec"].get("nodeName")


async def test_scheduler_can_be_disabled():
    c = Cluster(disabled={"scheduler"})
    await c.start()
    try:
        c.api.create("pods", pod("p"))
        await asyncio.sleep(0.2)
        p = c.api.get("pods", NS, "p")
        assert not p["spec"].get("nodeName") and p["status"]["phase"] == "Pending"
        assert c.manager.get("scheduler") is None and c.manager.get("kubelet") is not None
    finally:
        await c.stop()


async def test_small_node_pool():
    c = Cluster(nodes="tiny:1x{cpu:1,memory:1Gi,pods:2}")
    await c.start()
    try:
        api = c.api
        for i in range(3):
            api.create("pods", pod(f"p{i}", {"cpu": "100m"}))
        await wait_for(lambda: sum(1 for p in api.list("pods", NS)["items"]
                                   if p["spec"].get("nodeName")) == 2, what="two bound")
        third = await wait_for(lambda: next((p for p in api.list("pods", NS)["items"]
                                             if cond(p, "PodScheduled") and
                                             cond(p, "PodScheduled")["status"] == "False"), None))
        assert cond(third, "PodScheduled")["message"] == "0/1 nodes are available: 1 Too many pods."
    finally:
        await c.stop()


async def test_pending_pod_scheduled_when_a_node_appears():
    c = Cluster(nodes="")
    await c.start()
    try:
        api = c.api
        api.create("pods", pod("p", limits={"nvidia.com/gpu": "1"}))
        got = await wait_for(lambda: cond(api.get("pods", NS, "p"), "PodScheduled")
                             and api.get("pods", NS, "p"))
        assert cond(got, "PodScheduled")["message"] == "no nodes available to schedule pods"
        node = parse_nodes("late:{nvidia.com/gpu:1}")[0]
        status = node.pop("status")
        created = api.create("nodes", node)
        created["status"] = status
        api.update("nodes", created, subresource="status")
        got = await wait_for(lambda: pod_is_ready(api.get("pods", NS, "p")) and
                             api.get("pods", NS, "p"), what="scheduled on the new node")
        assert got["spec"]["nodeName"] == "late-0"
    finally:
        await c.stop()


async def test_kubelet_ready_after(api):
    api.create("pods", pod("slow", annotations={"kubesim.io/ready-after": "0.3"}))
    got = await wait_for(lambda: api.get("pods", NS, "slow")["status"].get("phase") == "Running"
                         and api.get("pods", NS, "slow"))
    if not pod_is_ready(got):  # running but not ready yet
        assert cond(got, "Ready")["reason"] == "ContainersNotReady"
        assert got["status"]["containerStatuses"][0]["ready"] is False
    await wait_for(lambda: pod_is_ready(api.get("pods", NS, "slow")), what="ready")
    st = api.get("pods", NS, "slow")["status"]
    assert st["containerStatuses"][0]["state"]["running"]["startedAt"]
    assert st["containerStatuses"][0]["started"] is True
    assert st["startTime"]
    assert [c["type"] for c in st["conditions"]] == [
        "PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"]


async def test_pod_ips_unique_and_spread(api):
    for i in range(5):
        api.create("pods", pod(f"p{i}"))
    await wait_for(lambda: all(p["status"].get("podIP") for p in api.list("pods", NS)["items"]))
    ips = [p["status"]["podIP"] for p in api.list("pods", NS)["items"]]
    assert len(set(ips)) == 5
    # pods without requests are spread (scored with kube-scheduler's non-zero defaults)
    placed = Counter(p["spec"]["nodeName"] for p in api.list("pods", NS)["items"])
    assert set(placed) == {"cpu-0", "cpu-1"} and max(placed.values()) == 3


@pytest.mark.parametrize("policy", ["Always", "OnFailure"])
async def test_kubelet_fail_after_restarts(api, policy):
    api.create("pods", pod("crash", annotations={"kubesim.io/fail-after": "0.05",
                                                 "kubesim.io/ready-after": "0"},
                           restartPolicy=policy))
    got = await wait_for(lambda: api.get("pods", NS, "crash")["status"].get(
        "containerStatuses", [{}])[0].get("restartCount", 0) >= 2 and api.get("pods", NS, "crash"),
        what="two restarts")
    cs = got["status"]["containerStatuses"][0]
    assert got["status"]["phase"] == "Running"
    assert cs["lastState"]["terminated"]["exitCode"] == 1
    assert cs["lastState"]["terminated"]["reason"] == "Error"


async def test_kubelet_fail_after_never_fails(api):
    api.create("pods", pod("once", annotations={"kubesim.io/fail-after": "0.05"},
                           restartPolicy="Never"))
    got = await wait_for(lambda: api.get("pods", NS, "once")["status"].get("phase") == "Failed"
                         and api.get("pods", NS, "once"), what="Failed")
    cs = got["status"]["containerStatuses"][0]
    assert cs["state"]["terminated"]["exitCode"] == 1 and cs["restartCount"] == 0
    assert not is_true(got, "Ready")


@pytest.mark.parametrize("annotations, policy, message", [
    ({"kubesim.io/termination-message": "input /x does not exist"}, "File", "input /x does not exist"),
    ({"kubesim.io/termination-message": "wrote this", "kubesim.io/log": "log"}, "FallbackToLogsOnError", "wrote this"),
    ({"kubesim.io/log": "\n".join("line %d" % i for i in range(100))}, "FallbackToLogsOnError",
     "\n".join("line %d" % i for i in range(20, 100))),
    ({"kubesim.io/log": "only the log"}, "File", None),
])
async def test_kubelet_termination_message(api, annotations, policy, message):
    """The terminated state's message: what the container wrote to its termination message path,
    else, with FallbackToLogsOnError, the last 80 lines of its log (a kubelet's rules)."""
    name = "term-%d" % (len(annotations) + len(policy) + len(message or ""))
    body = pod(name, annotations=dict(annotations, **{"kubesim.io/fail-after": "0.02", "kubesim.io/exit-code": "3"}),
               restartPolicy="Never")
    body["spec"]["containers"][0]["terminationMessagePolicy"] = policy
    api.create("pods", body)
    got = await wait_for(lambda: api.get("pods", NS, name)["status"].get("phase") == "Failed"
                         and api.get("pods", NS, name), what="Failed")
    term = got["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == 3 and term.get("message") == message


@pytest.mark.parametrize("policy, phase", [("Never", "Succeeded"), ("OnFailure", "Succeeded")])
async def test_kubelet_succeed_after(api, policy, phase):
    api.create("pods", pod("job", annotations={"kubesim.io/succeed-after": "0.05"},
                           restartPolicy=policy))
    got = await wait_for(lambda: api.get("pods", NS, "job")["status"].get("phase") == phase
                         and api.get("pods", NS, "job"), what=phase)
    assert got["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    assert got["status"]["containerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"


async def test_kubelet_succeed_after_always_restarts(api):
    api.create("pods", pod("svc", annotations={"kubesim.io/succeed-after": "0.05"}))
    got = await wait_for(lambda: api.get("pods", NS, "svc")["status"].get(
        "containerStatuses", [{}])[0].get("restartCount", 0) >= 1 and api.get("pods", NS, "svc"))
    assert got["status"]["phase"] == "Running"
    assert got["status"]["containerStatuses"][0]["lastState"]["terminated"]["exitCode"] == 0


# -- deployments --------------------------------------------------------------------------------
def deployment(name: str, replicas: int, **tmpl_extra: Any) -> dict:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": template(labels, **tmpl_extra)}}


def deployment_ready(d: dict) -> bool:
    """kubernetes.core 6.2.0 waiter.deployment_ready, on plain dicts."""
    st = d.get("status") or {}
    return bool(st and d["spec"]["replicas"] == (st.get("replicas") or 0)
                and st.get("availableReplicas") == st.get("replicas")
                and st.get("observedGeneration") == d["metadata"]["generation"]
                and not st.get("unavailableReplicas"))


async def test_deployment_available_scale_and_rollout(api):
    api.create("deployments.apps", deployment("web", 3))
    d = await wait_for(lambda: deployment_ready(api.get("deployments.apps", NS, "web"))
                       and api.get("deployments.apps", NS, "web"), what="deployment ready")
    assert is_true(d, "Available")
    assert cond(d, "Progressing")["reason"] == "NewReplicaSetAvailable"
    assert d["status"]["readyReplicas"] == d["status"]["updatedReplicas"] == 3
    pods = pods_of(api, "app=web")
    assert len(pods) == 3
    h = pods[0]["metadata"]["labels"]["pod-template-hash"]
    for p in pods:
        assert p["metadata"]["name"].startswith(f"web-{h}-")
        ref = p["metadata"]["ownerReferences"][0]
        assert ref["kind"] == "Deployment" and ref["controller"] is True
        assert ref["uid"] == d["metadata"]["uid"]

    api.patch("deployments.apps", NS, "web", {"spec": {"replicas": 1}})
    await wait_for(lambda: len(pods_of(api, "app=web")) == 1
                   and deployment_ready(api.get("deployments.apps", NS, "web")), what="scaled to 1")

    api.patch("deployments.apps", NS, "web", {"spec": {"replicas": 2, "template": {"metadata": {
        "annotations": {"rev": "2"}}}}})
    d = await wait_for(lambda: deployment_ready(api.get("deployments.apps", NS, "web"))
                       and api.get("deployments.apps", NS, "web")["status"].get("updatedReplicas") == 2
                       and api.get("deployments.apps", NS, "web"), what="rolled out")
    pods = pods_of(api, "app=web")
    assert len(pods) == 2
    assert all(p["metadata"]["labels"]["pod-template-hash"] != h for p in pods)
    assert all(p["metadata"]["annotations"]["rev"] == "2" for p in pods)

    api.patch("deployments.apps", NS, "web", {"spec": {"replicas": 0}})
    await wait_for(lambda: not pods_of(api, "app=web")
                   and deployment_ready(api.get("deployments.apps", NS, "web")), what="scaled to 0")


async def test_deployment_recreate_and_unavailable(api):
    d = deployment("gpu", 2, tolerations=[GPU_TOLERATION])
    d["spec"]["strategy"] = {"type": "Recreate"}
    d["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "3"}}
    api.create("deployments.apps", d)
    await wait_for(lambda: deployment_ready(api.get("deployments.apps", NS, "gpu")))
    # a third GPU-hungry replica cannot be placed: the Deployment is not fully available
    api.patch("deployments.apps", NS, "gpu", {"spec": {"replicas": 3}})
    got = await wait_for(lambda: api.get("deployments.apps", NS, "gpu")["status"].get(
        "unavailableReplicas") == 1 and api.get("deployments.apps", NS, "gpu"))
    assert not deployment_ready(got)
    assert cond(got, "Progressing")["reason"] == "ReplicaSetUpdated"
    api.patch("deployments.apps", NS, "gpu", {"spec": {"replicas": 2, "template": {
        "metadata": {"labels": {"app": "gpu", "v": "2"}}}}})
    await wait_for(lambda: deployment_ready(api.get("deployments.apps", NS, "gpu"))
                   and all(p["metadata"]["labels"].get("v") == "2" for p in pods_of(api, "app=gpu"))
                   and len(pods_of(api, "app=gpu")) == 2, what="recreated")


async def test_deployment_replaces_deleted_pod(api):
    api.create("deployments.apps", deployment("api", 2))
    await wait_for(lambda: deployment_ready(api.get("deployments.apps", NS, "api")))
    victim = pods_of(api, "app=api")[0]["metadata"]["name"]
    api.delete("pods", NS, victim)
    await wait_for(lambda: len(pods_of(api, "app=api")) == 2 and victim not in
                   [p["metadata"]["name"] for p in pods_of(api, "app=api")]
                   and deployment_ready(api.get("deployments.apps", NS, "api")))


# -- statefulsets ---------------------------------------------------------------------------------
def statefulset(name: str, replicas: int, policy: str = "Parallel", claims: bool = True,
                retention: dict | None = None, **tmpl_extra: Any) -> dict:
    labels = {"app": name}
    spec: dict[str, Any] = {"replicas": replicas, "serviceName": name, "podManagementPolicy": policy,
                            "selector": {"matchLabels": labels},
                            "template": template(labels, **tmpl_extra)}
    if claims:
        spec["volumeClaimTemplates"] = [{
            "metadata": {"name": "data", "labels": {"tier": "storage"}},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}}}]
    if retention:
        spec["persistentVolumeClaimRetentionPolicy"] = retention
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": name, "namespace": NS}, "spec": spec}


def sts_ready(s: dict) -> bool:
    """kubernetes.core 6.2.0 waiter.statefulset_ready (RollingUpdate), on plain dicts."""
    st = s.get("status") or {}
    n = s["spec"]["replicas"]
    return bool(st and s["spec"]["updateStrategy"]["type"] == "RollingUpdate"
                and st.get("observedGeneration") == s["metadata"]["generation"]
                and st.get("updateRevision") == st.get("currentRevision")
                and (st.get("updatedReplicas") or 0) == n and (st.get("readyReplicas") or 0) == n
                and st.get("replicas") == n)


async def test_statefulset_parallel_with_claims(api):
    api.create("statefulsets.apps", statefulset("db", 4))
    s = await wait_for(lambda: sts_ready(api.get("statefulsets.apps", NS, "db"))
                       and api.get("statefulsets.apps", NS, "db"), what="sts ready")
    assert s["status"]["collisionCount"] == 0
    assert s["status"]["currentReplicas"] == s["status"]["availableReplicas"] == 4
    pods = {p["metadata"]["name"]: p for p in pods_of(api, "app=db")}
    assert sorted(pods) == ["db-0", "db-1", "db-2", "db-3"]
    for i in range(4):
        p = pods[f"db-{i}"]
        labels = p["metadata"]["labels"]
        assert labels["apps.kubernetes.io/pod-index"] == str(i)
        assert labels["statefulset.kubernetes.io/pod-name"] == f"db-{i}"
        assert labels["controller-revision-hash"] == s["status"]["updateRevision"]
        assert p["spec"]["hostname"] == f"db-{i}" and p["spec"]["subdomain"] == "db"
        vol = next(v for v in p["spec"]["volumes"] if v["name"] == "data")
        assert vol["persistentVolumeClaim"]["claimName"] == f"data-db-{i}"
    claims = {c["metadata"]["name"]: c for c in api.list("persistentvolumeclaims", NS)["items"]}
    assert sorted(claims) == [f"data-db-{i}" for i in range(4)]
    for c in claims.values():
        assert c["metadata"]["labels"] == {"tier": "storage", "app": "db"}
        assert c["status"]["phase"] == "Bound"
        assert not c["metadata"].get("ownerReferences")  # whenDeleted defaults to Retain
    uids = {n: c["metadata"]["uid"] for n, c in claims.items()}

    api.patch("statefulsets.apps", NS, "db", {"spec": {"replicas": 0}})
    await wait_for(lambda: not pods_of(api, "app=db")
                   and sts_ready(api.get("statefulsets.apps", NS, "db")), what="scaled to 0")
    assert len(api.list("persistentvolumeclaims", NS)["items"]) == 4
    api.patch("statefulsets.apps", NS, "db", {"spec": {"replicas": 4}})
    await wait_for(lambda: sts_ready(api.get("statefulsets.apps", NS, "db")), what="back to 4")
    claims = {c["metadata"]["name"]: c["metadata"]["uid"]
              for c in api.list("persistentvolumeclaims", NS)["items"]}
    assert claims == uids


async def test_statefulset_ordered_ready(api):
    api.create("statefulsets.apps", statefulset("zk", 3, policy="OrderedReady", claims=False,
                                                annotations={"kubesim.io/ready-after": "0.3"}))
    await wait_for(lambda: api.get("pods", NS, "zk-0"), what="zk-0")
    assert gone(api, "pods", NS, "zk-1")()  # waits for zk-0 to be Ready
    await wait_for(lambda: pod_is_ready(api.get("pods", NS, "zk-0")))
    await wait_for(lambda: api.get("pods", NS, "zk-1"), what="zk-1")
    assert gone(api, "pods", NS, "zk-2")()
    await wait_for(lambda: sts_ready(api.get("statefulsets.apps", NS, "zk")), what="sts ready")
    # scale down removes the highest ordinals
    api.patch("statefulsets.apps", NS, "zk", {"spec": {"replicas": 1}})
    await wait_for(lambda: [p["metadata"]["name"] for p in pods_of(api, "app=zk")] == ["zk-0"])


async def test_statefulset_rolling_update(api):
    api.create("statefulsets.apps", statefulset("ru", 3, claims=False,
                                                annotations={"kubesim.io/ready-after": "0"}))
    s = await wait_for(lambda: sts_ready(api.get("statefulsets.apps", NS, "ru"))
                       and api.get("statefulsets.apps", NS, "ru"))
    old_rev = s["status"]["currentRevision"]
    api.patch("statefulsets.apps", NS, "ru", {"spec": {"template": {"metadata": {
        "labels": {"app": "ru", "v": "2"}}}}})
    s = await wait_for(lambda: api.get("statefulsets.apps", NS, "ru")["status"].get(
        "updateRevision") != old_rev and api.get("statefulsets.apps", NS, "ru"))
    new_rev = s["status"]["updateRevision"]
    s = await wait_for(lambda: sts_ready(api.get("statefulsets.apps", NS, "ru"))
                       and api.get("statefulsets.apps", NS, "ru"), what="rolled")
    assert s["status"]["currentRevision"] == new_rev
    assert all(p["metadata"]["labels"]["controller-revision-hash"] == new_rev
               and p["metadata"]["labels"]["v"] == "2" for p in pods_of(api, "app=ru"))


@pytest.mark.parametrize("retention, claims_left", [
    (None, 2),
    ({"whenDeleted": "Retain", "whenScaled": "Retain"}, 2),
    ({"whenDeleted": "Delete", "whenScaled": "Retain"}, 0),
])
async def test_statefulset_claim_retention_on_delete(api, retention, claims_left):
    api.create("statefulsets.apps", statefulset("kv", 2, retention=retention))
    await wait_for(lambda: sts_ready(api.get("statefulsets.apps", NS, "kv")))
    claims = api.list("persistentvolumeclaims", NS)["items"]
    owned = [c for c in claims if c["metadata"].get("ownerReferences")]
    assert len(owned) == (2 if claims_left == 0 else 0)
    api.delete("statefulsets.apps", NS, "kv")
    await wait_for(lambda: not pods_of(api, "app=kv"), what="pods collected")
    await wait_for(lambda: len(api.list("persistentvolumeclaims", NS)["items"]) == claims_left,
                   what=f"{claims_left} claims left")
    if claims_left == 0:  # reclaimPolicy Delete of the default class: the PVs go too
        await wait_for(lambda: not api.list("persistentvolumes")["items"], what="PVs deleted")


async def test_statefulset_when_scaled_delete(api):
    api.create("statefulsets.apps", statefulset("sc", 3, retention={"whenDeleted": "Retain",
                                                                    "whenScaled": "Delete"}))
    await wait_for(lambda: sts_ready(api.get("statefulsets.apps", NS, "sc")))
    api.patch("statefulsets.apps", NS, "sc", {"spec": {"replicas": 1}})
    await wait_for(lambda: sorted(c["metadata"]["name"] for c in
                                  api.list("persistentvolumeclaims", NS)["items"]) == ["data-sc-0"],
                   what="claims of removed ordinals deleted")


# -- jobs -------------------------------------------------------------------------------------------
def job(name: str, annotations: dict, completions: int | None = 1, parallelism: int = 1,
        backoff: int = 6, **spec: Any) -> dict:
    body: dict[str, Any] = {"parallelism": parallelism, "backoffLimit": backoff,
                            "template": template({"app": name}, annotations, restartPolicy="Never"),
                            **spec}
    if completions is not None:
        body["completions"] = completions
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": NS},
            "spec": body}


async def test_job_completes(api):
    api.create("jobs.batch", job("ok", {"kubesim.io/succeed-after": "0.05"}, completions=3,
                                 parallelism=2))
    j = await wait_for(lambda: is_true(api.get("jobs.batch", NS, "ok"), "Complete")
                       and api.get("jobs.batch", NS, "ok"), what="Complete")
    st = j["status"]
    assert st["succeeded"] == 3 and not st.get("active") and not st.get("failed")
    assert st["startTime"] and st["completionTime"]
    assert is_true(j, "SuccessCriteriaMet")
    pods = pods_of(api, "job-name=ok")
    assert len(pods) == 3
    for p in pods:
        labels = p["metadata"]["labels"]
        assert labels["batch.kubernetes.io/job-name"] == "ok"
        assert labels["controller-uid"] == labels["batch.kubernetes.io/controller-uid"] == \
            j["metadata"]["uid"]
        assert p["spec"]["restartPolicy"] == "Never"
        assert p["metadata"]["ownerReferences"][0]["kind"] == "Job"


async def test_job_indexed(api):
    api.create("jobs.batch", job("idx", {"kubesim.io/succeed-after": "0.02"}, completions=3,
                                 parallelism=3, completionMode="Indexed"))
    j = await wait_for(lambda: is_true(api.get("jobs.batch", NS, "idx"), "Complete")
                       and api.get("jobs.batch", NS, "idx"))
    assert j["status"]["completedIndexes"] == "0-2"
    idx = sorted(p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
                 for p in pods_of(api, "job-name=idx"))
    assert idx == ["0", "1", "2"]


async def test_job_backoff_limit(api):
    api.create("jobs.batch", job("bad", {"kubesim.io/fail-after": "0.02"}, backoff=1))
    j = await wait_for(lambda: is_true(api.get("jobs.batch", NS, "bad"), "Failed")
                       and api.get("jobs.batch", NS, "bad"), what="Failed")
    assert cond(j, "Failed")["reason"] == "BackoffLimitExceeded"
    assert is_true(j, "FailureTarget")
    assert j["status"]["failed"] == 2 and not j["status"].get("active")
    assert not is_true(j, "Complete")


async def test_job_backoff_limit_counts_restarts_on_failure(api):
    body = job("crashy", {"kubesim.io/fail-after": "0.02"}, backoff=2)
    body["spec"]["template"]["spec"]["restartPolicy"] = "OnFailure"
    api.create("jobs.batch", body)
    j = await wait_for(lambda: is_true(api.get("jobs.batch", NS, "crashy"), "Failed")
                       and api.get("jobs.batch", NS, "crashy"), what="Failed")
    assert cond(j, "Failed")["reason"] == "BackoffLimitExceeded"
    assert j["status"]["failed"] == 1 and not j["status"].get("active")
    await wait_for(lambda: not pods_of(api, "job-name=crashy"), what="pod deleted")


async def test_job_suspend_and_resume(api):
    api.create("jobs.batch", job("sus", {"kubesim.io/succeed-after": "0.3"}, completions=2,
                                 parallelism=2, suspend=True))
    j = await wait_for(lambda: is_true(api.get("jobs.batch", NS, "sus"), "Suspended")
                       and api.get("jobs.batch", NS, "sus"))
    assert not pods_of(api, "job-name=sus") and not j["status"].get("active")
    api.patch("jobs.batch", NS, "sus", {"spec": {"suspend": False}})
    j = await wait_for(lambda: api.get("jobs.batch", NS, "sus")["status"].get("active") == 2
                       and api.get("jobs.batch", NS, "sus"), what="resumed")
    assert cond(j, "Suspended")["status"] == "False"
    assert cond(j, "Suspended")["reason"] == "JobResumed"
    api.patch("jobs.batch", NS, "sus", {"spec": {"suspend": True}})
    await wait_for(lambda: not pods_of(api, "job-name=sus")
                   and is_true(api.get("jobs.batch", NS, "sus"), "Suspended"), what="re-suspended")


async def test_job_deadline_and_ttl(api):
    api.create("jobs.batch", job("slow", {"kubesim.io/succeed-after": "30"},
                                 activeDeadlineSeconds=1, ttlSecondsAfterFinished=0))
    await wait_for(lambda: gone(api, "jobs.batch", NS, "slow")(), timeout=60, what="ttl delete")


# -- services ------------------------------------------------------------------------------------------
def service(name: str, selector: dict | None, type_: str = "ClusterIP", **spec: Any) -> dict:
    body: dict[str, Any] = {"type": type_, "ports": [{"name": "http", "port": 80,
                                                       "targetPort": "web"}], **spec}
    if selector is not None:
        body["selector"] = selector
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": NS},
            "spec": body}


async def test_service_endpoints(api):
    for i, ready_after in enumerate(["0", "0", "600"]):
        p = pod(f"w{i}", annotations={"kubesim.io/ready-after": ready_after})
        p["metadata"]["labels"] = {"app": "w"}
        p["spec"]["containers"][0]["ports"] = [{"name": "web", "containerPort": 8080}]
        api.create("pods", p)
    api.create("services", service("w", {"app": "w"}))
    svc = api.get("services", NS, "w")
    assert svc["spec"]["clusterIP"].startswith("10.") and svc["spec"]["clusterIPs"]
    ep = await wait_for(lambda: len((api.get("endpoints", NS, "w").get("subsets") or [{}])[0].get(
        "addresses", [])) == 2 and api.get("endpoints", NS, "w"), what="2 ready endpoints")
    subset = ep["subsets"][0]
    assert subset["ports"] == [{"port": 8080, "protocol": "TCP", "name": "http"}]
    assert sorted(a["targetRef"]["name"] for a in subset["addresses"]) == ["w0", "w1"]
    assert [a["targetRef"]["name"] for a in subset["notReadyAddresses"]] == ["w2"]
    slices = api.list("endpointslices.discovery.k8s.io", NS,
                      label_selector="kubernetes.io/service-name=w")["items"]
    assert len(slices) == 1 and len(slices[0]["endpoints"]) == 3
    assert sum(e["conditions"]["ready"] for e in slices[0]["endpoints"]) == 2
    api.delete("pods", NS, "w0")
    await wait_for(lambda: [a["targetRef"]["name"] for a in
                            api.get("endpoints", NS, "w")["subsets"][0]["addresses"]] == ["w1"])
    api.delete("services", NS, "w")
    await wait_for(gone(api, "endpoints", NS, "w"), what="endpoints removed")


async def test_service_publish_not_ready_and_headless(api):
    p = pod("h0", annotations={"kubesim.io/ready-after": "600"})
    p["metadata"]["labels"] = {"app": "h"}
    p["spec"].update(hostname="h0", subdomain="h")
    api.create("pods", p)
    body = service("h", {"app": "h"}, clusterIP="None", publishNotReadyAddresses=True)
    body["spec"]["ports"][0]["targetPort"] = 22
    api.create("services", body)
    assert api.get("services", NS, "h")["spec"]["clusterIP"] == "None"
    ep = await wait_for(lambda: (api.get("endpoints", NS, "h").get("subsets") or [{}])[0].get(
        "addresses") and api.get("endpoints", NS, "h"))
    addr = ep["subsets"][0]["addresses"][0]
    assert addr["hostname"] == "h0" and addr["nodeName"]
    assert ep["subsets"][0]["ports"][0]["port"] == 22


async def test_service_nodeport_and_loadbalancer(api):
    api.create("services", service("np", {"app": "x"}, "NodePort"))
    api.create("services", service("lb", {"app": "x"}, "LoadBalancer"))
    np_port = api.get("services", NS, "np")["spec"]["ports"][0]["nodePort"]
    assert 30000 <= np_port <= 32767
    lb = await wait_for(lambda: (api.get("services", NS, "lb").get("status") or {}).get(
        "loadBalancer", {}).get("ingress") and api.get("services", NS, "lb"))
    assert lb["status"]["loadBalancer"]["ingress"] == [{"hostname": "lb-default.elb.kubesim.local"}]
    assert lb["spec"]["ports"][0]["nodePort"] != np_port


# -- persistent volumes -----------------------------------------------------------------------------------
def claim(name: str, storage: str = "5Gi", sc: str | None = None) -> dict:
    spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"],
                            "resources": {"requests": {"storage": storage}}}
    if sc is not None:
        spec["storageClassName"] = sc
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": NS}, "spec": spec}


def storage_class(name: str, reclaim: str = "Delete", mode: str = "Immediate", **extra: Any) -> dict:
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
            "provisioner": "example.com/csi", "reclaimPolicy": reclaim,
            "volumeBindingMode": mode, **extra}


def phase(api, name: str) -> str | None:
    return (api.get("persistentvolumeclaims", NS, name).get("status") or {}).get("phase")


async def test_pvc_default_class_binds(api):
    api.create("persistentvolumeclaims", claim("c1"))
    await wait_for(lambda: phase(api, "c1") == "Bound")
    c = api.get("persistentvolumeclaims", NS, "c1")
    pv = api.get("persistentvolumes", None, c["spec"]["volumeName"])
    assert pv["metadata"]["name"] == f"pvc-{c['metadata']['uid']}"
    assert pv["spec"]["capacity"] == {"storage": "5Gi"} == c["status"]["capacity"]
    assert pv["spec"]["claimRef"]["uid"] == c["metadata"]["uid"]
    assert pv["spec"]["storageClassName"] == "gp3"
    assert pv["spec"]["csi"]["driver"] == "ebs.csi.aws.com"
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Delete"
    assert pv["status"]["phase"] == "Bound"
    assert c["status"]["accessModes"] == ["ReadWriteOnce"]
    # expansion (gp3 allows it)
    api.patch("persistentvolumeclaims", NS, "c1", {"spec": {"resources": {"requests": {
        "storage": "8Gi"}}}})
    await wait_for(lambda: api.get("persistentvolumeclaims", NS, "c1")["status"]["capacity"][
        "storage"] == "8Gi", what="expanded")
    api.delete("persistentvolumeclaims", NS, "c1")
    await wait_for(gone(api, "persistentvolumes", None, pv["metadata"]["name"]), what="PV deleted")


async def test_pvc_pending_until_class_exists(api):
    api.create("persistentvolumeclaims", claim("c2", sc="later"))
    api.create("pods", {**pod("user"), "spec": {
        "containers": [container()],
        "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "c2"}}]}})
    got = await wait_for(lambda: (cond(api.get("pods", NS, "user"), "PodScheduled") or {}).get(
        "reason") == "Unschedulable" and api.get("pods", NS, "user"))
    assert "unbound immediate PersistentVolumeClaims" in cond(got, "PodScheduled")["message"]
    await asyncio.sleep(0.1)
    assert phase(api, "c2") == "Pending"
    api.create("storageclasses.storage.k8s.io", storage_class("later", reclaim="Retain"))
    await wait_for(lambda: phase(api, "c2") == "Bound", what="bound once the class exists")
    await wait_for(lambda: pod_is_ready(api.get("pods", NS, "user")), what="pod runs")
    pv_name = api.get("persistentvolumeclaims", NS, "c2")["spec"]["volumeName"]
    api.delete("pods", NS, "user")
    api.delete("persistentvolumeclaims", NS, "c2")
    await wait_for(lambda: api.get("persistentvolumes", None, pv_name)["status"]["phase"] == "Released",
                   what="Retain -> Released")


async def test_pvc_no_class_stays_pending(api):
    api.create("persistentvolumeclaims", claim("c3", sc=""))
    api.create("persistentvolumeclaims", claim("c4", sc="missing"))
    await asyncio.sleep(0.15)
    assert phase(api, "c3") == "Pending" and phase(api, "c4") == "Pending"
    # a matching static PV binds the classless claim
    api.create("persistentvolumes", {"apiVersion": "v1", "kind": "PersistentVolume",
                                     "metadata": {"name": "static"},
                                     "spec": {"capacity": {"storage": "10Gi"},
                                              "accessModes": ["ReadWriteOnce"],
                                              "hostPath": {"path": "/tmp/x"}}})
    await wait_for(lambda: phase(api, "c3") == "Bound", what="static binding")
    assert api.get("persistentvolumeclaims", NS, "c3")["spec"]["volumeName"] == "static"
    assert phase(api, "c4") == "Pending"


async def test_pvc_wait_for_first_consumer(api):
    api.create("storageclasses.storage.k8s.io", storage_class("wffc", mode="WaitForFirstConsumer"))
    api.create("persistentvolumeclaims", claim("c5", sc="wffc"))
    await asyncio.sleep(0.1)
    assert phase(api, "c5") == "Pending"
    api.create("pods", {**pod("consumer"), "spec": {
        "containers": [container()],
        "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "c5"}}]}})
    await wait_for(lambda: phase(api, "c5") == "Bound", what="bound after scheduling")
    node = api.get("pods", NS, "consumer")["spec"]["nodeName"]
    pv = api.get("persistentvolumes", None, api.get("persistentvolumeclaims", NS, "c5")["spec"][
        "volumeName"])
    terms = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"][0]["values"] == [node]


# -- garbage collection -------------------------------------------------------------------------------------
def cm(name: str, owners: list[dict] | None = None, ns: str = NS) -> dict:
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    if owners:
        meta["ownerReferences"] = [
            {"apiVersion": o["apiVersion"], "kind": o["kind"], "name": o["metadata"]["name"],
             "uid": o["metadata"]["uid"], "blockOwnerDeletion": True} for o in owners]
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": "v"}}


async def test_gc_background(api):
    owner = api.create("configmaps", cm("owner"))
    child = api.create("configmaps", cm("child", [owner]))
    api.create("configmaps", cm("grandchild", [child]))
    other = api.create("configmaps", cm("other"))
    api.create("configmaps", cm("two-owners", [owner, other]))
    api.delete("configmaps", NS, "owner")
    await wait_for(gone(api, "configmaps", NS, "child"), what="child collected")
    await wait_for(gone(api, "configmaps", NS, "grandchild"), what="grandchild collected")
    two = await wait_for(lambda: len(api.get("configmaps", NS, "two-owners")["metadata"][
        "ownerReferences"]) == 1 and api.get("configmaps", NS, "two-owners"))
    assert two["metadata"]["ownerReferences"][0]["uid"] == other["metadata"]["uid"]


async def test_gc_dangling_owner_at_create(api):
    fake = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ghost",
                                                                  "uid": "0000-not-there"}}
    api.create("configmaps", cm("orphaned", [fake]))
    await wait_for(gone(api, "configmaps", NS, "orphaned"), what="collected")


async def test_gc_foreground(api):
    api.create("deployments.apps", deployment("fg", 2))
    await wait_for(lambda: deployment_ready(api.get("deployments.apps", NS, "fg")))
    d = api.get("deployments.apps", NS, "fg")
    extra = api.create("configmaps", cm("fg-extra", [d]))
    api.delete("deployments.apps", NS, "fg", propagation_policy="Foreground")
    await wait_for(gone(api, "deployments.apps", NS, "fg"), what="owner gone after dependents")
    assert not pods_of(api, "app=fg")
    assert gone(api, "configmaps", NS, extra["metadata"]["name"])()


async def test_gc_foreground_waits_for_finalized_dependent(api):
    owner = api.create("configmaps", cm("fg-owner"))
    dep = cm("held", [owner])
    dep["metadata"]["finalizers"] = ["example.com/hold"]
    api.create("configmaps", dep)
    api.delete("configmaps", NS, "fg-owner", propagation_policy="Foreground")
    held = await wait_for(lambda: api.get("configmaps", NS, "held")["metadata"].get(
        "deletionTimestamp") and api.get("configmaps", NS, "held"))
    o = api.get("configmaps", NS, "fg-owner")
    assert o["metadata"]["deletionTimestamp"] and "foregroundDeletion" in o["metadata"]["finalizers"]
    api.patch("configmaps", NS, "held", {"metadata": {"finalizers": None}})
    await wait_for(gone(api, "configmaps", NS, "fg-owner"), what="owner released")
    assert held


async def test_gc_orphan(api):
    api.create("deployments.apps", deployment("or", 2))
    await wait_for(lambda: deployment_ready(api.get("deployments.apps", NS, "or")))
    names = sorted(p["metadata"]["name"] for p in pods_of(api, "app=or"))
    api.delete("deployments.apps", NS, "or", propagation_policy="Orphan")
    await wait_for(gone(api, "deployments.apps", NS, "or"), what="owner gone")
    await asyncio.sleep(0.05)
    pods = pods_of(api, "app=or")
    assert sorted(p["metadata"]["name"] for p in pods) == names
    assert all(not p["metadata"].get("ownerReferences") for p in pods)


async def test_gc_custom_resource_owner(api):
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "widgets.example.com"},
           "spec": {"group": "example.com", "scope": "Namespaced",
                    "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                    "versions": [{"name": "v1", "served": True, "storage": True,
                                  "schema": {"openAPIV3Schema": {
                                      "type": "object",
                                      "x-kubernetes-preserve-unknown-fields": True}}}]}}
    api.create("customresourcedefinitions.apiextensions.k8s.io", crd)
    w = api.create("widgets.example.com", {"apiVersion": "example.com/v1", "kind": "Widget",
                                           "metadata": {"name": "w1", "namespace": NS}})
    api.create("configmaps", cm("w1-config", [w]))
    w2 = api.create("widgets.example.com", {"apiVersion": "example.com/v1", "kind": "Widget",
                                            "metadata": {"name": "w2", "namespace": NS,
                                                         "ownerReferences": [{
                                                             "apiVersion": "example.com/v1",
                                                             "kind": "Widget", "name": "w1",
                                                             "uid": w["metadata"]["uid"]}]}})
    assert w2
    api.delete("widgets.example.com", NS, "w1")
    await wait_for(gone(api, "configmaps", NS, "w1-config"), what="configmap collected")
    await wait_for(gone(api, "widgets.example.com", NS, "w2"), what="dependent widget collected")


# -- namespaces -----------------------------------------------------------------------------------------------
async def test_namespace_lifecycle(api):
    api.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}})
    await wait_for(lambda: api.get("serviceaccounts", "team", "default"), what="default SA")
    assert api.get("namespaces", None, "team")["status"]["phase"] == "Active"
    api.create("configmaps", cm("c", ns="team"))
    d = deployment("app", 2)
    d["metadata"]["namespace"] = "team"
    api.create("deployments.apps", d)
    await wait_for(lambda: len(api.list("pods", "team")["items"]) == 2)
    held = cm("held", ns="team")
    held["metadata"]["finalizers"] = ["example.com/hold"]
    api.create("configmaps", held)
    api.delete("namespaces", None, "team")
    ns = await wait_for(lambda: is_true(api.get("namespaces", None, "team"),
                                        "NamespaceFinalizersRemaining")
                        and api.get("namespaces", None, "team"), what="waiting on finalizer")
    assert ns["status"]["phase"] == "Terminating"
    assert api.list("pods", "team")["items"] == []
    assert [c["metadata"]["name"] for c in api.list("configmaps", "team")["items"]] == ["held"]
    with pytest.raises(ApiError) as info:
        api.create("configmaps", cm("new", ns="team"))
    assert info.value.code == 403
    # as kube-apiserver's NamespaceLifecycle admission: the cause says why (issue 26.4)
    assert info.value.details["causes"] == [{"reason": "NamespaceTerminating", "field": "metadata.namespace",
                                             "message": "namespace team is being terminated"}]
    api.patch("configmaps", "team", "held", {"metadata": {"finalizers": None}})
    await wait_for(gone(api, "namespaces", None, "team"), what="namespace removed")


async def test_resource_quota_status_follows_its_spec(api):
    """The quota controller's part kubesim has: status.hard is spec.hard, soon after create and
    after a change (kube-apiserver refuses what a quota counts until then; issue 26.4)."""
    api.create("resourcequotas", {"apiVersion": "v1", "kind": "ResourceQuota",
                                  "metadata": {"name": "q", "namespace": "default"},
                                  "spec": {"hard": {"pods": "10", "requests.nvidia.com/gpu": "4"}}})
    await wait_for(lambda: (api.get("resourcequotas", "default", "q").get("status") or {}).get("hard")
                   == {"pods": "10", "requests.nvidia.com/gpu": "4"}, what="status.hard")
    api.patch("resourcequotas", "default", "q", {"spec": {"hard": {"pods": "5"}}})
    await wait_for(lambda: api.get("resourcequotas", "default", "q")["status"]["hard"]
                   == {"pods": "5", "requests.nvidia.com/gpu": "4"}, what="status.hard after a change")


async def test_statefulset_pod_refused_by_a_resource_quota(api):
    """kube-apiserver's quota admission for the StatefulSet controller's pod creates: a quota whose
    use leaves no room refuses the pod with the real message, the controller records the real
    FailedCreate Event on the set (count raised as it retries), and raising the quota lets the
    next try create it.  Quotas with scopes and other resources are not enforced."""
    gpu = {"nvidia.com/gpu": "1"}
    api.create("resourcequotas", {"apiVersion": "v1", "kind": "ResourceQuota",
                                  "metadata": {"name": "compute", "namespace": NS},
                                  "spec": {"hard": {"requests.nvidia.com/gpu": "1", "requests.cpu": "8",
                                                    "services": "0"}}})
    api.create("resourcequotas", {"apiVersion": "v1", "kind": "ResourceQuota",
                                  "metadata": {"name": "scoped", "namespace": NS},
                                  "spec": {"hard": {"pods": "0"}, "scopes": ["BestEffort"]}})
    api.create("pods", pod("holder", requests=gpu, limits=gpu, tolerations=[GPU_TOLERATION]))
    sts = statefulset("q", 1, claims=False)
    sts["spec"]["template"]["spec"]["containers"] = [container(requests={"cpu": "500m", **gpu}, limits=gpu)]
    sts["spec"]["template"]["spec"]["tolerations"] = [GPU_TOLERATION]
    api.create("statefulsets.apps", sts)
    uid = api.get("statefulsets.apps", NS, "q")["metadata"]["uid"]

    def failed_creates():
        return api.list("events", NS, field_selector="involvedObject.kind=StatefulSet,involvedObject.name=q,"
                                                     "reason=FailedCreate")["items"]
    events = await wait_for(lambda: [e for e in failed_creates() if int(e.get("count") or 0) >= 2],
                            what="the refusal recorded and retried")
    assert len(events) == 1
    event = events[0]
    assert (event["type"], event["involvedObject"]["uid"], event["source"]["component"]) == (
        "Warning", uid, "statefulset-controller")
    assert event["message"] == (
        'create Pod q-0 in StatefulSet q failed error: pods "q-0" is forbidden: exceeded quota: compute, '
        "requested: requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=1, limited: requests.nvidia.com/gpu=1")
    assert gone(api, "pods", NS, "q-0")()

    api.patch("resourcequotas", NS, "compute", {"spec": {"hard": {"requests.nvidia.com/gpu": "2"}}})
    await wait_for(lambda: api.get("pods", NS, "q-0"), what="q-0 created once the quota allows it")
    # A finished pod holds no quota: the holder's GPU is free again for a new pod.
    api.patch("resourcequotas", NS, "compute", {"spec": {"hard": {"requests.nvidia.com/gpu": "1"}}})
    api.delete("pods", NS, "holder")
    await wait_for(gone(api, "pods", NS, "holder"), what="holder gone")
    old_uid = api.get("pods", NS, "q-0")["metadata"]["uid"]
    api.delete("pods", NS, "q-0")
    await wait_for(lambda: not gone(api, "pods", NS, "q-0")()
                   and api.get("pods", NS, "q-0")["metadata"]["uid"] != old_uid,
                   what="q-0 re-created within the quota")


async def test_job_pods_refused_by_a_resource_quota(api):
    """kube-apiserver's quota admission for the Job controller's pod creates: each refused create
    records kube-controller-manager's Warning Event FailedCreate on the Job ('Error creating: pods
    "<job>-<index>-xxxxx" is forbidden: exceeded quota: ...', controller_utils.go createPods), no pod
    exists and the Job's status counts none active; raising the quota lets the next try create them."""
    api.create("resourcequotas", {"apiVersion": "v1", "kind": "ResourceQuota",
                                  "metadata": {"name": "compute", "namespace": NS},
                                  "spec": {"hard": {"requests.cpu": "3"}}})
    api.create("pods", pod("holder", requests={"cpu": "2"}))
    body = job("jq", {}, completions=2, parallelism=2, completionMode="Indexed")
    body["spec"]["template"]["spec"]["containers"] = [container(requests={"cpu": "2"})]
    api.create("jobs.batch", body)
    uid = api.get("jobs.batch", NS, "jq")["metadata"]["uid"]

    def failed_creates():
        return api.list("events", NS, field_selector="involvedObject.kind=Job,involvedObject.name=jq,"
                                                     "reason=FailedCreate")["items"]
    events = await wait_for(lambda: len(failed_creates()) >= 2 and failed_creates(),
                            what="the refusals recorded and retried")
    for event in events:
        assert (event["type"], event["involvedObject"]["uid"], event["source"]["component"]) == (
            "Warning", uid, "job-controller")
        assert event["message"].startswith('Error creating: pods "jq-0-') or \
            event["message"].startswith('(combined from similar events): Error creating: pods "jq-0-')
        assert event["message"].endswith('" is forbidden: exceeded quota: compute, requested: requests.cpu=2, '
                                         "used: requests.cpu=2, limited: requests.cpu=3")
    assert not pods_of(api, "job-name=jq")
    assert not api.get("jobs.batch", NS, "jq").get("status", {}).get("active")

    api.patch("resourcequotas", NS, "compute", {"spec": {"hard": {"requests.cpu": "6"}}})
    await wait_for(lambda: len(pods_of(api, "job-name=jq")) == 2, what="both pods created once the quota allows")


def test_a_pod_create_over_a_resource_quota_is_forbidden(api):
    """A pod created directly (or by server-side apply) that a quota has no room for is refused
    403 with kube-apiserver's message; a quota with scopes, and a pod that fits, are not."""
    api.create("resourcequotas", {"apiVersion": "v1", "kind": "ResourceQuota",
                                  "metadata": {"name": "compute", "namespace": NS},
                                  "spec": {"hard": {"requests.cpu": "3", "pods": "5"}}})
    api.create("pods", pod("holder", requests={"cpu": "2"}))
    with pytest.raises(ApiError) as refused:
        api.create("pods", pod("big", requests={"cpu": "2"}))
    assert (refused.value.code, refused.value.reason, refused.value.message) == (
        403, "Forbidden", 'pods "big" is forbidden: exceeded quota: compute, requested: requests.cpu=2, '
                          "used: requests.cpu=2, limited: requests.cpu=3")
    with pytest.raises(ApiError) as applied:
        api.patch("pods", NS, "big", pod("big", requests={"cpu": "2"}), patch_type="apply", field_manager="t")
    assert applied.value.code == 403 and applied.value.message == refused.value.message
    assert gone(api, "pods", NS, "big")()
    api.create("pods", pod("small", requests={"cpu": "1"}))


async def test_service_type_change_clears_what_the_old_type_allocated(api):
    """kube-apiserver's dropTypeDependentFields: an update to ClusterIP that leaves the allocated
    nodePort (and externalTrafficPolicy) as they were clears them, where they would be refused;
    the load balancer's address goes with the LoadBalancer type; one that sets a nodePort on a
    ClusterIP Service is refused."""
    api.create("services", service("t", {"app": "x"}, "LoadBalancer", externalTrafficPolicy="Local"))
    lb = await wait_for(lambda: (api.get("services", NS, "t").get("status") or {}).get(
        "loadBalancer", {}).get("ingress") and api.get("services", NS, "t"))
    assert lb["spec"]["ports"][0]["nodePort"] and lb["spec"]["externalTrafficPolicy"] == "Local"
    assert any(m.get("manager") == "cloud-controller-manager" and m.get("subresource") == "status"
               for m in lb["metadata"].get("managedFields") or [])
    as_node_port = dict(lb, spec=dict(lb["spec"], type="NodePort"))
    np = api.update("services", as_node_port, namespace=NS)
    assert np["spec"]["ports"][0]["nodePort"] == lb["spec"]["ports"][0]["nodePort"]
    assert np["spec"]["externalTrafficPolicy"] == "Local" and np["status"]["loadBalancer"] == {}
    cluster_ip = api.update("services", dict(np, spec=dict(np["spec"], type="ClusterIP")), namespace=NS)
    assert "nodePort" not in cluster_ip["spec"]["ports"][0]
    assert "externalTrafficPolicy" not in cluster_ip["spec"]
    back = api.update("services", dict(cluster_ip, spec=dict(cluster_ip["spec"], type="NodePort")), namespace=NS)
    assert 30000 <= back["spec"]["ports"][0]["nodePort"] <= 32767
    assert back["spec"]["externalTrafficPolicy"] == "Cluster"  # defaulted
    forced = copy.deepcopy(back)
    forced["spec"]["type"] = "ClusterIP"
    forced["spec"]["ports"][0]["nodePort"] = 30999  # changed: not cleared, refused
    with pytest.raises(ApiError) as err:
        api.update("services", forced, namespace=NS)
    assert err.value.code == 422 and "may not be used when `type` is 'ClusterIP'" in str(err.value)
