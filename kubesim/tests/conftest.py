"""Shared helpers for the kubesim tests: official-client factories, a raw HTTP helper,
fresh namespaces and a small test CRD (with CEL rules) used by several modules.

The `kubesim`, `kubesim_module` and `kubeconfig_env` fixtures come from
`kubesim.pytest_plugin` (enabled in the repository's root conftest.py).
"""
from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
import urllib3
from kubernetes import client, config
from kubernetes.dynamic import DynamicClient

from kubesim.testing import KubeSim

_ns_ids = itertools.count(1)


def api_client(sim) -> client.ApiClient:
    """An official-client ApiClient configured from the simulator's kubeconfig."""
    return config.new_client_from_config(config_file=sim.kubeconfig)


def status_of(exc: client.ApiException) -> dict[str, Any]:
    """The metav1.Status body of an ApiException."""
    return json.loads(exc.body)


class Http:
    """Raw HTTP against the simulator (explicit methods, paths, content types and bodies)."""

    def __init__(self, sim):
        self.base = sim.url
        self.pool = urllib3.PoolManager(retries=False, timeout=10)

    def request(self, method: str, path: str, body: Any = None,
                content_type: str = "application/json",
                headers: dict[str, str] | None = None) -> tuple[int, Any]:
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
        hdrs = dict(headers or {})
        if body is not None:
            hdrs["Content-Type"] = content_type
        resp = self.pool.request(method, self.base + path, body=body, headers=hdrs)
        try:
            data = json.loads(resp.data) if resp.data else None
        except ValueError:
            data = resp.data.decode(errors="replace")
        return resp.status, data

    def get(self, path: str, **kw) -> tuple[int, Any]:
        return self.request("GET", path, **kw)

    def post(self, path: str, body: Any, **kw) -> tuple[int, Any]:
        return self.request("POST", path, body, **kw)

    def put(self, path: str, body: Any, **kw) -> tuple[int, Any]:
        return self.request("PUT", path, body, **kw)

    def patch(self, path: str, body: Any, content_type: str) -> tuple[int, Any]:
        return self.request("PATCH", path, body, content_type)

    def delete(self, path: str, body: Any = None) -> tuple[int, Any]:
        return self.request("DELETE", path, body)


def assert_status(data: Any, code: int, reason: str, *in_message: str) -> None:
    """`data` is a metav1.Status for `code`/`reason` whose message mentions each string."""
    assert isinstance(data, dict), data
    assert data.get("kind") == "Status" and data.get("apiVersion") == "v1", data
    assert data.get("status") == "Failure", data
    assert data.get("code") == code, data
    assert data.get("reason") == reason, data
    assert data.get("message"), data
    for part in in_message:
        assert part in data["message"], (part, data["message"])


def make_namespace(sim, prefix: str = "t") -> str:
    name = f"{prefix}-{next(_ns_ids)}"
    sim.call(sim.api.create, "namespaces",
             {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return name


# A small CRD: defaults, pruning, a CEL rule and a CEL transition rule, status + scale.
WIDGET_GROUP = "tests.kubesim.io"
WIDGET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"widgets.{WIDGET_GROUP}"},
    "spec": {
        "group": WIDGET_GROUP,
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget",
                  "listKind": "WidgetList", "shortNames": ["wd"]},
        "versions": [{
            "name": "v1", "served": True, "storage": True,
            "subresources": {"status": {},
                             "scale": {"specReplicasPath": ".spec.replicas",
                                       "statusReplicasPath": ".status.replicas"}},
            "schema": {"openAPIV3Schema": {
                "type": "object",
                "properties": {
                    "spec": {
                        "type": "object",
                        "x-kubernetes-validations": [
                            {"rule": "self.size <= self.maxSize",
                             "message": "size must not exceed maxSize"},
                        ],
                        "properties": {
                            "size": {"type": "integer", "default": 1},
                            "maxSize": {"type": "integer", "default": 10},
                            "replicas": {"type": "integer", "default": 1},
                            "color": {"type": "string", "default": "blue"},
                            "storageClass": {
                                "type": "string",
                                "x-kubernetes-validations": [
                                    {"rule": "self == oldSelf",
                                     "message": "storageClass is immutable"}],
                            },
                        },
                    },
                    "status": {"type": "object",
                               "properties": {"replicas": {"type": "integer"},
                                              "phase": {"type": "string"}}},
                },
            }},
        }],
    },
}


def widget(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": f"{WIDGET_GROUP}/v1", "kind": "Widget",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


@pytest.fixture(scope="module")
def k8s(kubesim_module) -> client.ApiClient:
    """An ApiClient for the module's shared simulator."""
    c = api_client(kubesim_module)
    yield c
    c.close()


@pytest.fixture
def k8s_fresh(kubesim) -> client.ApiClient:
    """An ApiClient for a per-test simulator."""
    c = api_client(kubesim)
    yield c
    c.close()


def all_controllers() -> list[str]:
    from kubesim.controllers import REGISTRY, load_builtins

    load_builtins()
    return sorted(REGISTRY)


@pytest.fixture(scope="module")
def quiet_sim():
    """A module-scoped simulator with no nodes and every controller disabled: objects
    change only through the API calls a test makes."""
    sim = KubeSim(nodes="", disabled=all_controllers()).start()
    try:
        yield sim
    finally:
        sim.stop()


@pytest.fixture(scope="module")
def http(kubesim_module) -> Http:
    return Http(kubesim_module)


@pytest.fixture
def ns(kubesim_module) -> str:
    """A fresh namespace on the module's shared simulator."""
    return make_namespace(kubesim_module)


@pytest.fixture
def dyn(k8s) -> DynamicClient:
    return DynamicClient(k8s)
