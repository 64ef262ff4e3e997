"""End to end, distributed mode: kubesim + the local runtime + the real roles.

A 4-replica DevServer (worldSize 4, nprocsPerNode 1, gloo on the cpu-small flavor)
becomes Ready with a replicaStatus per replica; every object the role created is valid
Kubernetes 1.33; the pods carry the torch.distributed env (NODE_RANK from the pod-index
label through the downward API); an unchanged reconcile writes nothing; a crash-looping
replica makes the server Degraded/PodFailed naming it (and it recovers); deleting the
DevServer keeps the four home volumes.  A DevServer that wants more processes per node
than its flavor has GPUs ends Degraded/InsufficientGPUs with a Warning Event and nothing
created; one that sets a rendezvous variable itself is InvalidSpec naming it.
"""
from __future__ import annotations

import kubernetes_validate
import pytest

from _e2e_helpers import (GROUP, VERSION, assert_unchanged_reconcile_writes_nothing, condition, devserver, get_ds, new_namespace, wait_degraded, wait_ready,
                          warning_events)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

NAME, REPLICAS = "ddp", 4
SERVER_FIELDS = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields", "selfLink")


@pytest.fixture(scope="module")
def ddp(sim, kube, runtime):
    """The namespace of a Ready 4-replica distributed DevServer (shared by the tests below, in order)."""
    ns = new_namespace(kube)
    spec = {"mode": "distributed", "persistentHomeSize": "10Gi",
            "distributed": {"worldSize": REPLICAS, "nprocsPerNode": 1, "backend": "gloo"}}
    kube["custom"].create_namespaced_custom_object(GROUP, VERSION, ns, "devservers", devserver(NAME, **spec))
    wait_ready(sim, kube, ns, NAME)
    return ns


def _strip(obj: dict) -> dict:
    obj = dict(obj)
    obj.pop("status", None)
    obj["metadata"] = {k: v for k, v in obj["metadata"].items() if k not in SERVER_FIELDS}
    return obj


def test_reaches_ready_with_a_status_per_replica(sim, kube, ddp):
    ns = ddp
    st = get_ds(kube, ns, NAME)["status"]
    assert st["phase"] == "Running" and st["ready"] == "4/4" and st["replicas"] == REPLICAS
    assert st["rendezvousEndpoint"] == f"{NAME}-0.{NAME}.{ns}.svc.cluster.local:29500"
    replicas = st["replicaStatuses"]
    assert [r["index"] for r in replicas] == list(range(REPLICAS))
    for r in replicas:
        assert r["podName"] == f"{NAME}-{r['index']}" and r["phase"] == "Running" and r["ready"] is True
        assert r["nodeName"].startswith("cpu-")
    sts = kube["apps"].read_namespaced_stateful_set(NAME, ns)
    assert sts.spec.replicas == REPLICAS and sts.spec.pod_management_policy == "Parallel"
    assert sts.spec.persistent_volume_claim_retention_policy.when_scaled == "Retain"
    assert kube["core"].read_namespaced_service(NAME, ns).spec.publish_not_ready_addresses is True


def test_role_objects_are_valid_kubernetes(kube, ddp):
    ns = ddp
    api = kube["apps"].api_client
    objects = [kube["apps"].read_namespaced_stateful_set(NAME, ns)]
    objects += [kube["core"].read_namespaced_service(n, ns) for n in (NAME, f"{NAME}-ssh")]
    objects += [kube["core"].read_namespaced_config_map(n, ns) for n in (f"{NAME}-ssh", f"{NAME}-scripts")]
    for obj in objects:
        raw = _strip(api.sanitize_for_serialization(obj))
        raw.setdefault("apiVersion", "apps/v1" if raw.get("spec", {}).get("serviceName") else "v1")
        raw.setdefault("kind", type(obj).__name__.removeprefix("V1"))
        try:
            kubernetes_validate.validate(raw, "1.33.0", strict=True)
        except kubernetes_validate.ValidationError as exc:  # pragma: no cover - report nicely
            pytest.fail(f"{raw['kind']}/{raw['metadata']['name']} invalid: {exc}")
    scripts = kube["core"].read_namespaced_config_map(f"{NAME}-scripts", ns)
    assert sorted(scripts.data) == ["allreduce_check.py", "devrun", "gpu_check.py", "torchdev-agent"]


def test_pods_carry_the_rendezvous_env(kube, ddp):
    ns = ddp
    for i in range(REPLICAS):
        p = kube["core"].read_namespaced_pod(f"{NAME}-{i}", ns)
        assert p.metadata.labels["apps.kubernetes.io/pod-index"] == str(i)
        assert p.spec.hostname == f"{NAME}-{i}" and p.spec.subdomain == NAME
        env = {e.name: e for e in p.spec.containers[0].env}
        assert env["NODE_RANK"].value_from.field_ref.field_path == "metadata.labels['apps.kubernetes.io/pod-index']"
        assert env["MASTER_ADDR"].value == f"{NAME}-0.{NAME}.{ns}.svc.cluster.local"
        assert env["MASTER_PORT"].value == "29500"
        assert env["WORLD_SIZE"].value == "4" and env["NNODES"].value == "4" and env["NPROC_PER_NODE"].value == "1"
        assert env["TORCHDEV_BACKEND"].value == "gloo" and not any(n.startswith("NCCL_") for n in env)
        assert env["PATH"].value.startswith("/opt/torchdev/bin:")
        ports = {port.name: port.container_port for port in p.spec.containers[0].ports}
        assert ports["rdzv"] == 29500 and ports["nccl-10"] == 29510
        mounts = {m.mount_path: m.name for m in p.spec.containers[0].volume_mounts}
        assert mounts["/opt/torchdev/bin"] == "scripts" and mounts["/dev/shm"] == "shm"
        claim = {v.name: v for v in p.spec.volumes}["home"].persistent_volume_claim.claim_name
        assert claim == f"home-{NAME}-{i}"


