"""Table-driven tests of plugins/module_utils/plan.py."""

import pytest

from ansible_collections.torchdev.operator.plugins.module_utils import constants, plan


def _obj(kind="ConfigMap", name="x", data=None, uid="u"):
    return {"apiVersion": "v1", "kind": kind,
            "metadata": {"name": name, "namespace": "ns", "ownerReferences": [{"uid": uid, "controller": True}]},
            "data": data or {"k": "v"}}

def _pvc(name, size, uid="u"):
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": "ns", "ownerReferences": [{"uid": uid, "controller": True}]},
            "spec": {"resources": {"requests": {"storage": size}}}}

_CM = plan.stamp([_obj()])[0]

_STALE = _obj(kind="Service", name="x-ssh")

_RESIZE = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
           "metadata": {"name": "home-x-0", "namespace": "ns"},
           "spec": {"resources": {"requests": {"storage": "200Gi"}}}}


@pytest.mark.parametrize("desired,live,expected", [
    ({"a": 1}, {"a": 1, "b": 2}, True),
    ({"a": 1}, {"a": 2}, False),
    ({"a": [1, 2]}, {"a": [1, 2]}, True),
    ({"a": [1]}, {"a": [1, 2]}, False),  # a removed list element is drift
    ({"a": [{"x": 1}]}, {"a": [{"x": 1, "default": True}]}, True),
    ({"a": False}, {}, True),  # the apiserver omits false / empty
    ({"a": []}, {"a": None}, True),
    ({"resources": {"limits": {"cpu": "1"}}}, {"resources": {"limits": {"cpu": "1000m"}}}, True),
    ({"resources": {"limits": {"memory": "1Gi"}}}, {"resources": {"limits": {"memory": "1024Mi"}}}, True),
    ({"value": "1"}, {"value": "1.0"}, False),  # only quantity fields compare by value
    ({"port": 22}, {"port": "22"}, False),
    # named items: merged by name, kept in the order they have (a volume added later is last)
    ({"v": [{"name": "a", "x": 1}, {"name": "b"}]}, {"v": [{"name": "b"}, {"name": "a", "x": 1}]}, True),
    ({"v": [{"name": "a", "x": 1}, {"name": "b"}]}, {"v": [{"name": "b"}, {"name": "a", "x": 2}]}, False),
    ({"v": [{"name": "a"}, {"name": "b"}]}, {"v": [{"name": "a"}, {"name": "c"}]}, False),
    ({"v": [{"name": "a"}]}, {"v": [{"name": "a"}, {"name": "b"}]}, False),  # one more is drift too
    ({"args": ["b", "a"]}, {"args": ["a", "b"]}, False),  # plain lists keep their order
    ({"v": [{"name": "a"}, {"name": "a", "x": 1}]}, {"v": [{"name": "a", "x": 1}, {"name": "a"}]}, False),
])
def test_is_subset(desired, live, expected):
    assert plan.is_subset(desired, live) is expected


def test_drift_stamp_and_prune():
    desired = plan.stamp([_obj()])
    assert desired[0]["metadata"]["annotations"][constants.DESIRED_HASH_ANNOTATION]
    assert plan.drift(desired, []) == desired  # missing -> write
    assert plan.drift(desired, [desired[0]]) == []  # identical -> nothing
    live = [dict(desired[0], data={"k": "v", "extra": "1"})]
    assert plan.drift(desired, live) == []  # same intent, extra fields are not ours
    edited = [dict(desired[0], data={"k": "changed"})]
    assert plan.drift(desired, edited) == desired  # someone edited a field we manage
    newer = plan.stamp([_obj(data={"k": "v", "k2": "v2"})])
    assert plan.drift(plan.stamp([_obj()]), newer) == plan.stamp([_obj()])  # intent changed (a key removed)
    # k8s_info loop results are accepted as "observed" too
    assert plan.drift(desired, [{"resources": [desired[0]]}]) == []
    stale = _obj(kind="Service", name="x-ssh")
    other = _obj(kind="Service", name="foreign", uid="someone-else")
    assert plan.prune([desired[0], stale, other], desired, "u") == [
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x-ssh", "namespace": "ns"}}]


@pytest.mark.parametrize("desired, observed, kept, to_apply, to_prune", [
    ([_CM], [], [], [_CM], []),                          # nothing exists yet
    ([_CM], [_CM], [], [], []),                          # settled: nothing to write
    ([_CM], [_CM, _STALE], [], [], [{"apiVersion": "v1", "kind": "Service",
                                     "metadata": {"name": "x-ssh", "namespace": "ns"}}]),
    # a kept PVC is compared (the resize is written) but never pruned, even when owned
    ([_CM, _RESIZE], [_CM], [_pvc("home-x-0", "100Gi")], [_RESIZE], []),
    ([_CM], [_CM], [_pvc("home-x-0", "100Gi")], [], []),
])
def test_plan_is_drift_and_prune_in_one(desired, observed, kept, to_apply, to_prune):
    got = plan.plan(desired, observed, "u", kept)
    assert got == {"objects": desired, "to_apply": to_apply, "to_prune": to_prune}
    assert got["to_apply"] == plan.drift(desired, observed + kept)
    assert got["to_prune"] == plan.prune(observed, desired, "u")


def test_preserve_immutable():
    desired = {"kind": "StatefulSet", "spec": {"serviceName": "x", "volumeClaimTemplates": [
        {"metadata": {"name": "home"}, "spec": {"resources": {"requests": {"storage": "200Gi"}}}}]}}
    live = {"kind": "StatefulSet", "spec": {"serviceName": "x", "volumeClaimTemplates": [
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "home", "creationTimestamp": None},
         "spec": {"resources": {"requests": {"storage": "100Gi"}}}, "status": {"phase": "Pending"}}]}}
    out = plan.preserve_immutable([desired, {"kind": "Service"}], live)
    vct = out[0]["spec"]["volumeClaimTemplates"][0]
    assert vct == {"metadata": {"name": "home"}, "spec": {"resources": {"requests": {"storage": "100Gi"}}}}
    assert out[1] == {"kind": "Service"}
    assert plan.preserve_immutable(desired, {}) == desired


