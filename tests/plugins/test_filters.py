"""Table-driven tests of plugins/filter/torchdev.py (pure functions)."""

from decimal import Decimal

import pytest

import torchdev as f

GPU_FLAVOR = {
    "resources": {"requests": {"cpu": "7", "memory": "28Gi", "nvidia.com/gpu": 1},
                  "limits": {"cpu": "8", "memory": "30Gi", "nvidia.com/gpu": 1}},
    "gpu": {"type": "nvidia-a10g", "count": 1},
    "shmSize": "8Gi",
}


@pytest.mark.parametrize("value,expected", [
    ("1Gi", Decimal(2 ** 30)), ("500m", Decimal("0.5")), (8, Decimal(8)), ("1.5", Decimal("1.5")),
    ("1e3", Decimal(1000)), ("2k", Decimal(2000)), ("100Mi", Decimal(100 * 2 ** 20)), ("0.5Gi", Decimal(2 ** 29)),
])
def test_parse_quantity(value, expected):
    assert f.parse_quantity(value) == expected


@pytest.mark.parametrize("bad", ["", "abc", "1GB", "1 Gi", None, True, "--1"])
def test_parse_quantity_rejects(bad):
    with pytest.raises(ValueError):
        f.parse_quantity(bad)


@pytest.mark.parametrize("a,b,cmp", [("1Gi", "1024Mi", 0), ("1", "1000m", 0), ("200Gi", "100Gi", 1), (1, "2", -1)])
def test_quantity_cmp(a, b, cmp):
    assert f.quantity_cmp(a, b) == cmp


@pytest.mark.parametrize("email,label", [
    ("jane@example.com", "jane_at_example.com"),
    ("j.o+x@ex-ample.co.uk", "j.o-x_at_ex-ample.co.uk"),
    ("-weird@x.y", "weird_at_x.y"),
])
def test_owner_label(email, label):
    assert f.owner_label(email) == label


def test_owner_label_long_is_truncated_with_hash():
    value = f.owner_label("a" * 80 + "@example.com")
    assert len(value) <= 63 and value[-9] == "-"
    assert value != f.owner_label("a" * 81 + "@example.com")


def test_labels_and_selector():
    labels = f.labels("x", "a@b.c", "gpu")
    assert labels["app.kubernetes.io/name"] == "devserver"
    assert labels["torchdev.io/owner"] == "a_at_b.c" and labels["torchdev.io/flavor"] == "gpu"
    assert set(f.selector_labels("x").items()) <= set(labels.items())
    assert set(f.stable_labels("x").items()) <= set(labels.items())
    assert "torchdev.io/flavor" not in f.stable_labels("x")


@pytest.mark.parametrize("spec,expected", [
    (GPU_FLAVOR, {"requests": {"cpu": "7", "memory": "28Gi", "nvidia.com/gpu": "1"},
                  "limits": {"cpu": "8", "memory": "30Gi", "nvidia.com/gpu": "1"}}),
    ({"resources": {"requests": {"cpu": 2}}}, {"requests": {"cpu": "2"}}),
    ({"gpu": {"type": "nvidia-h100", "count": 8}}, {"requests": {"nvidia.com/gpu": "8"}, "limits": {"nvidia.com/gpu": "8"}}),
    ({}, {}),
    # seed 000's gpu-large: the GPUs only in resources
    ({"resources": {"requests": {"cpu": 8, "nvidia.com/gpu": 1}, "limits": {"cpu": 16, "nvidia.com/gpu": 1}}},
     {"requests": {"cpu": "8", "nvidia.com/gpu": "1"}, "limits": {"cpu": "16", "nvidia.com/gpu": "1"}}),
    ({"gpu": {"count": 2}}, {"requests": {"nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": "2"}}),
])
def test_resources(spec, expected):
    assert f.resources(spec) == expected


