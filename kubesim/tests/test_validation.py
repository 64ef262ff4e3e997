"""Tests for kubesim.validation: built-in kinds, names, CRD admission (prune/default/schema/CEL)."""
from __future__ import annotations

import copy
import glob
import os
from pathlib import Path

import pytest
import yaml

from kubesim import kueue as kq, validation as V
from kubesim.errors import ApiError

REPO = Path(__file__).resolve().parents[2]
KUEUE_DIR = str(kq.crds_dir())
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def causes_of(exc: ApiError) -> list[dict]:
    return exc.details.get("causes", [])


def fields_of(exc: ApiError) -> set[str]:
    return {c["field"] for c in causes_of(exc)}


# ------------------------------------------------------------------------ built-in kinds


def pod() -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default", "labels": {"app": "x"}},
            "spec": {"containers": [{"name": "c", "image": "nginx:1",
                                     "ports": [{"containerPort": 80, "protocol": "TCP"}],
                                     "env": [{"name": "A", "value": "1"}],
                                     "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                                                   "limits": {"nvidia.com/gpu": 1}}}],
                     "restartPolicy": "Always",
                     "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}]}}


VALID_BUILTINS = [
    pod(),
    {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "s"},
     "spec": {"serviceName": "s", "replicas": 2, "selector": {"matchLabels": {"a": "b"}},
              "podManagementPolicy": "Parallel",
              "template": {"metadata": {"labels": {"a": "b"}},
                           "spec": {"containers": [{"name": "c", "image": "i"}]}},
              "volumeClaimTemplates": [{"metadata": {"name": "data"},
                                        "spec": {"accessModes": ["ReadWriteOnce"],
                                                 "resources": {"requests": {"storage": "1Gi"}}}}]}},
    {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc"},
     "spec": {"clusterIP": "None", "selector": {"a": "b"},
              "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}},
    {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "pvc"},
     "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "standard",
              "resources": {"requests": {"storage": "10Gi"}}}},
    {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
     "spec": {"template": {"spec": {"restartPolicy": "Never",
                                    "containers": [{"name": "c", "image": "i"}]}}}},
    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": {"a": "b"}},
]


@pytest.mark.parametrize("obj", VALID_BUILTINS, ids=lambda o: o["kind"])
def test_builtin_valid(obj):
    V.validate_builtin(obj)


def _mutate(path, value):
    def f(o):
        node = o
        for p in path[:-1]:
            node = node[p]
        node[path[-1]] = value
        return o
    return f


@pytest.mark.parametrize("mutate,field,reason", [
    (_mutate(["spec", "containers", 0, "imagee"], "x"), "spec.containers[0].imagee", "FieldValueInvalid"),
    (_mutate(["spec", "bogus"], 1), "spec.bogus", "FieldValueInvalid"),
    (_mutate(["metadata", "labelz"], {}), "metadata.labelz", "FieldValueInvalid"),
    (_mutate(["spec", "containers", 0, "ports", 0, "containerPort"], "eighty"),
     "spec.containers[0].ports[0].containerPort", "FieldValueTypeInvalid"),
    (lambda o: (o["spec"]["containers"][0].pop("name"), o)[1], "spec.containers[0].name",
     "FieldValueRequired"),
    (_mutate(["spec", "containers", 0, "resources", "limits", "cpu"], {"x": 1}),
     "spec.containers[0].resources.limits.cpu", "FieldValueTypeInvalid"),
])
def test_builtin_invalid(mutate, field, reason):
    with pytest.raises(ApiError) as e:
        V.validate_builtin(mutate(pod()))
    assert e.value.code == 422
    assert e.value.reason == "Invalid"
    assert field in fields_of(e.value), causes_of(e.value)
    assert any(c["field"] == field and c["reason"] == reason for c in causes_of(e.value))
    assert f"{field}:" in e.value.message and 'Pod "p" is invalid' in e.value.message


def test_builtin_statefulset_nested_path():
    sts = copy.deepcopy(VALID_BUILTINS[1])
    sts["spec"]["template"]["spec"]["containers"][0]["image"] = 5
    with pytest.raises(ApiError) as e:
        V.validate_builtin(sts)
    assert "spec.template.spec.containers[0].image" in fields_of(e.value)
    assert e.value.details["group"] == "apps"


def test_builtin_unknown_kind_is_accepted():
    V.validate_builtin({"apiVersion": "torchdev.io/v1", "kind": "DevServer", "metadata": {"name": "x"}})


def test_builtin_validation_builds_each_validator_once():
    """What keeps validation cheap: a kind's validator (its schema and the definitions it
    refers to) is built once and reused, not per request.  (A per-call time limit here failed
    on a loaded 2-core machine; speed figures belong in bench/.)"""
    V._builtin_validator.cache_clear()
    p = pod()
    for _ in range(3):
        V.validate_builtin(p)
    info = V._builtin_validator.cache_info()
    assert (info.misses, info.hits) == (1, 2)


# ------------------------------------------------------------------------ names and metadata


@pytest.mark.parametrize("name,resource,ok", [
    ("web-1", "pods", True),
    ("a.b.c", "pods", True),
    ("Web", "pods", False),
    ("-web", "pods", False),
    ("x" * 253, "configmaps", True),
    ("x" * 254, "configmaps", False),
    ("my-ns", "namespaces", True),
    ("my.ns", "namespaces", False),
    ("x" * 64, "namespaces", False),
    ("svc-1", "services", True),
    ("1svc", "services", False),
    ("system:controller", "clusterroles.rbac.authorization.k8s.io", True),
    ("a/b", "roles.rbac.authorization.k8s.io", False),
    ("my.devserver", "devservers.torchdev.io", True),
])
def test_validate_name(name, resource, ok):
    if ok:
        V.validate_name(name, True, "Thing", resource)
    else:
        with pytest.raises(ApiError) as e:
            V.validate_name(name, True, "Thing", resource)
        assert e.value.code == 422
        assert fields_of(e.value) == {"metadata.name"}


@pytest.mark.parametrize("kwargs,field", [
    ({"name": None}, "metadata.name"),
    ({"name": "", "generate_name": "web-"}, None),
    ({"name": "", "generate_name": "Web-"}, "metadata.generateName"),
    ({"name": "ok", "labels": {"app.kubernetes.io/name": "x-1", "a": ""}}, None),
    ({"name": "ok", "labels": {"bad key!": "x"}}, "metadata.labels"),
    ({"name": "ok", "labels": {"a": "x" * 64}}, "metadata.labels"),
    ({"name": "ok", "labels": {"a": "-x"}}, "metadata.labels"),
    ({"name": "ok", "labels": {"Example.com/a": "x"}}, "metadata.labels"),
    ({"name": "ok", "annotations": {"example.com/anything": "any value at all!"}}, None),
    ({"name": "ok", "annotations": {"/x": "y"}}, "metadata.annotations"),
])
def test_validate_name_metadata(kwargs, field):
    kw = dict(kwargs)
    name = kw.pop("name")
    if field is None:
        V.validate_name(name, True, "Pod", "pods", **kw)
    else:
        with pytest.raises(ApiError) as e:
            V.validate_name(name, True, "Pod", "pods", **kw)
        assert field in fields_of(e.value)


def test_validate_metadata_from_object():
    V.validate_metadata(pod(), True, "Pod", "pods")
    with pytest.raises(ApiError):
        V.validate_metadata({"metadata": {"name": "BAD"}}, True, "Pod", "pods")


# ------------------------------------------------------------------------ quantities
# (the grammar's table: kubesim/tests/test_quantity.py)


# ------------------------------------------------------------------------ CRDs

TRAINER_SCHEMA = {
    "type": "object",
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "required": ["image"],
            "x-kubernetes-validations": [
                {"rule": "self.minReplicas <= self.replicas",
                 "message": "minReplicas must not exceed replicas", "fieldPath": ".minReplicas"},
                {"rule": "!has(self.gpuMemory) || quantity(self.gpuMemory).isLessThan(quantity('80Gi'))",
                 "messageExpression": "'gpuMemory ' + self.gpuMemory + ' is too large'"},
                {"rule": "self.image.startsWith('registry.example.com/') || self.image.matches('^[a-z]+:[0-9.]+$')",
                 "reason": "FieldValueForbidden", "message": "image must come from the registry"},
            ],
            "properties": {
                "image": {"type": "string", "minLength": 1},
                "replicas": {"type": "integer", "format": "int32", "default": 1, "minimum": 1},
                "minReplicas": {"type": "integer", "default": 1},
                "mode": {"type": "string", "enum": ["train", "eval"], "default": "train"},
                "gpuMemory": {"type": "string"},
                "port": {"x-kubernetes-int-or-string": True,
                         "anyOf": [{"type": "integer"}, {"type": "string"}]},
                "queue": {"type": "string", "x-kubernetes-validations": [
                    {"rule": "self == oldSelf", "message": "queue is immutable"}]},
                "distributed": {
                    "type": "object",
                    "default": {},
                    "properties": {
                        "worldSize": {"type": "integer", "maximum": 16, "default": 1},
                        "backend": {"type": "string", "default": "nccl"},
                        "rdzv": {"type": "object", "default": {"port": 29400},
                                 "properties": {"port": {"type": "integer"},
                                                "host": {"type": "string", "default": "localhost"}}},
                    },
                },
                "resources": {"type": "object", "additionalProperties": {
                    "x-kubernetes-int-or-string": True,
                    "anyOf": [{"type": "integer"}, {"type": "string"}],
                    "x-kubernetes-validations": [{"rule": "isQuantity(string(self))",
                                                  "message": "must be a quantity"}]}},
                "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "workers": {
                    "type": "array", "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["name"], "maxItems": 3,
                    "items": {"type": "object", "required": ["name"],
                              "properties": {"name": {"type": "string", "maxLength": 8},
                                             "zone": {"type": "string",
                                                      "x-kubernetes-validations": [
                                                          {"rule": "self == oldSelf",
                                                           "message": "zone is immutable"}]}}},
                    "x-kubernetes-validations": [{"rule": "self.all(w, w.name != 'bad')",
                                                  "message": "no bad workers"}],
                },
                "startAt": {"type": "string", "format": "date-time", "nullable": True},
            },
        },
        "status": {"type": "object", "properties": {
            "phase": {"type": "string", "enum": ["Pending", "Running"]},
            "readyReplicas": {"type": "integer", "minimum": 0},
        }, "x-kubernetes-validations": [{"rule": "!has(self.readyReplicas) || self.readyReplicas < 1000"}]},
    },
}