EXPANDS = {"metadata": {"name": "fast"}, "allowVolumeExpansion": True}
FIXED = {"metadata": {"name": "fixed"}}


def _pvc(name, size="100Gi", cls="fast", phase="Bound", **extra):
    pvc = {"kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": "ns"},
           "spec": {"storageClassName": cls, "resources": {"requests": {"storage": size}}}, "status": {"phase": phase}}
    for key, value in extra.items():
        pvc[key] = value
    return pvc


def _grow(name, size="200Gi"):
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": "ns"},
            "spec": {"resources": {"requests": {"storage": size}}}}


FIXED_MSG = ("claim home-x-0 cannot grow from 100Gi to 200Gi: its StorageClass fixed does not allow volume expansion "
             "(allowVolumeExpansion is not true; once an admin sets it, the next reconcile grows the claim)")


@pytest.mark.parametrize("pvcs, size, classes, apply, refused", [
    # grows a smaller bound claim of an expandable class; leaves equal, larger and other claims
    ([_pvc("home-x-0"), _pvc("home-x-1", "300Gi"), _pvc("home-x-2", "200Gi"), _pvc("home-xy-0", "1Gi"),
      _pvc("home-x-a", "1Gi"), _pvc("other-x-0", "1Gi")], "200Gi", [EXPANDS], [_grow("home-x-0")], []),
    # the same size in other units is no growth; one class or a list of classes
    ([_pvc("home-x-0", "1Ti")], "1024Gi", EXPANDS, [], []),
    ([_pvc("home-x-0")], "200Gi", EXPANDS, [_grow("home-x-0")], []),
    # a class without allowVolumeExpansion, with it false or a string "true": refused
    ([_pvc("home-x-0", cls="fixed")], "200Gi", [FIXED, EXPANDS], [],
     [("home-x-0", "fixed", "100Gi", "ResizeNotSupported", FIXED_MSG)]),
    ([_pvc("home-x-0", cls="fixed")], "200Gi", [dict(FIXED, allowVolumeExpansion=False)], [],
     [("home-x-0", "fixed", "100Gi", "ResizeNotSupported", FIXED_MSG)]),
    ([_pvc("home-x-0", cls="fixed")], "200Gi", [dict(FIXED, allowVolumeExpansion="true")], [],
     [("home-x-0", "fixed", "100Gi", "ResizeNotSupported", FIXED_MSG)]),
    # the class was not found (GET answered null), or the claim names none / ""
    ([_pvc("home-x-0", cls="gone")], "200Gi", None, [],
     [("home-x-0", "gone", "100Gi", "ResizeNotSupported",
       "claim home-x-0 cannot grow from 100Gi to 200Gi: its StorageClass gone does not exist")]),
    ([_pvc("home-x-0", cls="")], "200Gi", [EXPANDS], [],
     [("home-x-0", "", "100Gi", "ResizeNotSupported", "claim home-x-0 cannot grow from 100Gi to 200Gi: it has no "
       "StorageClass (only a dynamically provisioned claim can be resized)")]),
    # the beta annotation wins over spec.storageClassName, as in kube-apiserver
    ([_pvc("home-x-0", metadata={"name": "home-x-0", "namespace": "ns",
                                 "annotations": {"volume.beta.kubernetes.io/storage-class": "fixed"}})],
     "200Gi", [FIXED, EXPANDS], [], [("home-x-0", "fixed", "100Gi", "ResizeNotSupported", FIXED_MSG)]),
    # not bound yet: pending, whatever the class
    ([_pvc("home-x-0", phase="Pending")], "200Gi", [EXPANDS], [],
     [("home-x-0", "fast", "100Gi", "ResizePending", "claim home-x-0 is Pending, not bound: it grows from 100Gi "
       "to 200Gi once bound")]),
    ([_pvc("home-x-0", status=None)], "200Gi", [EXPANDS], [],
     [("home-x-0", "fast", "100Gi", "ResizePending", "claim home-x-0 is not bound yet, not bound: it grows from "
       "100Gi to 200Gi once bound")]),
    # a claim without a request grows (as before); an unreadable one is left alone
    ([_pvc("home-x-0", spec={"storageClassName": "fast"})], "200Gi", [EXPANDS], [_grow("home-x-0")], []),
    ([_pvc("home-x-0", "lots")], "200Gi", [EXPANDS], [], []),
    ([_pvc("home-x-0", {"a": 1})], "200Gi", [EXPANDS], [], []),
    # huge sizes compare by value
    ([_pvc("home-x-0", "64Ti")], str(2 ** 60), [EXPANDS], [_grow("home-x-0", str(2 ** 60))], []),
    ([_pvc("home-x-0", "9" * 40)], "64Ti", [EXPANDS], [], []),
    # hostile input: odd PVCs, classes, sizes, names; never raises
    ([None, 1, "x", [], {}, {"metadata": None}, {"metadata": {"name": 5}}, {"kind": "Pod", "metadata": {"name": "home-x-0"}},
      _pvc("home-x-0", spec="odd"), _pvc("home-x-1", spec={"resources": []})], "200Gi",
     [None, 1, {"metadata": {"name": ["x"]}}, EXPANDS], [], [
         ("home-x-0", "", None, "ResizeNotSupported", "claim home-x-0 cannot grow from no request to 200Gi: it has "
          "no StorageClass (only a dynamically provisioned claim can be resized)"),
         ("home-x-1", "", None, "ResizeNotSupported", "claim home-x-1 cannot grow from no request to 200Gi: it has "
          "no StorageClass (only a dynamically provisioned claim can be resized)")]),
    (None, "200Gi", [EXPANDS], [], []),
    ({"items": [_pvc("home-x-0")]}, "200Gi", [EXPANDS], [], []),
    ([_pvc("home-x-0")], "not a size", [EXPANDS], [], []),
    ([_pvc("home-x-0")], None, [EXPANDS], [], []),
    ([_pvc("home-x-0", cls="{{ lookup('env', 'HOME') }}" + "x" * 400)], "200Gi", [EXPANDS], [],
     [("home-x-0", "{{ lookup('env', 'HOME') }}" + "x" * 223 + "...", "100Gi", "ResizeNotSupported", None)]),
])
def test_home_resizes(pvcs, size, classes, apply, refused):
    got = plan.home_resizes(pvcs, "x", size, classes)
    assert got["apply"] == apply
    assert [(r["claim"], r["storageClass"], r["from"], r["reason"], r["message"] if want[4] else None)
            for r, want in zip(got["refused"], refused)] == refused
    assert len(got["refused"]) == len(refused)
    assert all(r["to"] == plan.quantity(size) for r in got["refused"])


def test_home_resizes_bad_name_or_claim():
    assert plan.home_resizes([_pvc("home-x-0")], None, "200Gi", [EXPANDS]) == {"apply": [], "refused": []}
    assert plan.home_resizes([_pvc("home-x-0")], "x", "200Gi", [EXPANDS], claim=3) == {"apply": [], "refused": []}
    assert plan.home_resizes([_pvc("data-x-0")], "x", "200Gi", [EXPANDS], claim="data")["apply"] == [_grow("data-x-0")]


def test_applied_objects():
    one = {"changed": True, "result": {"kind": "StatefulSet"}}
    many = {"changed": True, "result": {"results": [{"result": {"kind": "Service"}}, {"result": {"kind": "StatefulSet"}}]}}
    assert plan.applied_objects(one) == [{"kind": "StatefulSet"}]
    assert [o["kind"] for o in plan.applied_objects(many)] == ["Service", "StatefulSet"]
    assert plan.applied_objects({"skipped": True}) == [] and plan.applied_objects(None) == []
    assert plan.find(plan.applied_objects(many), "StatefulSet") == {"kind": "StatefulSet"}
