"""Helpers of the DevUser tests (tests/devuser/conftest.py holds the end-to-end fixtures)."""
from __future__ import annotations

import copy
import pathlib

from hack.render_cases import KEY, admitted, devuser, flavors, load, samples  # noqa: F401 (the DevUser tests' helpers)

ROOT = pathlib.Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "config" / "samples"
CRD = ROOT / "config" / "crd" / "bases" / "torchdev.io_devusers.yaml"
GROUP, VERSION = "torchdev.io", "v1alpha1"
KUEUE = "kueue.x-k8s.io"


def kueue_model(kind: str):
    """Admission (schema, defaults, CEL) of a Kueue kind from the real v0.19.2 CRDs."""
    from kubesim import kueue, validation

    for crd in kueue.load_crds():
        if crd["spec"]["names"]["kind"] == kind:
            return validation.CRDModel(copy.deepcopy(crd)).version("v1beta2")
    raise KeyError(kind)


def subset(small, big) -> bool:
    """Every leaf of `small` is in `big` unchanged (an apiserver only added defaults)."""
    if isinstance(small, dict):
        return isinstance(big, dict) and all(k in big and subset(v, big[k]) for k, v in small.items())
    if isinstance(small, list):
        return isinstance(big, list) and len(small) == len(big) and all(map(subset, small, big))
    return small == big


def condition(obj: dict, ctype: str) -> dict:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c["type"] == ctype:
            return c
    return {}


# --- end to end ---------------------------------------------------------------------------

def create_devuser(kube, name: str, **spec) -> dict:
    body = {"email": f"{name}@example.com", "sshPublicKeys": [KEY]}
    body.update(spec)
    return kube["custom"].create_cluster_custom_object(
        GROUP, VERSION, "devusers",
        {"apiVersion": f"{GROUP}/{VERSION}", "kind": "DevUser", "metadata": {"name": name}, "spec": body})


def get_devuser(kube, name: str) -> dict:
    return kube["custom"].get_cluster_custom_object(GROUP, VERSION, "devusers", name)


def wait_ready(sim, kube, name: str, timeout: float = 120) -> dict:
    def ready():
        obj = get_devuser(kube, name)
        ok = (condition(obj, "Ready").get("status") == "True"
              and obj.get("status", {}).get("observedGeneration") == obj["metadata"]["generation"])
        return obj if ok else None
    return sim.wait_for(ready, timeout, interval=0.2, message=f"devuser {name} Ready")


def gone(fn, *args) -> bool:
    """True when fn(*args) answers 404."""
    from kubernetes.client.exceptions import ApiException

    try:
        fn(*args)
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


def reconcile_again(sim, runtime, kind: str, namespace: str, name: str, timeout: float = 120):
    """Enqueue one more reconcile (as the resync would) and wait for it to finish."""
    assert runtime.wait_idle(timeout)
    before = runtime.counters(kind)["succeeded"]
    runtime.enqueue(kind, namespace, name)
    sim.wait_for(lambda: runtime.counters(kind)["succeeded"] > before, timeout, message=f"a reconcile of {name}")
    assert runtime.wait_idle(timeout)


def assert_reconcile_writes_nothing(sim, runtime, name: str) -> None:
    """One more reconcile of the settled DevUser `name` makes reads only: zero write requests
    and no changed task."""
    assert runtime.wait_idle(180)
    sim.reset_metrics()
    reconcile_again(sim, runtime, "DevUser", "", name)
    assert sim.writes() == 0, [r for r in sim.requests() if r["verb"] not in ("get", "list", "watch")]
    assert sim.metrics()["by_verb"].get("get", 0) > 0  # it did look
    record = [r for r in runtime.history("DevUser") if r.name == name][-1]
    assert record.ok and record.ansible.get("changed", 0) == 0, record