def trainer_crd(schema=None, **over) -> dict:
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "trainers.ml.example.com"},
        "spec": {
            "group": "ml.example.com", "scope": "Namespaced",
            "names": {"kind": "Trainer", "plural": "trainers", "singular": "trainer",
                      "listKind": "TrainerList", "shortNames": ["tr"]},
            "versions": [{"name": "v1", "served": True, "storage": True,
                          "subresources": {"status": {}},
                          "schema": {"openAPIV3Schema": copy.deepcopy(schema or TRAINER_SCHEMA)}}],
        },
    }
    for k, v in over.items():
        crd["spec"][k] = v
    return crd


@pytest.fixture(scope="module")
def trainer() -> V.VersionSchema:
    return V.CRDModel(trainer_crd()).version("v1")


def tr(spec=None, status=None, **md) -> dict:
    o = {"apiVersion": "ml.example.com/v1", "kind": "Trainer",
         "metadata": {"name": "t1", "namespace": "default", **md},
         "spec": {"image": "registry.example.com/train:1", **(spec or {})}}
    if status is not None:
        o["status"] = status
    return o


def test_crd_model_basics():
    m = V.CRDModel(trainer_crd())
    assert (m.group, m.kind, m.plural, m.singular, m.namespaced) == (
        "ml.example.com", "Trainer", "trainers", "trainer", True)
    assert m.storage_version == "v1" and m.served_versions == ["v1"]
    assert "status" in m.subresources("v1")
    with pytest.raises(KeyError):
        m.version("v2")


