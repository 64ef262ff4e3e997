"""The real control plane enforces what kubesim only stores (issue 26.1): ResourceQuota,
LimitRange, Pod Security and RBAC admission, the scheduler placing a Deployment's pod on a
fake (kwok) node where it becomes Running and Ready, graceful pod deletion, the
pvc-protection finalizer; and config/admission's ValidatingAdmissionPolicies refuse, as a
user bound to the users' ClusterRole, what tests/security/test_admission.py says they refuse.
"""
from __future__ import annotations

import copy
import json
import pathlib
import subprocess
import sys
import time
import uuid

import kubernetes
import pytest
import yaml

from devctl import infer
from ansible_collections.torchdev.operator.plugins.module_utils.constants import EAJ_HELPER_IMAGE

ROOT = pathlib.Path(__file__).resolve().parents[2]
USER = "jane@example.com"
JOB = "my-job"


def wait_for(predicate, timeout: float = 120, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def namespace(cp, labels: dict | None = None) -> str:
    name = f"real-{uuid.uuid4().hex[:6]}"
    code, body = cp.request("POST", "/api/v1/namespaces", {
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}})
    assert code == 201, body
    wait_for(lambda: cp.request("GET", f"/api/v1/namespaces/{name}/serviceaccounts/default")[0] == 200,
             what=f"the default ServiceAccount of {name}")
    return name


def pod(name: str = "p", **spec) -> dict:
    body = {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]}
    body.update(spec)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": body}


def test_resource_quota_refuses_a_pod_over_it(real_cluster):
    cp = real_cluster
    ns = namespace(cp)
    code, body = cp.request("POST", f"/api/v1/namespaces/{ns}/resourcequotas", {
        "apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q"},
        "spec": {"hard": {"requests.cpu": "1", "requests.nvidia.com/gpu": "0"}}})
    assert code == 201, body
    wait_for(lambda: (cp.request("GET", f"/api/v1/namespaces/{ns}/resourcequotas/q")[1]
                      .get("status", {}).get("hard")), what="the quota's status")
    over = pod(containers=[{"name": "main", "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": "2"}}}])
    code, body = cp.request("POST", f"/api/v1/namespaces/{ns}/pods", over)
    assert code == 403, body
    assert "exceeded quota: q" in body["message"] and "requests.cpu=2" in body["message"], body["message"]


def test_limit_range_defaults_apply(real_cluster):
    cp = real_cluster
    ns = namespace(cp)
    code, body = cp.request("POST", f"/api/v1/namespaces/{ns}/limitranges", {
        "apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "defaults"},
        "spec": {"limits": [{"type": "Container", "default": {"cpu": "500m", "memory": "512Mi"},
                             "defaultRequest": {"cpu": "250m", "memory": "256Mi"}}]}})
    assert code == 201, body
    code, body = cp.request("POST", f"/api/v1/namespaces/{ns}/pods?dryRun=All", pod())
    assert code == 201, body
    assert body["spec"]["containers"][0]["resources"] == {
        "limits": {"cpu": "500m", "memory": "512Mi"}, "requests": {"cpu": "250m", "memory": "256Mi"}}
    assert "LimitRanger plugin set" in body["metadata"]["annotations"]["kubernetes.io/limit-ranger"]


def test_pod_security_restricted_refuses_a_privileged_pod(real_cluster):
    cp = real_cluster
    ns = namespace(cp, {"pod-security.kubernetes.io/enforce": "restricted"})
    privileged = pod(containers=[{"name": "main", "image": "registry.k8s.io/pause:3.10",
                                  "securityContext": {"privileged": True}}])
    code, body = cp.request("POST", f"/api/v1/namespaces/{ns}/pods", privileged)
    assert code == 403, body
    assert 'violates PodSecurity "restricted:latest"' in body["message"], body["message"]
    assert "privileged" in body["message"]


def test_rbac_denies_an_unbound_user(real_cluster):
    cp = real_cluster
    ns = namespace(cp)
    api = kubernetes.config.new_client_from_config(config_file=str(cp.user_kubeconfig(USER)))
    with pytest.raises(kubernetes.client.ApiException) as ei:
        kubernetes.client.CoreV1Api(api).list_namespaced_pod(ns)
    assert ei.value.status == 403
    assert f'User "{USER}" cannot list resource "pods"' in json.loads(ei.value.body)["message"]


