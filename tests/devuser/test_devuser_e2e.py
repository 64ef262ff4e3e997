"""End to end without Kueue: kubesim + the local runtime + the real roles (watches.yaml).

Nothing is mocked: the devuser role runs through ansible-runner against the simulator over
HTTP.  Without Kueue no LocalQueue or ClusterQueue is rendered and the ResourceQuota caps
GPUs, CPU and memory.
"""
from __future__ import annotations

import base64

import pytest

from _devuser_helpers import (GROUP, KEY, VERSION, assert_reconcile_writes_nothing, condition, create_devuser,
                              get_devuser, gone, wait_ready)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
KUEUE = False


def _owner_uids(obj) -> list[str]:
    return [r.uid for r in obj.metadata.owner_references or []]


def test_create_to_ready(sim, kube, runtime):
    create_devuser(kube, "alice", quota={"gpus": 2, "cpu": "16", "memory": "64Gi"})
    obj = wait_ready(sim, kube, "alice")
    st = obj["status"]
    assert st["phase"] == "Active" and st["namespace"] == "dev-alice"
    assert st["kueue"] is False and "queueName" not in st and "clusterQueue" not in st
    assert st["sharedVolumeClaimName"] == "alice-shared-efs"
    assert condition(obj, "Degraded")["reason"] == "AsExpected"
    assert KEY.split()[1] not in str(st)  # no key material in the status
    uid = obj["metadata"]["uid"]

    core = kube["core"]
    ns = core.read_namespace("dev-alice")
    assert ns.metadata.labels["pod-security.kubernetes.io/enforce"] == "restricted"
    assert ns.metadata.labels["torchdev.io/user"] == "alice"
    assert not _owner_uids(ns)  # must outlive a Retain deletion
    rb = kube["rbac"].read_namespaced_role_binding("devserver-user", "dev-alice")
    assert rb.role_ref.name == "torchdev-devserver-user" and rb.role_ref.kind == "ClusterRole"
    assert [(s.kind, s.name) for s in rb.subjects] == [("User", "alice@example.com")]
    assert _owner_uids(rb) == [uid]
    hard = core.read_namespaced_resource_quota("torchdev-quota", "dev-alice").spec.hard
    assert hard["requests.nvidia.com/gpu"] == "2"  # no Kueue: the namespace quota caps GPUs
    assert hard["requests.cpu"] == "16" and hard["requests.memory"] == "64Gi"
    assert hard["count/devservers.torchdev.io"] == "10"
    limits = core.read_namespaced_limit_range("torchdev-limits", "dev-alice").spec.limits
    assert limits[0].max == {"cpu": "16", "memory": "64Gi"}
    policies = {p.metadata.name: p for p in kube["net"].list_namespaced_network_policy("dev-alice").items}
    assert set(policies) == {"default-deny", "allow-same-namespace", "allow-ssh"}
    assert [f.ip_block.cidr for f in policies["allow-ssh"].spec.ingress[0]._from] == ["10.0.0.0/8"]
    pvc = core.read_namespaced_persistent_volume_claim("alice-shared-efs", "dev-alice")
    assert pvc.spec.access_modes == ["ReadWriteMany"] and pvc.spec.storage_class_name == "efs-sc"
    assert not _owner_uids(pvc)
    secret = core.read_namespaced_secret("ssh-public-keys", "dev-alice")
    assert base64.b64decode(secret.data["authorized_keys"]).decode() == KEY + "\n"
    # Kueue is not served: nothing of it was rendered (nor could it be)
    assert gone(kube["custom"].list_cluster_custom_object, "kueue.x-k8s.io", "v1beta2", "clusterqueues")


def test_reconcile_of_unchanged_devuser_writes_nothing(sim, kube, runtime):
    create_devuser(kube, "idem")
    wait_ready(sim, kube, "idem")
    assert_reconcile_writes_nothing(sim, runtime, "idem")


