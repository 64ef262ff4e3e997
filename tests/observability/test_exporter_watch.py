"""The exporter against kubesim (issue 13.1): its counters count what happened while it
watched (a restart counts nothing again), and its watches are resumed from their last
resourceVersion, relisting only on 410 Gone or an error, when the list replaces what it holds.

No operator runs here: the tests write the objects' status as the operator would.  Every wait
is on the exporter's own output (its /metrics, its store) or on kubesim's request log.
"""
from __future__ import annotations

import copy
import threading
import urllib.request
from datetime import datetime, timedelta, timezone

import pytest
from prometheus_client.parser import text_string_to_metric_families

from _e2e_helpers import GROUP, ROOT, VERSION, devserver, load
from kubesim.testing import wait_for
from torchdev_exporter.__main__ import Exporter, watch_forever
from torchdev_exporter.metrics import Store

T0 = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(hours=2)


def stamp(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def wait(predicate, what, timeout=60.0):
    return wait_for(predicate, timeout, 0.05, what)


def scrape(exporter) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{exporter.port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def series(samples: dict, name: str, **labels) -> dict:
    """The samples of ``name`` whose labels include ``labels``: {labels tuple: value}."""
    want = set(labels.items())
    return {k: v for (n, k), v in samples.items() if n == name and want <= set(k)}


@pytest.fixture
def flavor(kube, ns):
    """A GPU flavor of this test alone (the time-to-Ready histogram is per flavor)."""
    body = load(ROOT / "config" / "samples" / "torchdev_v1alpha1_devserverflavor_gpu-h100-2.yaml")
    body["metadata"] = {"name": f"gpu-{ns}"}
    kube["custom"].create_cluster_custom_object(GROUP, VERSION, "devserverflavors", body)
    return body["metadata"]["name"]


def create_server(kube, ns, name, flavor, owner, status):
    body = devserver(name, flavor=flavor)
    body["spec"]["owner"] = owner
    kube["custom"].create_namespaced_custom_object(GROUP, VERSION, ns, "devservers", body)
    set_status(kube, ns, name, status)


def set_status(kube, ns, name, status):
    kube["custom"].patch_namespaced_custom_object_status(GROUP, VERSION, ns, "devservers", name, {"status": status})


def running(started: datetime, **extra) -> dict:
    ready = started + timedelta(seconds=40)
    return {"phase": "Running", "replicas": 1, "readyReplicas": 1,
            # a merge patch: a new reservation removes the last one's end
            "reservation": {"startedAt": stamp(started), "extensions": 0, "endedAt": None, "endReason": None},
            "startup": {"startedAt": stamp(started - timedelta(seconds=40)), "readyAt": stamp(ready), "complete": True,
                        "totalSeconds": 40, "phases": {"queued": 10, "scheduled": 2, "volumes": 4, "containers": 20,
                                                       "ready": 4}}, **extra}


def ended(started: datetime, reason: str) -> dict:
    return {"phase": "Stopped", "replicas": 0, "readyReplicas": 0,
            "reservation": {"startedAt": stamp(started), "endedAt": stamp(started + timedelta(minutes=30)),
                            "endReason": reason}}


def create_job(kube, ns, name, status):
    body = load(ROOT / "config" / "samples" / "torchdev_v1alpha1_trainingjob.yaml")
    body["metadata"] = {"name": name}
    kube["custom"].create_namespaced_custom_object(GROUP, VERSION, ns, "trainingjobs", body)
    kube["custom"].patch_namespaced_custom_object_status(GROUP, VERSION, ns, "trainingjobs", name, {"status": status})


def counters(samples, owner, ns, flavor) -> dict:
    """Every counter and histogram sample this test's objects can have produced."""
    out = {}
    for name in ("torchdev_reservations_started_total", "torchdev_reservations_ended_total"):
        out.update({(name,) + k: v for k, v in series(samples, name, user=owner).items()})
    for name in ("torchdev_trainingjob_created_total", "torchdev_trainingjob_failed_total",
                 "torchdev_trainingjob_completed_total", "torchdev_trainingjob_restarts_total"):
        out.update({(name,) + k: v for k, v in series(samples, name, namespace=ns).items()})
    for name in ("torchdev_time_to_ready_seconds_count", "torchdev_time_to_ready_phase_seconds_count"):
        out.update({(name,) + k: v for k, v in series(samples, name, flavor=flavor).items()})
    return out


def started_exporter(sim, flavor, ns, servers=2, jobs=1):
    """A new exporter, once its lists are in (its gauges show this test's objects)."""
    exporter = Exporter(sim.kubeconfig).start(port=0, address="127.0.0.1", insecure_loopback=True)

    def listed():
        got = scrape(exporter)
        return got if (sum(series(got, "torchdev_devservers", flavor=flavor).values()) == servers
                       and sum(series(got, "torchdev_trainingjobs", namespace=ns).values()) == jobs) else None
    return exporter, wait(listed, "the exporter's first lists")


def test_a_restarted_exporter_counts_again_only_what_happens_while_it_watches(sim, kube, ns, flavor, devuser):
    """Reservations started and ended, starts completed, a TrainingJob created, failed and
    restarted before the exporter lists them are its baseline: counted by nobody.  Today's
    exporter would count every listed server's reservation as started (and ended) again at
    each restart."""
    owner = devuser(f"restart-{ns}@example.com")
    create_server(kube, ns, "running", flavor, owner, running(T0))
    create_server(kube, ns, "stopped", flavor, owner, ended(T0, "Cancelled"))
    create_job(kube, ns, "failed", {"state": "Failed", "failureReason": "BackoffLimitExceeded", "restartCount": 2})

    first, samples = started_exporter(sim, flavor, ns)
    try:
        assert counters(samples, owner, ns, flavor) == {}
        # What happens now is counted, once.
        set_status(kube, ns, "running", ended(T0, "Stopped"))
        later = T0 + timedelta(hours=1)
        set_status(kube, ns, "stopped", running(later))
        kube["custom"].patch_namespaced_custom_object_status(GROUP, VERSION, ns, "trainingjobs", "failed", {
            "status": {"state": "Restarting", "restartCount": 3}})
        expected = {
            ("torchdev_reservations_started_total", ("flavor", flavor), ("user", owner)): 1.0,
            ("torchdev_reservations_ended_total", ("flavor", flavor), ("reason", "Stopped"), ("user", owner)): 1.0,
            ("torchdev_trainingjob_restarts_total", ("namespace", ns)): 1.0,
            ("torchdev_time_to_ready_seconds_count", ("flavor", flavor)): 1.0,
            ("torchdev_time_to_ready_phase_seconds_count", ("flavor", flavor), ("phase", "containers")): 1.0,
        }

        def counted():
            got = counters(scrape(first), owner, ns, flavor)
            return got if all(got.get(k) == v for k, v in expected.items()) else None
        got = wait(counted, "the changes counted")
        assert {k: v for k, v in got.items() if "_phase_" not in k[0]} == \
            {k: v for k, v in expected.items() if "_phase_" not in k[0]}
    finally:
        first.close()

    # A restart: the counters begin at zero and nothing that happened before is counted again.
    second, samples = started_exporter(sim, flavor, ns)
    try:
        assert counters(samples, owner, ns, flavor) == {}
        assert series(samples, "torchdev_gpus_running", user=owner) == {(("flavor", flavor), ("user", owner)): 2.0}
    finally:
        second.close()


class Watching:
    """watch_forever on this test's namespace's DevServers, in a thread, into a Store."""

    def __init__(self, kube, ns, timeout_seconds):
        self.store, self.stop, self.ns = Store(), threading.Event(), ns

        def list_fn(**kw):
            return kube["custom"].list_namespaced_custom_object(GROUP, VERSION, ns, "devservers", **kw)
        self.thread = threading.Thread(target=watch_forever, daemon=True, args=(
            list_fn, self.store.replace, self.store.apply, self.store.delete, self.stop, "devservers"),
            kwargs={"timeout_seconds": timeout_seconds})

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()

    def names(self):
        with self.store.lock:
            return sorted(name for _, name in self.store.devservers)


def requests(sim, ns, verb, code=None):
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/devservers"
    return [r for r in sim.requests(5000)
            if r["path"] == path and r["verb"] == verb and (code is None or r["code"] == code)]


def test_a_watch_that_ends_is_resumed_from_its_resource_version_not_relisted(sim, kube, ns):
    kube["custom"].create_namespaced_custom_object(GROUP, VERSION, ns, "devservers", devserver("a"))
    with Watching(kube, ns, timeout_seconds=1) as w:
        wait(lambda: w.names() == ["a"], "the list")
        wait(lambda: len(requests(sim, ns, "watch", 200)) >= 2, "two watch requests ended")
        kube["custom"].create_namespaced_custom_object(GROUP, VERSION, ns, "devservers", devserver("b"))
        wait(lambda: w.names() == ["a", "b"], "b through the resumed watch")
        kube["custom"].delete_namespaced_custom_object(GROUP, VERSION, ns, "devservers", "a")
        wait(lambda: w.names() == ["b"], "a's deletion through the watch")
        count = len(requests(sim, ns, "watch", 200))
        wait(lambda: len(requests(sim, ns, "watch", 200)) >= count + 2, "two more watch requests ended")
    assert len(requests(sim, ns, "list")) == 1


def test_410_gone_relists_at_once(sim, kube, ns):
    kube["custom"].create_namespaced_custom_object(GROUP, VERSION, ns, "devservers", devserver("a"))
    with Watching(kube, ns, timeout_seconds=1) as w:
        wait(lambda: w.names() == ["a"], "the list")
        # A change elsewhere moves the cluster's resourceVersion past the one the watch holds,
        # then etcd's compaction (kubesim's history) drops everything up to it.
        kube["core"].create_namespaced_config_map(ns, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bump"}})
        store = sim.cluster.api.store
        sim.call(lambda: setattr(store, "compacted_rv", store.rv))
        wait(lambda: requests(sim, ns, "watch", 410), "the watch resumed into 410 Gone")
        wait(lambda: len(requests(sim, ns, "list")) == 2, "the relist")
        kube["custom"].create_namespaced_custom_object(GROUP, VERSION, ns, "devservers", devserver("b"))
        wait(lambda: w.names() == ["a", "b"], "b through the watch after the relist")
    assert len(requests(sim, ns, "list")) == 2


def test_an_error_relists_and_the_list_replaces_the_store(sim, kube, ns):
    """A DevServer deleted while the watch is down disappears with the relist, and its running
    reservation ends as Deleted (it happened while the exporter ran)."""
    owner = f"gone-{ns}@example.com"
    for name in ("gone", "kept"):
        body = devserver(name)
        body["spec"]["owner"] = owner
        kube["custom"].create_namespaced_custom_object(GROUP, VERSION, ns, "devservers", body)
    set_status(kube, ns, "gone", running(T0))
    with Watching(kube, ns, timeout_seconds=1) as w:
        w.store.apply_devuser({"metadata": {"name": "gone"}, "spec": {"email": owner}})  # a user label

        def seen():
            with w.store.lock:
                return (w.store.devservers.get((ns, "gone")) or {}).get("status")
        wait(seen, "gone's status")
        rule = sim.faults.add(verb="watch", resource="devservers.torchdev.io", fraction=1.0, code=500)
        try:
            wait(lambda: rule.hits >= 1, "a watch request refused")
            lists = len(requests(sim, ns, "list"))
            kube["custom"].delete_namespaced_custom_object(GROUP, VERSION, ns, "devservers", "gone")
            wait(lambda: len(requests(sim, ns, "list")) > lists, "a relist after the deletion")
        finally:
            sim.faults.clear()
        wait(lambda: w.names() == ["kept"], "the store replaced by the relist")
        with w.store.lock:
            assert copy.deepcopy(w.store.ended) == {(owner, "cpu-small", "Deleted"): 1}
            assert w.store.started == {}  # gone's reservation began before the first list
