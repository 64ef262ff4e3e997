"""Helpers of the end-to-end tests (tests/e2e/conftest.py holds the fixtures)."""
from __future__ import annotations

import pathlib
import uuid

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
GROUP, VERSION = "torchdev.io", "v1alpha1"
NODES = (ROOT / "hack" / "sample-nodes.spec").read_text().strip()
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE2eTestKeyForTorchdevEndToEndxxxxxxxxxxxxx e2e@test"


def load(path: pathlib.Path) -> dict:
    return yaml.safe_load(path.read_text())


def new_namespace(kube) -> str:
    name = f"dev-e2e-{uuid.uuid4().hex[:6]}"
    kube["core"].create_namespace({"apiVersion": "v1", "kind": "Namespace",
                                   "metadata": {"name": name}})
    return name


def remove_all(sim, kube, namespace: str, plural: str = "devservers") -> None:
    """Delete the namespace's objects of `plural` (devservers, trainingjobs) and wait for its pods
    to go, so the nodes' GPUs and the queue's quota are free for the next test (what a test leaves
    running would leave a later one's pods unschedulable, whatever Kueue admits)."""
    custom = kube["custom"]
    for obj in custom.list_namespaced_custom_object(GROUP, VERSION, namespace, plural)["items"]:
        custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, plural, obj["metadata"]["name"])
    sim.wait_for(lambda: not kube["core"].list_namespaced_pod(namespace).items, 180, interval=0.2,
                 message=f"the pods of {namespace} gone")


def devserver(name: str, flavor: str = "cpu-small", **spec) -> dict:
    body = {"owner": "e2e@example.com", "flavor": flavor, "sshPublicKeys": [KEY]}
    body.update(spec)
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "DevServer",
            "metadata": {"name": name}, "spec": body}


def get_ds(kube, ns, name) -> dict:
    return kube["custom"].get_namespaced_custom_object(GROUP, VERSION, ns, "devservers", name)


def condition(obj: dict, ctype: str) -> dict:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c["type"] == ctype:
            return c
    return {}


def wait_ready(sim, kube, ns, name, timeout=90) -> dict:
    def ready():
        obj = get_ds(kube, ns, name)
        ok = (condition(obj, "Ready").get("status") == "True"
              and obj["status"].get("observedGeneration") == obj["metadata"]["generation"])
        return obj if ok else None
    return sim.wait_for(ready, timeout, interval=0.1, message=f"devserver {ns}/{name} Ready")


def wait_degraded(sim, kube, ns, name, reason, timeout=60) -> dict:
    def degraded():
        obj = get_ds(kube, ns, name)
        c = condition(obj, "Degraded")
        return obj if c.get("status") == "True" and c.get("reason") == reason else None
    return sim.wait_for(degraded, timeout, interval=0.1, message=f"{ns}/{name} Degraded/{reason}")


def reconcile_again(sim, runtime, ns, name, times=2, kind="DevServer") -> None:
    """``times`` more reconciles of the ``kind`` object, each waited for, the runtime idle before
    and after (a status that holds, an Event sent once)."""
    assert runtime.wait_idle(120)
    for _ in range(times):
        before = runtime.counters(kind)["succeeded"]
        runtime.enqueue(kind, ns, name)
        sim.wait_for(lambda: runtime.counters(kind)["succeeded"] > before, 60, message="another reconcile")
    assert runtime.wait_idle(120)


READ_VERBS = ("get", "list", "watch")


def assert_unchanged_reconcile_writes_nothing(sim, runtime, ns, name, kind="DevServer", attempts=3) -> None:
    """One more reconcile of a settled object sends no write request.

    The world must hold still for "unchanged" to mean anything: on the real tier the cluster's
    own machinery (the StatefulSet controller, kwok, Kueue) may still be changing an object in
    `ns` when the window opens, and the operator then rightly writes what changed. Such a window
    is measured again (up to `attempts`); a write in a window where the machinery wrote nothing
    in `ns` fails at once, naming the requests. kubesim's controllers write no request log, so
    there every window counts."""
    for _ in range(attempts):
        assert runtime.wait_idle(180)
        sim.reset_metrics()
        reconcile_again(sim, runtime, ns, name, times=1, kind=kind)
        writes = [r for r in sim.requests() if r["verb"] not in READ_VERBS]
        if not writes:
            return
        # Only RealSim reads the audit log for the machinery's writes.
        moved = getattr(sim, "machinery_writes", lambda _ns: [])(ns)
        if not moved:
            break
    raise AssertionError(f"an unchanged reconcile of {kind} {ns}/{name} wrote {writes}"
                         + (f" while the cluster changed {moved}" if moved else ""))


def set_quota(sim, kube, ns, hard, create=False) -> None:
    """The namespace's ResourceQuota `compute` with ``hard``: created (then waited for until the
    quota controller has counted it: kube-apiserver refuses what a quota counts until it has written
    status.hard), or patched."""
    spec = {"hard": hard}
    if not create:
        kube["core"].patch_namespaced_resource_quota("compute", ns, {"spec": spec})
        return
    kube["core"].create_namespaced_resource_quota(ns, {"apiVersion": "v1", "kind": "ResourceQuota",
                                                       "metadata": {"name": "compute"}, "spec": spec})
    sim.wait_for(lambda: (kube["core"].read_namespaced_resource_quota("compute", ns).status.hard or {}) == hard,
                 30, message="the quota counted")


def warning_events(kube, ns, name, reason) -> list:
    events = kube["core"].list_namespaced_event(ns, field_selector=f"involvedObject.name={name}").items
    return [e for e in events if e.type == "Warning" and e.reason == reason]


def bill_to(kube, ns: str, email: str) -> None:
    """Make ``ns`` a DevUser's namespace (the DevUser object and the namespace's torchdev.io/user
    label, as the devuser role leaves them; no devuser watch runs): its usage is billed to ``email``."""
    kube["custom"].create_cluster_custom_object(GROUP, VERSION, "devusers", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "DevUser", "metadata": {"name": ns}, "spec": {"email": email}})
    kube["core"].patch_namespace(ns, {"metadata": {"labels": {"torchdev.io/user": ns}}})


def usage_records(kube, ns: str) -> list:
    return kube["custom"].list_namespaced_custom_object(GROUP, VERSION, ns, "usagerecords")["items"]
