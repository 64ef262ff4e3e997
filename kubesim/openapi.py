"""OpenAPI v3 documents (`/openapi/v3` and `/openapi/v3/<api|apis/group>/<version>`).

kubectl reads them for three things:

* `kubectl apply` (and `create -f`, `replace`) look for a `fieldValidation` query parameter on
  the PATCH operation of each kind (cli-runtime `queryParamVerifierV3`); when it is there they
  leave validation to the server and send `fieldValidation=Strict`;
* `kubectl explain` finds the kind's path, takes its `x-kubernetes-group-version-kind`, then the
  component schema carrying the same GVK, and walks its properties (kubectl
  `pkg/explain/v2/templates/plaintext.tmpl`);
* client-side `kubectl apply` would compute strategic merge patches from the schemas when a
  PATCH operation declares an `application/strategic-merge-patch+json` request body; kubesim's
  PATCH operations declare none, so kubectl keeps using its compiled-in patch metadata.

Component schemas are named like kube-apiserver names them: built-in kinds by their Go package
(`io.k8s.api.core.v1.Pod`, from kubernetes-validate's definitions, which are the official
OpenAPI adapted to JSON Schema and are converted back here), CRD kinds by the reversed group,
the version and the kind (`io.torchdev.v1alpha1.DevServer`, apiextensions-apiserver
`controller/openapi/builder`), with `apiVersion`, `kind` and a `metadata` that references
ObjectMeta. Each document carries the schemas its kinds reference, nothing more.

Documents are rebuilt only when what they describe changes (`OpenAPIV3.documents`): built-in
group-versions once per process, CRD group-versions when a CRD's resourceVersion changes. The
root lists each one with `?hash=<sha512 of the document>`, as kube-apiserver does, so kubectl's
HTTP cache keeps a document for as long as its hash stays the same.
"""
from __future__ import annotations

import copy
import functools
import hashlib
import json
from typing import Any, Callable, Iterable

from kubesim import validation
from kubesim.registry import ResourceType

REF_PREFIX = "#/components/schemas/"
_DEFS_PREFIX = "#/$defs/"
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
LIST_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"
STATUS = "io.k8s.apimachinery.pkg.apis.meta.v1.Status"
# metav1beta1.PartialObjectMetadata{,List}'s swagger docs, which kube-apiserver gives a CRD's
# metadata property
OBJECT_META_DOC = ("Standard object's metadata. More info: https://git.k8s.io/community/"
                   "contributors/devel/sig-architecture/api-conventions.md#metadata")
LIST_META_DOC = ("Standard list metadata. More info: https://git.k8s.io/community/contributors/"
                 "devel/sig-architecture/api-conventions.md#metadata")
QUERY_PARAMS = ("dryRun", "fieldManager", "fieldValidation", "force")
Document = dict[str, Any]


# -- built-in schemas ----------------------------------------------------------------------------
def _convert(node: Any) -> Any:
    """A kubernetes-validate JSON Schema node as OpenAPI v3: `["T", "null"]` types back to
    `T`, `$defs` references to components, and a reference with siblings (a description)
    wrapped in `allOf`, the form kube-apiserver publishes."""
    if isinstance(node, list):
        return [_convert(n) for n in node]
    if not isinstance(node, dict):
        return node
    target = node.get("$ref")  # not a reference when it is a property named "$ref"
    out = {k: _convert(v) for k, v in node.items() if k != "$ref" or not isinstance(target, str)}
    if isinstance(out.get("type"), list):
        out["type"] = next(t for t in out["type"] if t != "null")
    if isinstance(target, str):
        ref = {"$ref": REF_PREFIX + target.removeprefix(_DEFS_PREFIX)}
        if not out:
            return ref
        out["allOf"] = [ref]
    return out


def _strip_type_meta_enums(schema: dict[str, Any]) -> None:
    """kubernetes-validate pins a kind's apiVersion and kind with an enum; kube-apiserver not."""
    if "x-kubernetes-group-version-kind" in schema:
        for name in ("apiVersion", "kind"):
            (schema.get("properties") or {}).get(name, {}).pop("enum", None)


@functools.lru_cache(maxsize=None)
def builtin_schemas() -> dict[str, dict[str, Any]]:
    """Every built-in definition as an OpenAPI v3 component schema, by its component name."""
    out = {}
    for name, schema in validation.definitions(strict=False)["$defs"].items():
        converted = _convert(schema)
        _strip_type_meta_enums(converted)
        out[name] = converted
    return out


def _type_meta_property(name: str) -> dict[str, Any]:
    """The `apiVersion` or `kind` property every kind has (metav1.TypeMeta's, as in Status)."""
    prop = copy.deepcopy(builtin_schemas()[STATUS]["properties"][name])
    prop.pop("enum", None)
    return prop


