"""Patches: JSON merge patch, JSON patch, strategic merge patch and server-side apply.

Every function returns a new object and never mutates its arguments.

Where the list/map semantics come from
    Strategic merge patch and server-side apply need, per field, the patch strategy and merge
    key of built-in kinds.  They are read from the OpenAPI definitions that ``kubernetes-validate``
    ships for the pinned version (``_definitions.json`` of the ``v<K8S_VERSION>-local-strict``
    directory keeps ``x-kubernetes-patch-strategy``, ``x-kubernetes-patch-merge-key``,
    ``x-kubernetes-list-type``, ``x-kubernetes-list-map-keys`` and ``x-kubernetes-map-type``), so
    there is no hand-written table: ``containers`` merge by ``name``, ``ports`` by
    ``containerPort``, ``volumeMounts`` by ``mountPath``, ``tolerations`` are replaced
    (atomic), ``ownerReferences`` merge by ``uid``, conditions by ``type`` and so on, exactly as
    declared upstream.  Custom resources get their list semantics for apply from the CRD's
    ``openAPIV3Schema`` (pass ``schema=``) or a ``list_keys(path)`` callable.

Strategic merge patch (built-in kinds only; custom resources -> 415 like the apiserver)
    Supports ``$patch: merge|replace|delete`` (on maps and on list items), ``$retainKeys``,
    ``$deleteFromPrimitiveList/<field>`` and ``$setElementOrder/<field>``.  The element order
    directive is applied best effort: elements named in it come first, in its order, followed
    by the remaining elements in their previous order.  Unknown fields are merged like maps.

Server-side apply, simplifications compared with structured-merge-diff:
    * Field sets use the real FieldsV1 encoding (``f:name``, ``k:{"name":"x"}``, ``v:"x"``,
      ``.``) but are computed by this module's own walk: the ``.`` marker is only written for
      list items (and for map entries that are not declared struct fields on built-ins).
    * Associative lists keep the live order; newly applied items are appended.
    * Conflicts are only reported against other *Apply* managers (``operation: Apply``) by
      default (``conflict_with_updates=True`` also checks Update managers, like the real
      apiserver).  A field is in conflict when another manager owns it and this apply changes
      its value.  Without conflict, ownership is shared; with ``force`` it moves.
      Fields owned by Update managers that an apply changes are transferred silently.
    * Fields the manager applied before and omits now are removed from the object unless
      another manager (or the new apply) owns them or something below them.
    * Ownership of paths that no longer exist in the object is dropped for every manager;
      a manager left owning nothing is dropped, except entries that already had no fields
      (e.g. written by a caller that records managers without field sets) and the applier.
    * ``update_managed_fields`` tracks non-apply writes loosely: every field that a write adds
      or changes is owned by that manager (operation ``Update``) and taken away from the others.
    * apiVersion/kind and server-owned metadata (name, namespace, uid, resourceVersion,
      generation, creationTimestamp, selfLink, managedFields) are never tracked.  Status
      resetting per subresource and version conversion of field sets are the caller's job.
    * ``metadata.resourceVersion`` / ``uid`` are never invented here; the caller handles them.
"""
from __future__ import annotations

import copy
import json
from typing import Any, Callable, Iterable

import jsonpatch
import jsonpointer

from kubesim.validation import builtin_schema, resolve_ref

__all__ = ["PatchError", "ConflictError", "merge_patch", "json_patch", "strategic_merge_patch",
           "server_side_apply", "update_managed_fields", "fields_to_set", "set_to_fields",
           "UNSUPPORTED_SMP_MESSAGE"]

UNSUPPORTED_SMP_MESSAGE = ("the body of the request was in an unknown format - accepted media "
                           "types include: application/json-patch+json, "
                           "application/merge-patch+json, application/apply-patch+yaml")


class PatchError(Exception):
    """A patch that cannot be applied. ``code``: 400 malformed, 409 conflict, 415, 422."""

    def __init__(self, message: str, code: int = 422):
        super().__init__(message)
        self.message = message
        self.code = code


