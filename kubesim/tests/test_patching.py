"""Tests for kubesim.patching: merge patch, JSON patch, strategic merge patch, server-side apply."""
from __future__ import annotations

import copy

import pytest

from kubesim.patching import (ConflictError, PatchError, fields_to_set, json_patch, merge_patch,
                              server_side_apply, set_to_fields, strategic_merge_patch,
                              update_managed_fields)

NOW = "2025-01-01T00:00:00Z"


def deployment() -> dict:
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"},
                     "finalizers": ["a", "b"],
                     "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "o1", "uid": "u1"}]},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "containers": [
                        {"name": "app", "image": "app:1",
                         "ports": [{"containerPort": 80}, {"containerPort": 81}],
                         "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                         "volumeMounts": [{"name": "data", "mountPath": "/data"}]},
                        {"name": "sidecar", "image": "side:1"},
                    ],
                    "initContainers": [{"name": "init", "image": "init:1"}],
                    "imagePullSecrets": [{"name": "s1"}],
                    "tolerations": [{"key": "t1", "operator": "Exists"}],
                    "volumes": [{"name": "data", "emptyDir": {}}],
                },
            },
        },
    }


def pod_spec(obj: dict) -> dict:
    return obj["spec"]["template"]["spec"]


# ------------------------------------------------------------------------ merge patch


@pytest.mark.parametrize("obj,patch,want", [
    ({"a": 1, "b": 2}, {"b": None}, {"a": 1}),
    ({"a": {"x": 1, "y": 2}}, {"a": {"y": None, "z": 3}}, {"a": {"x": 1, "z": 3}}),
    ({"a": [1, 2, 3]}, {"a": [4]}, {"a": [4]}),
    ({"a": 1}, {"b": {"c": None, "d": 1}}, {"a": 1, "b": {"d": 1}}),
    ({"a": {"x": 1}}, {"a": "s"}, {"a": "s"}),
    ({"a": "s"}, {"a": {"x": 1}}, {"a": {"x": 1}}),
    ({"metadata": {"labels": {"a": "1", "b": "2"}}}, {"metadata": {"labels": {"a": None}}},
     {"metadata": {"labels": {"b": "2"}}}),
])
def test_merge_patch(obj, patch, want):
    before = copy.deepcopy(obj), copy.deepcopy(patch)
    assert merge_patch(obj, patch) == want
    assert (obj, patch) == before  # inputs untouched


def test_merge_patch_rejects_non_object():
    with pytest.raises(PatchError) as e:
        merge_patch({}, [1])
    assert e.value.code == 400


# ------------------------------------------------------------------------ JSON patch


@pytest.mark.parametrize("ops,want", [
    ([{"op": "replace", "path": "/spec/replicas", "value": 3}], 3),
    ([{"op": "test", "path": "/spec/replicas", "value": 1},
      {"op": "replace", "path": "/spec/replicas", "value": 5}], 5),
    ([{"op": "remove", "path": "/spec/replicas"}], None),
])
def test_json_patch(ops, want):
    d = deployment()
    out = json_patch(d, ops)
    assert out["spec"].get("replicas") == want
    assert d == deployment()


@pytest.mark.parametrize("ops,code", [
    ([{"op": "test", "path": "/spec/replicas", "value": 2}], 422),
    ([{"op": "remove", "path": "/spec/nope"}], 422),
    ([{"op": "replace", "path": "/spec/template/spec/containers/9/image", "value": "x"}], 422),
    ([{"op": "frobnicate", "path": "/spec"}], 400),
    ([{"path": "/spec"}], 400),
    ({"op": "add"}, 400),
])
def test_json_patch_errors(ops, code):
    with pytest.raises(PatchError) as e:
        json_patch(deployment(), ops)
    assert e.value.code == code


# ------------------------------------------------------------------------ strategic merge patch


def _smp_deploy(patch):
    return strategic_merge_patch(deployment(), patch, "apps/v1", "Deployment")


