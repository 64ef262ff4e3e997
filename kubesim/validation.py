"""Validation: built-in kinds, object names/metadata, CustomResourceDefinitions and CRs.

Built-in kinds
    ``validate_builtin`` validates against the official OpenAPI-derived JSON schemas that the
    ``kubernetes-validate`` package ships (``v<K8S_VERSION>-local-strict``: every object has
    ``additionalProperties: false`` so unknown fields are rejected).  Instead of calling
    ``kubernetes_validate.validate`` (which re-reads and re-parses the 4.5 MB definitions file
    on every call) one ``jsonschema.Draft202012Validator`` per (apiVersion, kind) is built once
    with a local ``referencing`` registry (no remote ``$ref`` is ever fetched) and reused.

CRDs
    ``CRDModel(crd).version(name).admit(obj, old)`` does what kube-apiserver does to a custom
    resource on a write, in this order: prune unknown fields, apply ``default``\\ s, validate the
    OpenAPI v3 schema (via jsonschema, with the Kubernetes extensions translated), and evaluate
    ``x-kubernetes-validations`` CEL rules with cel-python (compiled once per CRD version).

Simplifications (documented on purpose):
    * Error messages follow the apiserver's wording closely but not byte for byte.
    * CEL rules are only evaluated when the OpenAPI schema validation found no error (the
      apiserver evaluates both); CEL cost limits are not enforced; CEL type checking at CRD
      creation is limited to parsing the rule (plus a smoke evaluation is *not* done).
    * CRD validation ratcheting is not implemented: on update every error counts, except
      that transition rules (those using ``oldSelf``) only run when an old value exists.
    * ``oldSelf`` is correlated through maps/objects and ``x-kubernetes-list-type: map`` lists
      (by key), like the apiserver; items of other lists are not correlated.
    * For ``subresource="status"`` only the ``status`` subtree is schema-validated and only
      rules declared at the root or inside ``status`` are evaluated.
"""
from __future__ import annotations

import copy
import datetime as _dt
import decimal
import functools
import json
import os
import re
import threading
from typing import Any, Callable, Iterable

import celpy
import jsonschema
from celpy import celtypes
from referencing import Registry, Resource

from kubesim.errors import ApiError, invalid
from kubesim.quantity import parse_quantity as _parse_quantity

K8S_VERSION = os.environ.get("KUBESIM_K8S_VERSION", "1.33.0").lstrip("v")

__all__ = [
    "K8S_VERSION", "validate_builtin", "validate_name", "validate_metadata", "CRDModel",
    "VersionSchema", "validate_crd", "builtin_schema", "has_builtin_schema", "Quantity",
    "parse_quantity", "field_path",
]

# ---------------------------------------------------------------------------------------------
# Helpers shared by every validator
# ---------------------------------------------------------------------------------------------


class MapKey(str):
    """A key of an additionalProperties map in a CEL rule's path: kube-apiserver names it
    `[key]` (field.Path.Key), e.g. spec.resources.requests[cpu]."""


def field_path(parts: Iterable[Any]) -> str:
    """('spec', 'containers', 0, 'image') -> 'spec.containers[0].image'"""
    out = ""
    for p in parts:
        if isinstance(p, (int, MapKey)):
            out += f"[{p}]"
        else:
            out += ("." if out else "") + str(p)
    return out


def _join(base: str, child: str) -> str:
    if not base:
        return child
    if not child:
        return base
    if child.startswith("["):
        return base + child
    return f"{base}.{child}"


def _goval(v: Any) -> str:
    """Render a value the way the apiserver prints it inside ``Invalid value: ...``."""
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, (int, float)):
        return json.dumps(v)
    if isinstance(v, dict):
        return '"object"'
    if isinstance(v, list):
        return '"array"'
    return json.dumps(str(v))


def _cause(field: str, reason: str, message: str) -> dict[str, str]:
    return {"field": field, "reason": reason, "message": message}


def _split_api_version(api_version: str) -> tuple[str, str]:
    if "/" in api_version:
        g, v = api_version.split("/", 1)
        return g, v
    return "", api_version


# ---------------------------------------------------------------------------------------------
# Built-in schemas (kubernetes-validate)
# ---------------------------------------------------------------------------------------------

_SCHEMA_ROOT = os.path.join(os.path.dirname(__import__("kubernetes_validate").__file__),
                            "kubernetes-json-schema")
_DEFS_URI = "https://kubernetes.io/api/_definitions.json"
_lock = threading.Lock()


def _schema_dir(strict: bool = True) -> str:
    """Directory of the newest shipped schema version not newer than K8S_VERSION."""
    want = tuple(int(x) for x in K8S_VERSION.split(".")[:2])
    best = None
    for name in os.listdir(_SCHEMA_ROOT):
        m = re.match(r"^v(\d+)\.(\d+)\.\d+-local(-strict)?$", name)
        if not m or bool(m.group(3)) != strict:
            continue
        ver = (int(m.group(1)), int(m.group(2)))
        if ver <= want and (best is None or ver > best[0]):
            best = (ver, name)
    if best is None:
        raise RuntimeError(f"kubernetes-validate ships no schema for {K8S_VERSION}")
    return os.path.join(_SCHEMA_ROOT, best[1])


@functools.lru_cache(maxsize=None)
def definitions(strict: bool = True) -> dict:
    """kubernetes-validate's ``_definitions.json`` ({"$defs": {name: JSON schema}}): with
    ``strict`` every object has ``additionalProperties: false`` (validation); without, the
    schemas are as the apiserver publishes them, adapted to JSON Schema (nullable types)."""
    with open(os.path.join(_schema_dir(strict), "_definitions.json")) as f:
        return json.load(f)


def _kind_file(api_version: str, kind: str) -> str:
    # like kubernetes_validate: rbac.authorization.k8s.io/v1 -> rbac-v1
    av = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    return os.path.join(_schema_dir(), f"{kind.lower()}-{av}.json")


@functools.lru_cache(maxsize=None)
def builtin_schema(api_version: str, kind: str) -> dict | None:
    """The strict JSON schema of a built-in kind (refs point into ``definitions()``), or None."""
    path = _kind_file(api_version, kind)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        schema = json.load(f)
    # the per-kind files are generated for every "kind" in the definitions (including e.g.
    # DeleteOptions); only treat it as a resource when the GVK matches.
    group, version = _split_api_version(api_version)
    gvks = schema.get("x-kubernetes-group-version-kind") or []
    if gvks and not any(g.get("group", "") == group and g.get("version") == version
                        and g.get("kind") == kind for g in gvks):
        return None
    return schema


def has_builtin_schema(api_version: str, kind: str) -> bool:
    return builtin_schema(api_version, kind) is not None


def resolve_ref(node: dict) -> dict:
    """Follow ``$ref`` (local to the definitions file) until a concrete schema node."""
    seen = 0
    while isinstance(node, dict) and "$ref" in node and seen < 50:
        ref = node["$ref"]
        name = ref.rsplit("/", 1)[-1]
        node = definitions()["$defs"][name]
        seen += 1
    return node


@functools.lru_cache(maxsize=None)
def _builtin_validator(api_version: str, kind: str) -> jsonschema.protocols.Validator | None:
    schema = builtin_schema(api_version, kind)
    if schema is None:
        return None
    with _lock:
        registry = Registry().with_resources([
            (schema["$id"], Resource.from_contents(schema)),
            (_DEFS_URI, Resource.from_contents(definitions())),
        ])
        return jsonschema.Draft202012Validator(schema, registry=registry)


