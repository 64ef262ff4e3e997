"""The end-to-end fixtures every test directory shares (conftest.py files import them):
per test module one kubesim (the module may set ``NODES``, a node spec, and ``KUEUE = True``
for Kueue's real CRDs and admission controller), the torchdev CRDs and the sample flavors,
and one local operator runtime running the real roles of watches.yaml; per test a fresh
namespace; the data-safety invariant (tests/_data_safety.py) is checked after each module.

With TORCHDEV_E2E_TIER=real the same fixtures come from the real tier (tests/_real_tier.py: the
real control plane, Kueue and ansible-operator; `make test-real`)."""
from __future__ import annotations

import pytest

from _e2e_helpers import GROUP, NODES, ROOT, VERSION, load, new_namespace


# The User-Agent of the tests' own client: it acts for the user (tests/_data_safety.py).
E2E_USER_AGENT = "torchdev-e2e-user/1.0"


@pytest.fixture(scope="session")
def real_tier(tmp_path_factory):
    import signal

    from _real_tier import RealTier

    def interrupted(*_):  # a SIGTERM (a CI or `timeout` kill) still stops what the tier started
        raise KeyboardInterrupt("SIGTERM")

    # One tier per test process: each directory's conftest imports this fixture, which makes it a
    # fixture of its own there, and two tiers would run two operators (the second waiting for the
    # first's proxy port) and two control planes.
    global _REAL_TIER
    previous = signal.signal(signal.SIGTERM, interrupted)
    if _REAL_TIER is None:
        _REAL_TIER = RealTier(tmp_path_factory.mktemp("real-tier"))
    try:
        yield _REAL_TIER
    finally:
        _REAL_TIER.close()  # at the session's end; closing twice is harmless
        signal.signal(signal.SIGTERM, previous)


_REAL_TIER = None


@pytest.fixture(scope="module")
def sim(request):
    """The module's simulator; when the module is done, no volume holding user data may have been
    deleted without the user (the test) asking (tests/_data_safety.py)."""
    from contextlib import ExitStack

    from _data_safety import DataSafety
    from _real_tier import tier

    nodes, kueue = getattr(request.module, "NODES", NODES), getattr(request.module, "KUEUE", False)
    with ExitStack() as stack:
        if tier() == "real":
            s = request.getfixturevalue("real_tier").get(nodes, kueue)["sim"]
            s.reset_metrics()
        else:
            from kubesim.testing import KubeSim

            s = stack.enter_context(KubeSim(nodes=nodes, kueue=kueue))
        yield s
        violations = DataSafety(s, user_agents=(E2E_USER_AGENT,)).violations()
        assert violations == [], "user data deleted without the user asking:\n" + "\n".join(violations)


@pytest.fixture(scope="module")
def kube(sim):
    from kubernetes import client, config

    api_client = config.new_client_from_config(sim.kubeconfig)
    api_client.user_agent = E2E_USER_AGENT
    ext = client.ApiextensionsV1Api(api_client)
    custom = client.CustomObjectsApi(api_client)
    from _real_tier import RealSim

    if not isinstance(sim, RealSim):  # the real tier installed them
        for crd in sorted((ROOT / "config" / "crd" / "bases").glob("*.yaml")):
            ext.create_custom_resource_definition(load(crd))
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


def watches_text(module) -> str | None:
    """watches.yaml as the module asks for it (None: as it is): ``WATCH_KINDS``, the watches it
    keeps; ``WATCH_VARS``, vars per kind over the watch's own."""
    kinds, more = getattr(module, "WATCH_KINDS", None), getattr(module, "WATCH_VARS", {})
    if kinds is None and not more:
        return None
    import yaml

    watches = [w for w in yaml.safe_load((ROOT / "watches.yaml").read_text()) if kinds is None or w["kind"] in kinds]
    for w in watches:
        if w["kind"] in more:
            w["vars"] = {**(w.get("vars") or {}), **more[w["kind"]]}
    return yaml.safe_dump(watches, sort_keys=False)


@pytest.fixture(scope="module")
def runtime(request, sim, kube, tmp_path_factory):
    """The operator: the local runtime (kubesim) or the real ansible-operator (the real tier), with
    the module's ``OPERATOR_ENV`` (more environment) and watches (`watches_text`)."""
    from _real_tier import RealSim

    env, watches = dict(getattr(request.module, "OPERATOR_ENV", {})), watches_text(request.module)
    if isinstance(sim, RealSim):
        yield request.getfixturevalue("real_tier").runtime(env, watches or (ROOT / "watches.yaml").read_text())
        return
    from torchdev_runtime.runtime import Runtime

    path = ROOT / "watches.yaml"
    if watches is not None:
        path = tmp_path_factory.mktemp("watches") / "watches.yaml"
        path.write_text(watches)
    with Runtime(str(path), sim.kubeconfig, ansible_config=str(ROOT / "ansible.cfg"),
                 max_concurrent_reconciles=2, extra_env=env) as rt:
        yield rt
        # A task after requeue_after runs without a kubeconfig under ansible-operator (the
        # runtime fails such a reconcile, and retries it: a test's outcome may not show it).
        late = sorted({r.error for r in rt.history() if r.error and "ran after requeue_after" in r.error})
        if late:
            pytest.fail("; ".join(late), pytrace=False)


@pytest.fixture
def ns(kube):
    return new_namespace(kube)
