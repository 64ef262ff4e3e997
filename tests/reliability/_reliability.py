"""What the reliability suite's modules share (issue 17): a simulator with the torchdev CRDs, the
sample flavors and the workload's pod mutator; the data-safety check; the local operator with
every watch of watches.yaml.  A module of its own: test modules import it by this name
(``conftest`` is a name every test directory has, and under pytest-xdist the one a worker
imported first would answer)."""
from __future__ import annotations

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