def _builtin_error_causes(err: jsonschema.ValidationError) -> list[dict[str, str]]:
    path = list(err.absolute_path)
    f = field_path(path)
    v = err.validator
    inst = err.instance
    if v == "additionalProperties":
        props = set((err.schema.get("properties") or {}).keys())
        extra = sorted(k for k in inst if k not in props) if isinstance(inst, dict) else []
        return [_cause(_join(f, k), "FieldValueInvalid",
                       f'unknown field "{_join(f, k)}"') for k in extra] or \
            [_cause(f, "FieldValueInvalid", err.message)]
    if v == "required":
        m = re.match(r"^'(.*)' is a required property$", err.message)
        name = m.group(1) if m else err.message
        return [_cause(_join(f, name), "FieldValueRequired", "Required value")]
    if v == "enum":
        allowed = ", ".join(_goval(x) for x in err.validator_value if x is not None)
        return [_cause(f, "FieldValueNotSupported",
                       f"Unsupported value: {_goval(inst)}: supported values: {allowed}")]
    if v == "type":
        want = err.validator_value
        want = [t for t in want if t != "null"] if isinstance(want, list) else [want]
        return [_cause(f, "FieldValueTypeInvalid",
                       f"Invalid value: {_goval(inst)}: must be of type {' or '.join(want)}")]
    if v in ("oneOf", "anyOf"):
        types = sorted({t for sub in err.validator_value for t in
                        ([sub.get("type")] if isinstance(sub.get("type"), str) else sub.get("type") or [])
                        if t != "null"})
        return [_cause(f, "FieldValueTypeInvalid",
                       f"Invalid value: {_goval(inst)}: must be of type {' or '.join(types) or 'unknown'}")]
    return [_cause(f, "FieldValueInvalid", f"Invalid value: {_goval(inst)}: {err.message}")]


def validate_builtin(obj: dict, strict: bool = False) -> None:
    """Validate a built-in object against its strict schema; raise 422 with field causes.

    Kinds without a shipped schema are accepted as-is (nothing to validate against).
    ``strict`` (the request's fieldValidation=Strict): unknown fields are a 400, "strict
    decoding error", as kube-apiserver's decoder answers before any validation.
    """
    api_version = obj.get("apiVersion") or ""
    kind = obj.get("kind") or ""
    validator = _builtin_validator(api_version, kind)
    if validator is None:
        return
    errors = list(validator.iter_errors(obj))
    if not errors:
        return
    if strict:
        unknown = [c["message"] for e in errors if e.validator == "additionalProperties"
                   for c in _builtin_error_causes(e) if c["message"].startswith("unknown field")]
        if unknown:
            raise ApiError(400, "; ".join(f"strict decoding error: {m}" for m in sorted(set(unknown))),
                           "BadRequest")
    causes: list[dict[str, str]] = []
    seen = set()
    for e in sorted(errors, key=lambda e: [str(p) for p in e.absolute_path]):
        for c in _builtin_error_causes(e):
            key = (c["field"], c["message"])
            if key not in seen:
                seen.add(key)
                causes.append(c)
    group, _ = _split_api_version(api_version)
    name = (obj.get("metadata") or {}).get("name") or ""
    raise invalid(kind, name, causes, group)


# What kube-apiserver checks beyond the schema in the pod specs of the kinds our workloads use
# (k8s.io/kubernetes pkg/apis/core/validation: ValidatePodSpec's containers, env and resources)
# and in PersistentVolumeClaims (ValidatePersistentVolumeClaimSpec): the schema says "string",
# these say which strings.
_POD_SPEC_PATHS = {"Pod": ("spec",), "PodTemplate": ("template", "spec"),
                   "StatefulSet": ("spec", "template", "spec"), "Deployment": ("spec", "template", "spec"),
                   "ReplicaSet": ("spec", "template", "spec"), "DaemonSet": ("spec", "template", "spec"),
                   "Job": ("spec", "template", "spec"),
                   "CronJob": ("spec", "jobTemplate", "spec", "template", "spec")}
_re_env_name = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_ENV_NAME_MSG = ("a valid environment variable name must consist of alphabetic characters, digits, '_', '-', "
                 "or '.', and must not start with a digit (e.g. 'my.env-name',  or 'MY_ENV.NAME',  or "
                 "'MyEnvName1', regex used for validation is '[-._a-zA-Z][-._a-zA-Z0-9]*')")


def _quantity_causes(values: Any, path: str, positive: bool = False) -> list[dict[str, str]]:
    causes = []
    for key, value in (values or {}).items() if isinstance(values, dict) else ():
        field = f"{path}[{key}]"
        try:
            q = parse_quantity(value)
        except Exception:  # noqa: BLE001 - any unparsable quantity
            causes.append(_cause(field, "FieldValueInvalid",
                                 f"Invalid value: {_goval(value)}: quantities must match the regular "
                                 "expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"))
            continue
        if positive and q <= 0:
            causes.append(_cause(field, "FieldValueInvalid", f"Invalid value: {_goval(value)}: must be greater than zero"))
        elif q < 0:
            causes.append(_cause(field, "FieldValueInvalid",
                                 f"Invalid value: {_goval(value)}: must be greater than or equal to 0"))
    return causes


def _pod_spec_causes(spec: Any, path: str) -> list[dict[str, str]]:
    causes: list[dict[str, str]] = []
    if not isinstance(spec, dict):
        return causes
    for group in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(group) or []):
            if not isinstance(c, dict):
                continue
            base = f"{path}.{group}[{i}]"
            if path == "spec" and not c.get("image"):  # a Pod's, not a template's
                causes.append(_cause(f"{base}.image", "FieldValueRequired", "Required value"))
            name = c.get("name")
            if isinstance(name, str) and not _re_label.match(name):
                causes.append(_cause(f"{base}.name", "FieldValueInvalid",
                                     f"Invalid value: {_goval(name)}: " + "; ".join(_label_errors(name))))
            for j, env in enumerate(c.get("env") or []):
                ename = env.get("name") if isinstance(env, dict) else None
                if isinstance(ename, str) and not _re_env_name.match(ename):
                    causes.append(_cause(f"{base}.env[{j}].name", "FieldValueInvalid",
                                         f"Invalid value: {_goval(ename)}: {_ENV_NAME_MSG}"))
            resources = c.get("resources") if isinstance(c.get("resources"), dict) else {}
            for part in ("requests", "limits"):
                causes += _quantity_causes(resources.get(part), f"{base}.resources.{part}")
    return causes


_re_config_key = re.compile(r"^[-._a-zA-Z0-9]+$")
_CONFIG_KEY_MSG = ("a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. "
                   "'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')")


def _config_key_causes(obj: dict, fields: tuple[str, ...]) -> list[dict[str, str]]:
    """The keys of a ConfigMap's or Secret's data (IsConfigMapKey)."""
    causes = []
    for field in fields:
        for key in obj.get(field) or {} if isinstance(obj.get(field), dict) else ():
            if len(key) > 253 or not _re_config_key.match(key) or key in (".", ".."):
                causes.append(_cause(f"{field}[{key}]", "FieldValueInvalid",
                                     f"Invalid value: {_goval(key)}: {_CONFIG_KEY_MSG}"))
    return causes


def _service_type_causes(spec: dict) -> list[dict[str, str]]:
    """kube-apiserver's type-dependent Service fields (ValidateService,
    validateServiceExternalTrafficPolicy): no nodePort on a ClusterIP Service, no
    externalTrafficPolicy on one that is not externally accessible."""
    if not isinstance(spec, dict):
        return []
    causes = []
    if spec.get("type", "ClusterIP") == "ClusterIP":
        for i, port in enumerate(spec.get("ports") or []):
            if isinstance(port, dict) and port.get("nodePort"):
                causes.append({"field": f"spec.ports[{i}].nodePort", "reason": "FieldValueForbidden",
                               "message": "Forbidden: may not be used when `type` is 'ClusterIP'"})
    external = spec.get("type") in ("NodePort", "LoadBalancer") or bool(spec.get("externalIPs"))
    policy = spec.get("externalTrafficPolicy")
    if not external and policy:
        causes.append({"field": "spec.externalTrafficPolicy", "reason": "FieldValueInvalid",
                       "message": f'Invalid value: "{policy}": may only be set for externally-accessible services'})
    return causes


