"""Watch: event order, resume from a resourceVersion, 410 Gone when too old, selectors,
timeouts, custom resources and fan-out, through the official client's `watch.Watch` and
raw streaming HTTP; watches ended by the server, compaction and an HTTP restart that keeps
the store."""
from __future__ import annotations

import json
import queue
import threading
import time

import pytest
import urllib3
from kubernetes import client, watch

from kubesim.store import Store
from kubesim.testing import KubeSim

from .conftest import (WIDGET_CRD, WIDGET_GROUP, Http, all_controllers, api_client, assert_status,
                       make_namespace, widget)


def cm(name, labels=None, data=None):
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "labels": labels or {}}, "data": data or {"k": "v"}}


def events(stream, n, timeout=5.0):
    """The next n (type, name, resourceVersion, obj) events of a Watch stream."""
    out = []
    deadline = time.monotonic() + timeout
    for ev in stream:
        obj = ev["raw_object"]
        out.append((ev["type"], obj["metadata"]["name"], obj["metadata"]["resourceVersion"], obj))
        if len(out) == n or time.monotonic() > deadline:
            break
    return out


class Background:
    """Consume a watch stream in a thread, so that writes can happen while it runs."""

    def __init__(self, func, *args, **kwargs):
        self.w = watch.Watch()
        self.q: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=self._run, args=(func, args, kwargs), daemon=True)
        self.thread.start()

    def _run(self, func, args, kwargs):
        try:
            for ev in self.w.stream(func, *args, **kwargs):
                self.q.put((ev["type"], ev["raw_object"]["metadata"]["name"], ev["raw_object"]))
        except Exception as exc:  # noqa: BLE001 - handed to the test
            self.q.put(exc)
        self.q.put(None)

    def next(self, timeout=5.0):
        item = self.q.get(timeout=timeout)
        if isinstance(item, Exception):
            raise item
        return item

    def until(self, name, timeout=5.0):
        """Events up to and including the first one about `name`."""
        out = []
        while True:
            item = self.next(timeout)
            assert item is not None, f"stream ended before an event about {name}: {out}"
            out.append(item)
            if item[1] == name:
                return out

    def stop(self):
        self.w.stop()


def _controllerless():
    sim = KubeSim(nodes="", disabled=all_controllers()).start()
    yield sim
    sim.stop()


quiet = pytest.fixture(scope="module", name="quiet")(_controllerless)
# a simulator of the test's own: compaction and restarts would disturb the module's
fresh = pytest.fixture(name="fresh")(_controllerless)


@pytest.fixture
def v1(quiet):
    c = api_client(quiet)
    yield client.CoreV1Api(c)
    c.close()


@pytest.fixture
def ns(quiet):
    return make_namespace(quiet, "w")


def test_resume_replays_changes_in_order(v1, ns):
    start_rv = v1.list_namespaced_config_map(ns).metadata.resource_version
    v1.create_namespaced_config_map(ns, cm("a"))
    v1.patch_namespaced_config_map("a", ns, {"data": {"k": "v2"}})
    v1.create_namespaced_config_map(ns, cm("b"))
    v1.delete_namespaced_config_map("a", ns)
    got = events(watch.Watch().stream(v1.list_namespaced_config_map, ns,
                                      resource_version=start_rv, timeout_seconds=5), 4)
    assert [(t, n) for t, n, _, _ in got] == [("ADDED", "a"), ("MODIFIED", "a"), ("ADDED", "b"),
                                              ("DELETED", "a")]
    rvs = [int(rv) for _, _, rv, _ in got]
    assert rvs == sorted(rvs) and rvs[0] > int(start_rv)
    assert got[1][3]["data"] == {"k": "v2"}
    # resume from the middle: only what came after
    got2 = events(watch.Watch().stream(v1.list_namespaced_config_map, ns,
                                       resource_version=got[1][2], timeout_seconds=5), 2)
    assert [(t, n) for t, n, _, _ in got2] == [("ADDED", "b"), ("DELETED", "a")]


def test_watch_without_resource_version_starts_with_current_state(v1, ns):
    for name in ("x", "y"):
        v1.create_namespaced_config_map(ns, cm(name))
    got = events(watch.Watch().stream(v1.list_namespaced_config_map, ns, timeout_seconds=5), 2)
    assert sorted((t, n) for t, n, _, _ in got) == [("ADDED", "x"), ("ADDED", "y")]


