"""devctl version shows the operator's version too (issue 28.6), in every -o format: the image tag
(or app.kubernetes.io/version label) of the operator's Deployment, "unknown" with the reason when
the cluster does not say it or cannot be reached."""
from __future__ import annotations

import pytest
import yaml
from kubernetes import client

from devctl_helpers import as_json, invoke


def _deployment(name, image, labels=None):
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "labels": {"control-plane": "controller-manager", **(labels or {})}},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"control-plane": "controller-manager"}},
                     "template": {"metadata": {"labels": {"control-plane": "controller-manager"}},
                                  "spec": {"containers": [{"name": "kube-rbac-proxy", "image": "proxy:9.9"},
                                                          {"name": "manager", "image": image}]}}}}


@pytest.mark.parametrize("image, tag", [
    ("ghcr.io/torchdev/torchdev-operator:0.3.1", "0.3.1"), ("localhost:5000/op:1.0@sha256:abc", "1.0"),
    ("localhost:5000/op", None), ("op@sha256:abc", None), ("op:", None), ("", None), (None, None)])
def test_image_version(image, tag):
    from devctl.version import image_version

    assert image_version(image) == tag


def test_version_reads_the_operator_deployment(sim, devctl):
    core, apps = client.CoreV1Api(sim.k8s), client.AppsV1Api(sim.k8s)
    for ns in ("torchdev-system", "operators"):
        core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    # nothing installed: unknown, with the reason, exit 0
    data = as_json(devctl("version", "-o", "json", namespace=False))
    assert data["operatorVersion"] == "unknown" and "not found" in data["operator"]["reason"], data
    # config/default's Deployment: the manager container's tag
    apps.create_namespaced_deployment("torchdev-system", _deployment(
        "torchdev-controller-manager", "ghcr.io/torchdev/torchdev-operator:0.3.1"))
    data = as_json(devctl("version", "-o", "json", namespace=False))
    assert data["operatorVersion"] == "0.3.1" and data["clientVersion"] and data["apiVersion"] == "torchdev.io/v1alpha1"
    assert data["operator"]["deployment"] == "torchdev-system/torchdev-controller-manager"
    as_yaml = yaml.safe_load(devctl("version", "-o", "yaml", namespace=False).stdout)
    assert as_yaml["operatorVersion"] == "0.3.1"
    text = devctl("version", namespace=False).stdout.splitlines()
    assert text[0].startswith("devctl ") and text[1] == (
        "operator 0.3.1 (ghcr.io/torchdev/torchdev-operator:0.3.1, torchdev-system/torchdev-controller-manager)")
    # an OLM install elsewhere, found by its labels; its version label wins over the tag
    apps.delete_namespaced_deployment("torchdev-controller-manager", "torchdev-system")
    apps.create_namespaced_deployment("operators", _deployment(
        "torchdev-operator", "ghcr.io/torchdev/torchdev-operator@sha256:0123",
        {"app.kubernetes.io/name": "torchdev", "app.kubernetes.io/version": "0.4.0"}))
    data = as_json(devctl("version", "-o", "json", namespace=False))
    assert (data["operatorVersion"], data["operator"]["deployment"]) == ("0.4.0", "operators/torchdev-operator")
    client_only = as_json(devctl("version", "--client", "-o", "json", namespace=False))
    assert "operatorVersion" not in client_only and client_only["clientVersion"] == data["clientVersion"]


def test_version_without_a_cluster_is_unknown_not_an_error(tmp_path):
    result = invoke(["--kubeconfig", str(tmp_path / "missing"), "version", "-o", "json"])
    data = as_json(result)
    assert data["operatorVersion"] == "unknown" and "does not exist" in data["operator"]["reason"]
    text = invoke(["--kubeconfig", str(tmp_path / "missing"), "version"])
    assert text.exit_code == 0 and text.stdout.splitlines()[1].startswith("operator unknown (kubeconfig ")