@pytest.mark.parametrize("spec,fragment", [
    ({"resources": {"requests": {"cpu": "4"}, "limits": {"cpu": "2"}}}, "lower than the request"),
    ({"resources": {"limits": {"nvidia.com/gpu": 2}}, "gpu": {"type": "t", "count": 1}}, "gpu.count (1)"),
    ({"resources": {"requests": {"nvidia.com/gpu": 1}, "limits": {"nvidia.com/gpu": 2}}, "gpu": {"type": "t", "count": 2}},
     "must equal the limit"),
    ({"resources": {"limits": {"memory": "4Gi"}}, "shmSize": "8Gi"}, "exceeds the memory limit"),
    ({"resources": {"limits": {"cpu": "lots"}}}, "invalid quantity"),
    ({"resources": {"limits": {"nvidia.com/gpu": "500m"}}, "gpu": {"type": "t", "count": 0}}, "whole number"),
])
def test_flavor_errors(spec, fragment):
    errors = f.flavor_errors(spec)
    assert any(fragment in e for e in errors), errors
    with pytest.raises(ValueError):
        f.resources(spec)


@pytest.mark.parametrize("spec,count", [
    ({}, 0),
    ({"gpu": {"type": "nvidia-h100", "count": 8}}, 8),
    ({"gpu": {"count": 0}, "resources": {"limits": {"cpu": 2}}}, 0),
    ({"resources": {"limits": {"nvidia.com/gpu": 2}}}, 2),
    ({"resources": {"requests": {"nvidia.com/gpu": "4"}}}, 4),
    ({"gpu": {}, "resources": {"requests": {"nvidia.com/gpu": 1}, "limits": {"nvidia.com/gpu": 1}}}, 1),
    ({"gpu": {"count": 2}, "resources": {"limits": {"nvidia.com/gpu": 2}}}, 2),
])
def test_flavor_gpu_count(spec, count):
    assert f.flavor_gpu_count(spec) == count


@pytest.mark.parametrize("spec", [{"resources": {"limits": {"nvidia.com/gpu": "500m"}}},
                                  {"resources": {"limits": {"nvidia.com/gpu": "two"}}}])
def test_flavor_gpu_count_rejects_fractions(spec):
    with pytest.raises(ValueError):
        f.flavor_gpu_count(spec)


@pytest.mark.parametrize("spec,warnings", [
    ({"mode": "standalone"}, []),
    ({"mode": "distributed", "distributed": {"worldSize": 2}}, []),
    ({"mode": "standalone", "distributed": {"worldSize": 4}}, ["spec.distributed is ignored: spec.mode is standalone"]),
    ({"distributed": {"worldSize": 4}}, ["spec.distributed is ignored"]),
])
def test_spec_warnings(spec, warnings):
    got = f.spec_warnings(spec)
    assert len(got) == len(warnings) and all(g.startswith(w) for g, w in zip(got, warnings))
    assert f.spec_errors(dict(spec, owner="a@b.c", flavor="x")) == []


def test_valid_flavor_has_no_errors():
    assert f.flavor_errors(GPU_FLAVOR) == []
    assert f.flavor_errors({}) == []


def test_flavor_hash_ignores_informational_fields():
    base = f.flavor_hash(GPU_FLAVOR)
    assert f.flavor_hash(dict(GPU_FLAVOR, description="x", pricePerHour="9.99")) == base
    assert f.flavor_hash(dict(GPU_FLAVOR, shmSize="16Gi")) != base


@pytest.mark.parametrize("raw,error", [
    ([{"name": "A", "value": "1"}, {"name": "A", "value": "2"}], "duplicate"),
    ([{"name": "TORCHDEV_NAME", "value": "x"}], "reserved"),
    ([{"name": "HOME", "value": "/root"}], "reserved"),
    ([{"value": "x"}], "need a name"),
])
def test_env_errors(raw, error):
    with pytest.raises(ValueError, match=error):
        f.env(raw, {"HOME": "/home/dev"})


def test_env_order_and_value_from():
    out = f.env([{"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}, {"name": "C", "value": 3}],
                {"TORCHDEV_Z": 1, "TORCHDEV_A": "a"})
    assert out == [{"name": "TORCHDEV_A", "value": "a"}, {"name": "TORCHDEV_Z", "value": "1"},
                   {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}, {"name": "C", "value": "3"}]


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
])
def test_is_subset(desired, live, expected):
    assert f.is_subset(desired, live) is expected


def _obj(kind="ConfigMap", name="x", data=None, uid="u"):
    return {"apiVersion": "v1", "kind": kind,
            "metadata": {"name": name, "namespace": "ns", "ownerReferences": [{"uid": uid, "controller": True}]},
            "data": data or {"k": "v"}}