def test_spec_change_and_drift_are_reconciled(sim, kube, runtime):
    create_devuser(kube, "bob")
    wait_ready(sim, kube, "bob")
    kube["custom"].patch_cluster_custom_object(GROUP, VERSION, "devusers", "bob", {
        "spec": {"quota": {"gpus": 4}, "network": {"sshAllowedCIDRs": []}, "sshPublicKeys": []}})
    wait_ready(sim, kube, "bob")
    core = kube["core"]
    assert core.read_namespaced_resource_quota("torchdev-quota", "dev-bob").spec.hard["requests.nvidia.com/gpu"] == "4"
    # no sources: no allow-ssh policy at all (an empty `from` would allow every source)
    assert {p.metadata.name for p in kube["net"].list_namespaced_network_policy("dev-bob").items} == {
        "default-deny", "allow-same-namespace"}
    assert core.read_namespaced_secret("ssh-public-keys", "dev-bob").data["authorized_keys"] == ""
    # A deleted policy is a dependent event: the DevUser is reconciled and the policy is back.
    kube["net"].delete_namespaced_network_policy("default-deny", "dev-bob")
    sim.wait_for(lambda: not gone(kube["net"].read_namespaced_network_policy, "default-deny", "dev-bob"), 120,
                 interval=0.2, message="default-deny to be re-created")


def test_injected_owner_reference_is_dropped(sim, kube, runtime):
    """ansible-operator's proxy would put an ownerReference to the (cluster-scoped) DevUser on
    objects created with a POST: the role removes it from everything that must survive Retain."""
    obj = create_devuser(kube, "carol")
    wait_ready(sim, kube, "carol")
    ref = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "DevUser", "name": "carol", "uid": obj["metadata"]["uid"]}
    core = kube["core"]
    cm = core.create_namespaced_config_map("dev-carol", {"apiVersion": "v1", "kind": "ConfigMap",
                                                         "metadata": {"name": "keep-me"}})
    other = {"apiVersion": "v1", "kind": "ConfigMap", "name": "keep-me", "uid": cm.metadata.uid}
    core.patch_namespace("dev-carol", {"metadata": {"ownerReferences": [ref]}})
    core.patch_namespaced_persistent_volume_claim("carol-shared-efs", "dev-carol",
                                                  {"metadata": {"ownerReferences": [other, ref]}})
    sim.wait_for(lambda: not _owner_uids(core.read_namespace("dev-carol")), 120, interval=0.2,
                 message="the namespace's ownerReference to be dropped")
    sim.wait_for(lambda: _owner_uids(core.read_namespaced_persistent_volume_claim("carol-shared-efs", "dev-carol"))
                 == [cm.metadata.uid], 120, interval=0.2, message="the claim's ownerReference to be dropped")


def test_invalid_cidr_is_degraded(sim, kube, runtime):
    create_devuser(kube, "dave", network={"sshAllowedCIDRs": ["10.1.2.3/8"]})

    def degraded():
        obj = get_devuser(kube, "dave")
        return obj if condition(obj, "Degraded").get("reason") == "InvalidSpec" else None
    obj = sim.wait_for(degraded, 120, interval=0.2, message="Degraded/InvalidSpec")
    assert obj["status"]["phase"] == "Failed"
    assert "sshAllowedCIDRs[0]" in condition(obj, "Degraded")["message"]
    assert condition(obj, "Ready")["reason"] == "ReconcileFailed"

    def warnings():  # cluster-scoped DevUser: its Events are in namespace default
        events = kube["core"].list_namespaced_event("default", field_selector="involvedObject.name=dave").items
        return [e for e in events if e.type == "Warning"]
    (event,) = sim.wait_for(warnings, 60, interval=0.2, message="a Warning Event")
    assert event.reason == "InvalidSpec" and "10.1.2.3/8" in event.message
    assert event.involved_object.kind == "DevUser"
    assert gone(kube["core"].read_namespace, "dev-dave")  # nothing was created


def _devserver(name: str, email: str) -> dict:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "DevServer", "metadata": {"name": name},
            "spec": {"owner": email, "flavor": "cpu-small", "sshKeySecretRef": {"name": "ssh-public-keys"}}}