def test_live_events_and_fan_out(v1, ns):
    v1.create_namespaced_config_map(ns, cm("marker"))
    watchers = [Background(v1.list_namespaced_config_map, ns, timeout_seconds=10)
                for _ in range(5)]
    try:
        for w in watchers:
            assert w.until("marker")[-1][0] == "ADDED"
        v1.create_namespaced_config_map(ns, cm("live"))
        v1.delete_namespaced_config_map("live", ns)
        for w in watchers:
            assert [e[:2] for e in w.until("live")] == [("ADDED", "live")]
            assert w.next()[:2] == ("DELETED", "live")
    finally:
        for w in watchers:
            w.stop()


def test_label_selector_watch_enters_and_leaves(v1, ns):
    v1.create_namespaced_config_map(ns, cm("sel-marker", {"team": "a"}))
    w = Background(v1.list_namespaced_config_map, ns, label_selector="team=a",
                   timeout_seconds=10)
    try:
        w.until("sel-marker")
        v1.create_namespaced_config_map(ns, cm("other", {"team": "b"}))   # not selected
        v1.create_namespaced_config_map(ns, cm("m", {"team": "b"}))
        v1.patch_namespaced_config_map("m", ns, {"metadata": {"labels": {"team": "a"}}})
        assert w.next()[:2] == ("ADDED", "m")          # entered the selection
        v1.patch_namespaced_config_map("m", ns, {"data": {"k": "2"}})
        assert w.next()[:2] == ("MODIFIED", "m")
        v1.patch_namespaced_config_map("m", ns, {"metadata": {"labels": {"team": "c"}}})
        assert w.next()[:2] == ("DELETED", "m")        # left the selection
    finally:
        w.stop()


def test_field_selector_watch_on_pods(quiet, v1, ns):
    def pod(name, node):
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]}}

    start = v1.list_namespaced_pod(ns).metadata.resource_version
    v1.create_namespaced_pod(ns, pod("on-a", "node-a"))
    v1.create_namespaced_pod(ns, pod("on-b", "node-b"))
    p = v1.read_namespaced_pod("on-a", ns)
    p.status = client.V1PodStatus(phase="Running")
    v1.replace_namespaced_pod_status("on-a", ns, p)
    got = events(watch.Watch().stream(v1.list_namespaced_pod, ns, resource_version=start,
                                      field_selector="spec.nodeName=node-a",
                                      timeout_seconds=5), 2)
    assert [(t, n) for t, n, _, _ in got] == [("ADDED", "on-a"), ("MODIFIED", "on-a")]
    got = events(watch.Watch().stream(v1.list_namespaced_pod, ns, resource_version=start,
                                      field_selector="status.phase=Running",
                                      timeout_seconds=5), 1)
    assert [(t, n) for t, n, _, _ in got] == [("ADDED", "on-a")]


def test_watch_cluster_scoped(v1):
    start = v1.list_namespace().metadata.resource_version
    v1.create_namespace({"apiVersion": "v1", "kind": "Namespace",
                         "metadata": {"name": "watched-ns"}})
    got = events(watch.Watch().stream(v1.list_namespace, resource_version=start,
                                      timeout_seconds=5), 1)
    assert got[0][:2] == ("ADDED", "watched-ns")


def test_timeout_seconds_ends_stream(quiet, ns):
    pool = urllib3.PoolManager(retries=False)
    t0 = time.monotonic()
    resp = pool.request("GET", f"{quiet.url}/api/v1/namespaces/{ns}/configmaps"
                               "?watch=true&timeoutSeconds=1", preload_content=False)
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("application/json")
    body = resp.read()
    assert body == b""  # nothing happened, nothing sent
    assert 0.9 <= time.monotonic() - t0 < 15  # ended by timeoutSeconds (a busy machine may be late)


def test_raw_watch_stream_is_newline_delimited_json(quiet, v1, ns):
    v1.create_namespaced_config_map(ns, cm("raw"))
    pool = urllib3.PoolManager(retries=False)
    resp = pool.request("GET", f"{quiet.url}/api/v1/namespaces/{ns}/configmaps"
                               "?watch=1&resourceVersion=0&timeoutSeconds=1",
                        preload_content=False)
    lines = [json.loads(line) for line in resp.read().splitlines()]
    assert lines[0]["type"] == "ADDED"
    assert lines[0]["object"]["kind"] == "ConfigMap"
    assert lines[0]["object"]["apiVersion"] == "v1"