def validate_builtin_semantics(obj: dict) -> None:
    """kube-apiserver's checks beyond the schema for pod specs (container names, env var names,
    non-negative resources, a Pod's images), claims (a positive storage request) and the data
    keys of ConfigMaps and Secrets; 422 naming the fields."""
    kind = obj.get("kind") or ""
    causes: list[dict[str, str]] = []
    if kind == "ConfigMap" and obj.get("apiVersion") == "v1":
        causes = _config_key_causes(obj, ("data", "binaryData"))
    elif kind == "Secret" and obj.get("apiVersion") == "v1":
        causes = _config_key_causes(obj, ("data",))
    elif kind in _POD_SPEC_PATHS:
        spec: Any = obj
        for part in _POD_SPEC_PATHS[kind]:
            spec = spec.get(part) if isinstance(spec, dict) else None
        causes = _pod_spec_causes(spec, ".".join(_POD_SPEC_PATHS[kind]))
    elif kind == "Service" and obj.get("apiVersion") == "v1":
        causes = _service_type_causes(obj.get("spec") or {})
    elif kind == "PersistentVolumeClaim":
        requests = ((obj.get("spec") or {}).get("resources") or {}).get("requests")
        if isinstance(requests, dict) and "storage" in requests:
            causes = _quantity_causes({"storage": requests["storage"]}, "spec.resources.requests", positive=True)
    if causes:
        group, _ = _split_api_version(obj.get("apiVersion") or "")
        raise invalid(kind, (obj.get("metadata") or {}).get("name") or "", causes, group)


# ---------------------------------------------------------------------------------------------
# Names, labels, annotations
# ---------------------------------------------------------------------------------------------

_DNS1123_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = _DNS1123_LABEL + r"(\." + _DNS1123_LABEL + ")*"
_DNS1035_LABEL = "[a-z]([-a-z0-9]*[a-z0-9])?"
_QNAME_PART = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?"
_re_label = re.compile(f"^{_DNS1123_LABEL}$")
_re_subdomain = re.compile(f"^{_DNS1123_SUBDOMAIN}$")
_re_1035 = re.compile(f"^{_DNS1035_LABEL}$")
_re_qname = re.compile(f"^{_QNAME_PART}$")
_re_lvalue = re.compile(f"^{_LABEL_VALUE}$")

_PATH_SEGMENT_RESOURCES = {"roles.rbac.authorization.k8s.io", "clusterroles.rbac.authorization.k8s.io",
                           "rolebindings.rbac.authorization.k8s.io",
                           "clusterrolebindings.rbac.authorization.k8s.io"}
_LABEL_RESOURCES = {"namespaces"}
_DNS1035_RESOURCES = {"services"}


def _subdomain_errors(v: str) -> list[str]:
    errs = []
    if len(v) > 253:
        errs.append("must be no more than 253 characters")
    if not _re_subdomain.match(v):
        errs.append("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                    "characters, '-' or '.', and must start and end with an alphanumeric "
                    "character (e.g. 'example.com', regex used for validation is "
                    f"'{_DNS1123_SUBDOMAIN}')")
    return errs


def _label_errors(v: str) -> list[str]:
    errs = []
    if len(v) > 63:
        errs.append("must be no more than 63 characters")
    if not _re_label.match(v):
        errs.append("a lowercase RFC 1123 label must consist of lower case alphanumeric "
                    "characters or '-', and must start and end with an alphanumeric character "
                    f"(e.g. 'my-name',  or '123-abc', regex used for validation is '{_DNS1123_LABEL}')")
    return errs


def _dns1035_errors(v: str) -> list[str]:
    errs = []
    if len(v) > 63:
        errs.append("must be no more than 63 characters")
    if not _re_1035.match(v):
        errs.append("a DNS-1035 label must consist of lower case alphanumeric characters or "
                    "'-', start with an alphabetic character, and end with an alphanumeric "
                    f"character (e.g. 'my-name',  or 'abc-123', regex used for validation is "
                    f"'{_DNS1035_LABEL}')")
    return errs


def _path_segment_errors(v: str) -> list[str]:
    if v in (".", ".."):
        return [f'may not be \'{v}\'']
    for bad in ("/", "%"):
        if bad in v:
            return [f"may not contain '{bad}'"]
    return []


def _qualified_name_errors(key: str) -> list[str]:
    errs = []
    prefix, slash, name = key.rpartition("/")
    if slash:
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs += ["prefix part " + e for e in _subdomain_errors(prefix)]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part must be no more than 63 characters")
    elif not _re_qname.match(name):
        errs.append("name part must consist of alphanumeric characters, '-', '_' or '.', and "
                    "must start and end with an alphanumeric character (e.g. 'MyName',  or "
                    f"'my.name',  or '123-abc', regex used for validation is '{_QNAME_PART}')")
    return errs


def _name_checker(resource: str) -> Callable[[str], list[str]]:
    if resource in _PATH_SEGMENT_RESOURCES:
        return _path_segment_errors
    if resource in _LABEL_RESOURCES:
        return _label_errors
    if resource in _DNS1035_RESOURCES:
        return _dns1035_errors
    return _subdomain_errors


def _metadata_causes(name: str | None, resource: str, generate_name: str | None,
                     labels: Any, annotations: Any) -> list[dict[str, str]]:
    causes = []
    check = _name_checker(resource)
    if name:
        if not isinstance(name, str):
            causes.append(_cause("metadata.name", "FieldValueInvalid",
                                 f"Invalid value: {_goval(name)}: must be a string"))
        else:
            for e in check(name):
                causes.append(_cause("metadata.name", "FieldValueInvalid",
                                     f"Invalid value: {_goval(name)}: {e}"))
    elif generate_name:
        # the apiserver validates the prefix with a trailing '-' masked
        prefix = generate_name[:-1] + "a" if generate_name.endswith("-") else generate_name
        for e in check(prefix):
            causes.append(_cause("metadata.generateName", "FieldValueInvalid",
                                 f"Invalid value: {_goval(generate_name)}: {e}"))
    else:
        causes.append(_cause("metadata.name", "FieldValueRequired",
                             "Required value: name or generateName is required"))
    if labels is not None:
        if not isinstance(labels, dict):
            causes.append(_cause("metadata.labels", "FieldValueTypeInvalid",
                                 "Invalid value: must be a map of strings"))
        else:
            for k, v in labels.items():
                for e in _qualified_name_errors(k):
                    causes.append(_cause("metadata.labels", "FieldValueInvalid",
                                         f"Invalid value: {_goval(k)}: {e}"))
                if not isinstance(v, str):
                    causes.append(_cause("metadata.labels", "FieldValueInvalid",
                                         f"Invalid value: {_goval(v)}: must be a string"))
                    continue
                if len(v) > 63:
                    causes.append(_cause("metadata.labels", "FieldValueInvalid",
                                         f"Invalid value: {_goval(v)}: must be no more than 63 characters"))
                elif not _re_lvalue.match(v):
                    causes.append(_cause(
                        "metadata.labels", "FieldValueInvalid",
                        f"Invalid value: {_goval(v)}: a valid label must be an empty string or "
                        "consist of alphanumeric characters, '-', '_' or '.', and must start and "
                        "end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
                        f"'12345', regex used for validation is '{_LABEL_VALUE}')"))
    if annotations is not None:
        if not isinstance(annotations, dict):
            causes.append(_cause("metadata.annotations", "FieldValueTypeInvalid",
                                 "Invalid value: must be a map of strings"))
        else:
            total = 0
            for k, v in annotations.items():
                for e in _qualified_name_errors(k.lower()):
                    causes.append(_cause("metadata.annotations", "FieldValueInvalid",
                                         f"Invalid value: {_goval(k)}: {e}"))
                if not isinstance(v, str):
                    causes.append(_cause("metadata.annotations", "FieldValueInvalid",
                                         f"Invalid value: {_goval(v)}: must be a string"))
                    continue
                total += len(k) + len(v)
            if total > 256 * 1024:
                causes.append(_cause("metadata.annotations", "FieldValueTooLong",
                                     "Too long: may not be more than 262144 bytes"))
    return causes


def validate_name(name: str | None, namespaced: bool, kind: str, resource: str, *,
                  generate_name: str | None = None, labels: dict | None = None,
                  annotations: dict | None = None, group: str = "") -> None:
    """Validate ``metadata.name`` (or generateName), labels and annotations; raise 422.

    ``resource`` is the kubectl-style resource name (``services``, ``namespaces``,
    ``roles.rbac.authorization.k8s.io``): namespaces use RFC 1123 labels, services RFC 1035
    labels (like the apiserver), RBAC kinds path segments, everything else RFC 1123 subdomains.
    """
    causes = _metadata_causes(name, resource, generate_name, labels, annotations)
    if causes:
        if not group and "." in resource:
            group = resource.split(".", 1)[1]
        raise invalid(kind, name or generate_name or "", causes, group)


