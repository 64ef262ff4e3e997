"""What a user can create in their namespace: RBAC (config/rbac/devserver_user_role.yaml, bound by
the devuser role) and then admission (config/admission, tests/security/_admission.py evaluates its
ValidatingAdmissionPolicies).  The user role keeps pods create and PVC create/patch for
`devctl infer`'s helper pods and job volumes; the policies admit those shapes only (issue 25.3:
a user could create a pod with 8 GPUs, a nodeName, the trainer's ServiceAccount or a Secret volume,
neither queued nor billed).  The helper shapes are devctl's own (devctl.infer.helper_pod,
ensure_volume's body), also as the API server's defaulting and mutating admission leave them
(ServiceAccount default, default tolerations) before the validating policies run."""
from __future__ import annotations

import copy
from typing import Any, Callable

import pytest

from _admission import Admission, Request
from _rbac import Access
from test_isolation import JANE, ADA, Authorizer, _user

from ansible_collections.torchdev.operator.plugins.module_utils import ephemeralaccelerationjob as eaj
from ansible_collections.torchdev.operator.plugins.module_utils.constants import EAJ_HELPER_IMAGE
from devctl import infer

JOB = "my-job"
OPERATOR = "system:serviceaccount:torchdev-system:torchdev-controller-manager"


@pytest.fixture(scope="module")
def admission(render_manifests):
    return Admission(render_manifests.kustomize("admission"))


@pytest.fixture(scope="module")
def authz(rendered, deployed):
    return Authorizer(list(deployed) + [o for case in (JANE, ADA) for o in rendered["devuser"][case]])


@pytest.fixture(scope="module")
def jane(rendered):
    user, namespace = _user(rendered, JANE)
    (ns,) = [o for o in rendered["devuser"][JANE] if o["kind"] == "Namespace"]
    return user, namespace, ns["metadata"]["labels"]


def helper(component: str = "transfer") -> dict[str, Any]:
    return infer.helper_pod(f"{component}-{JOB}-20260101000000", JOB, component, EAJ_HELPER_IMAGE,
                            ["sleep", str(infer.HELPER_LIFETIME)])


