"""End to end: kubesim + the local runtime + the real roles.

One simulator and one operator runtime per module (fixtures in conftest.py); each
test works in its own namespace. Nothing is mocked: the roles run through ansible-runner against
the simulator over HTTP, and the simulator's controllers schedule and start
the pods.
"""
from __future__ import annotations

import uuid
from datetime import datetime, timezone

import pytest

from _e2e_helpers import (GROUP, ROOT, VERSION, assert_unchanged_reconcile_writes_nothing, condition, devserver, get_ds, load, wait_degraded, wait_ready,
                          warning_events)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def stamp(value):
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)


def pod(kube, ns, name):
    return kube["core"].read_namespaced_pod(f"{name}-0", ns)


def test_create_to_ready(sim, kube, runtime, ns):
    kube["custom"].create_namespaced_custom_object(GROUP, VERSION, ns, "devservers",
                                                   devserver("alpha"))
    obj = wait_ready(sim, kube, ns, "alpha")
    st = obj["status"]
    assert st["phase"] == "Running"
    assert st["readyReplicas"] == 1 and st["ready"] == "1/1"
    assert st["sshEndpoint"].startswith(f"alpha-ssh.{ns}.svc")
    assert condition(obj, "Degraded")["status"] == "False"

    uid = obj["metadata"]["uid"]
    sts = kube["apps"].read_namespaced_stateful_set("alpha", ns)
    assert sts.spec.replicas == 1
    assert [r.uid for r in sts.metadata.owner_references] == [uid]
    for svc in ("alpha", "alpha-ssh"):
        s = kube["core"].read_namespaced_service(svc, ns)
        assert [r.uid for r in s.metadata.owner_references] == [uid]
    p = pod(kube, ns, "alpha")
    assert p.status.phase == "Running"
    # issue 13.2: the time to Ready by phase, from the pod's own stamps (not queued: queued 0)
    su = st["startup"]
    assert su["complete"] and su["startedAt"] == obj["metadata"]["creationTimestamp"] and su["phases"]["queued"] == 0
    stamps = {c.type: c.last_transition_time for c in p.status.conditions}
    created = stamp(su["startedAt"])
    assert su["phases"]["scheduled"] == int((stamps["PodScheduled"] - created).total_seconds())
    assert stamp(su["readyAt"]) == stamps["Ready"]
    assert sum(su["phases"].values()) == su["totalSeconds"] == int((stamps["Ready"] - created).total_seconds())
    assert p.spec.node_name.startswith("cpu-")  # the flavor's nodeSelector
    container = p.spec.containers[0]
    assert container.resources.requests["cpu"] == "2"
    mounts = {m.mount_path for m in container.volume_mounts}
    assert {"/home/dev", "/dev/shm"} <= mounts
    pvc = kube["core"].read_namespaced_persistent_volume_claim("home-alpha-0", ns)
    assert pvc.status.phase == "Bound" and pvc.spec.storage_class_name == "gp3"
    assert not pvc.metadata.owner_references  # the home volume outlives the DevServer


def test_reconcile_of_unchanged_devserver_writes_nothing(sim, kube, runtime, ns):
    kube["custom"].create_namespaced_custom_object(GROUP, VERSION, ns, "devservers",
                                                   devserver("idem"))
    wait_ready(sim, kube, ns, "idem")
    assert_unchanged_reconcile_writes_nothing(sim, runtime, ns, "idem")
    reads = sim.metrics()["by_verb"]
    assert reads.get("get", 0) > 0  # it did look
    record = [r for r in runtime.history("DevServer") if r.name == "idem"][-1]
    assert record.ok and record.ansible.get("changed", 0) == 0, record


def test_flavor_change_rolls_the_pod(sim, kube, runtime, ns):
    kube["custom"].create_namespaced_custom_object(GROUP, VERSION, ns, "devservers",
                                                   devserver("roll"))
    last_start = wait_ready(sim, kube, ns, "roll")["status"]["startup"]
    first = pod(kube, ns, "roll")
    patch = {"spec": {"flavor": "gpu-a10g-1"}}
    kube["custom"].patch_namespaced_custom_object(GROUP, VERSION, ns, "devservers", "roll", patch)

    def rolled():
        p = pod(kube, ns, "roll")
        return p if p.metadata.uid != first.metadata.uid and p.status.phase == "Running" else None
    second = sim.wait_for(rolled, 90, interval=0.1, message="the pod to be replaced")
    assert second.spec.node_name.startswith("g5-")
    assert second.spec.containers[0].resources.limits["nvidia.com/gpu"] == "1"
    obj = wait_ready(sim, kube, ns, "roll")
    assert obj["spec"]["flavor"] == "gpu-a10g-1"
    # the replaced pod is a new start: its time to Ready counts from that pod's creation
    # (a status written before the old pod went may still show the last start: wait for a
    # complete start other than that one)
    def new_start():
        o = get_ds(kube, ns, "roll")
        s = o["status"].get("startup") or {}
        return o if s.get("complete") and s.get("startedAt") != last_start["startedAt"] else None
    obj = sim.wait_for(new_start, 120, message="the new start's time to Ready")
    began = stamp(obj["status"]["startup"]["startedAt"])
    assert stamp(last_start["readyAt"]) <= began <= second.metadata.creation_timestamp
    ready = {c.type: c.last_transition_time for c in pod(kube, ns, "roll").status.conditions}["Ready"]
    assert stamp(obj["status"]["startup"]["readyAt"]) == ready