def test_crd_defaults_nested(trainer):
    out = trainer.admit(tr())
    assert out["spec"]["replicas"] == 1 and out["spec"]["mode"] == "train"
    # defaulted object gets its own nested defaults applied, recursively
    assert out["spec"]["distributed"] == {"worldSize": 1, "backend": "nccl",
                                          "rdzv": {"port": 29400, "host": "localhost"}}
    # nested defaults inside an object that exists
    out = trainer.admit(tr({"distributed": {"worldSize": 4, "rdzv": {"port": 1}}}))
    assert out["spec"]["distributed"] == {"worldSize": 4, "backend": "nccl",
                                          "rdzv": {"port": 1, "host": "localhost"}}


def test_crd_admit_does_not_mutate_input(trainer):
    obj = tr({"junk": 1})
    snap = copy.deepcopy(obj)
    trainer.admit(obj)
    assert obj == snap


def test_crd_pruning(trainer):
    warnings: list[str] = []
    out = trainer.admit(tr({"junk": 1, "extra": {"anything": {"goes": [1]}},
                            "distributed": {"bogus": True}},
                           labels={"a": "b"}) | {"topLevelJunk": 1}, warnings=warnings)
    assert "junk" not in out["spec"] and "topLevelJunk" not in out
    assert "bogus" not in out["spec"]["distributed"]
    assert out["spec"]["extra"] == {"anything": {"goes": [1]}}  # preserve-unknown-fields
    assert out["metadata"]["labels"] == {"a": "b"}
    assert out["apiVersion"] == "ml.example.com/v1" and out["kind"] == "Trainer"
    assert 'unknown field "spec.junk"' in warnings and 'unknown field "topLevelJunk"' in warnings
    with pytest.raises(ApiError) as e:
        trainer.admit(tr({"junk": 1}), field_validation="Strict")
    assert e.value.code == 400 and "spec.junk" in e.value.message