def test_drift_stamp_and_prune():
    desired = f.stamp([_obj()])
    assert desired[0]["metadata"]["annotations"][f.DESIRED_HASH_ANNOTATION]
    assert f.drift(desired, []) == desired  # missing -> write
    assert f.drift(desired, [desired[0]]) == []  # identical -> nothing
    live = [dict(desired[0], data={"k": "v", "extra": "1"})]
    assert f.drift(desired, live) == []  # same intent, extra fields are not ours
    edited = [dict(desired[0], data={"k": "changed"})]
    assert f.drift(desired, edited) == desired  # someone edited a field we manage
    newer = f.stamp([_obj(data={"k": "v", "k2": "v2"})])
    assert f.drift(f.stamp([_obj()]), newer) == f.stamp([_obj()])  # intent changed (a key removed)
    # k8s_info loop results are accepted as "observed" too
    assert f.drift(desired, [{"resources": [desired[0]]}]) == []
    stale = _obj(kind="Service", name="x-ssh")
    other = _obj(kind="Service", name="foreign", uid="someone-else")
    assert f.prune([desired[0], stale, other], desired, "u") == [
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x-ssh", "namespace": "ns"}}]


def _pvc(name, size, uid="u"):
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": "ns", "ownerReferences": [{"uid": uid, "controller": True}]},
            "spec": {"resources": {"requests": {"storage": size}}}}


_CM = f.stamp([_obj()])[0]
_STALE = _obj(kind="Service", name="x-ssh")
_RESIZE = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
           "metadata": {"name": "home-x-0", "namespace": "ns"},
           "spec": {"resources": {"requests": {"storage": "200Gi"}}}}


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
    got = f.plan(desired, observed, "u", kept)
    assert got == {"objects": desired, "to_apply": to_apply, "to_prune": to_prune}
    assert got["to_apply"] == f.drift(desired, observed + kept)
    assert got["to_prune"] == f.prune(observed, desired, "u")


def test_preserve_immutable_and_pvc_resizes():
    desired = {"kind": "StatefulSet", "spec": {"serviceName": "x", "volumeClaimTemplates": [
        {"metadata": {"name": "home"}, "spec": {"resources": {"requests": {"storage": "200Gi"}}}}]}}
    live = {"kind": "StatefulSet", "spec": {"serviceName": "x", "volumeClaimTemplates": [
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "home", "creationTimestamp": None},
         "spec": {"resources": {"requests": {"storage": "100Gi"}}}, "status": {"phase": "Pending"}}]}}
    out = f.preserve_immutable([desired, {"kind": "Service"}], live)
    vct = out[0]["spec"]["volumeClaimTemplates"][0]
    assert vct == {"metadata": {"name": "home"}, "spec": {"resources": {"requests": {"storage": "100Gi"}}}}
    assert out[1] == {"kind": "Service"}
    assert f.preserve_immutable(desired, {}) == desired
    pvcs = [{"kind": "PersistentVolumeClaim", "metadata": {"name": n, "namespace": "ns"},
             "spec": {"resources": {"requests": {"storage": s}}}}
            for n, s in (("home-x-0", "100Gi"), ("home-x-1", "300Gi"), ("home-xy-0", "1Gi"), ("home-x-a", "1Gi"))]
    assert f.pvc_resizes(pvcs, "x", "200Gi") == [{"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                                                  "metadata": {"name": "home-x-0", "namespace": "ns"},
                                                  "spec": {"resources": {"requests": {"storage": "200Gi"}}}}]


def _sts(ready=0, replicas=1, gen=1, observed=1, updated=None, cur="r1", upd="r1"):
    return {"metadata": {"generation": gen},
            "status": {"readyReplicas": ready, "replicas": replicas, "observedGeneration": observed,
                       "updatedReplicas": replicas if updated is None else updated,
                       "currentRevision": cur, "updateRevision": upd}}


