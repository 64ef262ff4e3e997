"""What the differential run against the real kube-apiserver 1.34 found (issue 26.6,
tests/real/test_differential_real.py), fixed in kubesim: each test states the real server's
answer to the same request (kubesim/DESIGN.md, "Found by the real control plane")."""
from __future__ import annotations

import base64

import pytest

from .conftest import WIDGET_CRD, WIDGET_GROUP, assert_status, widget

APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"


def causes(data) -> list[tuple]:
    return sorted({(c.get("reason"), c.get("field")) for c in (data.get("details") or {}).get("causes") or []})


def job(name: str, suspend: bool = True, restart: str | None = "Never") -> dict:
    spec = {"containers": [{"name": "m", "image": "busybox"}]}
    if restart:
        spec["restartPolicy"] = restart
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"suspend": suspend, "template": {"spec": spec}}}


def test_secret_string_data_is_written_into_data(http, ns):
    code, s = http.post(f"/api/v1/namespaces/{ns}/secrets",
                        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
                         "data": {"a": base64.b64encode(b"1").decode()},
                         "stringData": {"key": "value", "a": "2"}})
    assert code == 201, s
    assert "stringData" not in s
    assert s["data"] == {"a": base64.b64encode(b"2").decode(), "key": base64.b64encode(b"value").decode()}


@pytest.mark.parametrize("kind,path,field", [
    ("Secret", "secrets", "data"),
    ("ConfigMap", "configmaps", "data"),
])
def test_immutable_data_cannot_change(http, ns, kind, path, field):
    code, _ = http.post(f"/api/v1/namespaces/{ns}/{path}",
                        {"apiVersion": "v1", "kind": kind, "metadata": {"name": "im"}, "immutable": True,
                         "data": {"k": base64.b64encode(b"v").decode()}})
    assert code == 201
    code, data = http.patch(f"/api/v1/namespaces/{ns}/{path}/im",
                            {"data": {"k": base64.b64encode(b"w").decode()}}, MERGE)
    assert code == 422, data
    assert causes(data) == [("FieldValueForbidden", field)]
    code, data = http.patch(f"/api/v1/namespaces/{ns}/{path}/im", {"immutable": False}, MERGE)
    assert code == 422 and causes(data) == [("FieldValueForbidden", "immutable")], data
    code, data = http.patch(f"/api/v1/namespaces/{ns}/{path}/im", {"metadata": {"labels": {"a": "b"}}}, MERGE)
    assert code == 200, data


def test_role_binding_role_ref_is_immutable(http, ns):
    rb = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "rb"},
          "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
          "subjects": [{"kind": "User", "name": "jane", "apiGroup": "rbac.authorization.k8s.io"}]}
    path = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings"
    assert http.post(path, rb)[0] == 201
    code, data = http.patch(f"{path}/rb", {"roleRef": {"name": "edit"}}, MERGE)
    assert code == 422 and causes(data) == [("FieldValueInvalid", "roleRef")], data
    code, data = http.patch(f"{path}/rb", {"subjects": [{"kind": "User", "name": "joe",
                                                         "apiGroup": "rbac.authorization.k8s.io"}]}, MERGE)
    assert code == 200, data