def test_crd_null_non_nullable_dropped_then_defaulted(trainer):
    out = trainer.admit(tr({"replicas": None, "startAt": None}))
    assert out["spec"]["replicas"] == 1
    assert out["spec"]["startAt"] is None  # nullable keeps null


@pytest.mark.parametrize("spec,field,reason,text", [
    ({"mode": "serve"}, "spec.mode", "FieldValueNotSupported",
     'Unsupported value: "serve": supported values: "train", "eval"'),
    ({"distributed": {"worldSize": 17}}, "spec.distributed.worldSize", "FieldValueInvalid",
     "Invalid value: 17: must be less than or equal to 16"),
    ({"replicas": 0, "minReplicas": 0}, "spec.replicas", "FieldValueInvalid",
     "must be greater than or equal to 1"),
    ({"replicas": "two"}, "spec.replicas", "FieldValueTypeInvalid", "must be of type integer"),
    ({"replicas": 2 ** 40}, "spec.replicas", "FieldValueInvalid", "int32"),
    ({"image": ""}, "spec.image", "FieldValueInvalid", "at least 1 chars long"),
    ({"port": 1.5}, "spec.port", "FieldValueTypeInvalid", "must be of type integer or string"),
    ({"workers": [{"name": "a"}, {"name": "b"}, {"name": "c"}, {"name": "d"}]}, "spec.workers",
     "FieldValueTooMany", "Too many: 4: must have at most 3 items"),
    ({"workers": [{"name": "waytoolongname"}]}, "spec.workers[0].name", "FieldValueTooLong",
     "Too long"),
    ({"workers": [{"zone": "a"}]}, "spec.workers[0].name", "FieldValueRequired", "Required value"),
    ({"workers": [{"name": "a"}, {"name": "a"}]}, "spec.workers[1]", "FieldValueDuplicate",
     "Duplicate value"),
    ({"startAt": "yesterday"}, "spec.startAt", "FieldValueInvalid", "date-time"),
])
def test_crd_schema_errors(trainer, spec, field, reason, text):
    with pytest.raises(ApiError) as e:
        trainer.admit(tr(spec))
    assert e.value.code == 422
    matching = [c for c in causes_of(e.value) if c["field"] == field]
    assert matching, causes_of(e.value)
    assert matching[0]["reason"] == reason
    assert text in matching[0]["message"], matching[0]["message"]
    assert 'Trainer.ml.example.com "t1" is invalid' in e.value.message


def test_crd_required(trainer):
    obj = tr()
    del obj["spec"]["image"]
    with pytest.raises(ApiError) as e:
        trainer.admit(obj)
    assert causes_of(e.value) == [{"field": "spec.image", "reason": "FieldValueRequired",
                                   "message": "Required value"}]


