"""Table-driven tests of plugins/module_utils/conditions.py (no cluster)."""

import pytest

from ansible_collections.torchdev.operator.plugins.module_utils import conditions

T0, T1 = "2025-01-01T00:00:00Z", "2025-01-02T00:00:00Z"


def cond(ctype, status, reason="R", message="", ltt=None, gen=None):
    c = {"type": ctype, "status": status, "reason": reason, "message": message}
    if gen is not None:
        c["observedGeneration"] = gen
    if ltt:
        c["lastTransitionTime"] = ltt
    return c


@pytest.mark.parametrize("name,existing,desired,expect_status,expect_time,expect_changed", [
    ("new condition gets now", [], [cond("Ready", "True")], "True", T1, True),
    ("unchanged keeps time", [cond("Ready", "True", ltt=T0)], [cond("Ready", "True")], "True", T0, False),
    ("status change updates time", [cond("Ready", "False", ltt=T0)], [cond("Ready", "True")], "True", T1, True),
    ("reason change keeps time", [cond("Ready", "False", "A", ltt=T0)], [cond("Ready", "False", "B")], "False", T0, True),
    ("message change keeps time", [cond("Ready", "False", message="a", ltt=T0)],
     [cond("Ready", "False", message="b")], "False", T0, True),
    ("missing live time is set", [cond("Ready", "True")], [cond("Ready", "True")], "True", T1, True),
    ("bool status normalised", [cond("Ready", "True", ltt=T0)], [{"type": "Ready", "status": True, "reason": "R"}],
     "True", T0, False),
])
def test_merge_conditions(name, existing, desired, expect_status, expect_time, expect_changed):
    merged, changed = conditions.merge_conditions(existing, desired, now=T1)
    (ready,) = [c for c in merged if c["type"] == "Ready"]
    assert ready["status"] == expect_status, name
    assert ready["lastTransitionTime"] == expect_time, name
    assert changed is expect_changed, name


def test_other_types_are_kept_and_order_is_stable():
    existing = [cond("Ready", "True", ltt=T0), cond("Degraded", "False", ltt=T0)]
    merged, changed = conditions.merge_conditions(existing, [cond("Progressing", "True"), cond("Ready", "True")], now=T1)
    assert [c["type"] for c in merged] == ["Ready", "Degraded", "Progressing"]
    assert changed


def test_observed_generation_default_and_change():
    existing = [cond("Ready", "True", ltt=T0, gen=1)]
    merged, changed = conditions.merge_conditions(existing, [cond("Ready", "True")], now=T1, observed_generation=2)
    assert merged[0]["observedGeneration"] == 2 and merged[0]["lastTransitionTime"] == T0 and changed
    merged, changed = conditions.merge_conditions(merged, [cond("Ready", "True")], now=T1, observed_generation=2)
    assert not changed


@pytest.mark.parametrize("bad", [{"status": "True"}, {"type": "Ready", "status": "Maybe"}, "Ready"])
def test_invalid_conditions(bad):
    with pytest.raises(ValueError):
        conditions.merge_conditions([], [bad])


@pytest.mark.parametrize("name,live,desired,wanted,expect_patch", [
    ("nothing changes", {"phase": "Running", "conditions": [cond("Ready", "True", ltt=T0)]},
     {"phase": "Running"}, [cond("Ready", "True")], None),
    ("field change", {"phase": "Provisioning"}, {"phase": "Running"}, None, {"phase": "Running"}),
    ("None removes", {"sshEndpoint": "x"}, {"sshEndpoint": None}, None, {"sshEndpoint": None}),
    ("None on absent is a no-op", {}, {"sshEndpoint": None}, None, None),
    ("int vs str differs", {"replicas": "1"}, {"replicas": 1}, None, {"replicas": 1}),
    ("status.conditions ignored", {"phase": "Running"}, {"phase": "Running", "conditions": [1]}, None, None),
    ("None in a map means absent", {"queue": {"name": "q", "workload": "w"}},
     {"queue": {"name": "q", "workload": "w", "position": None}}, None, None),
    ("None in a map removes the key", {"queue": {"name": "q", "position": 2}},
     {"queue": {"name": "q", "position": None}}, None, {"queue": {"name": "q", "position": None}}),
    ("a new map value", {}, {"queue": {"name": "q", "position": 1, "clusterQueue": None}}, None,
     {"queue": {"name": "q", "position": 1, "clusterQueue": None}}),
    ("empty live status", None, {"phase": "Pending"}, [cond("Ready", "False")],
     {"phase": "Pending", "conditions": [dict(cond("Ready", "False"), lastTransitionTime=T1)]}),
])
def test_status_patch(name, live, desired, wanted, expect_patch):
    patch, result = conditions.status_patch(live, desired, wanted, now=T1)
    assert patch == expect_patch, name
    if patch is None:
        assert result == (live or {}), name
    assert None not in [v for value in result.values() if isinstance(value, dict) for v in value.values()], name