def defaulted(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod as the validating policies see it: after defaulting and the ServiceAccount,
    DefaultTolerationSeconds, Priority and LimitRanger admission plugins."""
    pod = copy.deepcopy(pod)
    spec = pod["spec"]
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("serviceAccount", spec["serviceAccountName"])
    spec.setdefault("tolerations", [
        {"key": k, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
        for k in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")])
    spec.update({"dnsPolicy": "ClusterFirst", "schedulerName": "default-scheduler", "priority": 0,
                 "preemptionPolicy": "PreemptLowerPriority"})
    for c in spec["containers"]:
        c.setdefault("terminationMessagePath", "/dev/termination-log")
        c.setdefault("resources", {}).setdefault("requests", {"cpu": "100m", "memory": "256Mi"})
    return pod


def volume(name: str = JOB) -> dict[str, Any]:
    """devctl infer create's volume (ensure_volume's body)."""
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": eaj.claim_name(name), "labels": infer._managed_by_devctl(eaj.labels(name, "artifacts")),
                         "annotations": {"torchdev.io/artifacts-ttl": "3600"}},
            "spec": eaj.claim_spec({"input": {"path": "/artifacts/x.jpg"}})}


def _container(pod):
    return pod["spec"]["containers"][0]


def _set(path: str, value) -> Callable[[dict], None]:
    def mutate(obj):
        *head, last = path.split(".")
        for key in head:
            obj = obj[int(key)] if isinstance(obj, list) else obj.setdefault(key, {})
        obj[last] = value
    return mutate


# (id, mutation of devctl's helper pod, the field the denial names; None: admitted)
POD_MATRIX: list[tuple[str, Callable[[dict], None] | None, str | None]] = [
    ("devctl transfer helper", None, None),
    ("devctl debug helper", lambda p: p.update(helper("debug")), None),
    ("8 GPUs", lambda p: _container(p)["resources"]["limits"].update({"nvidia.com/gpu": "8"}), "resources"),
    ("a GPU request only", lambda p: _container(p)["resources"]["requests"].update({"nvidia.com/gpu": "1"}),
     "resources"),
    ("EFA devices", lambda p: _container(p)["resources"]["limits"].update({"vpc.amazonaws.com/efa": "4"}), "resources"),
    ("a DRA resource claim", lambda p: _container(p)["resources"].update(claims=[{"name": "gpu"}]), "resources"),
    ("64 CPUs", lambda p: _container(p)["resources"]["limits"].update(cpu="64"), "resources.limits"),
    ("64Gi of memory", lambda p: _container(p)["resources"]["limits"].update(memory="64Gi"), "resources.limits"),
    ("no limits", lambda p: _container(p)["resources"].pop("limits"), "resources"),
    ("nodeName: skips the scheduler and taints", _set("spec.nodeName", "gpu-node-1"), "spec.nodeName"),
    ("nodeSelector", _set("spec.nodeSelector", {"nvidia.com/gpu.product": "H100"}), "spec.nodeName"),
    ("affinity", _set("spec.affinity", {"nodeAffinity": {}}), "spec.nodeName"),
    ("tolerates the GPU taint", lambda p: p["spec"].update(tolerations=[
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]), "spec.tolerations"),
    ("tolerates every taint", lambda p: p["spec"].update(tolerations=[{"operator": "Exists"}]), "spec.tolerations"),
    ("the trainer's ServiceAccount", lambda p: p["spec"].update(serviceAccountName="my-job-trainer",
                                                                 serviceAccount="my-job-trainer"),
     "spec.serviceAccountName"),
    ("the agent's ServiceAccount", lambda p: p["spec"].update(serviceAccountName="devserver-agent",
                                                               serviceAccount="devserver-agent"),
     "spec.serviceAccountName"),
    ("a mounted token", lambda p: p["spec"].update(automountServiceAccountToken=True), "spec.serviceAccountName"),
    ("a Secret volume", lambda p: p["spec"]["volumes"].append({"name": "s", "secret": {"secretName": "ssh-public-keys"}}),
     "spec.volumes"),
    ("a hostPath volume", lambda p: p["spec"]["volumes"].append({"name": "h", "hostPath": {"path": "/"}}),
     "spec.volumes"),
    ("a projected token", lambda p: p["spec"]["volumes"].append(
        {"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}), "spec.volumes"),
    ("a DevServer's home volume", lambda p: p["spec"]["volumes"][0]["persistentVolumeClaim"].update(
        claimName="home-my-server-0"), "spec.volumes"),
    ("another job's volume", lambda p: p["spec"]["volumes"][0]["persistentVolumeClaim"].update(
        claimName="artifacts-other"), "spec.volumes"),
    ("the PyTorch image", lambda p: _container(p).update(image="pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"),
     "image"),
    ("a second container", lambda p: p["spec"]["containers"].append(dict(_container(p), name="two")),
     "spec.containers"),
    ("an init container", lambda p: p["spec"].update(initContainers=[dict(_container(p), name="init")]),
     "spec.containers"),
    ("envFrom a Secret", lambda p: _container(p).update(envFrom=[{"secretRef": {"name": "s3-credentials"}}]), "env"),
    ("env from a Secret key", lambda p: _container(p).update(
        env=[{"name": "K", "valueFrom": {"secretKeyRef": {"name": "s3-credentials", "key": "k"}}}]), "env"),
    ("not a devctl pod", lambda p: p["metadata"]["labels"].pop("app.kubernetes.io/managed-by"), "metadata.labels"),
    ("no job label", lambda p: p["metadata"]["labels"].pop("torchdev.io/ephemeralaccelerationjob"),
     "metadata.labels"),
    ("a runtime class", _set("spec.runtimeClassName", "nvidia"), "spec.runtimeClassName"),
]


@pytest.mark.parametrize("case, mutate, denied", POD_MATRIX, ids=[c[0] for c in POD_MATRIX])
def test_what_a_user_may_create_as_a_pod(admission, authz, jane, case, mutate, denied):
    user, namespace, labels = jane
    assert authz.allowed(user, Access("", "pods", "create"), namespace)  # RBAC: yes; admission decides
    pod = helper()
    if mutate:
        mutate(pod)
    request = Request("CREATE", "pods", namespace, labels, user)
    for shape in (pod, defaulted(pod)):
        denials = admission.review(request, shape)
        if denied is None:
            assert denials == [], denials
        else:
            assert denials and any(denied in d for d in denials), denials
            assert not any("evaluation error" in d for d in denials), denials


def test_the_operator_and_the_cluster_are_not_confined(admission, jane):
    """The operator's pods (the inference pod with its GPU) and the StatefulSet/Job controllers'
    pods are not the users': the policies leave them to RBAC, Pod Security and the quota."""
    _, namespace, labels = jane
    gpu_pod = helper()
    _container(gpu_pod).update(image="ghcr.io/torchdev/torchdev-infer:1", resources={"limits": {"nvidia.com/gpu": "1"}})
    for who, groups in ((OPERATOR, ("system:serviceaccounts",)),
                        ("system:serviceaccount:kube-system:statefulset-controller", ("system:serviceaccounts",)),
                        ("system:serviceaccount:kube-system:job-controller", ("system:serviceaccounts",)),
                        ("system:kube-controller-manager", ()), ("admin", ("system:masters",))):
        assert admission.review(Request("CREATE", "pods", namespace, labels, who, groups), gpu_pod) == [], who
    # ... but a ServiceAccount of the user's namespace is (a token read from a user's pod)
    trainer = "system:serviceaccount:%s:my-job-trainer" % namespace
    assert admission.review(Request("CREATE", "pods", namespace, labels, trainer, ("system:serviceaccounts",)),
                            gpu_pod)
    # ... and so is a requester without any group (the policies' conditions do not fail on it)
    denials = admission.review(Request("CREATE", "pods", namespace, labels, "jane@example.com", None), gpu_pod)
    assert denials and not any("error" in d for d in denials), denials
    # ... and another namespace (no torchdev.io/user label) is not ours to police
    assert admission.review(Request("CREATE", "pods", "ml-platform", {"kubernetes.io/metadata.name": "ml-platform"},
                                    "someone"), gpu_pod) == []