def test_deployment_pod_runs_on_a_fake_node_and_terminates_gracefully(real_cluster):
    cp = real_cluster
    ns = namespace(cp)
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"nodeSelector": {"torchdev.io/node-pool": "cpu"},
                                       "terminationGracePeriodSeconds": 30,
                                       "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                                                       "resources": {"requests": {"cpu": "1"}}}]}}}}
    code, body = cp.request("POST", f"/apis/apps/v1/namespaces/{ns}/deployments", deployment)
    assert code == 201, body

    def ready_pod():
        for p in cp.request("GET", f"/api/v1/namespaces/{ns}/pods")[1].get("items", []):
            conds = {c["type"]: c["status"] for c in p.get("status", {}).get("conditions", [])}
            if p["status"].get("phase") == "Running" and conds.get("Ready") == "True":
                return p
        return None

    running = wait_for(ready_pod, what="the Deployment's pod Running and Ready")
    node = running["spec"]["nodeName"]
    assert node.startswith("cpu-"), node  # the scheduler honoured the nodeSelector
    assert running["status"]["podIP"] and running["status"]["containerStatuses"][0]["ready"]
    wait_for(lambda: cp.request("GET", f"/apis/apps/v1/namespaces/{ns}/deployments/web")[1]
             .get("status", {}).get("availableReplicas") == 1, what="availableReplicas 1")

    # Graceful deletion: the API server answers with the pod marked for deletion (a
    # deletionTimestamp and its grace period), and the pod is gone only once the (fake)
    # kubelet confirms; the ReplicaSet replaces it.
    name = running["metadata"]["name"]
    code, body = cp.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{name}")
    assert code == 200, body
    assert body["kind"] == "Pod" and body["metadata"]["deletionTimestamp"], body
    assert body["metadata"]["deletionGracePeriodSeconds"] == 30
    wait_for(lambda: cp.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}")[0] == 404,
             what=f"pod {name} removed after its graceful termination")
    wait_for(lambda: (p := ready_pod()) and p["metadata"]["name"] != name, what="the replacement pod")


