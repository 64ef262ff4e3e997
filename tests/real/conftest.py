"""The real control plane tier (issue 26): tests/real runs against kube-apiserver,
kube-controller-manager, kube-scheduler, etcd and kwok built from Go modules
(`make cluster-build`, hack/cluster).

`real_cluster` starts one control plane per pytest worker session in a temporary directory
(its own certificates, etcd data and free loopback ports, so xdist workers never collide)
and stops it at the end. Missing binaries are a failure naming `make cluster-build`, never
a skip: `make test` builds them first.
"""
from __future__ import annotations

import kubernetes
import pytest

from hack.cluster.control_plane import BIN_DIR, ControlPlane, missing_binaries


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/real/" in item.nodeid:
            item.add_marker(pytest.mark.real)


@pytest.fixture(scope="session")
def real_cluster(tmp_path_factory):
    if missing := missing_binaries():
        pytest.fail(f"the real control plane is not built ({', '.join(missing)} missing in "
                    f"{BIN_DIR}): run `make cluster-build`", pytrace=False)
    cp = ControlPlane(tmp_path_factory.mktemp("cluster"))
    try:
        cp.up()
        yield cp
    finally:
        cp.down()


@pytest.fixture(scope="session")
def real_api(real_cluster) -> kubernetes.client.ApiClient:
    """An admin (system:masters) client of the real API server."""
    return kubernetes.config.new_client_from_config(config_file=str(real_cluster.kubeconfig))
