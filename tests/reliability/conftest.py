"""Fixtures of the reliability suite (issue 17): a simulator per test module with the torchdev
CRDs and sample flavors installed in-process (the faults a test injects into kubesim's HTTP
layer reach the operator, never the test's own setup), and the data-safety invariant
(tests/_data_safety.py) checked when the module's simulator stops: no claim holding user data
was deleted without the user asking, whatever the module did.

The full-size runs are marked ``soak`` (``make soak``); ``make test`` deselects them and runs
the smaller versions."""
from __future__ import annotations

import json
import os

import pytest

from _data_safety import DataSafety
from _e2e_helpers import GROUP, ROOT, load
from _workload import NODES, install


def install_crds(sim) -> None:
    for crd in sorted((ROOT / "config" / "crd" / "bases").glob("*.yaml")):
        sim.call(sim.api.create, "customresourcedefinitions.apiextensions.k8s.io", load(crd))
    for f in sorted((ROOT / "config" / "samples").glob("*devserverflavor*.yaml")):
        sim.call(sim.api.create, f"devserverflavors.{GROUP}", load(f))


def start_sim(**kwargs):
    """A simulator with the CRDs, the sample flavors and the workload's pod mutator; the caller
    stops it (after checking the data-safety invariant, see ``cluster``)."""
    from kubesim.testing import KubeSim

    sim = KubeSim(nodes=kwargs.pop("nodes", NODES), **kwargs).start()
    install_crds(sim)
    install(sim)
    return sim


def check_data_safety(sim) -> dict:
    safety = DataSafety(sim)
    violations = safety.violations()
    assert violations == [], "user data deleted without the user asking:\n" + "\n".join(violations)
    return safety.summary()


@pytest.fixture(scope="module")
def sim():
    s = start_sim()
    try:
        yield s
        check_data_safety(s)
    finally:
        s.stop()


# The roles' looks at running workers, every 10 s in watches.yaml: every 2 s here, so that a
# finished TrainingJob or inference pod is seen sooner (what the roles do is unchanged).
WATCH_PERIODS = {"TrainingJob": {"trainingjob_watch_period": 2},
                 "EphemeralAccelerationJob": {"ephemeralaccelerationjob_watch_period": 2}}


def new_runtime(sim, max_concurrent_reconciles: int = 2, **kwargs):
    """The local operator (every watch of watches.yaml) in this process."""
    from torchdev_runtime.runtime import Runtime, collections_environ
    from torchdev_runtime.watches import load_watches, watch_replace

    cfg = str(ROOT / "ansible.cfg")
    watches = [watch_replace(w, vars=dict(w.vars or {}, **WATCH_PERIODS.get(w.gvk.kind, {})))
               for w in load_watches(str(ROOT / "watches.yaml"), max_concurrent_reconciles=max_concurrent_reconciles,
                                     environ=collections_environ(cfg))]
    kwargs.setdefault("health_interval", 0)
    return Runtime(watches=watches, kubeconfig=sim.kubeconfig, ansible_config=cfg, **kwargs)


# -- figures ------------------------------------------------------------------------------------
FIGURES: list[tuple[str, dict]] = []


@pytest.fixture
def figures(request):
    """``figures(title, data)``: a test's figures, printed at the end of the run (and appended as
    a JSON line to $RELIABILITY_FIGURES when set: ``make soak`` prints that file)."""
    def record(title: str, data: dict) -> None:
        FIGURES.append((title, data))
        request.node.user_properties.append((title, json.dumps(data, sort_keys=True)))
        path = os.environ.get("RELIABILITY_FIGURES")
        if path:
            with open(path, "a") as fh:
                fh.write(json.dumps({"test": request.node.nodeid, "title": title, **data}, sort_keys=True) + "\n")
    return record


def pytest_terminal_summary(terminalreporter):
    if FIGURES:
        terminalreporter.section("reliability figures")
        for title, data in FIGURES:
            terminalreporter.write_line(f"{title}: {json.dumps(data, sort_keys=True)}")