def test_send_initial_events_ends_with_bookmark(quiet, v1, ns):
    """client-go's WatchList (kubectl wait): current objects, then a BOOKMARK annotated
    k8s.io/initial-events-end, then live events."""
    for name in ("i1", "i2"):
        v1.create_namespaced_config_map(ns, cm(name))
    pool = urllib3.PoolManager(retries=False)
    resp = pool.request("GET", f"{quiet.url}/api/v1/namespaces/{ns}/configmaps?watch=1"
                               "&sendInitialEvents=true&allowWatchBookmarks=true"
                               "&resourceVersionMatch=NotOlderThan&timeoutSeconds=1",
                        preload_content=False)
    lines = [json.loads(line) for line in resp.read().splitlines()]
    assert [(e["type"], e["object"]["metadata"].get("name")) for e in lines] == [
        ("ADDED", "i1"), ("ADDED", "i2"), ("BOOKMARK", None)]
    bookmark = lines[-1]["object"]
    assert bookmark["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    assert bookmark["kind"] == "ConfigMap"
    assert int(bookmark["metadata"]["resourceVersion"]) >= max(
        int(e["object"]["metadata"]["resourceVersion"]) for e in lines[:2])


def test_watch_single_object_by_name(quiet, v1, ns):
    start = v1.list_namespaced_config_map(ns).metadata.resource_version
    v1.create_namespaced_config_map(ns, cm("one"))
    v1.create_namespaced_config_map(ns, cm("two"))
    got = events(watch.Watch().stream(v1.list_namespaced_config_map, ns, resource_version=start,
                                      field_selector="metadata.name=two",
                                      timeout_seconds=5), 1)
    assert got[0][:2] == ("ADDED", "two")


def test_custom_resource_watch_closed_when_crd_deleted(quiet):
    c = api_client(quiet)
    ext = client.ApiextensionsV1Api(c)
    co = client.CustomObjectsApi(c)
    ns = make_namespace(quiet, "wcr")
    ext.create_custom_resource_definition(WIDGET_CRD)
    try:
        co.create_namespaced_custom_object(WIDGET_GROUP, "v1", ns, "widgets", widget("w1", ns))
        w = Background(co.list_namespaced_custom_object, WIDGET_GROUP, "v1", ns, "widgets",
                       timeout_seconds=10)
        assert w.until("w1")[-1][0] == "ADDED"
        co.patch_namespaced_custom_object(WIDGET_GROUP, "v1", ns, "widgets", "w1",
                                          {"spec": {"size": 2}},
                                          _content_type="application/merge-patch+json")
        assert w.next()[:2] == ("MODIFIED", "w1")
    finally:
        ext.delete_custom_resource_definition(WIDGET_CRD["metadata"]["name"])
    assert w.next()[:2] == ("DELETED", "w1")
    assert w.next() is None  # the stream ended with the resource


# ------------------------------------------------------------------------------------------
# 410 Gone with a small event history
# ------------------------------------------------------------------------------------------

@pytest.fixture
def small_history():
    sim = KubeSim(nodes="", disabled=all_controllers())
    sim.cluster.api.store = Store(history=5)  # replaced before anything is stored
    sim.start()
    yield sim
    sim.stop()


def test_too_old_resource_version_is_410(small_history):
    sim = small_history
    c = api_client(sim)
    v1 = client.CoreV1Api(c)
    ns = make_namespace(sim, "gone")
    first = v1.create_namespaced_config_map(ns, cm("c0")).metadata.resource_version
    for i in range(1, 10):
        v1.create_namespaced_config_map(ns, cm(f"c{i}"))
    with pytest.raises(client.ApiException) as e:
        for _ in watch.Watch().stream(v1.list_namespaced_config_map, ns,
                                      resource_version=first, timeout_seconds=2):
            pass
    assert e.value.status == 410
    assert_status(json.loads(e.value.body), 410, "Expired", "too old resource version")

    # a recent resourceVersion still resumes
    recent = v1.list_namespaced_config_map(ns).metadata.resource_version
    v1.create_namespaced_config_map(ns, cm("after"))
    got = events(watch.Watch().stream(v1.list_namespaced_config_map, ns,
                                      resource_version=recent, timeout_seconds=5), 1)
    assert got[0][:2] == ("ADDED", "after")
    # the usual recovery: list, then watch from the list's resourceVersion
    listed = v1.list_namespaced_config_map(ns)
    assert len(listed.items) == 11
    c.close()


@pytest.mark.parametrize("rv,code", [("abc", 400), ("-5", 410)])
def test_bad_watch_resource_version(quiet, rv, code):
    pool = urllib3.PoolManager(retries=False)
    resp = pool.request("GET", f"{quiet.url}/api/v1/configmaps?watch=true&resourceVersion={rv}")
    assert resp.status == code
    assert json.loads(resp.data)["kind"] == "Status"


# ------------------------------------------------------------------------------------------
# Disruption (tests/reliability): watches ended by the server, compaction, a restart of the
# HTTP server that keeps the store
# ------------------------------------------------------------------------------------------

@pytest.fixture
def fresh_v1(fresh):
    c = api_client(fresh)
    c.configuration.retries = False
    yield client.CoreV1Api(c)
    c.close()


def test_end_watches_ends_streams_cleanly_and_resume_misses_nothing(fresh, fresh_v1):
    v1 = fresh_v1
    ns = make_namespace(fresh, "end")
    rv = v1.create_namespaced_config_map(ns, cm("a")).metadata.resource_version
    w = Background(v1.list_namespaced_config_map, ns, resource_version=rv, timeout_seconds=30)
    v1.create_namespaced_config_map(ns, cm("b"))
    assert w.until("b")[-1][:2] == ("ADDED", "b")
    assert fresh.end_watches() == 1
    assert w.next() is None  # ended without an error, like a server-side timeout
    v1.create_namespaced_config_map(ns, cm("c"))  # while nobody watches
    got = events(watch.Watch().stream(v1.list_namespaced_config_map, ns, resource_version=rv,
                                      timeout_seconds=2), 2)
    assert [(t, n) for t, n, *_ in got] == [("ADDED", "b"), ("ADDED", "c")]
    # the admin endpoint does the same
    w = Background(v1.list_namespaced_config_map, ns, timeout_seconds=30)
    assert {n for _, n, _ in (w.next(), w.next(), w.next())} == {"a", "b", "c"}
    code, data = Http(fresh).post("/kubesim/watches/close", {})
    assert code == 200 and data["closed"] >= 1
    assert w.next() is None


def test_compaction_makes_older_resource_versions_gone(fresh, fresh_v1):
    v1 = fresh_v1
    ns = make_namespace(fresh, "compact")
    old = v1.create_namespaced_config_map(ns, cm("a")).metadata.resource_version
    v1.create_namespaced_config_map(ns, cm("b"))
    code, data = Http(fresh).post("/kubesim/compact", {})
    assert code == 200 and int(data["compactedResourceVersion"]) > int(old)
    with pytest.raises(client.ApiException) as e:
        for _ in watch.Watch().stream(v1.list_namespaced_config_map, ns, resource_version=old,
                                      timeout_seconds=2):
            pass
    assert e.value.status == 410
    # from the compacted resourceVersion on, a resumed watch misses nothing
    now = data["compactedResourceVersion"]
    v1.create_namespaced_config_map(ns, cm("c"))
    got = events(watch.Watch().stream(v1.list_namespaced_config_map, ns, resource_version=now,
                                      timeout_seconds=2), 1)
    assert got[0][:2] == ("ADDED", "c")
    assert fresh.compact() >= int(now)


def test_http_restart_keeps_the_store(fresh, fresh_v1):
    v1 = fresh_v1
    ns = make_namespace(fresh, "restart")
    rv = v1.create_namespaced_config_map(ns, cm("a")).metadata.resource_version
    w = Background(v1.list_namespaced_config_map, ns, resource_version=rv, timeout_seconds=30)
    rv = v1.create_namespaced_config_map(ns, cm("a2")).metadata.resource_version
    assert w.until("a2")[-1][:2] == ("ADDED", "a2")  # the watch is open
    url = fresh.url
    fresh.stop_http()
    # the stream is cut: the client sees a broken connection, not a clean end (a timeout)
    with pytest.raises(Exception) as e:
        w.next(timeout=10)
    assert not isinstance(e.value, queue.Empty)
    with pytest.raises(Exception) as e:
        v1.list_namespaced_config_map(ns)
    assert not isinstance(e.value, client.ApiException)  # refused: no server
    # the store and its history live on: a change while the server is down
    fresh.call(fresh.api.create, "configmaps", cm("b"), ns)
    fresh.start_http()
    assert fresh.url == url
    assert sorted(i.metadata.name for i in v1.list_namespaced_config_map(ns).items) == [
        "a", "a2", "b"]
    got = events(watch.Watch().stream(v1.list_namespaced_config_map, ns, resource_version=rv,
                                      timeout_seconds=2), 1)
    assert got[0][:2] == ("ADDED", "b")
    # restarted with a fresh history (compact): resuming from before the restart is 410 Gone
    fresh.restart_http(compact=True)
    with pytest.raises(client.ApiException) as e:
        for _ in watch.Watch().stream(v1.list_namespaced_config_map, ns, resource_version=rv,
                                      timeout_seconds=2):
            pass
    assert e.value.status == 410