def test_smp_containers_env_ports_and_delete():
    patch = {"spec": {"template": {"spec": {"containers": [
        {"name": "app", "image": "app:2",
         "env": [{"name": "B", "value": "20"}, {"name": "C", "value": "3"}],
         "ports": [{"containerPort": 81, "$patch": "delete"}, {"containerPort": 82}]},
        {"name": "sidecar", "$patch": "delete"},
        {"name": "new", "image": "new:1"},
    ]}}}}
    out = _smp_deploy(patch)
    cs = pod_spec(out)["containers"]
    assert [c["name"] for c in cs] == ["app", "new"]
    app = cs[0]
    assert app["image"] == "app:2"
    assert app["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "20"},
                          {"name": "C", "value": "3"}]
    assert app["ports"] == [{"containerPort": 80}, {"containerPort": 82}]
    assert app["volumeMounts"] == [{"name": "data", "mountPath": "/data"}]


@pytest.mark.parametrize("patch,check", [
    # tolerations have no merge strategy: replaced
    ({"spec": {"template": {"spec": {"tolerations": [{"key": "t2", "operator": "Exists"}]}}}},
     lambda o: pod_spec(o)["tolerations"] == [{"key": "t2", "operator": "Exists"}]),
    # volumeMounts merge by mountPath
    ({"spec": {"template": {"spec": {"containers": [{"name": "app", "volumeMounts": [
        {"name": "data", "mountPath": "/data", "readOnly": True},
        {"name": "cache", "mountPath": "/cache"}]}]}}}},
     lambda o: pod_spec(o)["containers"][0]["volumeMounts"] == [
         {"name": "data", "mountPath": "/data", "readOnly": True},
         {"name": "cache", "mountPath": "/cache"}]),
    # initContainers and imagePullSecrets merge by name
    ({"spec": {"template": {"spec": {"initContainers": [{"name": "init2", "image": "i:2"}],
                                     "imagePullSecrets": [{"name": "s2"}]}}}},
     lambda o: [c["name"] for c in pod_spec(o)["initContainers"]] == ["init", "init2"]
     and pod_spec(o)["imagePullSecrets"] == [{"name": "s1"}, {"name": "s2"}]),
    # volumes: merge by name, $retainKeys drops the old volume source
    ({"spec": {"template": {"spec": {"volumes": [
        {"name": "data", "$retainKeys": ["name", "hostPath"], "hostPath": {"path": "/x"}}]}}}},
     lambda o: pod_spec(o)["volumes"] == [{"name": "data", "hostPath": {"path": "/x"}}]),
    # ownerReferences merge by uid
    ({"metadata": {"ownerReferences": [{"apiVersion": "v1", "kind": "Y", "name": "o2", "uid": "u2"}]}},
     lambda o: [r["uid"] for r in o["metadata"]["ownerReferences"]] == ["u1", "u2"]),
    # finalizers: primitive merge list (union) and $deleteFromPrimitiveList
    ({"metadata": {"finalizers": ["c", "a"], "$deleteFromPrimitiveList/finalizers": ["b"]}},
     lambda o: o["metadata"]["finalizers"] == ["a", "c"]),
    # $patch: replace on a keyed list
    ({"spec": {"template": {"spec": {"containers": [{"$patch": "replace"},
                                                    {"name": "only", "image": "o:1"}]}}}},
     lambda o: pod_spec(o)["containers"] == [{"name": "only", "image": "o:1"}]),
    # $patch: replace on a map
    ({"spec": {"selector": {"$patch": "replace", "matchLabels": {"x": "y"}}}},
     lambda o: o["spec"]["selector"] == {"matchLabels": {"x": "y"}}),
    # $patch: delete on a map
    ({"spec": {"template": {"metadata": {"$patch": "delete"}}}},
     lambda o: "metadata" not in o["spec"]["template"]),
    # explicit $patch: merge is the default
    ({"spec": {"template": {"metadata": {"$patch": "merge", "labels": {"v": "2"}}}}},
     lambda o: o["spec"]["template"]["metadata"]["labels"] == {"app": "web", "v": "2"}),
    # null deletes
    ({"spec": {"replicas": None}, "metadata": {"labels": {"app": None}}},
     lambda o: "replicas" not in o["spec"] and o["metadata"]["labels"] == {}),
    # $setElementOrder reorders
    ({"spec": {"template": {"spec": {"$setElementOrder/containers": [{"name": "sidecar"}, {"name": "app"}],
                                     "containers": [{"name": "app", "image": "app:3"}]}}}},
     lambda o: [c["name"] for c in pod_spec(o)["containers"]] == ["sidecar", "app"]
     and pod_spec(o)["containers"][1]["image"] == "app:3"),
    # args are atomic
    ({"spec": {"template": {"spec": {"containers": [{"name": "app", "args": ["x"]}]}}}},
     lambda o: pod_spec(o)["containers"][0]["args"] == ["x"]),
])
def test_smp_table(patch, check):
    d = deployment()
    out = strategic_merge_patch(d, copy.deepcopy(patch), "apps/v1", "Deployment")
    assert check(out), out
    assert d == deployment()