def test_job_defaults_selector_and_labels(http, ns):
    code, j = http.post(f"/apis/batch/v1/namespaces/{ns}/jobs", job("j"))
    assert code == 201, j
    uid = j["metadata"]["uid"]
    want = {"batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": "j",
            "controller-uid": uid, "job-name": "j"}
    assert j["spec"]["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    assert j["spec"]["template"]["metadata"]["labels"] == want
    assert j["metadata"]["labels"] == want
    assert j["spec"]["manualSelector"] is False
    assert j["spec"]["podReplacementPolicy"] == "TerminatingOrFailed"


def test_job_template_is_immutable_even_suspended(http, ns):
    assert http.post(f"/apis/batch/v1/namespaces/{ns}/jobs", job("j"))[0] == 201
    path = f"/apis/batch/v1/namespaces/{ns}/jobs/j"
    code, data = http.patch(path, {"spec": {"template": {"spec": {"containers": [{"name": "m", "image": "b:2"}]}}}},
                            STRATEGIC)
    assert code == 422 and causes(data) == [("FieldValueInvalid", "spec.template")], data
    # a suspended Job that never started: its scheduling directives may change (Kueue does so)
    code, data = http.patch(path, {"spec": {"template": {"metadata": {"annotations": {"a": "b"}},
                                                         "spec": {"nodeSelector": {"pool": "gpu"}}}}}, STRATEGIC)
    assert code == 200, data


def test_job_needs_a_restart_policy_never_or_on_failure(http, ns):
    code, data = http.post(f"/apis/batch/v1/namespaces/{ns}/jobs", job("j", restart=None))
    assert code == 422 and causes(data) == [("FieldValueRequired", "spec.template.spec.restartPolicy")], data
    code, data = http.post(f"/apis/batch/v1/namespaces/{ns}/jobs", job("k", restart="Always"))
    assert code == 422 and causes(data) == [("FieldValueRequired", "spec.template.spec.restartPolicy")], data


def test_claim_gets_the_default_storage_class(http, ns):
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "c"},
             "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}
    code, c = http.post(f"/api/v1/namespaces/{ns}/persistentvolumeclaims", claim)
    assert code == 201 and c["spec"]["storageClassName"] == "gp3", c
    claim["metadata"]["name"], claim["spec"]["storageClassName"] = "d", ""
    code, c = http.post(f"/api/v1/namespaces/{ns}/persistentvolumeclaims", claim)
    assert code == 201 and c["spec"]["storageClassName"] == "", c


def test_pod_admission_defaults(http, ns):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
           "spec": {"containers": [{"name": "m", "image": "busybox:1"}]}}
    code, p = http.post(f"/api/v1/namespaces/{ns}/pods", pod)
    assert code == 201, p
    spec = p["spec"]
    assert (spec["serviceAccountName"], spec["serviceAccount"]) == ("default", "default")
    assert (spec["priority"], spec["preemptionPolicy"], spec["enableServiceLinks"]) == (0, "PreemptLowerPriority", True)
    assert spec["containers"][0]["resources"] == {}


def test_other_defaults(http, ns):
    code, s = http.post(f"/apis/apps/v1/namespaces/{ns}/statefulsets", {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "s"},
        "spec": {"serviceName": "s", "replicas": 0, "selector": {"matchLabels": {"app": "s"}},
                 "template": {"metadata": {"labels": {"app": "s"}},
                              "spec": {"containers": [{"name": "m", "image": "busybox"}]}},
                 "volumeClaimTemplates": [{"metadata": {"name": "home"},
                                           "spec": {"accessModes": ["ReadWriteOnce"],
                                                    "resources": {"requests": {"storage": "1Gi"}}}}]}})
    assert code == 201, s
    vct = s["spec"]["volumeClaimTemplates"][0]
    assert (vct["apiVersion"], vct["kind"], vct["spec"]["volumeMode"]) == ("v1", "PersistentVolumeClaim", "Filesystem")
    code, n = http.post(f"/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies", {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "np"},
        "spec": {"podSelector": {}, "ingress": [{"ports": [{"port": 22}]}]}})
    assert code == 201, n
    assert n["spec"]["policyTypes"] == ["Ingress"] and n["spec"]["ingress"][0]["ports"][0]["protocol"] == "TCP"
    code, n = http.post("/apis/networking.k8s.io/v1/namespaces/" + ns + "/networkpolicies", {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "np2"},
        "spec": {"podSelector": {}, "egress": [{}]}})
    assert code == 201 and n["spec"]["policyTypes"] == ["Ingress", "Egress"], n


def test_namespace_name_label(http):
    code, n = http.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                "metadata": {"name": "label-me"}})
    assert code == 201 and n["metadata"]["labels"] == {"kubernetes.io/metadata.name": "label-me"}, n
    code, n = http.patch("/api/v1/namespaces/label-me",
                         {"metadata": {"labels": {"kubernetes.io/metadata.name": "other"}}}, MERGE)
    assert code == 200 and n["metadata"]["labels"]["kubernetes.io/metadata.name"] == "label-me", n