def _refs(node: Any) -> Iterable[str]:
    """Names of the components `node` references."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(REF_PREFIX):
            yield ref[len(REF_PREFIX):]
        for value in node.values():
            yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def with_references(schemas: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """`schemas` plus every built-in schema they reference, directly or not."""
    out = dict(schemas)
    pending = [ref for schema in schemas.values() for ref in _refs(schema)]
    while pending:
        name = pending.pop()
        if name in out or name not in builtin_schemas():
            continue
        out[name] = builtin_schemas()[name]
        pending.extend(_refs(out[name]))
    return out


# -- CRD schemas ---------------------------------------------------------------------------------
def rest_friendly_name(group: str, version: str, kind: str) -> str:
    """kube-openapi's ToRESTFriendlyName("group/version/kind"): the group reversed
    (`torchdev.io` -> `io.torchdev`), then version and kind: `io.torchdev.v1alpha1.DevServer`."""
    return ".".join([*reversed(group.split(".")), version, kind])


def _gvk(group: str, version: str, kind: str) -> dict[str, str]:
    return {"group": group, "version": version, "kind": kind}


def _meta_property(component: str, description: str) -> dict[str, Any]:
    return {"allOf": [{"$ref": REF_PREFIX + component}], "description": description}


def crd_schemas(crd: dict[str, Any], version: str) -> dict[str, dict[str, Any]]:
    """The component schemas of a CRD version: the kind (its openAPIV3Schema with apiVersion,
    kind and metadata, as apiextensions-apiserver's `buildKubeNative`) and its list."""
    spec, names = crd["spec"], crd["spec"]["names"]
    group, kind = spec["group"], names["kind"]
    served = next(v for v in spec["versions"] if v["name"] == version)
    schema = copy.deepcopy(((served.get("schema") or {}).get("openAPIV3Schema"))
                           or {"type": "object"})
    properties = schema.setdefault("properties", {})
    properties["apiVersion"] = _type_meta_property("apiVersion")
    properties["kind"] = _type_meta_property("kind")
    properties["metadata"] = _meta_property(OBJECT_META, OBJECT_META_DOC)
    schema["x-kubernetes-group-version-kind"] = [_gvk(group, version, kind)]
    name = rest_friendly_name(group, version, kind)
    list_kind = names.get("listKind") or f"{kind}List"
    return {name: schema, rest_friendly_name(group, version, list_kind): {
        "type": "object",
        "description": f"{list_kind} is a list of {kind}",
        "required": ["items"],
        "properties": {
            "apiVersion": _type_meta_property("apiVersion"),
            "items": {"type": "array", "items": {"$ref": REF_PREFIX + name},
                      "description": f"List of {names['plural']}. More info: https://git.k8s.io/"
                                     f"community/contributors/devel/sig-architecture/"
                                     f"api-conventions.md"},
            "kind": _type_meta_property("kind"),
            "metadata": _meta_property(LIST_META, LIST_META_DOC),
        },
        "x-kubernetes-group-version-kind": [_gvk(group, version, list_kind)],
    }}


def builtin_kind_schemas(rt: ResourceType) -> dict[str, dict[str, Any]]:
    """The component schemas of a built-in kind and its list (those kubernetes-validate has)."""
    gvk = _gvk(rt.group, rt.version, rt.kind)
    list_gvk = dict(gvk, kind=rt.list_kind)
    return {name: schema for name, schema in builtin_schemas().items()
            if gvk in schema.get("x-kubernetes-group-version-kind", ())
            or list_gvk in schema.get("x-kubernetes-group-version-kind", ())}


# -- paths ---------------------------------------------------------------------------------------
_OK = {"200": {"description": "OK"}}


def _schema_ref(schemas: dict[str, dict[str, Any]], kind: str) -> dict[str, Any]:
    """The responses of an operation returning `kind`: a reference to its schema in `schemas`."""
    for name, schema in schemas.items():
        if any(g["kind"] == kind for g in schema.get("x-kubernetes-group-version-kind", ())):
            return {"200": {"description": "OK", "content": {
                "application/json": {"schema": {"$ref": REF_PREFIX + name}}}}}
    return _OK


def _operation(rt: ResourceType, action: str, operation: str, responses: dict[str, Any],
               suffix: str = "") -> dict[str, Any]:
    """One operation, named like kube-apiserver's operation ids (`patchNamespacedConfigMap`)."""
    op: dict[str, Any] = {
        "operationId": f"{operation}{'Namespaced' if rt.namespaced else ''}{rt.kind}{suffix}",
        "responses": responses,
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": _gvk(rt.group, rt.version, rt.kind),
    }
    if action in ("patch", "put", "post"):
        op["parameters"] = [{"name": n, "in": "query", "schema": {"type": "string"}}
                            for n in QUERY_PARAMS if action == "patch" or n != "force"]
    return op


def resource_paths(rt: ResourceType, schemas: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The REST paths of one kind, with the operations its verbs allow (`schemas`: the kind's
    and its list's component schemas, which the responses reference)."""
    prefix = f"/apis/{rt.group}/{rt.version}" if rt.group else f"/api/{rt.version}"
    ns = "/namespaces/{namespace}" if rt.namespaced else ""
    collection, item = f"{prefix}{ns}/{rt.plural}", f"{prefix}{ns}/{rt.plural}/{{name}}"
    one, many = _schema_ref(schemas, rt.kind), _schema_ref(schemas, rt.list_kind)
    # (path, method, verb that enables it, x-kubernetes-action, operation, responses)
    table = [
        (collection, "get", "list", "list", "list", many),
        (collection, "post", "create", "post", "create", one),
        (collection, "delete", "deletecollection", "deletecollection", "deletecollection", _OK),
        (item, "get", "get", "get", "read", one),
        (item, "put", "update", "put", "replace", one),
        (item, "patch", "patch", "patch", "patch", one),
        (item, "delete", "delete", "delete", "delete", one),
    ]
    paths: dict[str, Any] = {}
    for path, method, verb, action, operation, responses in table:
        if verb in rt.verbs:
            paths.setdefault(path, {})[method] = _operation(rt, action, operation, responses)
    if "status" in rt.subresources:
        paths[f"{item}/status"] = {
            method: _operation(rt, action, operation, one, "Status")
            for method, action, operation in (("get", "get", "read"), ("put", "put", "replace"),
                                              ("patch", "patch", "patch"))}
    return paths


# -- documents -----------------------------------------------------------------------------------
def document(types: Iterable[ResourceType],
             kind_schemas: Callable[[ResourceType], dict[str, dict[str, Any]]]) -> Document:
    """The OpenAPI v3 document of one group-version serving `types`."""
    schemas: dict[str, dict[str, Any]] = {}
    paths: dict[str, Any] = {}
    for rt in sorted(types, key=lambda t: t.plural):
        own = kind_schemas(rt)
        schemas.update(own)
        paths.update(resource_paths(rt, own))
    return {"openapi": "3.0.0",
            "info": {"title": "Kubernetes (kubesim)", "version": "unversioned"},
            "paths": paths,
            "components": {"schemas": dict(sorted(with_references(schemas).items()))}}


def encode(doc: Document) -> tuple[bytes, str]:
    """The document's bytes and their hash (upper-case hex SHA-512, kube-openapi's ETag)."""
    data = json.dumps(doc, separators=(",", ":")).encode()
    return data, hashlib.sha512(data).hexdigest().upper()


@functools.lru_cache(maxsize=64)
def _builtin_document(types: tuple[ResourceType, ...]) -> tuple[bytes, str]:
    return encode(document(types, builtin_kind_schemas))


def gv_path(group: str, version: str) -> str:
    """The group-version's key in the root document: `api/v1`, `apis/apps/v1`."""
    return f"apis/{group}/{version}" if group else f"api/{version}"


class OpenAPIV3:
    """The documents of every served group-version, rebuilt when their inputs change.

    `registry` lists the types; `crd(name)` returns a stored CRD (None once deleted)."""

    def __init__(self, registry: Any, crd: Callable[[str], dict[str, Any] | None]):
        self.registry = registry
        self.crd = crd
        self._cache: dict[str, tuple[tuple, bytes, str]] = {}

    def _crd_version(self, rt: ResourceType) -> str:
        crd = self.crd(rt.crd or "")
        return crd["metadata"].get("resourceVersion", "") if crd else ""

    def _build(self, types: tuple[ResourceType, ...]) -> tuple[bytes, str]:
        if not any(rt.crd for rt in types):
            return _builtin_document(types)

        def kind_schemas(rt: ResourceType) -> dict[str, dict[str, Any]]:
            crd = self.crd(rt.crd) if rt.crd else None
            return crd_schemas(crd, rt.version) if crd else builtin_kind_schemas(rt)

        return encode(document(types, kind_schemas))

    def documents(self) -> dict[str, tuple[bytes, str]]:
        """gv_path -> (document bytes, hash) for every served group-version."""
        out = {}
        for group, versions in self.registry.groups().items():
            for version in versions:
                path = gv_path(group, version)
                types = tuple(sorted(self.registry.resources_in(group, version),
                                     key=lambda t: t.plural))
                key = (types, tuple(self._crd_version(rt) for rt in types if rt.crd))
                cached = self._cache.get(path)
                if cached is None or cached[0] != key:
                    cached = (key, *self._build(types))
                    self._cache[path] = cached
                out[path] = cached[1:]
        for stale in set(self._cache) - set(out):
            del self._cache[stale]
        return dict(sorted(out.items()))

    def root(self) -> Document:
        """The discovery document: each group-version's URL, with its document's hash."""
        return {"paths": {path: {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest}"}
                          for path, (_, digest) in self.documents().items()}}
