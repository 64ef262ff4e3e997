"""The end-to-end fixtures every test directory shares (conftest.py files import them):
per test module one kubesim (the module may set ``NODES``, a node spec, and ``KUEUE = True``
for Kueue's real CRDs and admission controller), the torchdev CRDs and the sample flavors,
and one local operator runtime running the real roles of watches.yaml; per test a fresh
namespace; the data-safety invariant (tests/_data_safety.py) is checked after each module."""
from __future__ import annotations

import pytest

from _e2e_helpers import GROUP, NODES, ROOT, VERSION, load, new_namespace


# The User-Agent of the tests' own client: it acts for the user (tests/_data_safety.py).
E2E_USER_AGENT = "torchdev-e2e-user/1.0"


@pytest.fixture(scope="module")
def sim(request):
    """The module's simulator; when the module is done, no volume holding user data may have been
    deleted without the user (the test) asking (tests/_data_safety.py)."""
    from kubesim.testing import KubeSim

    from _data_safety import DataSafety

    with KubeSim(nodes=getattr(request.module, "NODES", NODES), kueue=getattr(request.module, "KUEUE", False)) as s:
        yield s
        violations = DataSafety(s, user_agents=(E2E_USER_AGENT,)).violations()
        assert violations == [], "user data deleted without the user asking:\n" + "\n".join(violations)


@pytest.fixture(scope="module")
def kube(sim):
    from kubernetes import client, config

    api_client = config.new_client_from_config(sim.kubeconfig)
    api_client.user_agent = E2E_USER_AGENT
    ext = client.ApiextensionsV1Api(api_client)
    for crd in sorted((ROOT / "config" / "crd" / "bases").glob("*.yaml")):
        ext.create_custom_resource_definition(load(crd))
    custom = client.CustomObjectsApi(api_client)
    for f in sorted((ROOT / "config" / "samples").glob("*devserverflavor*.yaml")):
        custom.create_cluster_custom_object(GROUP, VERSION, "devserverflavors", load(f))
    return {
        "core": client.CoreV1Api(api_client),
        "apps": client.AppsV1Api(api_client),
        "rbac": client.RbacAuthorizationV1Api(api_client),
        "net": client.NetworkingV1Api(api_client),
        "custom": custom,
        "client": api_client,
    }


@pytest.fixture(scope="module")
def runtime(sim, kube):
    from torchdev_runtime.runtime import Runtime

    with Runtime(str(ROOT / "watches.yaml"), sim.kubeconfig, ansible_config=str(ROOT / "ansible.cfg"),
                 max_concurrent_reconciles=2) as rt:
        yield rt


@pytest.fixture
def ns(kube):
    return new_namespace(kube)