def test_delete_removes_children_and_keeps_home(sim, kube, runtime, ns):
    kube["custom"].create_namespaced_custom_object(GROUP, VERSION, ns, "devservers",
                                                   devserver("bye"))
    wait_ready(sim, kube, ns, "bye")
    kube["custom"].delete_namespaced_custom_object(GROUP, VERSION, ns, "devservers", "bye")

    def children_gone():
        sts = kube["apps"].list_namespaced_stateful_set(ns).items
        svcs = kube["core"].list_namespaced_service(ns).items
        pods = kube["core"].list_namespaced_pod(ns).items
        return not sts and not svcs and not pods
    sim.wait_for(children_gone, 60, message="the DevServer's children to be collected")
    pvc = kube["core"].read_namespaced_persistent_volume_claim("home-bye-0", ns)
    assert pvc.metadata.deletion_timestamp is None and pvc.status.phase == "Bound"


def _running(sim, kube, ns, name):
    """A server Ready and serving: its StatefulSet and pod uid as they are now."""
    wait_ready(sim, kube, ns, name)
    return kube["apps"].read_namespaced_stateful_set(name, ns), pod(kube, ns, name).metadata.uid


def _running_on_a_flavor_of_its_own(sim, kube, ns, name):
    """A copy of the sample cpu-small under a name of its own and a server of it, Ready:
    (the flavor's name, the flavor, _running's)."""
    small = load(ROOT / "config" / "samples" / "torchdev_v1alpha1_devserverflavor_cpu-small.yaml")
    small["metadata"]["name"] = flavor = f"{name}-{uuid.uuid4().hex[:5]}"
    kube["custom"].create_cluster_custom_object(GROUP, VERSION, "devserverflavors", small)
    kube["custom"].create_namespaced_custom_object(GROUP, VERSION, ns, "devservers", devserver(name, flavor=flavor))
    return flavor, small, _running(sim, kube, ns, name)


def _kept_running(sim, kube, runtime, ns, name, running, reason, field):
    """Degraded with ``reason`` (the message naming ``field``), phase and Ready true to the
    pods, the change not applied and nothing running touched."""
    sts_before, pod_uid = running
    obj = wait_degraded(sim, kube, ns, name, reason)
    assert field in condition(obj, "Degraded")["message"]
    assert obj["status"]["phase"] == "Running" and obj["status"]["ready"] == "1/1"
    assert condition(obj, "Ready")["status"] == "True"
    assert condition(obj, "Progressing")["reason"] == "SpecRejected"
    assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"]
    assert obj["status"]["sshEndpoint"].startswith(f"{name}-ssh.")  # from the last applied spec
    sim.wait_for(lambda: warning_events(kube, ns, name, reason), 60, message="a Warning Event")
    assert runtime.wait_idle(180)
    sts = kube["apps"].read_namespaced_stateful_set(name, ns)
    assert sts.metadata.resource_version == sts_before.metadata.resource_version  # not touched
    assert pod(kube, ns, name).metadata.uid == pod_uid


def _converged(sim, kube, ns, name):
    """Ready, and the fix applied: Degraded False, Progressing Reconciled (a flavor fix changes
    no generation of the server, so Ready alone says nothing)."""
    wait_ready(sim, kube, ns, name)

    def converged():
        obj = get_ds(kube, ns, name)
        return (condition(obj, "Degraded").get("status") == "False"
                and condition(obj, "Progressing").get("reason") == "Reconciled"
                and condition(obj, "Ready").get("status") == "True")
    sim.wait_for(converged, 90, interval=0.1, message=f"devserver {ns}/{name} converged")


