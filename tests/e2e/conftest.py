"""Shared fixtures of the end-to-end tests: per test module one kubesim (nodes from
hack/sample-nodes.spec), the CRDs and the sample flavors, and one local operator runtime
running the real roles; per test a fresh namespace.  The helpers live in _e2e_helpers.py
(imported by name: conftest.py is not unique in tests/)."""
from __future__ import annotations

import pytest

from _e2e_helpers import GROUP, NODES, ROOT, VERSION, load, new_namespace
from kubesim.testing import KubeSim


@pytest.fixture(scope="module")
def sim(request):
    """A test module may bring its own node pools (``NODES = "..."``)."""
    with KubeSim(nodes=getattr(request.module, "NODES", NODES)) as s:
        yield s


@pytest.fixture(scope="module")
def kube(sim):
    from kubernetes import client, config

    api_client = config.new_client_from_config(sim.kubeconfig)
    ext = client.ApiextensionsV1Api(api_client)
    for crd in sorted((ROOT / "config" / "crd" / "bases").glob("*.yaml")):
        ext.create_custom_resource_definition(load(crd))
    custom = client.CustomObjectsApi(api_client)
    for f in sorted((ROOT / "config" / "samples").glob("*devserverflavor*.yaml")):
        custom.create_cluster_custom_object(GROUP, VERSION, "devserverflavors", load(f))
    return {
        "core": client.CoreV1Api(api_client),
        "apps": client.AppsV1Api(api_client),
        "custom": custom,
    }


@pytest.fixture(scope="module")
def runtime(sim, kube):
    from torchdev_runtime.runtime import Runtime

    rt = Runtime(str(ROOT / "watches.yaml"), sim.kubeconfig,
                 ansible_config=str(ROOT / "ansible.cfg"), max_concurrent_reconciles=2)
    rt.start()
    try:
        yield rt
    finally:
        rt.stop()


@pytest.fixture
def ns(kube):
    return new_namespace(kube)
