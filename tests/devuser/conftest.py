"""Fixtures of the DevUser end-to-end tests: per test module one kubesim (nodes from
hack/sample-nodes.spec; with Kueue's real CRDs and admission controller when the module sets
``KUEUE = True``), the torchdev CRDs and the sample flavors, and one local operator runtime
running the real roles of watches.yaml.  The helpers live in _devuser_helpers.py."""
from __future__ import annotations

import pytest

from _devuser_helpers import GROUP, ROOT, VERSION, load


@pytest.fixture(scope="module")
def sim(request):
    from kubesim.testing import KubeSim

    nodes = (ROOT / "hack" / "sample-nodes.spec").read_text().strip()
    with KubeSim(nodes=nodes, kueue=getattr(request.module, "KUEUE", False)) as s:
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
        "rbac": client.RbacAuthorizationV1Api(api_client),
        "net": client.NetworkingV1Api(api_client),
        "custom": custom,
        "client": api_client,
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