VOLUME_MATRIX: list[tuple[str, str, Callable[[dict], None] | None, str | None]] = [
    ("devctl infer create's volume", "CREATE", None, None),
    ("detached from its job (devctl infer delete)", "UPDATE",
     lambda v: v["metadata"].update(annotations={"torchdev.io/artifacts-expire-at": "2026-01-01T00:00:00Z"}), None),
    ("bound, then patched", "UPDATE", _set("spec.volumeName", "pvc-1234"), None),
    ("any other name", "CREATE", lambda v: v["metadata"].update(name="scratch"), "metadata.name"),
    ("another job's name", "CREATE", lambda v: v["metadata"].update(name="artifacts-other"), "metadata.name"),
    ("a DevServer's home volume, patched", "UPDATE", lambda v: v["metadata"].update(name="home-my-server-0"),
     "metadata.name"),
    ("a chosen PersistentVolume", "CREATE", _set("spec.volumeName", "pvc-of-another-user"), "spec.volumeName"),
    ("a copy of another volume", "CREATE", _set("spec.dataSource", {"kind": "PersistentVolumeClaim", "name": "x"}),
     "spec.dataSource"),
    ("a snapshot", "CREATE", _set("spec.dataSourceRef", {"apiGroup": "snapshot.storage.k8s.io",
                                                         "kind": "VolumeSnapshot", "name": "x"}), "spec.dataSource"),
]


@pytest.mark.parametrize("case, operation, mutate, denied", VOLUME_MATRIX, ids=[c[0] for c in VOLUME_MATRIX])
def test_what_a_user_may_create_as_a_volume(admission, authz, jane, case, operation, mutate, denied):
    user, namespace, labels = jane
    assert authz.allowed(user, Access("", "persistentvolumeclaims", {"CREATE": "create", "UPDATE": "patch"}[operation]),
                         namespace)
    old = volume()
    claim = copy.deepcopy(old)
    if mutate:
        mutate(claim)
    denials = admission.review(Request(operation, "persistentvolumeclaims", namespace, labels, user), claim,
                               old if operation == "UPDATE" else None)
    if denied is None:
        assert denials == [], denials
    else:
        assert denials and any(denied in d for d in denials), denials


def test_a_user_has_no_pod_or_volume_rights_in_another_namespace(authz, rendered):
    user, _ = _user(rendered, JANE)
    _, other = _user(rendered, ADA)
    for access in (Access("", "pods", "create"), Access("", "persistentvolumeclaims", "create"),
                   Access("", "persistentvolumeclaims", "patch"), Access("", "pods", "delete")):
        assert not authz.allowed(user, access, other), access


def test_the_policies_cover_what_the_user_role_grants(admission, deployed):
    """Every write the users' role grants on pods and PVCs is one a policy of config/admission
    looks at, in every namespace the devuser role labels (torchdev.io/user)."""
    (role,) = [o for o in deployed if o["kind"] == "ClusterRole" and o["metadata"]["name"] == "torchdev-devserver-user"]
    granted = {(res, verb) for rule in role["rules"] if "" in rule.get("apiGroups", [])
               for res in rule.get("resources", []) for verb in rule.get("verbs", [])
               if res in ("pods", "persistentvolumeclaims") and verb in ("create", "update", "patch")}
    assert granted == {("pods", "create"), ("persistentvolumeclaims", "create"), ("persistentvolumeclaims", "patch")}
    operations = {"create": "CREATE", "update": "UPDATE", "patch": "UPDATE"}
    for resource, verb in granted:
        covering = [p for p in admission.policies.values()
                    if any(resource in r["resources"] and operations[verb] in r["operations"]
                           for r in p["spec"]["matchConstraints"]["resourceRules"])]
        assert covering, (resource, verb)
    assert all(b["spec"]["matchResources"]["namespaceSelector"] == {
        "matchExpressions": [{"key": "torchdev.io/user", "operator": "Exists"}]} for b in admission.bindings)