def test_unchanged_reconcile_writes_nothing(sim, runtime, ddp):
    assert_unchanged_reconcile_writes_nothing(sim, runtime, ddp, NAME)


def test_failing_replica_is_degraded_then_recovers(sim, kube, runtime, ddp):
    ns, victim = ddp, f"{NAME}-2"
    # The simulated kubelet reads kubesim.io/fail-after from the pod at every step: the
    # container exits 1 at once after each (re)start -> CrashLoopBackOff.
    kube["core"].patch_namespaced_pod(victim, ns, {"metadata": {"annotations": {"kubesim.io/fail-after": "0"}}})

    def crashing():
        p = kube["core"].read_namespaced_pod(victim, ns)
        waiting = p.status.container_statuses[0].state.waiting
        return waiting is not None and waiting.reason == "CrashLoopBackOff"
    sim.wait_for(crashing, 30, interval=0.1, message="the replica to crash-loop")
    # A pod's status is not a dependent event of the DevServer and there is no reconcile
    # period: in a cluster the replica's lifecycle agent reports its restart to the
    # <name>-activity ConfigMap (a dependent); kubesim runs no agent, so the test nudges.
    runtime.enqueue("DevServer", ns, NAME)
    obj = wait_degraded(sim, kube, ns, NAME, "PodFailed")
    message = condition(obj, "Degraded")["message"]
    assert message.startswith(f"replica 2 (pod {victim}): CrashLoopBackOff, ") and "restart" in message
    assert condition(obj, "Ready")["status"] == "False"
    assert obj["status"]["replicaStatuses"][2]["ready"] is False

    kube["core"].patch_namespaced_pod(victim, ns, {"metadata": {"annotations": {"kubesim.io/fail-after": None}}})
    obj = wait_ready(sim, kube, ns, NAME, timeout=60)  # the server polls while not all replicas are ready
    assert condition(obj, "Degraded")["reason"] == "AsExpected"


def test_delete_keeps_every_home_volume(sim, kube, ddp):
    ns = ddp
    kube["custom"].delete_namespaced_custom_object(GROUP, VERSION, ns, "devservers", NAME)

    def children_gone():
        return not (kube["apps"].list_namespaced_stateful_set(ns).items or kube["core"].list_namespaced_pod(ns).items
                    or kube["core"].list_namespaced_config_map(ns, label_selector=f"torchdev.io/devserver={NAME}").items)
    sim.wait_for(children_gone, 60, message="the DevServer's children to be collected")
    for i in range(REPLICAS):
        pvc = kube["core"].read_namespaced_persistent_volume_claim(f"home-{NAME}-{i}", ns)
        assert pvc.metadata.deletion_timestamp is None and pvc.status.phase == "Bound"


def test_problems_are_reported_not_retried(sim, kube, runtime, ns):
    greedy = devserver("greedy", flavor="gpu-a10g-1", mode="distributed",
                       distributed={"worldSize": 4, "nprocsPerNode": 2, "backend": "nccl"})
    bossy = devserver("bossy", mode="distributed", distributed={"worldSize": 2, "backend": "gloo"},
                      env=[{"name": "MASTER_ADDR", "value": "10.0.0.1"}])
    for body in (greedy, bossy):
        kube["custom"].create_namespaced_custom_object(GROUP, VERSION, ns, "devservers", body)

    obj = wait_degraded(sim, kube, ns, "greedy", "InsufficientGPUs")
    message = condition(obj, "Degraded")["message"]
    assert "nprocsPerNode (2) exceeds the 1 GPU(s) per pod of flavor gpu-a10g-1" in message
    assert condition(obj, "Ready")["status"] == "False" and obj["status"]["phase"] == "Failed"
    event = sim.wait_for(lambda: warning_events(kube, ns, "greedy", "InsufficientGPUs"), 30,
                         message="a Warning Event")[0]
    assert "nprocsPerNode" in event.message and event.involved_object.kind == "DevServer"

    obj = wait_degraded(sim, kube, ns, "bossy", "InvalidSpec")
    assert "MASTER_ADDR is set by the operator in distributed mode" in condition(obj, "Degraded")["message"]

    assert runtime.wait_idle(180)
    runs = [r for r in runtime.history("DevServer") if r.name in ("greedy", "bossy")]
    assert runs and all(r.ok for r in runs), runs
    assert not kube["apps"].list_namespaced_stateful_set(ns).items  # nothing half-made