@pytest.mark.parametrize("desired,sts,suspended,failed,phase", [
    (1, None, False, False, "Pending"),
    (1, _sts(0), False, False, "Provisioning"),
    (1, _sts(1), False, False, "Running"),
    (1, _sts(1, gen=2, observed=1), False, False, "Provisioning"),
    (1, _sts(1, upd="r2"), False, False, "Provisioning"),
    (0, _sts(0, 0), True, False, "Suspended"),
    (1, _sts(1), False, True, "Failed"),
])
def test_phase(desired, sts, suspended, failed, phase):
    assert f.phase(desired, sts, suspended, failed) == phase


def _cr(status=None, **spec):
    return {"metadata": {"name": "x", "namespace": "ns", "generation": 3}, "spec": spec, "status": status or {}}


@pytest.mark.parametrize("cr,sts,replicas,phase,ready_reason,progress_reason", [
    (_cr(), _sts(1), 1, "Running", "ServerReady", "Reconciled"),
    (_cr(), _sts(0), 1, "Provisioning", "PodsNotReady", "Provisioning"),
    (_cr({"phase": "Running"}), _sts(0, upd="r2"), 1, "Provisioning", "PodsNotReady", "RollingUpdate"),
    (_cr(suspend=True), _sts(0, 0), 0, "Suspended", "Suspended", "Reconciled"),
])
def test_devserver_status(cr, sts, replicas, phase, ready_reason, progress_reason):
    status = f.devserver_status(cr, sts, replicas, "h", "x-ssh", now="T")
    conds = {c["type"]: c for c in status["conditions"]}
    assert status["phase"] == phase
    assert conds["Ready"]["reason"] == ready_reason and conds["Progressing"]["reason"] == progress_reason
    assert conds["Degraded"] == {"type": "Degraded", "status": "False", "reason": "AsExpected", "message": "",
                                 "observedGeneration": 3}
    assert status["observedGeneration"] == 3 and status["flavorSpecHash"] == "h"
    assert status["ready"] == "%d/%d" % (status["readyReplicas"], replicas)
    assert status["sshEndpoint"] == "x-ssh.ns.svc.cluster.local:22" and status["sshCommand"] == "devctl ssh x -n ns"


def test_start_time_is_kept_while_running():
    assert f.devserver_status(_cr(), _sts(1), 1, "h", now="T1")["startTime"] == "T1"
    running = _cr({"phase": "Running", "startTime": "T0"})
    assert f.devserver_status(running, _sts(1), 1, "h", now="T1")["startTime"] == "T0"
    assert "startTime" not in f.devserver_status(_cr(), _sts(0), 1, "h", now="T1")


@pytest.mark.parametrize("result,reason,transient", [
    ({"msg": "FlavorNotFound: DevServerFlavor x does not exist"}, "FlavorNotFound", False),
    ({"msg": "InvalidSpec: bad"}, "InvalidSpec", False),
    ({"msg": "Failed to apply object: b'{...\"code\":422}'", "reason": "Unprocessable Entity"}, "InvalidSpec", False),
    ({"msg": "Failed to retrieve requested object: (500)"}, "ReconcileError", True),
    ({}, "ReconcileError", True),
])
def test_failure_reason(result, reason, transient):
    assert f.failure_reason(result) == {"reason": reason, "transient": transient}


def test_failure_message_is_compact_and_bounded():
    assert f.failure_message({"msg": "a\n  b"}) == "a b"
    assert len(f.failure_message({"msg": "x" * 5000})) == 1024


@pytest.mark.parametrize("spec,fragment", [
    ({"owner": "a@b.c", "flavor": "f", "persistentHomeSize": "10Mi"}, "at least 1Gi"),
    ({"owner": "a@b.c", "flavor": "f", "mode": "distributed", "distributed": {"worldSize": 3, "nprocsPerNode": 2}},
     "multiple"),
    ({"owner": "a@b.c", "flavor": "f", "env": [{"name": "TORCHDEV_X", "value": "1"}]}, "reserved"),
    ({"flavor": "f"}, "owner is required"),
])
def test_spec_errors(spec, fragment):
    assert any(fragment in e for e in f.spec_errors(spec))


@pytest.mark.parametrize("spec,n", [({}, 1), ({"mode": "distributed", "distributed": {"worldSize": 8, "nprocsPerNode": 4}}, 2),
                                    ({"mode": "distributed", "distributed": {"worldSize": 4}}, 4)])
def test_replicas(spec, n):
    assert f.replicas(spec) == n


