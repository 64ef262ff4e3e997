"""The DevUser CRD (config/crd/bases/torchdev.io_devusers.yaml): admission through kubesim
(OpenAPI schema, defaults, CEL rules incl. transition rules), in process and over HTTP, plus
the names and columns docs/api.md promises.  The structural checks every torchdev CRD gets
(descriptions, bounds, metav1.Conditions) are in tests/test_crds.py."""
from __future__ import annotations

import copy

import pytest

from _devuser_helpers import CRD, GROUP, KEY, VERSION, load

@pytest.fixture(scope="module")
def model():
    from kubesim import validation

    crd = load(CRD)
    validation.validate_crd(copy.deepcopy(crd))
    return validation.CRDModel(crd).version(VERSION)


def _user(name="jane", **spec):
    body = {"email": "jane@example.com"}
    body.update(spec)
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "DevUser", "metadata": {"name": name}, "spec": body}


def _reject(model, obj, old=None):
    from kubesim.errors import ApiError

    with pytest.raises(ApiError) as ei:
        model.admit(obj, old=old)
    assert ei.value.code == 422
    return ei.value.message


def test_defaults(model):
    out = model.admit(_user())
    assert out["spec"] == {
        "email": "jane@example.com",
        "quota": {"gpus": 0, "cpu": "64", "memory": "256Gi", "storage": "2Ti", "persistentVolumeClaims": 32,
                  "devServers": 10},
        "queue": {}, "network": {},
        "sharedStorage": {"size": "100Gi", "storageClassName": "efs-sc"},
        "deletionPolicy": "Retain",
        "adoptNamespace": False,
    }


@pytest.mark.parametrize("name", ["a", "jane", "j0-e", "9lives", "x" * 59])
def test_usernames_accepted(model, name):
    model.admit(_user(name))


@pytest.mark.parametrize("name", ["x" * 60, "Jane", "-jane", "jane-", "jane.doe", "jane_doe"])
def test_usernames_rejected(model, name):
    assert "DNS-1123 label" in _reject(model, _user(name))


@pytest.mark.parametrize("spec, field", [
    ({"email": "not-an-email"}, "spec.email"),
    ({"email": "a@b"}, "spec.email"),
    ({"sshPublicKeys": ["ssh-ed25519 not-base64"]}, "spec.sshPublicKeys[0]"),
    ({"sshPublicKeys": [KEY] * 33}, "spec.sshPublicKeys"),
    ({"quota": {"gpus": -1}}, "spec.quota.gpus"),
    ({"quota": {"gpus": 4097}}, "spec.quota.gpus"),
    ({"quota": {"cpu": "-2"}}, "spec.quota.cpu"),
    ({"quota": {"memory": "10 GB"}}, "spec.quota.memory"),
    ({"quota": {"storage": -1}}, "spec.quota.storage"),
    ({"quota": {"persistentVolumeClaims": 0}}, "spec.quota.persistentVolumeClaims"),
    ({"quota": {"devServers": 1001}}, "spec.quota.devServers"),
    ({"quota": {"flavors": [{"name": "a", "gpus": 1}, {"name": "a", "gpus": 2}]}}, "spec.quota.flavors[1]"),
    ({"quota": {"flavors": [{"gpus": 1}]}}, "spec.quota.flavors[0].name"),
    ({"quota": {"flavors": [{"name": "Bad_Name"}]}}, "spec.quota.flavors[0].name"),
    ({"queue": {"clusterQueue": "Team Vision"}}, "spec.queue.clusterQueue"),
    ({"network": {"sshAllowedCIDRs": ["10.0.0.0"]}}, "spec.network.sshAllowedCIDRs[0]"),
    ({"network": {"sshAllowedCIDRs": ["10.0.0.0/33"]}}, "spec.network.sshAllowedCIDRs[0]"),
    ({"network": {"sshAllowedCIDRs": ["300.0.0.0/8"]}}, "spec.network.sshAllowedCIDRs[0]"),
    ({"network": {"sshAllowedCIDRs": ["10.0.0.0/8", "10.0.0.0/8"]}}, "spec.network.sshAllowedCIDRs[1]"),
    ({"sharedStorage": {"size": "lots"}}, "spec.sharedStorage.size"),
    ({"deletionPolicy": "Orphan"}, "spec.deletionPolicy"),
])
def test_invalid_specs_name_the_field(model, spec, field):
    message = _reject(model, _user(**spec))
    assert field + ":" in message, message


@pytest.mark.parametrize("cidrs", [["10.0.0.0/8"], ["0.0.0.0/0"], ["192.168.1.7/32", "fd00::/8"], ["::/0"], []])
def test_cidrs_accepted(model, cidrs):
    model.admit(_user(network={"sshAllowedCIDRs": cidrs}))