def validate_metadata(obj: dict, namespaced: bool, kind: str, resource: str,
                      group: str = "") -> None:
    """validate_name() applied to an object's metadata."""
    md = obj.get("metadata") or {}
    validate_name(md.get("name"), namespaced, kind, resource,
                  generate_name=md.get("generateName"), labels=md.get("labels"),
                  annotations=md.get("annotations"), group=group)


# ---------------------------------------------------------------------------------------------
# Quantities (k8s.io/apimachinery/pkg/api/resource) and the CEL libraries
# ---------------------------------------------------------------------------------------------

def parse_quantity(s: Any) -> decimal.Decimal:
    """A Kubernetes quantity ("100m", "1.5Gi", "2e3", "-1", 4) as an exact Decimal: kubesim's one
    parser (kubesim/quantity.py), signed as CEL's quantity() is."""
    return _parse_quantity(s, signed=True)


@functools.total_ordering
class Quantity:
    """The CEL ``Quantity`` type of the Kubernetes CEL library."""

    __slots__ = ("value", "text")

    def __init__(self, text: Any):
        self.text = str(text)
        self.value = parse_quantity(text)

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, Quantity) and self.value == other.value

    def __lt__(self, other: "Quantity") -> bool:
        return self.value < other.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return f"Quantity({self.text!r})"


def _q(x: Any) -> Quantity:
    if isinstance(x, Quantity):
        return x
    raise celpy.CELEvalError("no such overload: expected a Quantity", TypeError, None)


def _from_dec(d: decimal.Decimal) -> Quantity:
    q = Quantity.__new__(Quantity)
    q.value = d
    q.text = str(d.normalize()) if d == d.to_integral_value() else str(d)
    return q


def _cel_str(f: Callable) -> Callable:
    return lambda *a: celtypes.StringType(f(*a))


def _url_parts(s: str):
    from urllib.parse import urlsplit
    p = urlsplit(str(s))
    if not p.scheme or not (p.netloc or p.path.startswith("/")):
        raise ValueError("not an absolute URI or absolute path")
    return p


def _is_url(s: Any) -> celtypes.BoolType:
    try:
        _url_parts(s)
        return celtypes.BoolType(True)
    except ValueError:
        return celtypes.BoolType(False)


def _wrap_err(f: Callable) -> Callable:
    def inner(*a):
        try:
            return f(*a)
        except celpy.CELEvalError:
            raise
        except Exception as e:  # noqa: BLE001 - surfaced as a CEL evaluation error
            raise celpy.CELEvalError(str(e), type(e), None)
    return inner


def _is_quantity(s: Any) -> celtypes.BoolType:
    try:
        parse_quantity(str(s))
        return celtypes.BoolType(True)
    except ValueError:
        return celtypes.BoolType(False)


def _list_fn(name: str) -> Callable:
    def f(lst, *args):
        items = list(lst)
        if name == "isSorted":
            return celtypes.BoolType(all(items[i] <= items[i + 1] for i in range(len(items) - 1)))
        if name == "sum":
            total = items[0] if items else celtypes.IntType(0)
            for x in items[1:]:
                total = total + x
            return total
        if name == "min":
            return min(items)
        if name == "max":
            return max(items)
        raise celpy.CELEvalError(f"unknown list function {name}", TypeError, None)
    return f


def _index_of(a, b):
    if isinstance(a, str):
        return celtypes.IntType(a.find(b))
    try:
        return celtypes.IntType(list(a).index(b))
    except ValueError:
        return celtypes.IntType(-1)


def _last_index_of(a, b):
    if isinstance(a, str):
        return celtypes.IntType(a.rfind(b))
    items = list(a)
    for i in range(len(items) - 1, -1, -1):
        if items[i] == b:
            return celtypes.IntType(i)
    return celtypes.IntType(-1)


def _substring(s, start, end=None):
    return celtypes.StringType(s[int(start):] if end is None else s[int(start):int(end)])


def _split(s, sep, n=None):
    parts = s.split(sep) if n is None or int(n) < 0 else s.split(sep, int(n) - 1)
    return celtypes.ListType([celtypes.StringType(p) for p in parts])


CEL_FUNCTIONS: dict[str, Callable] = {
    # Kubernetes quantity library
    "quantity": _wrap_err(lambda s: Quantity(str(s))),
    "isQuantity": _is_quantity,
    "isLessThan": _wrap_err(lambda a, b: celtypes.BoolType(_q(a).value < _q(b).value)),
    "isGreaterThan": _wrap_err(lambda a, b: celtypes.BoolType(_q(a).value > _q(b).value)),
    "compareTo": _wrap_err(lambda a, b: celtypes.IntType((_q(a).value > _q(b).value) -
                                                         (_q(a).value < _q(b).value))),
    "asInteger": _wrap_err(lambda a: celtypes.IntType(int(_q(a).value.to_integral_value(
        decimal.ROUND_CEILING)))),
    "asApproximateFloat": _wrap_err(lambda a: celtypes.DoubleType(float(_q(a).value))),
    "sign": _wrap_err(lambda a: celtypes.IntType((_q(a).value > 0) - (_q(a).value < 0))),
    "isInteger": _wrap_err(lambda a: celtypes.BoolType(
        _q(a).value == _q(a).value.to_integral_value() and abs(_q(a).value) < 2 ** 63)),
    "add": _wrap_err(lambda a, b: _from_dec(_q(a).value + (b.value if isinstance(b, Quantity)
                                                             else decimal.Decimal(int(b))))),
    "sub": _wrap_err(lambda a, b: _from_dec(_q(a).value - (b.value if isinstance(b, Quantity)
                                                             else decimal.Decimal(int(b))))),
    # URL library
    "isURL": _is_url,
    "url": _wrap_err(lambda s: (_url_parts(s), celtypes.StringType(s))[1]),
    "getScheme": _wrap_err(lambda s: celtypes.StringType(_url_parts(s).scheme)),
    "getHost": _wrap_err(lambda s: celtypes.StringType(_url_parts(s).netloc)),
    "getHostname": _wrap_err(lambda s: celtypes.StringType(_url_parts(s).hostname or "")),
    "getPort": _wrap_err(lambda s: celtypes.StringType(str(_url_parts(s).port or ""))),
    "getEscapedPath": _wrap_err(lambda s: celtypes.StringType(_url_parts(s).path)),
    # strings extension library
    "lowerAscii": _cel_str(lambda s: s.lower()),
    "upperAscii": _cel_str(lambda s: s.upper()),
    "trim": _cel_str(lambda s: s.strip()),
    "replace": _wrap_err(lambda s, a, b, n=None: celtypes.StringType(
        s.replace(a, b) if n is None or int(n) < 0 else s.replace(a, b, int(n)))),
    "split": _wrap_err(_split),
    "join": _wrap_err(lambda lst, sep="": celtypes.StringType(str(sep).join(str(x) for x in lst))),
    "substring": _wrap_err(_substring),
    "charAt": _wrap_err(lambda s, i: celtypes.StringType(s[int(i)] if int(i) < len(s) else "")),
    "indexOf": _wrap_err(_index_of),
    "lastIndexOf": _wrap_err(_last_index_of),
    # lists extension library
    "isSorted": _wrap_err(_list_fn("isSorted")),
    "sum": _wrap_err(_list_fn("sum")),
    "min": _wrap_err(_list_fn("min")),
    "max": _wrap_err(_list_fn("max")),
    # regex library
    "find": _wrap_err(lambda s, r: celtypes.StringType(
        (re.search(r, s).group(0) if re.search(r, s) else ""))),
    "findAll": _wrap_err(lambda s, r, n=None: celtypes.ListType(
        [celtypes.StringType(x.group(0)) for x in re.finditer(r, s)][:None if n is None or int(n) < 0 else int(n)])),
}

_CEL_ENV: celpy.Environment | None = None


def _cel_env() -> celpy.Environment:
    global _CEL_ENV
    if _CEL_ENV is None:
        _CEL_ENV = celpy.Environment()
    return _CEL_ENV