def test_smp_pod_status_conditions_by_type():
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
           "spec": {"containers": [{"name": "c", "image": "i"}]},
           "status": {"conditions": [{"type": "Ready", "status": "False"},
                                     {"type": "PodScheduled", "status": "True"}]}}
    out = strategic_merge_patch(pod, {"status": {"conditions": [
        {"type": "Ready", "status": "True"}]}}, "v1", "Pod")
    assert out["status"]["conditions"] == [{"type": "Ready", "status": "True"},
                                           {"type": "PodScheduled", "status": "True"}]


def test_smp_custom_resource_is_415():
    with pytest.raises(PatchError) as e:
        strategic_merge_patch({"spec": {}}, {"spec": {"a": 1}}, "torchdev.io/v1", "DevServer")
    assert e.value.code == 415


def test_smp_missing_merge_key_is_422():
    with pytest.raises(PatchError) as e:
        _smp_deploy({"spec": {"template": {"spec": {"containers": [{"image": "x"}]}}}})
    assert e.value.code == 422


def test_smp_unknown_directive_is_400():
    with pytest.raises(PatchError) as e:
        _smp_deploy({"spec": {"$patch": "explode"}})
    assert e.value.code == 400


# ------------------------------------------------------------------------ server-side apply


def apply(existing, applied, manager, force=False, **kw):
    return server_side_apply(existing, applied, manager, force, "apps/v1", "Deployment", NOW, **kw)


def managers(obj):
    return {(e["manager"], e["operation"]): e["fieldsV1"] for e in obj["metadata"]["managedFields"]}


def small(replicas=None, image=None, labels=None, env=None, container="app"):
    spec: dict = {}
    if replicas is not None:
        spec["replicas"] = replicas
    if image is not None or env is not None:
        c = {"name": container}
        if image is not None:
            c["image"] = image
        if env is not None:
            c["env"] = env
        spec["template"] = {"spec": {"containers": [c]}}
    obj = {"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": "web", "namespace": "default"}, "spec": spec}
    if labels is not None:
        obj["metadata"]["labels"] = labels
    return obj


def test_ssa_create_fieldsv1_encoding():
    out = apply(None, small(replicas=2, image="app:1", labels={"app": "web"}), "mgr")
    assert out["spec"]["replicas"] == 2
    (entry,) = out["metadata"]["managedFields"]
    assert {k: entry[k] for k in ("manager", "operation", "apiVersion", "time", "fieldsType")} == {
        "manager": "mgr", "operation": "Apply", "apiVersion": "apps/v1", "time": NOW,
        "fieldsType": "FieldsV1"}
    assert entry["fieldsV1"] == {
        "f:metadata": {"f:labels": {"f:app": {}}},
        "f:spec": {"f:replicas": {},
                   "f:template": {"f:spec": {"f:containers": {
                       'k:{"name":"app"}': {".": {}, "f:image": {}, "f:name": {}}}}}}}
    assert "uid" not in out["metadata"] and "resourceVersion" not in out["metadata"]


def test_fieldsv1_roundtrip():
    fields = {"f:spec": {"f:ports": {'k:{"containerPort":80,"protocol":"TCP"}': {
        ".": {}, "f:containerPort": {}}}, "f:finalizers": {'v:"a"': {}}}}
    assert set_to_fields(fields_to_set(fields)) == fields