def test_delete_answers_a_status_when_the_object_is_gone(http, ns):
    assert http.post(f"/api/v1/namespaces/{ns}/configmaps",
                     {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "gone"}})[0] == 201
    code, data = http.delete(f"/api/v1/namespaces/{ns}/configmaps/gone")
    assert code == 200, data
    assert (data["kind"], data["status"], data["details"]["name"], data["details"]["kind"]) == \
        ("Status", "Success", "gone", "configmaps"), data
    assert http.post(f"/api/v1/namespaces/{ns}/configmaps",
                     {"apiVersion": "v1", "kind": "ConfigMap",
                      "metadata": {"name": "held", "finalizers": ["x.io/keep"]}})[0] == 201
    code, data = http.delete(f"/api/v1/namespaces/{ns}/configmaps/held")
    assert code == 200 and data["kind"] == "ConfigMap" and data["metadata"]["deletionTimestamp"], data


@pytest.fixture(scope="module")
def widgets(http):
    code, body = http.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", WIDGET_CRD)
    assert code in (201, 409), body
    return f"/apis/{WIDGET_GROUP}/v1"


def test_custom_resource_update_needs_a_resource_version(http, ns, widgets):
    path = f"{widgets}/namespaces/{ns}/widgets"
    code, w = http.post(path, widget("w", ns))
    assert code == 201, w
    code, data = http.put(f"{path}/w", widget("w", ns, size=2))
    assert code == 422 and causes(data) == [("FieldValueInvalid", "metadata.resourceVersion")], data
    assert_status(data, 422, "Invalid", "must be specified for an update")


def test_apply_without_field_manager_is_invalid(http, ns):
    code, data = http.patch(f"/api/v1/namespaces/{ns}/configmaps/a",
                            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}, APPLY)
    assert code == 422 and causes(data) == [("FieldValueRequired", "fieldManager")], data


def test_strict_unknown_field_of_a_builtin_is_a_bad_request(http, ns):
    code, data = http.post(f"/api/v1/namespaces/{ns}/configmaps?fieldValidation=Strict",
                           {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "extra": 1})
    assert_status(data, 400, "BadRequest", 'strict decoding error: unknown field "extra"')


def test_no_remaining_item_count_with_a_selector(http, ns):
    for n in "abc":
        http.post(f"/api/v1/namespaces/{ns}/configmaps",
                  {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": n, "labels": {"g": "1"}}})
    code, data = http.get(f"/api/v1/namespaces/{ns}/configmaps?limit=2&labelSelector=g")
    assert code == 200 and data["metadata"]["continue"] and "remainingItemCount" not in data["metadata"], data
    code, data = http.get(f"/api/v1/namespaces/{ns}/configmaps?limit=2")
    assert data["metadata"]["remainingItemCount"] == 1, data



def test_apply_conflicts_with_an_update_manager(http, ns):
    path = f"/api/v1/namespaces/{ns}/configmaps"
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "v"}}
    assert http.post(f"{path}?fieldManager=kubectl-edit", cm)[0] == 201
    mine = {**cm, "data": {"k": "mine"}}
    code, data = http.patch(f"{path}/a?fieldManager=devctl", mine, APPLY)
    assert code == 409 and causes(data) == [("FieldManagerConflict", ".data.k")], data
    assert 'conflict with "kubectl-edit"' in data["message"], data
    code, data = http.patch(f"{path}/a?fieldManager=devctl&force=true", mine, APPLY)
    assert code == 200 and data["data"] == {"k": "mine"}, data
    # the same value is no conflict: shared ownership
    code, data = http.patch(f"{path}/a?fieldManager=other", mine, APPLY)
    assert code == 200, data


@pytest.mark.parametrize("kind,path,field", [
    ("ConfigMap", "configmaps", "data"), ("ConfigMap", "configmaps", "binaryData"), ("Secret", "secrets", "data")])
def test_data_keys_are_config_keys(http, ns, kind, path, field):
    code, data = http.post(f"/api/v1/namespaces/{ns}/{path}", {
        "apiVersion": "v1", "kind": kind, "metadata": {"name": "bad-key"}, field: {"bad key": "dg=="}})
    assert code == 422 and causes(data) == [("FieldValueInvalid", f"{field}[bad key]")], data
    code, data = http.post(f"/api/v1/namespaces/{ns}/{path}", {
        "apiVersion": "v1", "kind": kind, "metadata": {"name": "good-key"}, field: {"a-b_c.d": "dg=="}})
    assert code == 201, data


