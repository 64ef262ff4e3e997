"""Work queue semantics, controller-runtime's rate limiter and the event predicates."""
from __future__ import annotations

import json
import threading
import time

import pytest

from torchdev_runtime.controller import (annotation_requests, dependent_event_passes, dependent_view,
                                         find_k8s_objects, owner_requests,
                                         primary_event_passes)
from torchdev_runtime.watches import GVK, Watch
from torchdev_runtime.workqueue import (BucketRateLimiter, ItemExponentialFailureRateLimiter,
                                        RateLimitingQueue, default_controller_rate_limiter,
                                        exponential_backoff)

BACKOFF = [(0, 0.005), (1, 0.010), (2, 0.020), (10, 5.12), (17, 655.36), (18, 1000.0),
           (30, 1000.0), (5000, 1000.0)]


@pytest.mark.parametrize("failures,delay", BACKOFF)
def test_exponential_backoff(failures, delay):
    assert exponential_backoff(failures) == pytest.approx(delay)


def test_item_exponential_limiter_per_item_and_forget():
    rl = ItemExponentialFailureRateLimiter()
    assert [rl.when("a") for _ in range(4)] == pytest.approx([0.005, 0.01, 0.02, 0.04])
    assert rl.when("b") == pytest.approx(0.005)
    assert rl.num_requeues("a") == 4
    rl.forget("a")
    assert rl.num_requeues("a") == 0 and rl.when("a") == pytest.approx(0.005)


def test_bucket_limiter_burst_then_qps():
    now = [0.0]
    b = BucketRateLimiter(qps=10, burst=100, clock=lambda: now[0])
    assert all(b.when(i) == 0 for i in range(100))
    assert b.when("x") == pytest.approx(0.1)
    assert b.when("y") == pytest.approx(0.2)
    now[0] = 10.0
    assert b.when("z") == 0


def test_default_rate_limiter_is_max_of_both():
    rl = default_controller_rate_limiter()
    assert rl.when("k") == pytest.approx(0.005)
    assert rl.when("k") == pytest.approx(0.01)
    rl.forget("k")
    assert rl.num_requeues("k") == 0


def test_queue_dedups_and_never_hands_out_an_item_twice():
    q = RateLimitingQueue()
    try:
        for _ in range(5):
            q.add("a")
        q.add("b")
        assert len(q) == 2
        item, _ = q.get()
        assert item == "a"
        q.add("a")            # changed while processing: remembered, not queued
        assert len(q) == 1
        item2, _ = q.get()
        assert item2 == "b"
        assert q.get(timeout=0.05) == (None, False)
        q.done("a")           # now it comes back once
        assert len(q) == 1
        assert q.get(timeout=0.05)[0] == "a"
        q.done("a")
        q.done("b")
        assert q.is_idle()
    finally:
        q.shutdown()


def test_is_pending_while_queued_or_processing_not_while_delayed():
    q = RateLimitingQueue()
    try:
        assert not q.is_pending("a")
        q.add("a")
        assert q.is_pending("a")          # queued
        item, _ = q.get()
        assert q.is_pending(item)         # processing
        q.done(item)
        assert not q.is_pending("a")
        q.add_after("a", 30.0)
        assert not q.is_pending("a")      # a delayed requeue is not due yet
    finally:
        q.shutdown()


def test_add_after_keeps_earliest_and_rate_limited_requeue():
    q = RateLimitingQueue()
    try:
        q.add_after("x", 5.0)
        q.add_after("x", 0.05)
        q.add_after("x", 10.0)
        assert q.waiting() == 1
        t0 = time.monotonic()
        item, _ = q.get(timeout=2)
        assert item == "x" and time.monotonic() - t0 < 4.0  # the earliest (0.05 s), not the 5 s one
        q.done("x")
        delays = [q.add_rate_limited("y") for _ in range(3)]
        assert delays == pytest.approx([0.005, 0.01, 0.02])
        assert q.get(timeout=1)[0] == "y"
    finally:
        q.shutdown()


def test_shutdown_drops_queued_items():
    q = RateLimitingQueue()
    q.add("a")
    q.shutdown()
    assert q.get(timeout=0.1) == (None, True)
    q.add("b")  # ignored after shutdown
    assert len(q) == 1  # "a" is still there but never handed out


def test_shutdown_releases_workers():
    q = RateLimitingQueue()
    got = []
    t = threading.Thread(target=lambda: got.append(q.get()))
    t.start()
    q.shutdown()
    t.join(2)
    assert got == [(None, True)]