@pytest.mark.parametrize("second,force,expect_conflict,check", [
    # different field: merged, both own their fields
    (small(labels={"team": "x"}), False, False,
     lambda o: o["spec"]["replicas"] == 2 and o["metadata"]["labels"] == {"team": "x"}),
    # same value: shared ownership, no conflict
    (small(replicas=2), False, False, lambda o: o["spec"]["replicas"] == 2),
    # different value: conflict
    (small(replicas=5), False, True, None),
    # different value with force: wins, ownership moves
    (small(replicas=5), True, False,
     lambda o: o["spec"]["replicas"] == 5
     and "f:replicas" not in managers(o)[("a", "Apply")].get("f:spec", {})
     and "f:replicas" in managers(o)[("b", "Apply")]["f:spec"]),
    # a container applied by manager b merges into the keyed list
    (small(image="side:1", container="side"), False, False,
     lambda o: [c["name"] for c in o["spec"]["template"]["spec"]["containers"]] == ["app", "side"]),
    # changing a's container image conflicts
    (small(image="app:2"), False, True, None),
])
def test_ssa_two_managers(second, force, expect_conflict, check):
    first = apply(None, small(replicas=2, image="app:1"), "a")
    if expect_conflict:
        with pytest.raises(ConflictError) as e:
            apply(first, second, "b", force)
        assert e.value.code == 409
        assert '"a"' in e.value.message and e.value.conflicts
        assert e.value.causes[0]["reason"] == "FieldManagerConflict"
    else:
        out = apply(first, second, "b", force)
        assert check(out), out
        assert {m for m, _ in managers(out)} == {"a", "b"}


def test_ssa_conflict_message_lists_fields():
    first = apply(None, small(replicas=2, image="app:1"), "a")
    with pytest.raises(ConflictError) as e:
        apply(first, small(replicas=3, image="app:9"), "b")
    msg = e.value.message
    assert msg.startswith("Apply failed with 2 conflicts")
    assert ".spec.replicas" in msg and '.spec.template.spec.containers[name="app"].image' in msg


def test_ssa_same_manager_removes_omitted_fields():
    first = apply(None, small(replicas=2, image="app:1", labels={"a": "1", "b": "2"}), "a")
    out = apply(first, small(image="app:1", labels={"a": "1"}), "a")
    assert "replicas" not in out["spec"]
    assert out["metadata"]["labels"] == {"a": "1"}
    assert len(out["metadata"]["managedFields"]) == 1


def test_ssa_omitted_field_kept_when_other_manager_owns_it():
    first = apply(None, small(replicas=2, image="app:1"), "a")
    both = apply(first, small(replicas=2), "b")  # shared ownership of replicas
    out = apply(both, small(image="app:1"), "a")  # a drops replicas; b still owns it
    assert out["spec"]["replicas"] == 2
    out2 = apply(out, small(image="app:1", env=[{"name": "X", "value": "1"}]), "a")
    out3 = apply(out2, small(image="app:1"), "a")  # env item removed again
    assert "env" not in out3["spec"]["template"]["spec"]["containers"][0] or \
        out3["spec"]["template"]["spec"]["containers"][0]["env"] == []


def test_ssa_does_not_mutate_inputs_and_keeps_other_fields():
    live = apply(None, small(replicas=2), "a")
    live["metadata"]["uid"] = "uid-1"
    live["metadata"]["resourceVersion"] = "7"
    snapshot = copy.deepcopy(live)
    applied = small(replicas=3)
    out = apply(live, applied, "a")
    assert live == snapshot and applied == small(replicas=3)
    assert out["metadata"]["uid"] == "uid-1" and out["metadata"]["resourceVersion"] == "7"
    assert out["spec"]["replicas"] == 3


