"""k8s_observe's discovery and list-everything queries (what the devuser role uses to
detect Kueue and to list the DevServerFlavors), against kubesim with and without Kueue."""
from __future__ import annotations

import importlib.util

import pytest

from _support import run_module
from kubesim.testing import KubeSim

observe = importlib.import_module("ansible_collections.torchdev.operator.plugins.modules.k8s_observe")


@pytest.mark.parametrize("query,error", [
    ({"api_version": "kueue.x-k8s.io/v1beta2", "discovery": True}, None),
    ({"discovery": True}, "takes api_version only"),
    ({"api_version": "v1", "discovery": True, "plural": "pods"}, "takes api_version only (got plural)"),
    ({"api_version": "v1", "plural": "pods", "all": True}, None),
    ({"api_version": "v1", "plural": "pods", "all": True, "name": "x"}, "exactly one of name and label_selector"),
])
def test_validate_query(query, error):
    got = observe.validate_query("q", query)
    assert (got is None) if error is None else (error in got), got


@pytest.mark.parametrize("query,path", [
    ({"api_version": "kueue.x-k8s.io/v1beta2", "discovery": True}, "/apis/kueue.x-k8s.io/v1beta2"),
    ({"api_version": "v1", "discovery": True}, "/api/v1"),
    ({"api_version": "torchdev.io/v1alpha1", "plural": "devserverflavors", "all": True, "cluster": True},
     "/apis/torchdev.io/v1alpha1/devserverflavors"),
])
def test_query_path(query, path):
    assert observe.query_path(query, None) == path


def _run(sim, queries, tmp_path):
    result = run_module("k8s_observe", {"queries": queries}, {"K8S_AUTH_KUBECONFIG": sim.kubeconfig})
    assert not result.get("failed"), result
    return result["objects"]


QUERIES = {
    "kueue": {"api_version": "kueue.x-k8s.io/v1beta2", "discovery": True},
    "core": {"api_version": "v1", "discovery": True},
    "namespaces": {"api_version": "v1", "plural": "namespaces", "all": True, "cluster": True},
    "queue": {"api_version": "kueue.x-k8s.io/v1beta2", "plural": "clusterqueues", "name": "nope", "cluster": True},
}


@pytest.mark.parametrize("kueue", [False, True], ids=["without-kueue", "with-kueue"])
def test_discovery_tells_whether_kueue_is_served(kueue, tmp_path):
    with KubeSim(kueue=kueue) as sim:
        objects = _run(sim, QUERIES, tmp_path)
        assert sim.writes() == 0
    if kueue:
        assert {"clusterqueues", "localqueues", "resourceflavors", "workloads"} <= set(objects["kueue"])
        assert not any("/" in r for r in objects["kueue"])  # no subresources
    else:
        assert objects["kueue"] is None
    assert "pods" in objects["core"]
    assert "default" in {n["metadata"]["name"] for n in objects["namespaces"]}
    assert all(n["kind"] == "Namespace" for n in objects["namespaces"])
    assert objects["queue"] is None  # missing object, served or not