def test_pvc_gets_the_protection_finalizer(real_cluster):
    cp = real_cluster
    ns = namespace(cp)
    code, body = cp.request("POST", f"/api/v1/namespaces/{ns}/persistentvolumeclaims", {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "home"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
    assert code == 201, body
    assert body["metadata"]["finalizers"] == ["kubernetes.io/pvc-protection"]


# --- config/admission as a user bound to the users' ClusterRole ------------------------------

def _kustomize(directory: pathlib.Path) -> list[dict]:
    kubectl = pathlib.Path(sys.executable).parent / "kubectl"
    out = subprocess.run([str(kubectl), "kustomize", str(directory)], check=True, capture_output=True,
                         text=True).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def _apply(cp, obj: dict) -> None:
    group_version = obj["apiVersion"]
    plural = {"ValidatingAdmissionPolicy": "validatingadmissionpolicies",
              "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
              "ClusterRole": "clusterroles"}[obj["kind"]]
    code, body = cp.request(
        "PATCH", f"/apis/{group_version}/{plural}/{obj['metadata']['name']}?fieldManager=torchdev-tests&force=true",
        obj, content_type="application/apply-patch+yaml")
    assert code in (200, 201), body


def helper_pod() -> dict:
    """devctl infer's helper pod (tests/security/test_admission.py's helper()), as sent."""
    return infer.helper_pod(f"transfer-{JOB}-20260101000000", JOB, "transfer", EAJ_HELPER_IMAGE,
                            ["sleep", str(infer.HELPER_LIFETIME)])


def _container(p):
    return p["spec"]["containers"][0]


# (id, mutation of the helper pod, text the denial names; None: admitted): rows of
# tests/security/test_admission.py's POD_MATRIX.
POD_ROWS = [
    ("devctl transfer helper", None, None),
    ("8 GPUs", lambda p: _container(p)["resources"]["limits"].update({"nvidia.com/gpu": "8"}), "resources"),
    ("nodeName", lambda p: p["spec"].update(nodeName="gpu-node-1"), "spec.nodeName"),
    ("tolerates every taint", lambda p: p["spec"].update(tolerations=[{"operator": "Exists"}]),
     "spec.tolerations"),
    ("a Secret volume", lambda p: p["spec"]["volumes"].append({"name": "s", "secret": {"secretName": "x"}}),
     "spec.volumes"),
    ("a hostPath volume", lambda p: p["spec"]["volumes"].append({"name": "h", "hostPath": {"path": "/"}}),
     "spec.volumes"),
    ("the PyTorch image", lambda p: _container(p).update(image="pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"),
     "image"),
]


@pytest.fixture(scope="module")
def user_namespace(real_cluster):
    """A user namespace (torchdev.io/user) with the users' ClusterRole bound to USER, and
    config/admission's policies installed; returns (namespace, the user's CoreV1Api)."""
    cp = real_cluster
    (role,) = [d for d in yaml.safe_load_all((ROOT / "config/rbac/devserver_user_role.yaml").read_text())
               if d and d["metadata"]["name"] == "devserver-user"]
    _apply(cp, role)
    policies = _kustomize(ROOT / "config" / "admission")
    for obj in policies:
        _apply(cp, obj)
    ns = namespace(cp, {"torchdev.io/user": "jane"})
    code, body = cp.request("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "devserver-user"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role["metadata"]["name"]},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}]})
    assert code == 201, body
    api = kubernetes.client.CoreV1Api(
        kubernetes.config.new_client_from_config(config_file=str(cp.user_kubeconfig(USER))))
    # a policy is enforced once the API server has compiled it: wait until a denied row is denied
    bad = helper_pod()
    POD_ROWS[1][1](bad)

    def denied():
        try:
            api.create_namespaced_pod(ns, bad, dry_run="All")
        except kubernetes.client.ApiException as e:
            return e.status == 422 and "ValidatingAdmissionPolicy" in e.body
        return False
    wait_for(denied, what="config/admission's policies in force")
    return ns, api


@pytest.mark.parametrize("case,mutate,denied", POD_ROWS, ids=[r[0] for r in POD_ROWS])
def test_admission_policies_as_the_user(user_namespace, case, mutate, denied):
    ns, api = user_namespace
    obj = copy.deepcopy(helper_pod())
    if mutate:
        mutate(obj)
    if denied is None:
        created = api.create_namespaced_pod(ns, obj, dry_run="All")
        assert created.metadata.name == obj["metadata"]["name"]
        return
    with pytest.raises(kubernetes.client.ApiException) as ei:
        api.create_namespaced_pod(ns, obj, dry_run="All")
    message = json.loads(ei.value.body)["message"]
    # 422: a policy validation without a reason denies as Invalid (config/admission/user_pods.yaml)
    assert ei.value.status == 422 and "ValidatingAdmissionPolicy 'torchdev-user-pods'" in message, message
    assert denied in message, message


# --- kubesim's kubelet annotations on kwok's nodes (hack/cluster/kwok-kubesim-stages.yaml) ---

def test_a_job_pod_succeeds_after_kubesim_succeed_after(real_cluster):
    """The real Job controller completes a Job whose pod kwok ends with exit 0 after
    kubesim.io/succeed-after seconds, as kubesim's kubelet does."""
    cp = real_cluster
    ns = namespace(cp)
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "once"},
           "spec": {"backoffLimit": 0, "template": {
               "metadata": {"annotations": {"kubesim.io/succeed-after": "1"}},
               "spec": {"restartPolicy": "Never", "nodeSelector": {"torchdev.io/node-pool": "cpu"},
                        "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]}}}}
    code, body = cp.request("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", job)
    assert code == 201, body

    def complete():
        conds = cp.request("GET", f"/apis/batch/v1/namespaces/{ns}/jobs/once")[1].get("status", {}).get("conditions") or []
        return {c["type"] for c in conds if c["status"] == "True"} & {"Complete", "Failed"}
    assert wait_for(complete, what="the Job's Complete condition") == {"Complete"}
    (p,) = cp.request("GET", f"/api/v1/namespaces/{ns}/pods?labelSelector=job-name=once")[1]["items"]
    assert p["status"]["phase"] == "Succeeded"
    assert p["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0


def test_a_pod_fails_with_kubesim_exit_code_and_message(real_cluster):
    cp = real_cluster
    ns = namespace(cp)
    failing = pod("fails", restartPolicy="Never", nodeSelector={"torchdev.io/node-pool": "cpu"})
    failing["metadata"]["annotations"] = {"kubesim.io/fail-after": "0", "kubesim.io/exit-code": "3",
                                          "kubesim.io/termination-message": "CUDA error: out of memory"}
    code, body = cp.request("POST", f"/api/v1/namespaces/{ns}/pods", failing)
    assert code == 201, body
    done = wait_for(lambda: (p := cp.request("GET", f"/api/v1/namespaces/{ns}/pods/fails")[1])
                    ["status"].get("phase") == "Failed" and p, what="the pod Failed")
    term = done["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (term["exitCode"], term["reason"], term["message"]) == (3, "Error", "CUDA error: out of memory")


# --- the credentials hack/cluster mints -----------------------------------------------------------

def _whoami(kubeconfig) -> dict:
    api = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))
    review = kubernetes.client.AuthenticationV1Api(api).create_self_subject_review(
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    return review.status.user_info


def test_user_and_service_account_credentials(real_cluster):
    """user_kubeconfig: the user alone (no group but system:authenticated);
    service_account_kubeconfig: a bound token of that ServiceAccount."""
    cp = real_cluster
    user = _whoami(cp.user_kubeconfig(USER))
    assert (user.username, user.groups) == (USER, ["system:authenticated"])
    ns = namespace(cp)
    code, body = cp.request("POST", f"/api/v1/namespaces/{ns}/serviceaccounts", {
        "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "operator"}})
    assert code == 201, body
    sa = _whoami(cp.service_account_kubeconfig(ns, "operator"))
    assert sa.username == f"system:serviceaccount:{ns}:operator"
    assert set(sa.groups) == {"system:serviceaccounts", f"system:serviceaccounts:{ns}", "system:authenticated"}