def test_delete_with_retain_keeps_namespace_and_volumes(sim, kube, runtime):
    create_devuser(kube, "erin")
    wait_ready(sim, kube, "erin")
    custom = kube["custom"]
    custom.create_namespaced_custom_object(GROUP, VERSION, "dev-erin", "devservers", _devserver("box", "erin@example.com"))
    sim.wait_for(lambda: custom.get_namespaced_custom_object(GROUP, VERSION, "dev-erin", "devservers", "box")
                 .get("status", {}).get("phase") == "Running", 120, interval=0.2, message="the DevServer to run")
    # a server in a DevUser's namespace mounts the user's shared volume at /shared by default
    pod = kube["core"].read_namespaced_pod("box-0", "dev-erin")
    shared = {v.name: v.persistent_volume_claim.claim_name for v in pod.spec.volumes if v.persistent_volume_claim}
    assert shared["shared"] == "erin-shared-efs"
    assert any(m.mount_path == "/shared" for m in pod.spec.containers[0].volume_mounts)
    assert custom.get_namespaced_custom_object(GROUP, VERSION, "dev-erin", "devservers", "box")[
        "status"]["sharedVolumeClaimName"] == "erin-shared-efs"
    # ... unless it opts out
    custom.create_namespaced_custom_object(GROUP, VERSION, "dev-erin", "devservers",
                                           dict(_devserver("bare", "erin@example.com"),
                                                spec=dict(_devserver("bare", "erin@example.com")["spec"],
                                                          mountSharedVolume=False)))
    sim.wait_for(lambda: custom.get_namespaced_custom_object(GROUP, VERSION, "dev-erin", "devservers", "bare")
                 .get("status", {}).get("phase") == "Running", 120, interval=0.2, message="the second DevServer")
    pod = kube["core"].read_namespaced_pod("bare-0", "dev-erin")
    assert not [v for v in pod.spec.volumes if v.name == "shared"]

    custom.delete_cluster_custom_object(GROUP, VERSION, "devusers", "erin")
    sim.wait_for(lambda: gone(get_devuser, kube, "erin"), 120, interval=0.2, message="the DevUser to go")
    core = kube["core"]
    assert core.read_namespace("dev-erin").metadata.deletion_timestamp is None
    assert core.read_namespaced_persistent_volume_claim("erin-shared-efs", "dev-erin").metadata.deletion_timestamp is None
    assert core.read_namespaced_persistent_volume_claim("home-box-0", "dev-erin").metadata.deletion_timestamp is None
    assert core.read_namespaced_secret("ssh-public-keys", "dev-erin")
    assert gone(kube["rbac"].read_namespaced_role_binding, "devserver-user", "dev-erin")  # access removed
    ds = custom.get_namespaced_custom_object(GROUP, VERSION, "dev-erin", "devservers", "box")
    assert ds["spec"]["suspend"] is True
    sim.wait_for(lambda: not core.list_namespaced_pod("dev-erin").items, 120, interval=0.2,
                 message="the suspended server's pod to go")
    # the garbage collector had nothing of the retained objects to collect
    assert not _owner_uids(core.read_namespace("dev-erin"))


def test_delete_with_delete_removes_the_namespace(sim, kube, runtime):
    create_devuser(kube, "frank", deletionPolicy="Delete")
    wait_ready(sim, kube, "frank")
    kube["custom"].delete_cluster_custom_object(GROUP, VERSION, "devusers", "frank")
    sim.wait_for(lambda: gone(kube["core"].read_namespace, "dev-frank"), 120, interval=0.2,
                 message="dev-frank to be deleted")
    sim.wait_for(lambda: gone(get_devuser, kube, "frank"), 120, interval=0.2, message="the DevUser to go")
    runs = [r for r in runtime.history("DevUser") if r.name == "frank"]
    assert [r.ok for r in runs if r.finalizer_run] == [True], runs