@functools.lru_cache(maxsize=4096)
def _compile_cel(expr: str):
    env = _cel_env()
    return env.program(env.compile(expr), functions=CEL_FUNCTIONS)


def _to_cel(v: Any) -> Any:
    return celpy.json_to_cel(v)


# ---------------------------------------------------------------------------------------------
# CRD schemas
# ---------------------------------------------------------------------------------------------

_OBJECT_META_FIELDS = {
    "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
    "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels",
    "annotations", "ownerReferences", "finalizers", "managedFields",
}

_EXTENSION_KEYS = {"x-kubernetes-validations", "x-kubernetes-preserve-unknown-fields",
                   "x-kubernetes-embedded-resource", "x-kubernetes-int-or-string",
                   "x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-map-type",
                   "nullable", "default", "description", "example", "externalDocs",
                   "x-kubernetes-patch-strategy", "x-kubernetes-patch-merge-key"}


def _to_jsonschema(node: Any) -> Any:
    """Translate an OpenAPI v3 structural schema into a Draft 4 JSON schema."""
    if isinstance(node, list):
        return [_to_jsonschema(x) for x in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for k, v in node.items():
        if k in _EXTENSION_KEYS:
            continue
        if k in ("properties", "patternProperties", "definitions"):
            out[k] = {pk: _to_jsonschema(pv) for pk, pv in v.items()}
        elif k in ("items", "additionalProperties", "not", "allOf", "anyOf", "oneOf"):
            out[k] = _to_jsonschema(v) if not isinstance(v, bool) else v
        else:
            out[k] = v
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        if "anyOf" not in out and "oneOf" not in out:
            out["type"] = ["integer", "string"]
    if node.get("nullable"):
        t = out.get("type")
        if isinstance(t, str):
            out["type"] = [t, "null"]
        if "enum" in out and None not in out["enum"]:
            out["enum"] = list(out["enum"]) + [None]
        for comb in ("anyOf", "oneOf", "allOf"):
            if comb in out:
                out = {"anyOf": [{"type": "null"}, out]}
                break
    return out


_format_checker = jsonschema.FormatChecker(formats=())


def _fmt(name: str):
    return _format_checker.checks(name, raises=(ValueError, TypeError))


@_fmt("int32")
def _check_int32(v: Any) -> bool:
    return not isinstance(v, int) or isinstance(v, bool) or -2 ** 31 <= v < 2 ** 31


@_fmt("int64")
def _check_int64(v: Any) -> bool:
    return not isinstance(v, int) or isinstance(v, bool) or -2 ** 63 <= v < 2 ** 63


_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


@_fmt("date-time")
def _check_datetime(v: Any) -> bool:
    if not isinstance(v, str):
        return True
    if not _RFC3339.match(v):
        return False
    _dt.datetime.fromisoformat(v.replace("Z", "+00:00").replace("z", "+00:00").replace(" ", "T"))
    return True


@_fmt("date")
def _check_date(v: Any) -> bool:
    if not isinstance(v, str):
        return True
    _dt.date.fromisoformat(v)
    return True


_TYPE_NAMES = {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer",
               float: "number", type(None): "null"}


def _crd_error_cause(err: jsonschema.ValidationError, prefix: tuple = ()) -> dict[str, str]:
    path = list(prefix) + list(err.absolute_path)
    f = field_path(path)
    v = err.validator
    val = err.validator_value
    inst = err.instance
    gv = _goval(inst)
    if v == "required":
        m = re.match(r"^'(.*)' is a required property$", err.message)
        return _cause(_join(f, m.group(1) if m else ""), "FieldValueRequired", "Required value")
    if v == "enum":
        allowed = ", ".join(_goval(x) for x in val if x is not None)
        return _cause(f, "FieldValueNotSupported",
                      f"Unsupported value: {gv}: supported values: {allowed}")
    if v == "type":
        want = val if isinstance(val, str) else "/".join(t for t in val if t != "null")
        return _cause(f, "FieldValueTypeInvalid",
                      f"Invalid value: {gv}: {f} in body must be of type {want}: "
                      f"\"{_TYPE_NAMES.get(type(inst), 'unknown')}\"")
    if v == "maximum":
        excl = err.schema.get("exclusiveMaximum") is True
        return _cause(f, "FieldValueInvalid",
                      f"Invalid value: {gv}: must be less than {'' if excl else 'or equal to '}{val}")
    if v == "minimum":
        excl = err.schema.get("exclusiveMinimum") is True
        return _cause(f, "FieldValueInvalid",
                      f"Invalid value: {gv}: must be greater than {'' if excl else 'or equal to '}{val}")
    if v == "maxLength":
        return _cause(f, "FieldValueTooLong", f"Too long: may not be more than {val} bytes")
    if v == "minLength":
        return _cause(f, "FieldValueInvalid", f"Invalid value: {gv}: {f} in body should be at "
                                              f"least {val} chars long")
    if v == "maxItems":
        return _cause(f, "FieldValueTooMany",
                      f"Too many: {len(inst)}: must have at most {val} items")
    if v == "minItems":
        return _cause(f, "FieldValueInvalid",
                      f"Invalid value: {len(inst)}: {f} in body should have at least {val} items")
    if v == "maxProperties":
        return _cause(f, "FieldValueTooMany",
                      f"Too many: {len(inst)}: must have at most {val} items")
    if v == "minProperties":
        return _cause(f, "FieldValueInvalid",
                      f"Invalid value: {len(inst)}: {f} in body should have at least {val} properties")
    if v == "pattern":
        return _cause(f, "FieldValueInvalid", f"Invalid value: {gv}: {f} in body should match '{val}'")
    if v == "format":
        return _cause(f, "FieldValueInvalid",
                      f"Invalid value: {gv}: {f} in body must be of type {val}: {gv}")
    if v == "uniqueItems":
        return _cause(f, "FieldValueDuplicate", f"Duplicate value: {gv}")
    if v in ("anyOf", "oneOf") and all(isinstance(x, dict) and set(x) == {"type"} for x in val):
        types = " or ".join(x["type"] if isinstance(x["type"], str) else "/".join(x["type"])
                            for x in val)
        return _cause(f, "FieldValueTypeInvalid",
                      f"Invalid value: {gv}: {f} in body must be of type {types}")
    if v == "multipleOf":
        return _cause(f, "FieldValueInvalid", f"Invalid value: {gv}: {f} in body should be a "
                                              f"multiple of {val}")
    return _cause(f, "FieldValueInvalid", f"Invalid value: {gv}: {err.message}")


class _Rule:
    __slots__ = ("rule", "program", "message", "message_program", "field_path", "reason",
                 "transition", "optional_old_self")

    def __init__(self, spec: dict):
        self.rule = spec["rule"]
        self.program = _compile_cel(self.rule)
        self.message = spec.get("message")
        me = spec.get("messageExpression")
        self.message_program = _compile_cel(me) if me else None
        self.field_path = spec.get("fieldPath")
        self.reason = spec.get("reason") or "FieldValueInvalid"
        self.transition = bool(re.search(r"\boldSelf\b", self.rule))
        self.optional_old_self = bool(spec.get("optionalOldSelf"))


_REASON_PREFIX = {
    "FieldValueInvalid": None,  # "Invalid value: <type>: msg"
    "FieldValueRequired": "Required value",
    "FieldValueForbidden": "Forbidden",
    "FieldValueDuplicate": "Duplicate value",
}


class VersionSchema:
    """The schema of one served version of a CRD, ready to admit objects."""

    def __init__(self, crd_kind: str, group: str, name: str, schema: dict | None,
                 status_enabled: bool = False):
        self.kind = crd_kind
        self.group = group
        self.name = name
        self.openapi = schema or {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        self.status_enabled = status_enabled
        js = _to_jsonschema(self.openapi)
        self._validator = jsonschema.Draft4Validator(js, format_checker=_format_checker)
        st = (js.get("properties") or {}).get("status")
        self._status_validator = (jsonschema.Draft4Validator(st, format_checker=_format_checker)
                                  if st is not None else None)
        self._rules_cache: dict[int, list[_Rule]] = {}
        self._has_rules = _schema_has_rules(self.openapi)
        # compile every rule up front (raises on syntax errors)
        self._compile_all(self.openapi)

    # -- public ------------------------------------------------------------------------------
    def admit(self, obj: dict, old: dict | None = None, subresource: str | None = None, *,
              warnings: list[str] | None = None, field_validation: str = "Ignore") -> dict:
        """Prune, default, validate and run CEL rules; return the new object or raise 422.

        ``warnings`` (optional list) receives ``unknown field "spec.x"`` for every pruned
        field; ``field_validation="Strict"`` turns those into a 400 like the apiserver.
        """
        obj = copy.deepcopy(obj)
        pruned: list[str] = []
        self._prune(obj, self.openapi, [], pruned, root=True)
        if pruned:
            if field_validation == "Strict":
                raise ApiError(400, "; ".join(f'strict decoding error: unknown field "{p}"'
                                              for p in pruned), "BadRequest")
            if warnings is not None:
                warnings.extend(f'unknown field "{p}"' for p in pruned)
        _apply_defaults(obj, self.openapi)
        causes: list[dict[str, str]] = []
        if subresource == "status":
            if self._status_validator is not None and "status" in obj:
                causes += [_crd_error_cause(e, ("status",))
                           for e in self._status_validator.iter_errors(obj["status"])]
        else:
            causes += [_crd_error_cause(e) for e in self._validator.iter_errors(obj)]
        causes += self._list_uniqueness(obj, subresource)
        if not causes and self._has_rules:
            causes += self._run_rules(obj, old, subresource)
        if causes:
            causes.sort(key=lambda c: c["field"])
            name = (obj.get("metadata") or {}).get("name") or \
                (obj.get("metadata") or {}).get("generateName") or ""
            raise invalid(self.kind, name, causes, self.group)
        return obj

    def list_keys(self, path: tuple | list) -> list[str] | str | None:
        """For server-side apply: keys of the list at ``path`` (field names, list items
        skipped), ``"set"`` for ``x-kubernetes-list-type: set``, None for atomic lists."""
        node = self.openapi
        for p in path:
            node = _child_schema(node, p)
            if node is None:
                return None
            if node.get("type") == "array" and p != path[-1]:
                node = node.get("items") or {}
        if node is None:
            return None
        lt = node.get("x-kubernetes-list-type")
        if lt == "map":
            return list(node.get("x-kubernetes-list-map-keys") or [])
        if lt == "set":
            return "set"
        return None

    # -- pruning -------------------------------------------------------------------------------
    def _prune(self, value: Any, schema: dict, path: list, pruned: list[str], root=False) -> None:
        if isinstance(value, dict):
            if schema.get("x-kubernetes-preserve-unknown-fields") and not schema.get("properties") \
                    and not isinstance(schema.get("additionalProperties"), dict):
                return
            props = schema.get("properties") or {}
            addl = schema.get("additionalProperties")
            embedded = root or schema.get("x-kubernetes-embedded-resource")
            for k in list(value.keys()):
                v = value[k]
                if embedded and k in ("apiVersion", "kind"):
                    continue
                if embedded and k == "metadata" and isinstance(v, dict):
                    for mk in list(v):
                        if mk not in _OBJECT_META_FIELDS:
                            del v[mk]
                            pruned.append(field_path(path + ["metadata", mk]))
                    continue
                sub = props.get(k)
                if sub is None and isinstance(addl, dict):
                    sub = addl
                if sub is None:
                    if schema.get("x-kubernetes-preserve-unknown-fields") or addl is True:
                        continue
                    del value[k]
                    pruned.append(field_path(path + [k]))
                    continue
                if v is None and not sub.get("nullable"):
                    # the apiserver drops nulls of non-nullable fields (a default re-adds them)
                    del value[k]
                    continue
                self._prune(v, sub, path + [k], pruned)
        elif isinstance(value, list):
            items = schema.get("items")
            if isinstance(items, dict):
                for i, v in enumerate(value):
                    self._prune(v, items, path + [i], pruned)

    # -- list-type uniqueness -----------------------------------------------------------------
    def _list_uniqueness(self, obj: dict, subresource: str | None) -> list[dict[str, str]]:
        causes: list[dict[str, str]] = []

        def walk(v, s, path):
            if not isinstance(s, dict):
                return
            if isinstance(v, dict):
                props = s.get("properties") or {}
                addl = s.get("additionalProperties")
                for k, cv in v.items():
                    cs = props.get(k) or (addl if isinstance(addl, dict) else None)
                    if cs is not None:
                        walk(cv, cs, path + [k])
            elif isinstance(v, list):
                lt = s.get("x-kubernetes-list-type")
                if lt in ("set", "map"):
                    keys = s.get("x-kubernetes-list-map-keys") or []
                    seen = set()
                    for i, item in enumerate(v):
                        if lt == "map" and isinstance(item, dict):
                            k = json.dumps({kk: item.get(kk) for kk in keys}, sort_keys=True)
                        else:
                            k = json.dumps(item, sort_keys=True)
                        if k in seen:
                            causes.append(_cause(field_path(path + [i]), "FieldValueDuplicate",
                                                 f"Duplicate value: {k if lt == 'map' else _goval(item)}"))
                        seen.add(k)
                items = s.get("items")
                if isinstance(items, dict):
                    for i, item in enumerate(v):
                        walk(item, items, path + [i])

        if subresource == "status":
            st = (self.openapi.get("properties") or {}).get("status")
            if st is not None and "status" in obj:
                walk(obj["status"], st, ["status"])
        else:
            walk(obj, self.openapi, [])
        return causes

    # -- CEL ---------------------------------------------------------------------------------
    def _compile_all(self, schema: Any) -> None:
        if not isinstance(schema, dict):
            return
        if schema.get("x-kubernetes-validations"):
            self._rules(schema)
        for k in ("properties",):
            for sub in (schema.get(k) or {}).values():
                self._compile_all(sub)
        for k in ("items", "additionalProperties"):
            if isinstance(schema.get(k), dict):
                self._compile_all(schema[k])

    def _rules(self, schema: dict) -> list[_Rule]:
        key = id(schema)
        r = self._rules_cache.get(key)
        if r is None:
            r = [_Rule(spec) for spec in schema.get("x-kubernetes-validations") or []]
            self._rules_cache[key] = r
        return r

    def _run_rules(self, obj: dict, old: dict | None, subresource: str | None) -> list[dict]:
        causes: list[dict[str, str]] = []
        if subresource == "status":
            self._eval_node(obj, old, self.openapi, [], causes, descend=False)
            st = (self.openapi.get("properties") or {}).get("status")
            if st is not None and "status" in obj:
                self._eval_node(obj["status"], (old or {}).get("status") if isinstance(old, dict)
                                else None, st, ["status"], causes,
                                has_old=isinstance(old, dict) and "status" in old)
        else:
            self._eval_node(obj, old, self.openapi, [], causes, has_old=old is not None)
        return causes

    def _eval_node(self, value: Any, old: Any, schema: dict, path: list, causes: list,
                   has_old: bool = False, descend: bool = True) -> None:
        if not isinstance(schema, dict):
            return
        rules = schema.get("x-kubernetes-validations")
        if rules:
            cel_self = None
            cel_old = None
            for rule in self._rules(schema):
                if rule.transition and not has_old and not rule.optional_old_self:
                    continue
                if cel_self is None:
                    cel_self = _to_cel(value)
                    cel_old = _to_cel(old) if has_old else None
                act = {"self": cel_self}
                if rule.transition:
                    act["oldSelf"] = cel_old if has_old else _OptionalNone
                msg = _eval_rule(rule, act)
                if msg is not None:
                    f = field_path(path)
                    if rule.field_path:
                        fp = rule.field_path
                        f = _join(f, fp[1:] if fp.startswith(".") else fp)
                    prefix = _REASON_PREFIX.get(rule.reason)
                    if prefix is None:
                        tname = schema.get("type") or ("integer-or-string" if schema.get(
                            "x-kubernetes-int-or-string") else "object")
                        text = f'Invalid value: "{tname}": {msg}'
                    else:
                        text = f"{prefix}: {msg}"
                    causes.append(_cause(f, rule.reason, text))
        if not descend:
            return
        if isinstance(value, dict):
            props = schema.get("properties") or {}
            addl = schema.get("additionalProperties")
            for k, v in value.items():
                sub = props.get(k) or (addl if isinstance(addl, dict) else None)
                if sub is None or not _schema_has_rules(sub):
                    continue
                o_has = has_old and isinstance(old, dict) and k in old
                self._eval_node(v, old.get(k) if o_has else None, sub,
                                path + [k if k in props else MapKey(k)], causes, o_has)
        elif isinstance(value, list):
            items = schema.get("items")
            if not isinstance(items, dict) or not _schema_has_rules(items):
                return
            keys = schema.get("x-kubernetes-list-map-keys") \
                if schema.get("x-kubernetes-list-type") == "map" else None
            old_by_key = {}
            if keys and has_old and isinstance(old, list):
                for o in old:
                    if isinstance(o, dict):
                        old_by_key[tuple(json.dumps(o.get(k)) for k in keys)] = o
            for i, v in enumerate(value):
                o = None
                if keys and isinstance(v, dict):
                    o = old_by_key.get(tuple(json.dumps(v.get(k)) for k in keys))
                self._eval_node(v, o, items, path + [i], causes, o is not None)


class _OptionalNoneType:
    def __repr__(self) -> str:
        return "optional.none()"


_OptionalNone = _OptionalNoneType()
CEL_FUNCTIONS["hasValue"] = lambda o: celtypes.BoolType(o is not _OptionalNone)
CEL_FUNCTIONS["value"] = lambda o: o


def _eval_rule(rule: _Rule, act: dict) -> str | None:
    """Evaluate one rule; None when it holds, else the message to report."""
    try:
        result = rule.program.evaluate(act)
    except celpy.CELEvalError as e:
        return f"rule evaluation error: {rule.rule}: {e.args[0] if e.args else e}"
    except Exception as e:  # noqa: BLE001 - cel-python raises assorted errors
        return f"rule evaluation error: {rule.rule}: {e}"
    if isinstance(result, celpy.CELEvalError):
        return f"rule evaluation error: {rule.rule}: {result.args[0] if result.args else result}"
    if result is True or (isinstance(result, celtypes.BoolType) and bool(result)):
        return None
    if rule.message_program is not None:
        try:
            m = rule.message_program.evaluate(act)
            if isinstance(m, str) and m.strip():
                return str(m)
        except Exception:  # noqa: BLE001 - fall back to message / rule
            pass
    if rule.message:
        return rule.message
    return f"failed rule: {rule.rule}"


_rules_memo: dict[int, tuple[Any, bool]] = {}


def _schema_has_rules(schema: Any) -> bool:
    if not isinstance(schema, dict):
        return False
    hit = _rules_memo.get(id(schema))
    if hit is not None and hit[0] is schema:
        return hit[1]
    res = bool(schema.get("x-kubernetes-validations"))
    if not res:
        for sub in (schema.get("properties") or {}).values():
            if _schema_has_rules(sub):
                res = True
                break
    if not res:
        for k in ("items", "additionalProperties"):
            if _schema_has_rules(schema.get(k)):
                res = True
                break
    _rules_memo[id(schema)] = (schema, res)
    return res


def _child_schema(schema: dict, key: Any) -> dict | None:
    if not isinstance(schema, dict):
        return None
    props = schema.get("properties") or {}
    if key in props:
        return props[key]
    addl = schema.get("additionalProperties")
    return addl if isinstance(addl, dict) else None


def _apply_defaults(value: Any, schema: dict) -> None:
    """Structural defaulting like the apiserver: missing fields with a default get a copy of
    it, then defaulting recurses into every present (including freshly defaulted) value."""
    if not isinstance(schema, dict):
        return
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for k, sub in props.items():
            if "default" in sub and (k not in value or (value[k] is None and not sub.get("nullable"))):
                value[k] = copy.deepcopy(sub["default"])
        addl = schema.get("additionalProperties")
        for k, v in value.items():
            sub = props.get(k) or (addl if isinstance(addl, dict) else None)
            if sub is not None and isinstance(v, (dict, list)):
                _apply_defaults(v, sub)
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            for v in value:
                if isinstance(v, (dict, list)):
                    _apply_defaults(v, items)


# ---------------------------------------------------------------------------------------------
# CRDModel and validate_crd
# ---------------------------------------------------------------------------------------------


class CRDModel:
    """Everything kubesim needs from an ``apiextensions.k8s.io/v1`` CustomResourceDefinition."""

    def __init__(self, crd: dict):
        spec = crd.get("spec") or {}
        self.crd = crd
        self.group = spec.get("group", "")
        names = spec.get("names") or {}
        self.kind = names.get("kind", "")
        self.plural = names.get("plural", "")
        self.singular = names.get("singular") or self.kind.lower()
        self.list_kind = names.get("listKind") or f"{self.kind}List"
        self.short_names = list(names.get("shortNames") or [])
        self.categories = list(names.get("categories") or [])
        self.scope = spec.get("scope", "Namespaced")
        self.namespaced = self.scope == "Namespaced"
        self.versions_spec = list(spec.get("versions") or [])
        self.storage_version = next((v["name"] for v in self.versions_spec if v.get("storage")),
                                    self.versions_spec[0]["name"] if self.versions_spec else "")
        self._versions: dict[str, VersionSchema] = {}

    @property
    def served_versions(self) -> list[str]:
        return [v["name"] for v in self.versions_spec if v.get("served", True)]

    def subresources(self, version: str) -> dict:
        for v in self.versions_spec:
            if v["name"] == version:
                return v.get("subresources") or {}
        return {}

    def version(self, name: str) -> VersionSchema:
        vs = self._versions.get(name)
        if vs is None:
            for v in self.versions_spec:
                if v["name"] == name:
                    schema = (v.get("schema") or {}).get("openAPIV3Schema")
                    vs = VersionSchema(self.kind, self.group, name, schema,
                                       "status" in (v.get("subresources") or {}))
                    self._versions[name] = vs
                    break
            else:
                raise KeyError(f"version {name!r} not defined by {self.plural}.{self.group}")
        return vs


def _structural_causes(schema: Any, path: str, causes: list, root: bool = False,
                       in_value_validation: bool = False) -> None:
    if not isinstance(schema, dict):
        return
    t = schema.get("type")
    ios = schema.get("x-kubernetes-int-or-string")
    pres = schema.get("x-kubernetes-preserve-unknown-fields")
    if not in_value_validation:
        if not t and not ios and not pres:
            causes.append(_cause(f"{path}.type", "FieldValueRequired",
                                 "Required value: must not be empty for specified object fields"))
        if ios and t:
            causes.append(_cause(f"{path}.type", "FieldValueForbidden",
                                 "Forbidden: must be empty if x-kubernetes-int-or-string is true"))
        if t == "array" and not isinstance(schema.get("items"), dict):
            causes.append(_cause(f"{path}.items", "FieldValueRequired",
                                 "Required value: must be specified"))
        if t == "object" and schema.get("properties") and isinstance(schema.get("additionalProperties"), dict):
            causes.append(_cause(f"{path}.additionalProperties", "FieldValueForbidden",
                                 "Forbidden: additionalProperties and properties are mutual exclusive"))
        if t and t not in ("object", "array", "string", "integer", "number", "boolean"):
            causes.append(_cause(f"{path}.type", "FieldValueNotSupported",
                                 f'Unsupported value: "{t}": supported values: "array", "boolean", '
                                 '"integer", "number", "object", "string"'))
    lt = schema.get("x-kubernetes-list-type")
    if lt is not None:
        if lt not in ("atomic", "set", "map"):
            causes.append(_cause(f"{path}.x-kubernetes-list-type", "FieldValueNotSupported",
                                 f'Unsupported value: "{lt}": supported values: "atomic", "map", "set"'))
        if lt == "map" and not schema.get("x-kubernetes-list-map-keys"):
            causes.append(_cause(f"{path}.x-kubernetes-list-map-keys", "FieldValueRequired",
                                 "Required value: must not be empty if x-kubernetes-list-type is map"))
    if schema.get("x-kubernetes-list-map-keys") and lt != "map":
        causes.append(_cause(f"{path}.x-kubernetes-list-type", "FieldValueInvalid",
                             'Invalid value: must be "map" if x-kubernetes-list-map-keys is non-empty'))
    for i, rule in enumerate(schema.get("x-kubernetes-validations") or []):
        rp = f"{path}.x-kubernetes-validations[{i}]"
        if not isinstance(rule, dict) or not rule.get("rule"):
            causes.append(_cause(f"{rp}.rule", "FieldValueRequired", "Required value"))
            continue
        for key in ("rule", "messageExpression"):
            if rule.get(key):
                try:
                    _compile_cel(rule[key])
                except Exception as e:  # noqa: BLE001 - any parse error
                    causes.append(_cause(f"{rp}.{key}", "FieldValueInvalid",
                                         f"Invalid value: {_goval(rule[key])}: compilation failed: "
                                         f"{str(e).splitlines()[0] if str(e) else type(e).__name__}"))
        r = rule.get("reason")
        if r and r not in ("FieldValueInvalid", "FieldValueForbidden", "FieldValueRequired",
                           "FieldValueDuplicate"):
            causes.append(_cause(f"{rp}.reason", "FieldValueNotSupported",
                                 f'Unsupported value: "{r}": supported values: "FieldValueDuplicate",'
                                 ' "FieldValueForbidden", "FieldValueInvalid", "FieldValueRequired"'))
    if root and isinstance(schema.get("properties"), dict):
        md = schema["properties"].get("metadata")
        if isinstance(md, dict):
            extra = set(md) - {"type", "properties", "description"}
            if extra or set((md.get("properties") or {})) - {"name", "generateName"}:
                causes.append(_cause(f"{path}.properties[metadata]", "FieldValueForbidden",
                                     "Forbidden: must not specify anything other than name and "
                                     "generateName, but metadata is implicitly specified"))
    for k, sub in (schema.get("properties") or {}).items():
        _structural_causes(sub, f"{path}.properties[{k}]", causes,
                           in_value_validation=in_value_validation)
    for k in ("items", "additionalProperties"):
        if isinstance(schema.get(k), dict):
            _structural_causes(schema[k], f"{path}.{k}", causes,
                               in_value_validation=in_value_validation)
    for k in ("allOf", "anyOf", "oneOf"):
        for i, sub in enumerate(schema.get(k) or []):
            _structural_causes(sub, f"{path}.{k}[{i}]", causes, in_value_validation=True)
    if isinstance(schema.get("not"), dict):
        _structural_causes(schema["not"], f"{path}.not", causes, in_value_validation=True)


def _default_rule_causes(schema: Any, path: str, causes: list) -> None:
    """kube-apiserver checks each `default` against the CEL rules of its own schema, as written
    (the default's fields are not defaulted first): a rule that fails or errs refuses the CRD."""
    if not isinstance(schema, dict):
        return
    if "default" in schema and schema.get("x-kubernetes-validations"):
        value = _to_cel(schema["default"])
        for spec in schema["x-kubernetes-validations"]:
            try:
                rule = _Rule(spec)
            except Exception:  # noqa: BLE001 - a rule that does not compile is reported elsewhere
                continue
            if rule.transition:
                continue
            msg = _eval_rule(rule, {"self": value})
            if msg is not None:
                causes.append(_cause(f"{path}.default", "FieldValueInvalid",
                                     f'Invalid value: "{schema.get("type", "object")}": {msg}'))
                break
    for k, sub in (schema.get("properties") or {}).items():
        _default_rule_causes(sub, f"{path}.properties[{k}]", causes)
    for k in ("items", "additionalProperties"):
        _default_rule_causes(schema.get(k), f"{path}.{k}", causes)


def validate_crd(crd: dict) -> None:
    """The checks the apiserver does on CustomResourceDefinition create/update; raise 422."""
    causes: list[dict[str, str]] = []
    md = crd.get("metadata") or {}
    spec = crd.get("spec") or {}
    name = md.get("name") or ""
    group = spec.get("group") or ""
    names = spec.get("names") or {}
    plural = names.get("plural") or ""
    if not group:
        causes.append(_cause("spec.group", "FieldValueRequired", "Required value"))
    elif "." not in group:
        causes.append(_cause("spec.group", "FieldValueInvalid",
                             f"Invalid value: {_goval(group)}: should be a domain with at least one dot"))
    else:
        for e in _subdomain_errors(group):
            causes.append(_cause("spec.group", "FieldValueInvalid", f"Invalid value: {_goval(group)}: {e}"))
    if not plural:
        causes.append(_cause("spec.names.plural", "FieldValueRequired", "Required value"))
    if plural and group and name != f"{plural}.{group}":
        causes.append(_cause("metadata.name", "FieldValueInvalid",
                             f'Invalid value: {_goval(name)}: must be spec.names.plural+"."+spec.group'))
    kind = names.get("kind") or ""
    if not kind:
        causes.append(_cause("spec.names.kind", "FieldValueRequired", "Required value"))
    for fld in ("plural", "singular"):
        v = names.get(fld)
        if v:
            for e in _label_errors(v):
                causes.append(_cause(f"spec.names.{fld}", "FieldValueInvalid",
                                     f"Invalid value: {_goval(v)}: {e}"))
    for fld in ("kind", "listKind"):
        v = names.get(fld)
        if v and not re.match(r"^[A-Za-z][A-Za-z0-9]*$", v):
            causes.append(_cause(f"spec.names.{fld}", "FieldValueInvalid",
                                 f"Invalid value: {_goval(v)}: may have mixed case, but should "
                                 "otherwise match: [a-z]([-a-z0-9]*[a-z0-9])?"))
    if kind and names.get("listKind") and kind == names["listKind"]:
        causes.append(_cause("spec.names.listKind", "FieldValueInvalid",
                             f"Invalid value: {_goval(kind)}: kind and listKind may not be the same"))
    scope = spec.get("scope")
    if scope not in ("Namespaced", "Cluster"):
        causes.append(_cause("spec.scope", "FieldValueNotSupported",
                             f'Unsupported value: {_goval(scope)}: supported values: "Cluster", "Namespaced"'))
    versions = spec.get("versions") or []
    if not versions:
        causes.append(_cause("spec.versions", "FieldValueInvalid",
                             "Invalid value: must have exactly one version marked as storage version"))
    storage = [v for v in versions if v.get("storage")]
    if versions and len(storage) != 1:
        causes.append(_cause("spec.versions", "FieldValueInvalid",
                             f"Invalid value: {_goval(versions[0].get('name'))}: must have exactly one "
                             "version marked as storage version"))
    seen = set()
    for i, v in enumerate(versions):
        vp = f"spec.versions[{i}]"
        vn = v.get("name") or ""
        if not vn:
            causes.append(_cause(f"{vp}.name", "FieldValueRequired", "Required value"))
        else:
            for e in _label_errors(vn):
                causes.append(_cause(f"{vp}.name", "FieldValueInvalid", f"Invalid value: {_goval(vn)}: {e}"))
            if vn in seen:
                causes.append(_cause("spec.versions", "FieldValueInvalid",
                                     f"Invalid value: {_goval(vn)}: must contain unique version names"))
            seen.add(vn)
        schema = (v.get("schema") or {}).get("openAPIV3Schema")
        sp = f"{vp}.schema.openAPIV3Schema"
        if not isinstance(schema, dict):
            causes.append(_cause(sp, "FieldValueRequired", "Required value: schemas are required"))
            continue
        if schema.get("type") != "object":
            causes.append(_cause(f"{sp}.type", "FieldValueInvalid",
                                 'Invalid value: must be object at the root'))
        _structural_causes(schema, sp, causes, root=True)
        _default_rule_causes(schema, sp, causes)
        sub = v.get("subresources") or {}
        scale = sub.get("scale")
        if isinstance(scale, dict):
            for k in ("specReplicasPath", "statusReplicasPath"):
                if not scale.get(k):
                    causes.append(_cause(f"{vp}.subresources.scale.{k}", "FieldValueRequired",
                                         "Required value"))
    if versions and not any(v.get("served") for v in versions):
        causes.append(_cause("spec.versions", "FieldValueInvalid",
                             "Invalid value: must have at least one version marked as served"))
    if causes:
        raise invalid("CustomResourceDefinition", name, causes, "apiextensions.k8s.io")