def test_ssa_update_managers_do_not_conflict_by_default():
    live = apply(None, small(replicas=2), "a")
    edited = copy.deepcopy(live)
    edited["spec"]["replicas"] = 4
    edited = update_managed_fields(live, edited, "kubectl-edit", "apps/v1", NOW)
    ms = managers(edited)
    assert "f:replicas" in ms[("kubectl-edit", "Update")]["f:spec"]
    assert ("a", "Apply") not in ms  # its only field moved to the editor
    out = apply(edited, small(replicas=6), "b")
    assert out["spec"]["replicas"] == 6
    with pytest.raises(ConflictError):
        apply(edited, small(replicas=7), "b", conflict_with_updates=True)


def test_ssa_crd_list_keys_and_schema():
    schema = {"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "workers": {"type": "array", "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["name"],
                    "items": {"type": "object", "properties": {"name": {"type": "string"},
                                                               "size": {"type": "integer"}}}},
        "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
        "args": {"type": "array", "items": {"type": "string"}}}}}}
    cr = {"apiVersion": "torchdev.io/v1", "kind": "DevServer", "metadata": {"name": "x"},
          "spec": {"workers": [{"name": "w1", "size": 1}], "tags": ["a"], "args": ["1"]}}
    cr2 = {"apiVersion": "torchdev.io/v1", "kind": "DevServer", "metadata": {"name": "x"},
           "spec": {"workers": [{"name": "w2", "size": 2}], "tags": ["b"], "args": ["2"]}}
    for kw in ({"schema": schema},
               {"list_keys": lambda p: {("spec", "workers"): ["name"], ("spec", "tags"): "set"}.get(tuple(p))}):
        live = server_side_apply(None, cr, "a", False, "torchdev.io/v1", "DevServer", NOW, **kw)
        out = server_side_apply(live, cr2, "b", True, "torchdev.io/v1", "DevServer", NOW, **kw)
        assert [w["name"] for w in out["spec"]["workers"]] == ["w1", "w2"]
        assert out["spec"]["tags"] == ["a", "b"]
        assert out["spec"]["args"] == ["2"]
        fa = managers(out)[("a", "Apply")]["f:spec"]
        assert 'k:{"name":"w1"}' in fa["f:workers"] and 'v:"a"' in fa["f:tags"]
        assert "f:args" not in fa  # forced away


def test_ssa_errors():
    with pytest.raises(PatchError) as e:
        apply(None, small(), "")
    assert e.value.code == 400
    bad = small()
    bad["metadata"]["managedFields"] = [{"manager": "x"}]
    with pytest.raises(PatchError) as e:
        apply(None, bad, "m")
    assert e.value.code == 400


def test_ssa_ports_key_uses_protocol_default():
    d = small(image="app:1")
    d["spec"]["template"]["spec"]["containers"][0]["ports"] = [{"containerPort": 80}]
    live = apply(None, d, "a")
    fields = managers(live)[("a", "Apply")]
    ports = fields["f:spec"]["f:template"]["f:spec"]["f:containers"]['k:{"name":"app"}']["f:ports"]
    assert list(ports) == ['k:{"containerPort":80,"protocol":"TCP"}']
    # the live object got defaulted by the server; applying again must not duplicate the port
    live["spec"]["template"]["spec"]["containers"][0]["ports"][0]["protocol"] = "TCP"
    d["spec"]["template"]["spec"]["containers"][0]["ports"][0]["name"] = "http"
    out = apply(live, d, "a")
    assert out["spec"]["template"]["spec"]["containers"][0]["ports"] == [
        {"containerPort": 80, "protocol": "TCP", "name": "http"}]


def test_ssa_keeps_entries_recorded_without_fields():
    live = apply(None, small(replicas=2), "a")
    live["metadata"]["managedFields"].append({"manager": "kubectl", "operation": "Update",
                                              "apiVersion": "apps/v1", "time": NOW,
                                              "fieldsType": "FieldsV1", "fieldsV1": {}})
    out = apply(live, small(replicas=3), "a")
    assert ("kubectl", "Update") in managers(out)
    # but a manager whose last field was forced away disappears
    out = apply(out, small(replicas=4), "b", force=True)
    assert ("a", "Apply") not in managers(out) and ("b", "Apply") in managers(out)