@pytest.mark.parametrize("api_version,plural,ns,sub,path", [
    ("torchdev.io/v1alpha1", "devservers", "ns", "status", "/apis/torchdev.io/v1alpha1/namespaces/ns/devservers/x/status"),
    ("torchdev.io/v1alpha1", "devserverflavors", None, None, "/apis/torchdev.io/v1alpha1/devserverflavors/x"),
    ("v1", "configmaps", "ns", None, "/api/v1/namespaces/ns/configmaps/x"),
])
def test_resource_path(api_version, plural, ns, sub, path):
    assert conditions.resource_path(api_version, plural, "x", ns, sub) == path


@pytest.mark.parametrize("kind,plural", [("DevServer", "devservers"), ("DevServerFlavor", "devserverflavors"),
                                         ("Policy", "policies"), ("Ingress", "ingresses"), ("Gateway", "gateways")])
def test_default_plural(kind, plural):
    assert conditions.default_plural(kind) == plural



@pytest.mark.parametrize("result,reason,transient", [
    ({"msg": "FlavorNotFound: DevServerFlavor x does not exist"}, "FlavorNotFound", False),
    ({"msg": "InvalidSpec: bad"}, "InvalidSpec", False),
    ({"msg": "Failed to apply object: b'{...\"code\":422}'", "reason": "Unprocessable Entity"}, "InvalidSpec", False),
    ({"msg": "Failed to retrieve requested object: (500)"}, "ReconcileError", True),
    ({}, "ReconcileError", True),
])
def test_failure_reason(result, reason, transient):
    assert conditions.failure_reason(result) == {"reason": reason, "transient": transient}


# kubernetes.core.k8s failures as they read (captured against kubesim's fault injection)
def _apply_failed(code, reason):
    return {"failed": True, "reason": reason,
            "msg": 'Failed to apply object: {"kind":"Status","apiVersion":"v1","status":"Failure","code":%d}' % code}


@pytest.mark.parametrize("result,again", [
    (_apply_failed(409, "Conflict"), True),
    (_apply_failed(429, "Too Many Requests"), True),
    (_apply_failed(500, "Internal Server Error"), True),
    (_apply_failed(503, "Service Unavailable"), True),
    ({"failed": True, "msg": "Failed to apply object: ('Connection aborted.', RemoteDisconnected('Remote end "
                             "closed connection without response'))"}, True),
    ({"failed": True, "msg": "HTTPConnectionPool(host='127.0.0.1', port=1): Max retries exceeded with url: /api"}, True),
    (_apply_failed(422, "Unprocessable Entity"), False),
    (_apply_failed(403, "Forbidden"), False),
    (_apply_failed(404, "Not Found"), False),
    ({"failed": True, "msg": "failed to get DevUser x: 500 Internal Server Error", "status_code": 500}, True),
    ({"failed": True, "msg": "InvalidSpec: bad"}, False),
    ({"changed": True}, False),                      # a success is never retried
    ({"skipped": True}, False),
    (None, False),
])
def test_retryable(result, again):
    assert conditions.retryable(result) is again


def test_failure_message_is_compact_and_bounded():
    assert conditions.failure_message({"msg": "a\n  b"}) == "a b"
    assert len(conditions.failure_message({"msg": "x" * 5000})) == 1024


@pytest.mark.parametrize("result,explicit,reason", [
    ({"msg": "InsufficientGPUs: nprocsPerNode (2) exceeds"}, None, "InsufficientGPUs"),
    ({}, "InsufficientGPUs", "InsufficientGPUs"),
])
def test_insufficient_gpus_is_permanent(result, explicit, reason):
    assert conditions.failure_reason(result, explicit) == {"reason": reason, "transient": False}
