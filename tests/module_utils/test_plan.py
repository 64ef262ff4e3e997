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


def test_preserve_immutable_and_pvc_resizes():
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
    pvcs = [{"kind": "PersistentVolumeClaim", "metadata": {"name": n, "namespace": "ns"},
             "spec": {"resources": {"requests": {"storage": s}}}}
            for n, s in (("home-x-0", "100Gi"), ("home-x-1", "300Gi"), ("home-xy-0", "1Gi"), ("home-x-a", "1Gi"))]
    assert plan.pvc_resizes(pvcs, "x", "200Gi") == [{"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                                                  "metadata": {"name": "home-x-0", "namespace": "ns"},
                                                  "spec": {"resources": {"requests": {"storage": "200Gi"}}}}]


def test_applied_objects():
    one = {"changed": True, "result": {"kind": "StatefulSet"}}
    many = {"changed": True, "result": {"results": [{"result": {"kind": "Service"}}, {"result": {"kind": "StatefulSet"}}]}}
    assert plan.applied_objects(one) == [{"kind": "StatefulSet"}]
    assert [o["kind"] for o in plan.applied_objects(many)] == ["Service", "StatefulSet"]
    assert plan.applied_objects({"skipped": True}) == [] and plan.applied_objects(None) == []
    assert plan.find(plan.applied_objects(many), "StatefulSet") == {"kind": "StatefulSet"}