def test_a_pod_needs_an_image(http, ns):
    code, data = http.post(f"/api/v1/namespaces/{ns}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [{"name": "m"}]}})
    assert code == 422 and causes(data) == [("FieldValueRequired", "spec.containers[0].image")], data


def test_dry_run_takes_all_only(http, ns):
    code, data = http.post(f"/api/v1/namespaces/{ns}/configmaps?dryRun=Bogus",
                           {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}})
    assert code == 422 and causes(data) == [("FieldValueNotSupported", "dryRun")], data


def test_deletion_with_finalizers_bumps_the_generation(http, ns, widgets):
    path = f"{widgets}/namespaces/{ns}/widgets"
    body = widget("held", ns)
    body["metadata"]["finalizers"] = ["tests.kubesim.io/keep"]
    code, w = http.post(path, body)
    assert code == 201 and w["metadata"]["generation"] == 1, w
    code, w = http.delete(f"{path}/held")
    assert code == 200 and w["metadata"]["deletionTimestamp"] and w["metadata"]["generation"] == 2, w
    code, w = http.delete(f"{path}/held")  # already being deleted: unchanged
    assert w["metadata"]["generation"] == 2, w


def test_a_claim_grows_only_when_bound_and_its_class_allows_expansion(http, ns, kubesim_module):
    """kube-apiserver's PersistentVolumeClaimResize admission: 403 with the plugin's words for a
    bound claim whose class lacks allowVolumeExpansion; validation: 422 for an unbound claim's
    request; a class that allows it (patched later, as an admin does) lets the same patch through."""
    sc = f"fixed-{ns}"
    code, data = http.post("/apis/storage.k8s.io/v1/storageclasses", {
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": sc},
        "provisioner": "ebs.csi.aws.com", "reclaimPolicy": "Delete", "volumeBindingMode": "Immediate"})
    assert code == 201, data
    claims = f"/api/v1/namespaces/{ns}/persistentvolumeclaims"
    for name, cls in (("c", sc), ("pending", "")):
        code, data = http.post(claims, {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
                                        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": cls,
                                                 "resources": {"requests": {"storage": "1Gi"}}}})
        assert code == 201, data
    kubesim_module.wait_for(lambda: (http.get(f"{claims}/c")[1].get("status") or {}).get("phase") == "Bound",
                            30, message="claim c bound")
    grow = {"spec": {"resources": {"requests": {"storage": "2Gi"}}}}

    code, data = http.patch(f"{claims}/c", grow, MERGE)
    assert_status(data, 403, "Forbidden", 'persistentvolumeclaims "c" is forbidden: only dynamically provisioned pvc '
                  "can be resized and the storageclass that provisions the pvc must support resize")
    assert data["message"] == ('persistentvolumeclaims "c" is forbidden: only dynamically provisioned pvc can be '
                               "resized and the storageclass that provisions the pvc must support resize")
    assert http.get(f"{claims}/c")[1]["spec"]["resources"]["requests"]["storage"] == "1Gi"
    # the same request, unchanged, and a label change pass
    code, data = http.patch(f"{claims}/c", {"metadata": {"labels": {"a": "b"}}}, MERGE)
    assert code == 200, data
    code, data = http.patch(f"{claims}/pending", grow, MERGE)
    assert code == 422 and causes(data) == [("FieldValueForbidden", "spec")], data
    assert "spec is immutable after creation except resources.requests" in data["message"]

    code, data = http.patch(f"/apis/storage.k8s.io/v1/storageclasses/{sc}", {"allowVolumeExpansion": True}, MERGE)
    assert code == 200, data
    code, data = http.patch(f"{claims}/c", grow, MERGE)
    assert code == 200 and data["spec"]["resources"]["requests"]["storage"] == "2Gi", data
    assert http.delete(f"/apis/storage.k8s.io/v1/storageclasses/{sc}")[0] == 200