@pytest.mark.parametrize("spec,field,reason,text", [
    # rule with fieldPath and message
    ({"replicas": 2, "minReplicas": 3}, "spec.minReplicas", "FieldValueInvalid",
     'Invalid value: "object": minReplicas must not exceed replicas'),
    # quantity comparison + messageExpression
    ({"gpuMemory": "96Gi"}, "spec", "FieldValueInvalid", "gpuMemory 96Gi is too large"),
    # reason
    ({"image": "docker.io/evil"}, "spec", "FieldValueForbidden",
     "Forbidden: image must come from the registry"),
    # rule declared on additionalProperties values: the key as kube-apiserver names it, [key]
    ({"resources": {"cpu": "lots"}}, "spec.resources[cpu]", "FieldValueInvalid", "must be a quantity"),
    # rule on a list
    ({"workers": [{"name": "bad"}]}, "spec.workers", "FieldValueInvalid", "no bad workers"),
])
def test_crd_cel_failures(trainer, spec, field, reason, text):
    with pytest.raises(ApiError) as e:
        trainer.admit(tr(spec))
    c = [c for c in causes_of(e.value) if c["field"] == field]
    assert c and c[0]["reason"] == reason and text in c[0]["message"], causes_of(e.value)


@pytest.mark.parametrize("spec", [
    {"gpuMemory": "79Gi"}, {"gpuMemory": "80000Mi"}, {"gpuMemory": "1e10"},
    {"image": "pytorch:2.1"}, {"resources": {"cpu": "500m", "memory": 1024, "gpu": "1"}},
    {"port": "http"}, {"port": 8080}, {"startAt": "2024-01-01T00:00:00Z"},
])
def test_crd_cel_passes(trainer, spec):
    trainer.admit(tr(spec))


def test_crd_transition_rules(trainer):
    old = trainer.admit(tr({"queue": "q1", "workers": [{"name": "a", "zone": "z1"}]}))
    # create: transition rules are skipped (no old object)
    trainer.admit(tr({"queue": "anything"}))
    # unchanged update passes
    trainer.admit(copy.deepcopy(old), old)
    # changed immutable field fails
    new = copy.deepcopy(old)
    new["spec"]["queue"] = "q2"
    with pytest.raises(ApiError) as e:
        trainer.admit(new, old)
    assert causes_of(e.value) == [{"field": "spec.queue", "reason": "FieldValueInvalid",
                                   "message": 'Invalid value: "string": queue is immutable'}]
    # a field that did not exist before may be set (oldSelf absent -> rule skipped)
    old2 = trainer.admit(tr())
    new2 = copy.deepcopy(old2)
    new2["spec"]["queue"] = "q9"
    trainer.admit(new2, old2)
    # list-type=map items correlate by key: zone of worker "a" is immutable
    new3 = copy.deepcopy(old)
    new3["spec"]["workers"] = [{"name": "b", "zone": "z2"}, {"name": "a", "zone": "z3"}]
    with pytest.raises(ApiError) as e:
        trainer.admit(new3, old)
    assert fields_of(e.value) == {"spec.workers[1].zone"}


def test_crd_status_subresource(trainer):
    old = trainer.admit(tr())
    new = copy.deepcopy(old)
    new["status"] = {"phase": "Running", "readyReplicas": 1}
    assert trainer.admit(new, old, subresource="status")["status"]["phase"] == "Running"
    bad = copy.deepcopy(new)
    bad["status"]["phase"] = "Exploded"
    bad["spec"]["mode"] = "not-checked-on-status"
    with pytest.raises(ApiError) as e:
        trainer.admit(bad, old, subresource="status")
    assert fields_of(e.value) == {"status.phase"}
    bad["status"] = {"readyReplicas": 5000}
    with pytest.raises(ApiError) as e:
        trainer.admit(bad, old, subresource="status")
    assert fields_of(e.value) == {"status"}


def test_crd_list_keys(trainer):
    assert trainer.list_keys(("spec", "workers")) == ["name"]
    assert trainer.list_keys(("spec", "image")) is None
    assert trainer.list_keys(("spec", "nothing")) is None


# ------------------------------------------------------------------------ validate_crd