def test_quantities_as_ints_and_strings(model):
    out = model.admit(_user(quota={"cpu": 8, "memory": "1.5Ti", "flavors": [{"name": "gpu-a10g-1", "cpu": "500m"}]}))
    assert out["spec"]["quota"]["cpu"] == 8 and out["spec"]["quota"]["flavors"][0]["cpu"] == "500m"


def test_shared_storage_may_grow_but_not_shrink(model):
    old = model.admit(_user(sharedStorage={"size": "100Gi"}))
    grown = copy.deepcopy(old)
    grown["spec"]["sharedStorage"]["size"] = "1Ti"
    model.admit(grown, old=old)
    shrunk = copy.deepcopy(old)
    shrunk["spec"]["sharedStorage"]["size"] = "50Gi"
    assert "may not shrink" in _reject(model, shrunk, old)


def test_storage_class_is_immutable(model):
    old = model.admit(_user())
    new = copy.deepcopy(old)
    new["spec"]["sharedStorage"]["storageClassName"] = "gp3"
    assert "immutable" in _reject(model, new, old)
    new["spec"]["sharedStorage"]["storageClassName"] = "efs-sc"
    new["spec"]["email"] = "jane.doe@example.com"  # other fields may change
    model.admit(new, old=old)


def test_status_is_validated(model):
    obj = model.admit(_user())
    obj["status"] = {"phase": "Active", "namespace": "dev-jane", "kueue": True, "observedGeneration": 1,
                     "conditions": [{"type": "Ready", "status": "True", "reason": "UserReady", "message": "",
                                     "lastTransitionTime": "2025-01-01T00:00:00Z"}]}
    model.admit(obj, old=obj, subresource="status")
    bad = copy.deepcopy(obj)
    bad["status"]["phase"] = "Running"
    from kubesim.errors import ApiError

    with pytest.raises(ApiError) as ei:
        model.admit(bad, old=obj, subresource="status")
    assert "status.phase" in ei.value.message


def test_names_columns_and_scope():
    crd = load(CRD)
    spec = crd["spec"]
    assert crd["metadata"]["name"] == "devusers.torchdev.io" and spec["scope"] == "Cluster"
    assert spec["names"]["shortNames"] == ["du"] and spec["names"]["categories"] == ["torchdev"]
    (version,) = spec["versions"]
    assert version["subresources"] == {"status": {}}
    cols = [c["name"] for c in version["additionalPrinterColumns"] if not c.get("priority")]
    assert cols == ["Email", "Namespace", "Phase", "GPUs", "Age"]
    cond = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["conditions"]["description"]
    for reason in ("UserReady", "ReconcileFailed", "AsExpected", "InvalidSpec", "ReconcileError"):
        assert reason in cond


def test_samples_are_admitted_unchanged(model):
    from _devuser_helpers import samples, subset

    found = samples("torchdev_v1alpha1_devuser*.yaml")
    assert len(found) >= 2
    for name, obj in found.items():
        assert subset(obj, model.admit(copy.deepcopy(obj))), f"{name}: the schema prunes or rewrites fields"


# -- over HTTP, through kubesim as an API server ------------------------------------------

@pytest.fixture(scope="module")
def crd_api(kubesim_module):
    from kubernetes import client, config

    api = config.new_client_from_config(kubesim_module.kubeconfig)
    client.ApiextensionsV1Api(api).create_custom_resource_definition(load(CRD))
    return client.CustomObjectsApi(api)


@pytest.mark.parametrize("name, spec, field", [
    ("bad-email", {"email": "nope"}, "spec.email"),
    ("bad-cidr", {"network": {"sshAllowedCIDRs": ["10.0.0.0/40"]}}, "spec.network.sshAllowedCIDRs[0]"),
    ("bad-gpus", {"quota": {"gpus": -3}}, "spec.quota.gpus"),
])
def test_http_rejections_name_the_field(crd_api, name, spec, field):
    from kubernetes.client.exceptions import ApiException

    with pytest.raises(ApiException) as ei:
        crd_api.create_cluster_custom_object(GROUP, VERSION, "devusers", _user(name, **spec))
    assert ei.value.status == 422 and field in ei.value.body


def test_http_name_rule_and_defaults(crd_api):
    from kubernetes.client.exceptions import ApiException

    with pytest.raises(ApiException) as ei:
        crd_api.create_cluster_custom_object(GROUP, VERSION, "devusers", _user("y" * 60))
    assert ei.value.status == 422 and "at most 59" in ei.value.body
    out = crd_api.create_cluster_custom_object(GROUP, VERSION, "devusers", _user("ok-user"))
    assert out["spec"]["deletionPolicy"] == "Retain" and out["spec"]["quota"]["devServers"] == 10
    assert "namespace" not in out["metadata"]
