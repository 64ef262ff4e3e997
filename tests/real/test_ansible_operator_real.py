"""The real ansible-operator on the real control plane (issue 26.3): the binary built from
ansible-operator-plugins v1.39.0 (`make operator-build`), run as the image runs it
(hack/ansible_operator/run.py: the image's HOME, ansible-core 2.18 and ansible-runner 2.4 of
.venv-image, our watches.yaml) with the token of its own ServiceAccount bound by config/rbac,
not the admin: what the shipped RBAC does not grant fails here.

A standalone DevServer (tests/e2e/test_devserver_e2e.py's simplest case) goes to Ready with its
StatefulSet, Services and home volume, kwok runs its pod; its deletion runs the finalizer
(watches.yaml torchdev.io/devserver-usage), which closes its reservation's UsageRecord
(endReason Deleted), and then the DevServer is gone.
"""
from __future__ import annotations

import pathlib
import subprocess
import uuid

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client import ApiException

from kubesim.testing import wait_for as poll

from hack.ansible_operator.run import BIN, NAMESPACE, SERVICE_ACCOUNT, AnsibleOperator, identity_objects

ROOT = pathlib.Path(__file__).resolve().parents[2]
GROUP, VERSION = "torchdev.io", "v1alpha1"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE2eTestKeyForTorchdevEndToEndxxxxxxxxxxxxx e2e@test"
USAGE_FINALIZER = "torchdev.io/devserver-usage"

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def wait_for(predicate, timeout: float, what: str, operator: AnsibleOperator | None = None, detail=None):
    """kubesim.testing.wait_for (its value; API errors count as not yet), failing with `detail()`
    (what was seen) and the operator's log."""
    try:
        return poll(predicate, timeout, interval=0.5, message=what)
    except TimeoutError as err:
        pytest.fail(str(err) + ("\n--- seen ---\n%s" % detail() if detail else "")
                    + ("\n--- operator log ---\n" + operator.log_tail() if operator else ""))


def running_operator(admin_kubeconfig, workdir):
    """The real ansible-operator for a test module (fixtures: this module's and test_kueue_real's)."""
    assert BIN.is_file(), "%s is not built: run `make operator-build`" % BIN
    with AnsibleOperator(admin_kubeconfig, workdir) as op:
        yield op


HOME_CLASS = "gp3"  # roles/devserver/defaults: devserver_defaults.homeStorageClassName


def _static_volumes(api, core, count: int = 8) -> None:
    """StorageClass gp3 and `count` available PersistentVolumes of it: the control plane has no
    volume provisioner, so kube-controller-manager's PV controller binds home claims to these
    (static provisioning)."""
    sc = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": HOME_CLASS},
          "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "Immediate",
          "allowVolumeExpansion": True}
    try:
        client.StorageV1Api(api).create_storage_class(sc)
    except ApiException as err:
        if err.status != 409:
            raise
    for _ in range(count):
        core.create_persistent_volume({
            "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"generateName": "static-"},
            "spec": {"capacity": {"storage": "1Ti"}, "accessModes": ["ReadWriteOnce"],
                     "storageClassName": HOME_CLASS, "persistentVolumeReclaimPolicy": "Retain",
                     "hostPath": {"path": "/var/lib/torchdev-test-volume"}}})


@pytest.fixture(scope="module")
def kube(real_cluster):
    """An admin client; the CRDs installed (as `make install`) and the sample flavors created."""
    kubeconfig = str(real_cluster.kubeconfig)
    crds = subprocess.run([str(ROOT / ".venv" / "bin" / "kubectl"), "kustomize", str(ROOT / "config" / "crd")],
                          check=True, capture_output=True, text=True).stdout
    subprocess.run([str(ROOT / ".venv" / "bin" / "kubectl"), "--kubeconfig", kubeconfig, "apply", "--server-side",
                    "--force-conflicts", "-f", "-"], input=crds, check=True, capture_output=True, text=True)
    api = config.new_client_from_config(config_file=kubeconfig)
    custom = client.CustomObjectsApi(api)
    ext = client.ApiextensionsV1Api(api)
    wait_for(lambda: all(any(c.type == "Established" and c.status == "True" for c in (crd.status.conditions or []))
                         for crd in ext.list_custom_resource_definition().items if crd.spec.group == GROUP),
             120, "the torchdev CRDs Established")
    for f in sorted((ROOT / "config" / "samples").glob("*devserverflavor*.yaml")):
        body = yaml.safe_load(f.read_text())
        try:
            custom.create_cluster_custom_object(GROUP, VERSION, "devserverflavors", body)
        except ApiException as err:
            if err.status != 409:
                raise
    core = client.CoreV1Api(api)
    _static_volumes(api, core)
    return {"core": core, "apps": client.AppsV1Api(api), "custom": custom,
            "auth": client.AuthorizationV1Api(api), "kubeconfig": kubeconfig}


@pytest.fixture(scope="module")
def operator(real_cluster, kube, tmp_path_factory):
    yield from running_operator(real_cluster.kubeconfig, tmp_path_factory.mktemp("ansible-operator"))


def get_ds(kube, ns, name):
    return kube["custom"].get_namespaced_custom_object(GROUP, VERSION, ns, "devservers", name)


def condition(obj, ctype):
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == ctype), {})