class ConflictError(PatchError):
    """Server-side apply conflicts. ``conflicts``: [(manager, field_path_string)]."""

    def __init__(self, message: str, conflicts: list[tuple[str, str]]):
        super().__init__(message, 409)
        self.conflicts = conflicts

    @property
    def causes(self) -> list[dict[str, str]]:
        return [{"reason": "FieldManagerConflict", "message": f'conflict with "{m}": {f}',
                 "field": f} for m, f in self.conflicts]


_MISSING = object()
_DELETE = object()

# ---------------------------------------------------------------------------------------------
# JSON merge patch (RFC 7386) and JSON patch (RFC 6902)
# ---------------------------------------------------------------------------------------------


def _merge(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = _merge(out.get(k), v)
    return out


def merge_patch(obj: dict, patch: dict) -> dict:
    """RFC 7386 JSON merge patch: maps merge recursively, ``null`` deletes, the rest replaces."""
    if not isinstance(patch, dict):
        raise PatchError("json: cannot unmarshal merge patch: the patch must be a JSON object", 400)
    return _merge(copy.deepcopy(obj), patch)


def json_patch(obj: dict, ops: list) -> dict:
    """RFC 6902 JSON patch via the ``jsonpatch`` library."""
    if not isinstance(ops, list):
        raise PatchError("json: cannot unmarshal object into Go value of type jsonpatch.Patch", 400)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op:
            raise PatchError(f"invalid JSON patch operation: {op!r}", 400)
    try:
        patch = jsonpatch.JsonPatch(ops)
        return patch.apply(copy.deepcopy(obj), in_place=True)
    except jsonpatch.JsonPatchTestFailed as e:
        raise PatchError(f"the server rejected our request due to an error in our request: "
                         f"testing value failed: {e}", 422) from None
    except jsonpatch.InvalidJsonPatch as e:
        raise PatchError(f"invalid JSON patch: {e}", 400) from None
    except (jsonpatch.JsonPatchConflict, jsonpointer.JsonPointerException) as e:
        raise PatchError(f"the server rejected our request due to an error in our request: {e}",
                         422) from None
    except (TypeError, ValueError, KeyError, IndexError) as e:
        raise PatchError(f"invalid JSON patch: {e}", 400) from None


# ---------------------------------------------------------------------------------------------
# Schema navigation (built-in definitions with $ref, or plain CRD openAPIV3Schema)
# ---------------------------------------------------------------------------------------------


def _res(schema: Any) -> dict:
    if not isinstance(schema, dict):
        return {}
    if "$ref" in schema:
        return resolve_ref(schema)
    return schema


def _child(schema: Any, key: str) -> dict:
    s = _res(schema)
    props = s.get("properties") or {}
    if key in props:
        return _res(props[key])
    addl = s.get("additionalProperties")
    return _res(addl) if isinstance(addl, dict) else {}


def _items(schema: Any) -> dict:
    return _res(_res(schema).get("items"))


# ---------------------------------------------------------------------------------------------
# Strategic merge patch
# ---------------------------------------------------------------------------------------------


def _strip_directives(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _strip_directives(x) for k, x in v.items() if not k.startswith("$")}
    if isinstance(v, list):
        return [_strip_directives(x) for x in v
                if not (isinstance(x, dict) and x.get("$patch") in ("replace", "delete")
                        and len(x) == 1)]
    return v


def _apply_order(lst: list, order: list, key: str | None) -> list:
    if not isinstance(order, list):
        raise PatchError("invalid $setElementOrder directive: must be a list", 400)

    def ident(x):
        if key is not None:
            return json.dumps(x.get(key) if isinstance(x, dict) else x, sort_keys=True)
        return json.dumps(x, sort_keys=True)

    rank = {ident(o): i for i, o in enumerate(order)}
    named = [x for x in lst if ident(x) in rank]
    rest = [x for x in lst if ident(x) not in rank]
    named.sort(key=lambda x: rank[ident(x)])
    return named + rest


def _smp_map(orig: dict, patch: dict, schema: dict) -> Any:
    patch = dict(patch)
    directive = patch.pop("$patch", None)
    if directive == "replace":
        return _strip_directives(patch)
    if directive == "delete":
        return _DELETE
    if directive not in (None, "merge"):
        raise PatchError(f"Unknown patch type: {directive}", 400)
    retain = patch.pop("$retainKeys", None)
    if retain is not None:
        if not isinstance(retain, list):
            raise PatchError("invalid $retainKeys directive: must be a list", 400)
        for k in list(orig):
            if k not in retain:
                del orig[k]
    orders: dict[str, Any] = {}
    for k in list(patch):
        if k.startswith("$deleteFromPrimitiveList/"):
            field = k.split("/", 1)[1]
            vals = patch.pop(k)
            if not isinstance(vals, list):
                raise PatchError(f"invalid {k} directive: must be a list", 400)
            if isinstance(orig.get(field), list):
                orig[field] = [x for x in orig[field] if x not in vals]
        elif k.startswith("$setElementOrder/"):
            orders[k.split("/", 1)[1]] = patch.pop(k)
    for k, pv in patch.items():
        if k.startswith("$"):
            continue  # unknown directives are ignored
        sub = _child(schema, k)
        if pv is None:
            orig.pop(k, None)
            continue
        ov = orig.get(k, _MISSING)
        if isinstance(pv, dict):
            r = _smp_map(ov if isinstance(ov, dict) else {}, pv, sub)
            if r is _DELETE:
                orig.pop(k, None)
            else:
                orig[k] = r
        elif isinstance(pv, list):
            orig[k] = _smp_list(ov if isinstance(ov, list) else [], pv, sub, k)
        else:
            orig[k] = pv
    for field, order in orders.items():
        if isinstance(orig.get(field), list):
            key = _res(_child(schema, field)).get("x-kubernetes-patch-merge-key")
            orig[field] = _apply_order(orig[field], order, key)
    return orig


def _smp_list(orig: list, patch: list, schema: dict, name: str) -> list:
    s = _res(schema)
    strategy = [x.strip() for x in (s.get("x-kubernetes-patch-strategy") or "").split(",")]
    if "merge" not in strategy:
        return _strip_directives(patch)
    key = s.get("x-kubernetes-patch-merge-key")
    items = _items(s)
    if any(isinstance(x, dict) and x.get("$patch") == "replace" for x in patch):
        return [_strip_directives(x) for x in patch
                if not (isinstance(x, dict) and x.get("$patch") == "replace")]
    if not key:  # list of primitives with merge strategy (finalizers): union
        out = list(orig)
        for x in patch:
            if isinstance(x, dict) and "$patch" in x:
                continue
            if x not in out:
                out.append(copy.deepcopy(x))
        return out
    out = list(orig)
    for item in patch:
        if not isinstance(item, dict):
            raise PatchError(f"unable to find api field in struct {name} for the json field "
                             f"\"{key}\": list items must be objects", 400)
        if key not in item:
            raise PatchError(f"map: {json.dumps(item)} does not contain declared merge key: {key}")
        matches = [i for i, x in enumerate(out) if isinstance(x, dict) and x.get(key) == item[key]]
        if item.get("$patch") == "delete":
            for i in reversed(matches):
                del out[i]
            continue
        if not matches:
            r = _smp_map({}, item, items)
            if r is not _DELETE:
                out.append(r)
        else:
            i = matches[0]
            r = _smp_map(out[i], item, items)
            if r is _DELETE:
                del out[i]
            else:
                out[i] = r
    return out


def strategic_merge_patch(obj: dict, patch: dict, api_version: str, kind: str) -> dict:
    """Kubernetes strategic merge patch for built-in kinds (415 for anything else)."""
    schema = builtin_schema(api_version, kind)
    if schema is None:
        raise PatchError(UNSUPPORTED_SMP_MESSAGE, 415)
    if not isinstance(patch, dict):
        raise PatchError("json: cannot unmarshal strategic merge patch: must be a JSON object", 400)
    r = _smp_map(copy.deepcopy(obj), copy.deepcopy(patch), schema)
    if r is _DELETE:
        return {}
    return r


# ---------------------------------------------------------------------------------------------
# Field sets (FieldsV1)
# ---------------------------------------------------------------------------------------------

Path = tuple  # tuple of path-element strings: "f:spec", 'k:{"name":"c"}', 'v:"x"'

_STRIPPED = {("f:apiVersion",), ("f:kind",)} | {
    ("f:metadata", "f:" + k) for k in ("name", "namespace", "uid", "resourceVersion", "generation",
                                       "creationTimestamp", "selfLink", "managedFields",
                                       "clusterName", "deletionTimestamp",
                                       "deletionGracePeriodSeconds")}


# Server-side apply needs the default of a list-map key field that an item omits (ports are
# keyed by containerPort+protocol and clients usually omit protocol).  The upstream OpenAPI
# declares ``default: "TCP"`` for these, but the JSON schemas shipped by kubernetes-validate
# strip every ``default``, so this one value is hand-written (checked: ``protocol`` of
# ContainerPort/ServicePort/EphemeralContainer ports is the only built-in list-map key with a
# default).  CRD schemas keep their defaults and are read directly.
_BUILTIN_KEY_DEFAULTS = {"protocol": "TCP"}


def _compact(v: Any) -> str:
    return json.dumps(v, sort_keys=True, separators=(",", ":"))


class _Types:
    """List/map semantics for one object type."""

    def __init__(self, schema: dict | None, list_keys: Callable | None, builtin: bool = False):
        self.schema = schema or {}
        self.list_keys = list_keys
        self.builtin = builtin

    def key_defaults(self, item_schema: dict, keys: list[str] | None) -> dict:
        out = {}
        for k in keys or []:
            d = _child(item_schema, k).get("default", _MISSING)
            if d is _MISSING and self.builtin:
                d = _BUILTIN_KEY_DEFAULTS.get(k, _MISSING)
            if d is not _MISSING:
                out[k] = d
        return out

    def list_kind(self, schema: dict, names: tuple) -> tuple[str, list[str] | None]:
        if self.list_keys is not None:
            r = self.list_keys(names)
            if r == "set":
                return "set", None
            if r:
                return "map", list(r)
        s = _res(schema)
        lt = s.get("x-kubernetes-list-type")
        if lt == "map" and s.get("x-kubernetes-list-map-keys"):
            return "map", list(s["x-kubernetes-list-map-keys"])
        if lt == "set":
            return "set", None
        if lt == "atomic":
            return "atomic", None
        strategy = s.get("x-kubernetes-patch-strategy") or ""
        if "merge" in strategy:
            if s.get("x-kubernetes-patch-merge-key"):
                return "map", [s["x-kubernetes-patch-merge-key"]]
            return "set", None
        return "atomic", None

    @staticmethod
    def map_atomic(schema: dict) -> bool:
        s = _res(schema)
        return s.get("x-kubernetes-map-type") == "atomic"


def _item_pe(item: Any, keys: list[str], defaults: dict | None = None) -> str:
    if isinstance(item, dict):
        kv = {k: item[k] for k in keys if k in item}
        for k, d in (defaults or {}).items():
            kv.setdefault(k, d)
        return "k:" + _compact(kv)
    return "v:" + _compact(item)


def _fieldset(obj: Any, types: _Types) -> set:
    out: set = set()

    def walk(v: Any, s: dict, names: tuple, path: Path) -> None:
        if isinstance(v, dict):
            if path and types.map_atomic(s):
                out.add(path)
                return
            rs = _res(s)
            props = rs.get("properties") or {}
            free_map = isinstance(rs.get("additionalProperties"), dict)
            for k, cv in v.items():
                p = path + ("f:" + k,)
                if cv is None or (isinstance(cv, dict) and not cv) or (free_map and k not in props):
                    out.add(p)
                walk(cv, _child(s, k), names + (k,), p)
        elif isinstance(v, list):
            kind, keys = types.list_kind(s, names)
            if kind == "atomic":
                out.add(path)
            elif kind == "set":
                for x in v:
                    out.add(path + ("v:" + _compact(x),))
            else:
                it = _items(s)
                defaults = types.key_defaults(it, keys)
                for x in v:
                    p = path + (_item_pe(x, keys or [], defaults),)
                    out.add(p)
                    if isinstance(x, dict):
                        walk(x, it, names, p)
        else:
            out.add(path)

    walk(obj, types.schema, (), ())
    out.discard(())
    return {p for p in out if p not in _STRIPPED and not (len(p) >= 2 and p[:2] in _STRIPPED)
            and p != ("f:metadata",)}


def fields_to_set(fields: dict | None) -> set:
    """Decode a FieldsV1 object into a set of paths (tuples of path-element strings)."""
    out: set = set()

    def walk(node: dict, prefix: Path) -> None:
        for k, sub in node.items():
            if k == ".":
                out.add(prefix)
                continue
            p = prefix + (k,)
            if not sub:
                out.add(p)
            else:
                walk(sub, p)

    walk(fields or {}, ())
    return out


def set_to_fields(paths: Iterable[Path]) -> dict:
    """Encode a set of paths as FieldsV1."""
    paths = set(paths)
    root: dict = {}
    for p in paths:
        node = root
        for pe in p:
            node = node.setdefault(pe, {})
    for p in paths:
        node = root
        for pe in p:
            node = node[pe]
        if node and p:
            node["."] = {}

    def order(node: dict) -> dict:
        return {k: order(node[k]) for k in sorted(node, key=lambda k: (k != ".", k))}

    return order(root)


def _key_value(item: dict, key: str) -> Any:
    if key in item:
        return item[key]
    return _BUILTIN_KEY_DEFAULTS.get(key)


def _lookup(obj: Any, path: Path) -> Any:
    node = obj
    for pe in path:
        kind, _, rest = pe.partition(":")
        if kind == "f":
            if not isinstance(node, dict) or rest not in node:
                return _MISSING
            node = node[rest]
        elif kind == "k":
            if not isinstance(node, list):
                return _MISSING
            want = json.loads(rest)
            for x in node:
                if isinstance(x, dict) and all(_key_value(x, k) == v for k, v in want.items()):
                    node = x
                    break
            else:
                return _MISSING
        elif kind == "v":
            val = json.loads(rest)
            if not isinstance(node, list) or val not in node:
                return _MISSING
            node = val
        else:
            return _MISSING
    return node


def _remove(obj: Any, path: Path) -> None:
    if not path:
        return
    parent = _lookup(obj, path[:-1])
    kind, _, rest = path[-1].partition(":")
    if kind == "f" and isinstance(parent, dict):
        parent.pop(rest, None)
    elif kind == "k" and isinstance(parent, list):
        want = json.loads(rest)
        parent[:] = [x for x in parent if not (isinstance(x, dict)
                                               and all(_key_value(x, k) == v
                                                       for k, v in want.items()))]
    elif kind == "v" and isinstance(parent, list):
        val = json.loads(rest)
        parent[:] = [x for x in parent if x != val]


def _render_path(path: Path) -> str:
    out = ""
    for pe in path:
        kind, _, rest = pe.partition(":")
        if kind == "f":
            out += "." + rest
        elif kind == "k":
            kv = json.loads(rest)
            out += "[" + ",".join(f"{k}={json.dumps(v)}" for k, v in kv.items()) + "]"
        elif kind == "v":
            out += f"[={rest}]"
    return out


def _ssa_merge(live: Any, applied: Any, s: dict, names: tuple, types: _Types) -> Any:
    if isinstance(applied, dict) and isinstance(live, dict) and not (names and types.map_atomic(s)):
        out = dict(live)
        for k, v in applied.items():
            if v is None:
                out.pop(k, None)
            elif k in live:
                out[k] = _ssa_merge(live[k], v, _child(s, k), names + (k,), types)
            else:
                out[k] = copy.deepcopy(v)
        return out
    if isinstance(applied, list) and isinstance(live, list):
        kind, keys = types.list_kind(s, names)
        if kind == "map":
            out = [copy.deepcopy(x) for x in live]
            it = _items(s)
            defaults = types.key_defaults(it, keys)
            index = {_item_pe(x, keys or [], defaults): i for i, x in enumerate(out)}
            for x in applied:
                pe = _item_pe(x, keys or [], defaults)
                if pe in index:
                    out[index[pe]] = _ssa_merge(out[index[pe]], x, it, names, types)
                else:
                    index[pe] = len(out)
                    out.append(copy.deepcopy(x))
            return out
        if kind == "set":
            out = [copy.deepcopy(x) for x in live]
            for x in applied:
                if x not in out:
                    out.append(copy.deepcopy(x))
            return out
    return copy.deepcopy(applied)


def _leaves(paths: set) -> set:
    """Paths without any descendant in the set."""
    parents = set()
    for p in paths:
        for i in range(1, len(p)):
            parents.add(p[:i])
    return {p for p in paths if p not in parents}


def _decode_managed(obj: dict | None) -> list[dict]:
    out = []
    for e in ((obj or {}).get("metadata") or {}).get("managedFields") or []:
        e = dict(e)
        e["_set"] = fields_to_set(e.get("fieldsV1"))
        e["_keep_empty"] = not e["_set"]  # entries recorded without fields stay as they were
        out.append(e)
    return out


def _encode_managed(entries: list[dict]) -> list[dict]:
    out = []
    for e in entries:
        if not e["_set"] and not e.pop("_keep_empty", False):
            continue  # a manager that owns nothing any more is dropped, like the apiserver
        e = dict(e)
        e.pop("_keep_empty", None)
        e["fieldsType"] = "FieldsV1"
        e["fieldsV1"] = set_to_fields(e.pop("_set"))
        order = ["manager", "operation", "apiVersion", "time", "fieldsType", "fieldsV1",
                 "subresource"]
        out.append({k: e[k] for k in order if k in e} | {k: v for k, v in e.items()
                                                        if k not in order})
    return out


def _types_for(api_version: str, kind: str, schema: dict | None, list_keys) -> _Types:
    if schema is None:
        schema = builtin_schema(api_version, kind)
        return _Types(schema, list_keys, builtin=schema is not None)
    return _Types(schema, list_keys)


def server_side_apply(existing: dict | None, applied: dict, manager: str, force: bool,
                      api_version: str, kind: str, now: str, *,
                      list_keys: Callable[[tuple], Any] | None = None,
                      schema: dict | None = None, conflict_with_updates: bool = False,
                      subresource: str | None = None) -> dict:
    """Server-side apply of ``applied`` by ``manager``; see the module docstring.

    ``list_keys(path)`` (path: tuple of field names from the root, list indices omitted)
    returns the map keys of an associative list, ``"set"``, or None (atomic) - for CRDs;
    ``schema`` may instead be a CRD version's ``openAPIV3Schema``.  Raises ``ConflictError``
    (409) on conflicts unless ``force``; ``PatchError`` (400) for malformed input.
    """
    if not manager:
        raise PatchError("PATCH requests with apply patch type must specify a fieldManager", 400)
    if not isinstance(applied, dict):
        raise PatchError("apply patch must be a JSON/YAML object", 400)
    if applied.get("kind") and applied.get("kind") != kind:
        raise PatchError(f"apply patch kind {applied.get('kind')!r} does not match {kind!r}", 400)
    applied = copy.deepcopy(applied)
    md = applied.get("metadata")
    if isinstance(md, dict) and md.get("managedFields"):
        raise PatchError("metadata.managedFields must be nil", 400)
    if isinstance(md, dict):
        md.pop("managedFields", None)
    types = _types_for(api_version, kind, schema, list_keys)
    new_set = _fieldset(applied, types)

    def entry(s: set) -> dict:
        e = {"manager": manager, "operation": "Apply", "apiVersion": api_version, "time": now,
             "_set": s, "_keep_empty": True}
        if subresource:
            e["subresource"] = subresource
        return e

    if existing is None:
        result = applied
        result.setdefault("metadata", {})["managedFields"] = _encode_managed([entry(new_set)])
        return result

    live = copy.deepcopy(existing)
    live.setdefault("metadata", {})
    entries = _decode_managed(live)
    live["metadata"].pop("managedFields", None)

    def mine(e: dict) -> bool:
        return e.get("manager") == manager and e.get("operation") == "Apply" and \
            e.get("subresource") == subresource

    prev = next((e for e in entries if mine(e)), None)
    prev_set = prev["_set"] if prev else set()
    others = [e for e in entries if not mine(e)]

    merged = _ssa_merge(live, applied, types.schema, (), types)

    # fields this manager stops applying: removed unless someone else owns them (or below)
    kept = set(new_set)
    for e in others:
        kept |= e["_set"]
    kept_prefixes = set()
    for p in kept:
        for i in range(1, len(p) + 1):
            kept_prefixes.add(p[:i])
    doomed = {p for p in prev_set - new_set if p not in kept_prefixes}
    for p in doomed:
        # removing an item/field removes everything below it (keys included), so only the
        # top-most doomed paths are removed explicitly
        if not any(p[:i] in doomed for i in range(1, len(p))):
            _remove(merged, p)

    # conflicts: another manager owns a leaf this apply changes
    leaves = _leaves(new_set)
    conflicts: list[tuple[str, Path]] = []
    changed_by_update: dict[int, set] = {}
    for idx, e in enumerate(others):
        is_apply = e.get("operation") == "Apply"
        for p in e["_set"] & leaves:
            lv = _lookup(live, p)
            if lv is _MISSING or lv == _lookup(merged, p):
                continue
            if is_apply or conflict_with_updates:
                conflicts.append((e.get("manager", ""), p))
            else:
                changed_by_update.setdefault(idx, set()).add(p)
    if conflicts and not force:
        conflicts.sort(key=lambda c: (c[0], c[1]))
        rendered = [(m, _render_path(p)) for m, p in conflicts]
        n = len(rendered)
        by_mgr: dict[str, list[str]] = {}
        for m, f in rendered:
            by_mgr.setdefault(m, []).append(f)
        if n == 1:
            m, f = rendered[0]
            msg = f'Apply failed with 1 conflict: conflict with "{m}" using {api_version}: {f}'
        else:
            parts = []
            for m, fs in by_mgr.items():
                parts.append(f'conflicts with "{m}" using {api_version}:\n' +
                             "\n".join(f"- {f}" for f in fs))
            msg = f"Apply failed with {n} conflicts: " + "\n".join(parts)
        raise ConflictError(msg, rendered)
    taken = {p for _, p in conflicts}
    for idx, e in enumerate(others):
        e["_set"] = e["_set"] - taken - changed_by_update.get(idx, set())

    # drop ownership of paths that no longer exist
    for e in others:
        e["_set"] = {p for p in e["_set"] if _lookup(merged, p) is not _MISSING}

    new_entry = entry(new_set)
    out_entries = []
    placed = False
    for e in entries:
        if mine(e):
            out_entries.append(new_entry)
            placed = True
        else:
            out_entries.append(e)
    if not placed:
        out_entries.append(new_entry)
    merged.setdefault("metadata", {})["managedFields"] = _encode_managed(out_entries)
    return merged


def update_managed_fields(old: dict | None, new: dict, manager: str, api_version: str, now: str,
                          *, kind: str | None = None, operation: str = "Update",
                          list_keys: Callable[[tuple], Any] | None = None,
                          schema: dict | None = None, subresource: str | None = None) -> dict:
    """Record a non-apply write (create/update/patch) in ``new``'s managedFields (returns a
    new object).  Loose: fields added or changed by the write are owned by ``manager``
    (operation ``Update``) and removed from other managers; fields that disappeared are
    dropped from every manager.  The managedFields are taken from ``new`` when present,
    otherwise from ``old``."""
    new = copy.deepcopy(new)
    md = new.setdefault("metadata", {})
    source = new if md.get("managedFields") else old
    entries = _decode_managed(source)
    md.pop("managedFields", None)
    types = _types_for(api_version, kind or new.get("kind", ""), schema, list_keys)
    new_set = _fieldset(new, types)
    if old is not None:
        old_body = copy.deepcopy(old)
        old_body.get("metadata", {}).pop("managedFields", None)
        old_set = _fieldset(old_body, types)
        leaves = _leaves(new_set)
        changed = {p for p in new_set if p not in old_set or
                   (p in leaves and _lookup(old_body, p) != _lookup(new, p))}
    else:
        changed = set(new_set)

    def mine(e: dict) -> bool:
        return e.get("manager") == manager and e.get("operation") == operation and \
            e.get("subresource") == subresource

    placed = False
    for e in entries:
        if mine(e):
            e["_set"] = (e["_set"] | changed) & new_set
            e["time"] = now
            e["apiVersion"] = api_version
            placed = True
        else:
            e["_set"] = {p for p in e["_set"] - changed if _lookup(new, p) is not _MISSING}
    if not placed and changed:
        e = {"manager": manager, "operation": operation, "apiVersion": api_version, "time": now,
             "_set": changed}
        if subresource:
            e["subresource"] = subresource
        entries.append(e)
    md["managedFields"] = _encode_managed(entries)
    if not md["managedFields"]:
        md.pop("managedFields")
    return new
