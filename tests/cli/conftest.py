"""Fixtures for the devctl tests.

* every test gets an isolated HOME / devctl config / no KUBECONFIG / fixed git e-mail;
* ``sim`` is a kubesim simulator (one per module) with the torchdev CRDs from
  config/crd/bases installed with the kubernetes client, plus the sample flavors;
* ``ns`` is a fresh namespace per test; ``devctl(...)`` runs the CLI in-process
  against the simulator with click's CliRunner.

No operator runs: tests write DevServer status themselves (``set_status``).
"""
from __future__ import annotations

import glob

import pytest
import yaml

from devctl_helpers import CRD_DIR, FLAVORS, GROUP, VERSION, Cluster, invoke, unique
from devuser_helpers import Users


@pytest.fixture(autouse=True)
def isolated_env(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("USER", "tester")
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("DEVCTL_CONFIG", str(tmp_path / "devctl.yaml"))
    import devctl.settings
    import devctl.wait

    monkeypatch.setattr(devctl.settings, "git_user_email", lambda: None)
    monkeypatch.setattr(devctl.wait, "POLL_INTERVAL", 0.02)
    return home


# -- simulator ------------------------------------------------------------------------

def _crd_docs() -> list[dict]:
    files = sorted(glob.glob(str(CRD_DIR / "*.yaml")))
    assert files, f"no CRDs in {CRD_DIR}"
    docs = []
    for path in files:
        with open(path) as fh:
            docs += [d for d in yaml.safe_load_all(fh) if d]
    return docs


def _start_sim(**kwargs):
    """A kubesim with the torchdev CRDs and the sample flavors (``kwargs`` go to KubeSim)."""
    from kubesim import testing

    sim = testing.KubeSim(**kwargs).start()
    try:
        from kubernetes import client, config

        api_client = config.new_client_from_config(config_file=sim.kubeconfig)
        ext = client.ApiextensionsV1Api(api_client)
        for crd in _crd_docs():
            ext.create_custom_resource_definition(crd)
        custom = client.CustomObjectsApi(api_client)
        for flavor in FLAVORS:
            custom.create_cluster_custom_object(GROUP, VERSION, "devserverflavors", flavor)
        sim.k8s = api_client
    except BaseException:
        sim.stop()
        raise
    return sim


@pytest.fixture(scope="module")
def sim():
    sim = _start_sim()
    try:
        yield sim
    finally:
        sim.stop()


@pytest.fixture(scope="module")
def kueue_sim():
    """Like ``sim`` with Kueue's CRDs and kubesim's Kueue admission controller.
    A test module uses it for ``ns``/``devctl``/``cluster`` by overriding ``sim``."""
    sim = _start_sim(kueue=True)
    try:
        yield sim
    finally:
        sim.stop()


@pytest.fixture
def ns(sim):
    from kubernetes import client

    name = unique("dev-t")
    client.CoreV1Api(sim.k8s).create_namespace(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return name


@pytest.fixture
def cluster(sim, ns):
    return Cluster(sim, ns)


@pytest.fixture
def devctl(sim, ns):
    """Run devctl against the simulator in namespace ``ns``: devctl("list", "-o", "json")."""

    def run(*args, input=None, namespace=True):
        base = ["--kubeconfig", sim.kubeconfig] + (["-n", ns] if namespace else [])
        return invoke(base + list(args), input=input)

    return run


@pytest.fixture
def users(sim):
    """DevUsers and the objects their role renders (devuser_helpers.Users)."""
    return Users(sim)