def test_check_mode_of_a_settled_devuser_changes_nothing(sim, kube, runtime, tmp_path):
    """playbooks/devuser.yml in check mode, with the extra vars ansible-operator passes, on a
    settled DevUser: not changed, and not a single write request."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from _devuser_helpers import ROOT

    create_devuser(kube, "gus")
    obj = wait_ready(sim, kube, "gus")
    assert runtime.wait_idle(180)
    extra = {"ansible_operator_meta": {"name": "gus", "namespace": ""}, "_torchdev_io_devuser": obj,
             "_torchdev_io_devuser_spec": obj["spec"]}
    (tmp_path / "vars.json").write_text(json.dumps(extra))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), K8S_AUTH_KUBECONFIG=sim.kubeconfig,
               ANSIBLE_NOCOLOR="1")
    sim.reset_metrics()
    proc = subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "--check", "-e",
                           f"@{tmp_path / 'vars.json'}", str(ROOT / "playbooks" / "devuser.yml")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "changed=0" in proc.stdout and "failed=0" in proc.stdout, proc.stdout[-2000:]
    assert KEY.split()[1] not in proc.stdout
    assert sim.writes() == 0, [r for r in sim.requests() if r["verb"] not in ("get", "list", "watch")]


def test_check_mode_of_a_new_devuser_writes_nothing(sim, kube, runtime, tmp_path):
    """Check mode on a DevUser whose objects do not exist yet (the object itself is not created,
    so the runtime leaves it alone): it would change things, and it writes nothing."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from _devuser_helpers import ROOT, devuser

    obj = devuser("hal")
    extra = {"ansible_operator_meta": {"name": "hal", "namespace": ""}, "_torchdev_io_devuser": obj,
             "_torchdev_io_devuser_spec": obj["spec"]}
    (tmp_path / "vars.json").write_text(json.dumps(extra))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), K8S_AUTH_KUBECONFIG=sim.kubeconfig,
               ANSIBLE_NOCOLOR="1")
    assert runtime.wait_idle(180)
    sim.reset_metrics()
    proc = subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "--check", "-e",
                           f"@{tmp_path / 'vars.json'}", str(ROOT / "playbooks" / "devuser.yml")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "changed=0" not in proc.stdout, proc.stdout[-2000:]
    writes = [r for r in sim.requests() if r.get("verb") not in ("get", "list", "watch")]
    assert gone(kube["core"].read_namespace, "dev-hal"), writes


# --- a namespace dev-<name> that torchdev did not create (docs/api.md "DevUser") ----------