def test_validate_crd_accepts_fixture():
    V.validate_crd(trainer_crd())


def _no_type(s):
    s = copy.deepcopy(s)
    del s["properties"]["spec"]["properties"]["image"]["type"]
    return s


def _bad_cel(s):
    s = copy.deepcopy(s)
    s["properties"]["spec"]["x-kubernetes-validations"].append({"rule": "self.replicas >"})
    return s


def _metadata_fields(s):
    s = copy.deepcopy(s)
    s["properties"]["metadata"] = {"type": "object", "properties": {"labels": {"type": "object"}}}
    return s


def _default_failing_its_rule(s):
    """A default checked against its own CEL rules as written (kube-apiserver, issue 26: the
    TrainingJob CRD's checkpoint.storage default {} was refused, self.type: no such key)."""
    s = copy.deepcopy(s)
    s["properties"]["spec"]["properties"]["storage"] = {
        "type": "object", "default": {},
        "properties": {"type": {"type": "string", "default": "pvc"}, "bucket": {"type": "string"}},
        "x-kubernetes-validations": [{"rule": "self.type != 's3' || has(self.bucket)",
                                      "message": "bucket is required when type is s3"}]}
    return s


def test_validate_crd_accepts_a_default_that_meets_its_rules():
    s = _default_failing_its_rule(TRAINER_SCHEMA)
    s["properties"]["spec"]["properties"]["storage"]["default"] = {"type": "pvc"}
    V.validate_crd(trainer_crd(s))


def _bad_list_type(s):
    s = copy.deepcopy(s)
    s["properties"]["spec"]["properties"]["workers"]["x-kubernetes-list-type"] = "bag"
    return s


@pytest.mark.parametrize("crd,field", [
    (trainer_crd(_no_type(TRAINER_SCHEMA)),
     "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[image].type"),
    (trainer_crd(_bad_cel(TRAINER_SCHEMA)),
     "spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[3].rule"),
    (trainer_crd(_metadata_fields(TRAINER_SCHEMA)),
     "spec.versions[0].schema.openAPIV3Schema.properties[metadata]"),
    (trainer_crd(_bad_list_type(TRAINER_SCHEMA)),
     "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[workers].x-kubernetes-list-type"),
    (trainer_crd(_default_failing_its_rule(TRAINER_SCHEMA)),
     "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[storage].default"),
    (trainer_crd(group="ml.other.com"), "metadata.name"),
    (trainer_crd(group="nodots"), "spec.group"),
    (trainer_crd(scope="Global"), "spec.scope"),
    (trainer_crd(versions=[{"name": "v1", "served": True, "storage": True,
                            "schema": {"openAPIV3Schema": {"type": "object"}}},
                           {"name": "v2", "served": True, "storage": True,
                            "schema": {"openAPIV3Schema": {"type": "object"}}}]), "spec.versions"),
    (trainer_crd(versions=[{"name": "v1", "served": True, "storage": False,
                            "schema": {"openAPIV3Schema": {"type": "object"}}}]), "spec.versions"),
    (trainer_crd(versions=[{"name": "v1", "served": True, "storage": True}]),
     "spec.versions[0].schema.openAPIV3Schema"),
    (trainer_crd(names={"kind": "Trainer", "plural": "Trainers"}), "spec.names.plural"),
])
def test_validate_crd_rejects(crd, field):
    with pytest.raises(ApiError) as e:
        V.validate_crd(crd)
    assert e.value.code == 422
    assert field in fields_of(e.value), causes_of(e.value)
    assert e.value.details["kind"] == "CustomResourceDefinition"


def test_validate_crd_int_or_string_and_preserve_unknown_need_no_type():
    s = {"type": "object", "properties": {
        "spec": {"type": "object", "properties": {
            "a": {"x-kubernetes-int-or-string": True},
            "b": {"x-kubernetes-preserve-unknown-fields": True},
            "c": {"type": "string", "anyOf": [{"pattern": "^a"}, {"pattern": "^b"}]}}}}}
    V.validate_crd(trainer_crd(s))


# ------------------------------------------------------------------------ real CRDs


def _crd_files(pattern: str) -> list[str]:
    files = sorted(glob.glob(pattern))
    assert files, f"no CRD files match {pattern}"
    return files