@pytest.mark.parametrize("bad,reason,field", [
    ({"env": [{"name": "TORCHDEV_NAME", "value": "x"}]}, "InvalidSpec", "TORCHDEV_NAME"),
    ({"flavor": "no-such-flavor"}, "FlavorNotFound", "spec.flavor: DevServerFlavor no-such-flavor"),
])
def test_rejected_change_of_a_running_server_keeps_it_running(sim, kube, runtime, ns, bad, reason, field):
    """A spec or flavor problem on a running server: Degraded (reason, message naming the field),
    phase and Ready true to the pods, nothing running touched; fixed, it converges again."""
    name = "steady"
    kube["custom"].create_namespaced_custom_object(GROUP, VERSION, ns, "devservers", devserver(name))
    running = _running(sim, kube, ns, name)
    good_spec = get_ds(kube, ns, name)["spec"]

    kube["custom"].patch_namespaced_custom_object(GROUP, VERSION, ns, "devservers", name, {"spec": bad})
    _kept_running(sim, kube, runtime, ns, name, running, reason, field)

    fixed = {key: good_spec.get(key) for key in bad}
    kube["custom"].patch_namespaced_custom_object(GROUP, VERSION, ns, "devservers", name, {"spec": fixed})
    _converged(sim, kube, ns, name)


def test_flavor_made_invalid_under_a_running_server_keeps_it_running(sim, kube, runtime, ns):
    """The flavor of a running server is edited in place into one that cannot be applied (the
    flavor role's annotation brings the change): the server keeps running, Degraded InvalidSpec
    naming the flavor's field; the flavor fixed, it converges again."""
    flavor, small, running = _running_on_a_flavor_of_its_own(sim, kube, ns, "edit")

    kube["custom"].patch_cluster_custom_object(GROUP, VERSION, "devserverflavors", flavor, {"spec": {"shmSize": "16Gi"}})
    _kept_running(sim, kube, runtime, ns, "edit", running, "InvalidSpec",
                  f"DevServerFlavor {flavor} is invalid: shmSize (16Gi) exceeds the memory limit")

    kube["custom"].patch_cluster_custom_object(GROUP, VERSION, "devserverflavors", flavor,
                                               {"spec": {"shmSize": small["spec"]["shmSize"]}})
    _converged(sim, kube, ns, "edit")


def test_flavor_deleted_under_a_running_server_keeps_it_running(sim, kube, runtime, ns):
    """The flavor of a running server is deleted: at its next reconcile (a deleted flavor
    nudges no DevServer and there is no reconcile period, so the test queues it) the server
    keeps running, Degraded FlavorNotFound naming spec.flavor."""
    flavor, _, running = _running_on_a_flavor_of_its_own(sim, kube, ns, "orphan")

    kube["custom"].delete_cluster_custom_object(GROUP, VERSION, "devserverflavors", flavor)
    assert runtime.wait_idle(180)
    runtime.enqueue("DevServer", ns, "orphan")
    _kept_running(sim, kube, runtime, ns, "orphan", running, "FlavorNotFound",
                  f"spec.flavor: DevServerFlavor {flavor} does not exist")


def test_unknown_flavor_is_degraded_then_recovers(sim, kube, runtime, ns):
    flavor = f"late-{uuid.uuid4().hex[:5]}"
    kube["custom"].create_namespaced_custom_object(GROUP, VERSION, ns, "devservers",
                                                   devserver("lost", flavor=flavor))

    def degraded():
        obj = get_ds(kube, ns, "lost")
        c = condition(obj, "Degraded")
        return obj if c.get("status") == "True" and c.get("reason") == "FlavorNotFound" else None
    obj = sim.wait_for(degraded, 60, interval=0.1, message="Degraded/FlavorNotFound")
    assert flavor in condition(obj, "Degraded")["message"]
    assert condition(obj, "Ready")["status"] == "False"

    def warning_event():
        events = kube["core"].list_namespaced_event(
            ns, field_selector="involvedObject.name=lost").items
        return [e for e in events if e.type == "Warning" and e.reason == "FlavorNotFound"]
    event = sim.wait_for(warning_event, 30, message="a Warning Event")[0]
    assert flavor in event.message and event.involved_object.kind == "DevServer"
    # a problem with the spec is reported, not retried: the run succeeded
    assert runtime.wait_idle(180)
    lost = [r for r in runtime.history("DevServer") if r.name == "lost"]
    assert lost and all(r.ok for r in lost), lost
    assert not kube["apps"].list_namespaced_stateful_set(ns).items  # nothing half-made

    # the flavor appears: the flavor role nudges the DevServer, which becomes Ready
    small = load(ROOT / "config" / "samples" / "torchdev_v1alpha1_devserverflavor_cpu-small.yaml")
    small["metadata"]["name"] = flavor
    kube["custom"].create_cluster_custom_object(GROUP, VERSION, "devserverflavors", small)
    obj = wait_ready(sim, kube, ns, "lost")
    assert condition(obj, "Degraded")["status"] == "False"