# --- predicates -----------------------------------------------------------------------------

W = Watch(gvk=GVK("torchdev.io", "v1alpha1", "DevServer"), role="/r")


def obj(gen=1, labels=None, ann=None, status=None, deleting=False, rv="1", owners=None,
        ns="ns", name="o"):
    md = {"name": name, "namespace": ns, "resourceVersion": rv}
    if gen:
        md["generation"] = gen
    if labels is not None:
        md["labels"] = labels
    if ann is not None:
        md["annotations"] = ann
    if deleting:
        md["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    if owners:
        md["ownerReferences"] = owners
    o = {"apiVersion": "v1", "kind": "Thing", "metadata": md, "spec": {}}
    if status is not None:
        o["status"] = status
    return o


PRIMARY = [
    ("create", Watch(gvk=W.gvk), "ADDED", None, obj(), True),
    ("delete", Watch(gvk=W.gvk), "DELETED", obj(), obj(), True),
    ("spec change (generation bump)", W, "MODIFIED", obj(1), obj(2, rv="2"), True),
    ("status-only update", W, "MODIFIED", obj(1), obj(1, status={"x": 1}, rv="2"), False),
    ("label-only update", W, "MODIFIED", obj(1), obj(1, labels={"a": "b"}, rv="2"), False),
    ("annotation-only update", W, "MODIFIED", obj(1), obj(1, ann={"a": "b"}, rv="2"), False),
    ("annotation update with watchAnnotationsChanges",
     Watch(gvk=W.gvk, watch_annotations_changes=True), "MODIFIED", obj(1),
     obj(1, ann={"a": "b"}, rv="2"), True),
    ("object without generation", W, "MODIFIED", obj(0), obj(0, rv="2"), True),
    ("deletion started (runtime addition)", W, "MODIFIED", obj(1), obj(1, deleting=True), True),
    ("selector: create of non-matching", Watch(gvk=W.gvk, selector={"matchLabels": {"t": "1"}}),
     "ADDED", None, obj(), False),
    ("selector: spec change of matching",
     Watch(gvk=W.gvk, selector={"matchLabels": {"t": "1"}}), "MODIFIED",
     obj(1, labels={"t": "1"}), obj(2, labels={"t": "1"}), True),
    ("selector: new object no longer matches",
     Watch(gvk=W.gvk, selector={"matchLabels": {"t": "1"}}), "MODIFIED",
     obj(1, labels={"t": "1"}), obj(2, labels={"t": "2"}), False),
]


@pytest.mark.parametrize("name,w,etype,old,new,want", PRIMARY, ids=[p[0] for p in PRIMARY])
def test_primary_predicates(name, w, etype, old, new, want):
    assert primary_event_passes(w, etype, old, new) is want


def _status_write(fields, time, rv="2"):
    """A StatefulSet as kube-apiserver stores it after kube-controller-manager wrote its status."""
    o = obj(rv=rv)
    o["metadata"] = {**o["metadata"], "managedFields": [{
        "manager": "kube-controller-manager", "operation": "Update", "subresource": "status",
        "apiVersion": "apps/v1", "time": "2026-11-27T%s:00Z" % time, "fieldsType": "FieldsV1",
        "fieldsV1": {"f:status": {f: {} for f in ["f:replicas"] + fields}}}]}
    return o


DEPENDENT = [
    ("create ignored", "ADDED", None, obj(), False),
    ("delete passes", "DELETED", obj(), obj(), True),
    ("status-only ignored", "MODIFIED", obj(), obj(status={"ready": 1}, rv="2"), False),
    ("resourceVersion-only ignored", "MODIFIED", obj(), obj(rv="9"), False),
    ("label change passes", "MODIFIED", obj(), obj(labels={"x": "y"}, rv="2"), True),
    ("spec change passes", "MODIFIED", obj(), {**obj(rv="2"), "spec": {"r": 2}}, True),
]


DEPENDENT_VIEWS = DEPENDENT + [
    ("data change passes", "MODIFIED", {**obj(), "data": {"a": "1"}}, {**obj(rv="2"), "data": {"a": "2"}}, True),
    ("managedFields change passes", "MODIFIED", obj(), {**obj(rv="2"), "metadata": {
        **obj()["metadata"], "resourceVersion": "2", "managedFields": [{"manager": "m"}]}}, True),
    ("annotation change passes", "MODIFIED", obj(), obj(ann={"a": "b"}, rv="2"), True),
    # operator-lib removeTimeFromManagedFields: a status write that only moves a manager's time is
    # ignored; one whose fields appear or go (a StatefulSet's readyReplicas 1 -> absent) passes
    ("a managedFields time alone ignored", "MODIFIED", _status_write(["f:readyReplicas"], "10:00"),
     _status_write(["f:readyReplicas"], "10:05", rv="3"), False),
    ("a status field gone from managedFields passes", "MODIFIED", _status_write(["f:readyReplicas"], "10:00"),
     _status_write([], "10:05", rv="3"), True),
    ("the same object, a new resourceVersion and status", "MODIFIED", {**obj(), "data": {"a": "1"}},
     {**obj(status={"x": 1}, rv="3"), "data": {"a": "1"}}, False),
]


@pytest.mark.parametrize("name,etype,old,new,want", DEPENDENT, ids=[d[0] for d in DEPENDENT])
def test_dependent_predicate(name, etype, old, new, want):
    assert dependent_event_passes(etype, old, new) is want


@pytest.mark.parametrize("name,etype,old,new,want", DEPENDENT_VIEWS, ids=[d[0] for d in DEPENDENT_VIEWS])
def test_dependent_predicate_on_views(name, etype, old, new, want):
    """A dependent's cache keeps dependent_view of each object: the predicate answers alike."""
    view = (lambda o: None if o is None else dependent_view(o))
    assert dependent_event_passes(etype, old, new) is want
    assert dependent_event_passes(etype, view(old), view(new)) is want


def test_dependent_view_keeps_what_the_mapping_reads():
    ann = {"operator-sdk/primary-resource": "team/alice", "operator-sdk/primary-resource-type": "DevServer.torchdev.io"}
    owners = [{"apiVersion": "torchdev.io/v1alpha1", "kind": "DevServer", "name": "a", "uid": "1", "controller": True}]
    o = {**obj(owners=owners, ann=ann, ns="team", labels={"l": "1"}), "data": {"big": "x" * 10000}}
    v = dependent_view(o)
    assert owner_requests(v, W.gvk, True) == owner_requests(o, W.gvk, True) == {("team", "a")}
    assert annotation_requests(v, W.gvk) == annotation_requests(o, W.gvk) == {("team", "alice")}
    assert v["metadata"]["resourceVersion"] == o["metadata"]["resourceVersion"] and "data" not in v
    assert (v["apiVersion"], v["kind"], v["metadata"]["labels"]) == (o["apiVersion"], o["kind"], {"l": "1"})
    assert len(json.dumps(v)) < 1000


def test_owner_mapping_any_matching_owner_reference():
    owners = [
        {"apiVersion": "torchdev.io/v1alpha1", "kind": "DevServer", "name": "a", "uid": "1",
         "controller": True},
        {"apiVersion": "torchdev.io/v1beta1", "kind": "DevServer", "name": "b", "uid": "2"},
        {"apiVersion": "other.io/v1alpha1", "kind": "DevServer", "name": "c", "uid": "3"},
        {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "d", "uid": "4"},
    ]
    o = obj(owners=owners, ns="team")
    assert owner_requests(o, W.gvk, True) == {("team", "a"), ("team", "b")}
    assert owner_requests(o, W.gvk, False) == {("", "a"), ("", "b")}


def test_annotation_mapping():
    ann = {"operator-sdk/primary-resource": "team/alice",
           "operator-sdk/primary-resource-type": "DevServer.torchdev.io"}
    assert annotation_requests(obj(ann=ann), W.gvk) == {("team", "alice")}
    ann2 = dict(ann, **{"operator-sdk/primary-resource": "cluster-thing"})
    assert annotation_requests(obj(ann=ann2), W.gvk) == {("", "cluster-thing")}
    ann3 = dict(ann, **{"operator-sdk/primary-resource-type": "TrainJob.torchdev.io"})
    assert annotation_requests(obj(ann=ann3), W.gvk) == set()


def test_find_k8s_objects_in_module_results():
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}
    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "b"}}
    res = {"changed": True, "result": cm, "invocation": {"module_args": {"definition": sts}},
           "results": [{"result": sts}], "resources": [cm]}
    found = find_k8s_objects(res)
    assert sorted(o["kind"] for o in found) == ["ConfigMap", "ConfigMap", "StatefulSet"]