def _foreign_namespace(kube, name: str) -> None:
    """Someone's namespace dev-<name> with a claim and a DevServer in it, made before the DevUser."""
    core = kube["core"]
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace",
                           "metadata": {"name": f"dev-{name}", "labels": {"team": "theirs"}}})
    core.create_namespaced_persistent_volume_claim(f"dev-{name}", {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "their-data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
    kube["custom"].create_namespaced_custom_object(GROUP, VERSION, f"dev-{name}", "devservers",
                                                   _devserver("theirs", "them@example.com"))


def _warnings(kube, name: str, reason: str) -> list:
    events = kube["core"].list_namespaced_event("default").items
    return [e for e in events if e.involved_object.name == name and e.reason == reason and e.type == "Warning"]


def _untouched(kube, name: str) -> None:
    core = kube["core"]
    ns = core.read_namespace(f"dev-{name}")
    assert ns.metadata.deletion_timestamp is None
    assert ns.metadata.labels.get("team") == "theirs" and "torchdev.io/user" not in ns.metadata.labels
    assert "pod-security.kubernetes.io/enforce" not in ns.metadata.labels
    assert not (ns.metadata.annotations or {}).get("torchdev.io/created-by")
    assert not kube["net"].list_namespaced_network_policy(f"dev-{name}").items
    assert not core.list_namespaced_resource_quota(f"dev-{name}").items
    assert core.read_namespaced_persistent_volume_claim("their-data", f"dev-{name}").metadata.deletion_timestamp is None
    ds = kube["custom"].get_namespaced_custom_object(GROUP, VERSION, f"dev-{name}", "devservers", "theirs")
    assert not ds["spec"].get("suspend")


def test_existing_namespace_is_not_taken_over(sim, kube, runtime):
    _foreign_namespace(kube, "hank")
    create_devuser(kube, "hank", deletionPolicy="Delete")
    obj = sim.wait_for(lambda: (lambda o: o if condition(o, "Degraded").get("reason") == "NamespaceNotOwned" else None)(
        get_devuser(kube, "hank")), 120, interval=0.2, message="hank Degraded/NamespaceNotOwned")
    degraded = condition(obj, "Degraded")
    assert "dev-hank" in degraded["message"] and "spec.adoptNamespace: true" in degraded["message"]
    assert obj["status"]["phase"] == "Failed" and condition(obj, "Ready")["status"] == "False"
    sim.wait_for(lambda: _warnings(kube, "hank", "NamespaceNotOwned"), 60, message="a Warning Event")
    assert len(_warnings(kube, "hank", "NamespaceNotOwned")) == 1
    _untouched(kube, "hank")
    assert gone(kube["rbac"].read_namespaced_role_binding, "devserver-user", "dev-hank")

    # offboarding it, whatever the policy, leaves the namespace and everything in it alone
    kube["custom"].delete_cluster_custom_object(GROUP, VERSION, "devusers", "hank")
    sim.wait_for(lambda: gone(get_devuser, kube, "hank"), 120, interval=0.2, message="the DevUser to go")
    _untouched(kube, "hank")


def test_retain_offboarding_of_a_user_who_never_got_the_namespace_touches_nothing(sim, kube, runtime):
    _foreign_namespace(kube, "ivy")
    create_devuser(kube, "ivy")  # deletionPolicy Retain
    sim.wait_for(lambda: condition(get_devuser(kube, "ivy"), "Degraded").get("reason") == "NamespaceNotOwned",
                 120, interval=0.2, message="ivy Degraded/NamespaceNotOwned")
    kube["custom"].delete_cluster_custom_object(GROUP, VERSION, "devusers", "ivy")
    sim.wait_for(lambda: gone(get_devuser, kube, "ivy"), 120, interval=0.2, message="the DevUser to go")
    _untouched(kube, "ivy")  # its DevServer was not suspended


def test_adopted_namespace_is_managed_but_never_deleted(sim, kube, runtime):
    _foreign_namespace(kube, "jo")
    create_devuser(kube, "jo", deletionPolicy="Delete", adoptNamespace=True)
    wait_ready(sim, kube, "jo")
    core = kube["core"]
    ns = core.read_namespace("dev-jo")
    assert ns.metadata.labels["torchdev.io/user"] == "jo"
    assert ns.metadata.labels["pod-security.kubernetes.io/enforce"] == "restricted"
    assert ns.metadata.annotations["torchdev.io/adopted-by"] == "devuser/jo"
    assert "torchdev.io/created-by" not in ns.metadata.annotations
    assert {p.metadata.name for p in kube["net"].list_namespaced_network_policy("dev-jo").items} >= {"default-deny"}

    kube["custom"].delete_cluster_custom_object(GROUP, VERSION, "devusers", "jo")
    sim.wait_for(lambda: gone(get_devuser, kube, "jo"), 120, interval=0.2, message="the DevUser to go")
    assert core.read_namespace("dev-jo").metadata.deletion_timestamp is None  # kept despite Delete
    assert core.read_namespaced_persistent_volume_claim("their-data", "dev-jo").metadata.deletion_timestamp is None
    assert core.read_namespaced_persistent_volume_claim("jo-shared-efs", "dev-jo").metadata.deletion_timestamp is None
    sim.wait_for(lambda: _warnings(kube, "jo", "NamespaceKept"), 60, message="a Warning Event")
    assert len(_warnings(kube, "jo", "NamespaceKept")) == 1
    ds = kube["custom"].get_namespaced_custom_object(GROUP, VERSION, "dev-jo", "devservers", "theirs")
    assert ds["spec"]["suspend"] is True  # as with Retain: the user's access is gone


def test_created_namespace_is_marked_and_deleted_with_delete(sim, kube, runtime):
    create_devuser(kube, "kim", deletionPolicy="Delete")
    wait_ready(sim, kube, "kim")
    assert kube["core"].read_namespace("dev-kim").metadata.annotations["torchdev.io/created-by"] == "devuser/kim"
    kube["custom"].delete_cluster_custom_object(GROUP, VERSION, "devusers", "kim")
    sim.wait_for(lambda: gone(kube["core"].read_namespace, "dev-kim"), 120, interval=0.2,
                 message="dev-kim to be deleted")