def test_operator_runs_as_its_own_service_account_not_admin(real_cluster, operator):
    """The operator's kubeconfig holds a token of torchdev-system/torchdev-controller-manager only,
    and that identity is what config/rbac grants: e.g. it may not create a ClusterRoleBinding."""
    cfg = yaml.safe_load(operator.kubeconfig.read_text())
    user = cfg["users"][0]["user"]
    assert set(user) == {"token"}, user
    api = config.new_client_from_config(config_file=str(operator.kubeconfig))
    who = client.AuthenticationV1Api(api).create_self_subject_review(  # who the API server says we are
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    assert who.status.user_info.username == "system:serviceaccount:%s:%s" % (NAMESPACE, SERVICE_ACCOUNT)
    assert "system:masters" not in (who.status.user_info.groups or [])
    access = client.AuthorizationV1Api(api)

    def can(verb, group, resource):
        return access.create_self_subject_access_review({
            "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {"verb": verb, "group": group, "resource": resource}}}).status.allowed

    assert can("watch", GROUP, "devservers") and can("create", "apps", "statefulsets")
    assert not can("create", "rbac.authorization.k8s.io", "clusterrolebindings")
    assert not can("delete", "", "nodes")
    kinds = {o["kind"] for o in identity_objects()}
    assert {"ServiceAccount", "ClusterRole", "ClusterRoleBinding"} <= kinds


def seen(kube, ns):
    """What a failed wait shows: the namespace's DevServers' status, pods, claims and Events."""
    out = []
    for ds in kube["custom"].list_namespaced_custom_object(GROUP, VERSION, ns, "devservers")["items"]:
        out.append("DevServer %s: %s" % (ds["metadata"]["name"], yaml.safe_dump(ds.get("status") or {})))
    for pod in kube["core"].list_namespaced_pod(ns).items:
        out.append("pod %s: %s on %s, %s" % (pod.metadata.name, pod.status.phase, pod.spec.node_name,
                                              [(c.type, c.status, c.reason) for c in pod.status.conditions or []]))
    for pvc in kube["core"].list_namespaced_persistent_volume_claim(ns).items:
        out.append("claim %s: %s" % (pvc.metadata.name, pvc.status.phase))
    for ev in kube["core"].list_namespaced_event(ns).items:
        out.append("event %s %s/%s %s: %s" % (ev.type, ev.involved_object.kind, ev.involved_object.name,
                                               ev.reason, ev.message))
    return "\n".join(out)


# The wait's own limits (300 s to Ready and the rest) stay under pytest's, so a failure shows what
# was seen and the operator's log rather than pytest-timeout's thread dump.
@pytest.mark.timeout(900)
def test_devserver_to_ready_then_deleted_through_its_finalizer(kube, operator):
    ns = "dev-real-%s" % uuid.uuid4().hex[:6]
    kube["core"].create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    name = "alpha"
    kube["custom"].create_namespaced_custom_object(GROUP, VERSION, ns, "devservers", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "DevServer", "metadata": {"name": name},
        "spec": {"owner": "e2e@example.com", "flavor": "cpu-small", "sshPublicKeys": [KEY]}})

    def ready():
        obj = get_ds(kube, ns, name)
        ok = (condition(obj, "Ready").get("status") == "True"
              and obj["status"].get("observedGeneration") == obj["metadata"]["generation"])
        return obj if ok else None

    obj = wait_for(ready, 300, "DevServer %s/%s Ready" % (ns, name), operator, lambda: seen(kube, ns))
    st = obj["status"]
    assert st["phase"] == "Running" and st["readyReplicas"] == 1 and st["ready"] == "1/1", st
    assert condition(obj, "Degraded").get("status") == "False", st
    assert USAGE_FINALIZER in obj["metadata"]["finalizers"]
    uid = obj["metadata"]["uid"]
    sts = kube["apps"].read_namespaced_stateful_set(name, ns)
    assert sts.spec.replicas == 1 and [r.uid for r in sts.metadata.owner_references] == [uid]
    for svc in (name, f"{name}-ssh"):
        assert [r.uid for r in kube["core"].read_namespaced_service(svc, ns).metadata.owner_references] == [uid]
    pod = kube["core"].read_namespaced_pod(f"{name}-0", ns)
    assert pod.status.phase == "Running" and pod.spec.node_name
    pvc = kube["core"].read_namespaced_persistent_volume_claim(f"home-{name}-0", ns)
    assert not pvc.metadata.owner_references  # the home volume outlives the DevServer

    def records():
        return kube["custom"].list_namespaced_custom_object(GROUP, VERSION, ns, "usagerecords",
                                                            label_selector="torchdev.io/devserver=%s" % name)["items"]

    opened = wait_for(records, 60, "the reservation's open UsageRecord", operator)
    assert [r for r in opened if not r["spec"].get("endedAt")], opened

    kube["custom"].delete_namespaced_custom_object(GROUP, VERSION, ns, "devservers", name)
    closed = wait_for(lambda: [r for r in records() if r["spec"].get("endedAt")], 180,
                      "the finalizer's closed UsageRecord", operator)
    assert [r["spec"]["endReason"] for r in closed] == ["Deleted"], closed

    wait_for(lambda: not kube["custom"].list_namespaced_custom_object(
        GROUP, VERSION, ns, "devservers", field_selector="metadata.name=%s" % name)["items"], 120,
        "DevServer %s/%s gone (its finalizer removed)" % (ns, name), operator)
    # the home volume stays (user data is never deleted without an explicit request)
    assert kube["core"].read_namespaced_persistent_volume_claim(f"home-{name}-0", ns).metadata.name