def _load_docs(path: str) -> list:
    with open(path) as f:
        return [d for d in yaml.load_all(f, Loader=_Loader) if d]


PROJECT_CRDS = _crd_files(str(REPO / "config" / "crd" / "bases" / "*.yaml"))


@pytest.mark.parametrize("path", PROJECT_CRDS, ids=os.path.basename)
def test_project_crds_valid(path):
    for doc in _load_docs(path):
        if doc and doc.get("kind") == "CustomResourceDefinition":
            V.validate_crd(doc)
            m = V.CRDModel(doc)
            for v in m.served_versions:
                m.version(v)


KUEUE_CRDS = _crd_files(os.path.join(KUEUE_DIR, "*.yaml"))


_kueue_models: dict[str, V.CRDModel] = {}


def kueue_model(kind: str) -> V.CRDModel:
    if not _kueue_models:
        for path in KUEUE_CRDS:
            for doc in _load_docs(path):
                if doc and doc.get("kind") == "CustomResourceDefinition":
                    m = V.CRDModel(doc)
                    _kueue_models[m.kind] = m
    return _kueue_models[kind]


@pytest.mark.parametrize("path", KUEUE_CRDS, ids=os.path.basename)
def test_kueue_crds_valid(path):
    for doc in _load_docs(path):
        if doc and doc.get("kind") == "CustomResourceDefinition":
            V.validate_crd(doc)
            m = V.CRDModel(doc)
            for v in m.served_versions:
                m.version(v)  # compiles every CEL rule


KUEUE_OBJECTS = [
    {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
     "metadata": {"name": "default-flavor"}, "spec": {}},
    {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
     "metadata": {"name": "gpu"},
     "spec": {"nodeLabels": {"gpu": "h100"},
              "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}},
    {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "cq"},
     "spec": {"namespaceSelector": {},
              "resourceGroups": [{"coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                                  "flavors": [{"name": "default-flavor", "resources": [
                                      {"name": "cpu", "nominalQuota": 9},
                                      {"name": "memory", "nominalQuota": "36Gi"},
                                      {"name": "nvidia.com/gpu", "nominalQuota": "8"}]}]}]}},
    {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
     "metadata": {"name": "lq", "namespace": "team-a"}, "spec": {"clusterQueue": "cq"}},
]


@pytest.mark.parametrize("obj", KUEUE_OBJECTS, ids=lambda o: o["kind"] + "/" + o["metadata"]["name"])
def test_kueue_admit_minimal(obj):
    vs = kueue_model(obj["kind"]).version("v1beta2")
    out = vs.admit(obj)
    again = vs.admit(out, out)  # update with transition rules
    assert again == out


def test_kueue_clusterqueue_defaults_and_cel():
    vs = kueue_model("ClusterQueue").version("v1beta2")
    out = vs.admit(KUEUE_OBJECTS[2])
    assert out["spec"]["queueingStrategy"] == "BestEffortFIFO"
    assert out["spec"]["preemption"]["withinClusterQueue"] == "Never"
    bad = copy.deepcopy(KUEUE_OBJECTS[2])
    bad["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["borrowingLimit"] = 1
    with pytest.raises(ApiError) as e:
        vs.admit(bad)
    assert "borrowingLimit must be nil when cohort is empty" in e.value.message
    bad = copy.deepcopy(KUEUE_OBJECTS[2])
    bad["spec"]["resourceGroups"][0]["coveredResources"] = ["cpu"]
    with pytest.raises(ApiError) as e:
        vs.admit(bad)
    assert e.value.code == 422
    bad = copy.deepcopy(KUEUE_OBJECTS[2])
    bad["spec"]["queueingStrategy"] = "Random"
    with pytest.raises(ApiError) as e:
        vs.admit(bad)
    assert "spec.queueingStrategy" in fields_of(e.value)


def test_kueue_resourceflavor_toleration_rules():
    vs = kueue_model("ResourceFlavor").version("v1beta2")
    bad = copy.deepcopy(KUEUE_OBJECTS[1])
    bad["spec"]["tolerations"][0]["effect"] = "Sometimes"
    with pytest.raises(ApiError) as e:
        vs.admit(bad)
    assert e.value.code == 422