def test_flavor_notices():
    dss = [
        {"metadata": {"name": "a", "namespace": "n1"}, "spec": {"flavor": "gpu"}},
        {"metadata": {"name": "b", "namespace": "n2", "annotations": {f.FLAVOR_HASH_ANNOTATION: "h"}}, "spec": {"flavor": "gpu"}},
        {"metadata": {"name": "c", "namespace": "n3"}, "spec": {"flavor": "cpu"}},
        {"metadata": {"name": "d", "namespace": "n4", "deletionTimestamp": "t"}, "spec": {"flavor": "gpu"}},
    ]
    assert [d["metadata"]["name"] for d in f.flavor_users(dss, "gpu")] == ["a", "b"]
    assert f.flavor_notices(dss, "gpu", "h") == [{"apiVersion": f.API_VERSION, "kind": "DevServer", "metadata": {
        "name": "a", "namespace": "n1", "annotations": {f.FLAVOR_HASH_ANNOTATION: "h"}}}]


def test_applied_objects():
    one = {"changed": True, "result": {"kind": "StatefulSet"}}
    many = {"changed": True, "result": {"results": [{"result": {"kind": "Service"}}, {"result": {"kind": "StatefulSet"}}]}}
    assert f.applied_objects(one) == [{"kind": "StatefulSet"}]
    assert [o["kind"] for o in f.applied_objects(many)] == ["Service", "StatefulSet"]
    assert f.applied_objects({"skipped": True}) == [] and f.applied_objects(None) == []
    assert f.find(f.applied_objects(many), "StatefulSet") == {"kind": "StatefulSet"}


def test_filter_module_wraps_errors():
    from ansible.errors import AnsibleFilterError

    filters = f.FilterModule().filters()
    assert filters["torchdev_owner_label"]("a@b.c") == "a_at_b.c"
    with pytest.raises(AnsibleFilterError):
        filters["torchdev_quantity"]("lots")


def _progressing_since(ts, phase="Provisioning"):
    return {"phase": phase, "conditions": [
        {"type": "Progressing", "status": "True", "reason": "Provisioning", "lastTransitionTime": ts}]}


@pytest.mark.parametrize("status,now,expected", [
    (_progressing_since("2026-01-01T00:00:00Z"), "2026-01-01T00:00:01Z", "2s"),      # just started
    (_progressing_since("2026-01-01T00:00:00Z"), "2026-01-01T00:01:00Z", "15s"),     # backing off
    (_progressing_since("2026-01-01T00:00:00Z"), "2026-01-01T02:00:00Z", "60s"),     # capped
    (_progressing_since("2026-01-01T00:00:00Z", "Pending"), "2026-01-01T00:00:20Z", "5s"),
    (_progressing_since("2026-01-01T00:00:00Z", "Queued"), "2026-01-01T00:00:08Z", "2s"),  # polls for admission
    (_progressing_since("2026-01-01T00:00:00Z", "Queued"), "2026-01-01T05:00:00Z", "60s"),
    ({"phase": "Provisioning"}, "2026-01-01T00:00:00Z", "2s"),                         # no condition yet
    (_progressing_since("2026-01-01T00:00:00Z", "Running"), "2026-01-01T00:00:01Z", ""),
    ({"phase": "Suspended"}, None, ""),
    ({}, None, ""),
])
def test_requeue_period(status, now, expected):
    assert f.requeue_period(status, now) == expected


def test_requeue_period_rejects_bad_time():
    with pytest.raises(Exception, match="RFC 3339"):
        f.requeue_period(_progressing_since("yesterday"), "2026-01-01T00:00:00Z")


def _requeue_action():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "plugins" / "action" / "requeue_after.py"
    spec = importlib.util.spec_from_file_location("requeue_after_action", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("period,expected", [("5s", "5s"), (" 1m30s ", "1m30s"), ("", ""), (None, ""),
                                             ("250ms", "250ms")])
def test_requeue_after_period(period, expected):
    assert _requeue_action().check_period(period) == expected


@pytest.mark.parametrize("period", ["5", "soon", "5 s", "-1s"])
def test_requeue_after_rejects(period):
    with pytest.raises(ValueError, match="Go duration"):
        _requeue_action().check_period(period)
