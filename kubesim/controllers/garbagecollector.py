"""Garbage collector: ownerReference cascading deletion for every resource type.

It indexes every object (built-ins and custom resources alike) by uid and by the
owner uids it references, from the apiserver's event stream plus one initial list.

* Background: when an object goes away, each dependent whose owners are now all gone
  is deleted; a dependent that still has a live owner just loses the dangling reference.
  Objects created with references to owners that do not exist are collected too.
* Foreground: an owner with a deletionTimestamp and the `foregroundDeletion` finalizer
  has its dependents deleted (dependents that have dependents themselves in foreground
  too); once none is left the finalizer is removed and the apiserver removes the owner.
* Orphan: an owner with the `orphan` finalizer has its uid removed from its dependents'
  ownerReferences, then the finalizer removed.
"""
from __future__ import annotations

import logging
from typing import Any, Hashable, Iterable

from kubesim.controllers._util import try_get
from kubesim.controllers.base import Controller, register
from kubesim.errors import ApiError

log = logging.getLogger("kubesim.gc")

Obj = dict[str, Any]
Ref = tuple[str, str, str]  # (resource key, namespace, name)
FOREGROUND = "foregroundDeletion"
ORPHAN = "orphan"


def _owner_uids(obj: Obj) -> tuple[str, ...]:
    return tuple(r.get("uid", "") for r in obj.get("metadata", {}).get("ownerReferences") or []
                 if r.get("uid"))


@register
class GarbageCollector(Controller):
    name = "garbagecollector"
    watches = ()  # every resource: see on_event

    def __init__(self, cluster: Any):
        super().__init__(cluster)
        self.alive: dict[str, Ref] = {}                 # uid -> where the object lives
        self.owners_of: dict[Ref, tuple[str, ...]] = {}  # object -> owner uids it references
        self.dependents: dict[str, set[Ref]] = {}       # owner uid -> objects referencing it
        self.uid_of: dict[Ref, str] = {}

    # -- index -------------------------------------------------------------------------
    def _set_owners(self, ref: Ref, owners: tuple[str, ...]) -> tuple[str, ...]:
        old = self.owners_of.get(ref, ())
        if old == owners:
            return old
        for u in old:
            deps = self.dependents.get(u)
            if deps is not None:
                deps.discard(ref)
                if not deps:
                    del self.dependents[u]
        for u in owners:
            self.dependents.setdefault(u, set()).add(ref)
        if owners:
            self.owners_of[ref] = owners
        else:
            self.owners_of.pop(ref, None)
        return old

    def _index(self, resource: str, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        ref = (resource, meta.get("namespace", ""), meta.get("name", ""))
        uid = meta.get("uid", "")
        prev = self.uid_of.get(ref)
        if prev and prev != uid:
            self.alive.pop(prev, None)
        self.uid_of[ref] = uid
        self.alive[uid] = ref
        self._set_owners(ref, _owner_uids(obj))

    def _types(self) -> list[Any]:
        reg = self.api.registry
        fn = getattr(reg, "storage_types", None) or getattr(reg, "all")
        return list(fn())

    def initial_keys(self) -> Iterable[Hashable]:
        keys: list[Hashable] = []
        for rt in self._types():
            try:
                items = self.api.list(rt.key, copy_=False)["items"]
            except (ApiError, TypeError):
                continue
            for obj in items:
                self._index(rt.key, obj)
                meta = obj["metadata"]
                if meta.get("ownerReferences") or self._gc_finalizing(obj):
                    keys.append(("obj", rt.key, meta.get("namespace", ""), meta["name"]))
        return keys

    @staticmethod
    def _gc_finalizing(obj: Obj) -> bool:
        meta = obj.get("metadata") or {}
        fins = meta.get("finalizers") or []
        return bool(meta.get("deletionTimestamp")) and (FOREGROUND in fins or ORPHAN in fins)

    def on_event(self, event_type: str, resource: str, obj: Obj, old: Obj | None) -> None:
        meta = obj.get("metadata") or {}
        ref: Ref = (resource, meta.get("namespace", ""), meta.get("name", ""))
        uid = meta.get("uid", "")
        if event_type == "DELETED":
            if self.uid_of.get(ref) == uid:
                del self.uid_of[ref]
            if self.alive.get(uid) == ref:
                del self.alive[uid]
            owners = self._set_owners(ref, ())
            if uid in self.dependents:
                self.enqueue(("gone", uid))
            for u in owners:  # an owner waiting in foreground deletion may be done now
                if u in self.alive:
                    self.enqueue(("obj",) + self.alive[u])
            return
        self._index(resource, obj)
        old_owners = _owner_uids(old) if old is not None else ()
        new_owners = _owner_uids(obj)
        if new_owners and (old is None or old_owners != new_owners):
            self.enqueue(("obj",) + ref)
        for u in set(old_owners) - set(new_owners):
            if u in self.alive:
                self.enqueue(("obj",) + self.alive[u])
        if self._gc_finalizing(obj):
            self.enqueue(("obj",) + ref)

    # -- reconcile ------------------------------------------------------------------------
    async def reconcile(self, key: Hashable) -> float | None:
        kind = key[0]  # type: ignore[index]
        if kind == "gone":
            retry = None
            for dep in sorted(self.dependents.get(key[1], ())):  # type: ignore[index]
                r = self._check(dep)
                if r is not None:
                    retry = r
            return retry
        return self._check(tuple(key[1:]))  # type: ignore[arg-type,index]

    def _check(self, ref: Ref) -> float | None:
        resource, ns, name = ref
        if self.api.registry.find(resource) is None:
            return None
        obj = try_get(self.api, resource, ns or None, name)
        if obj is None:
            return None
        meta = obj["metadata"]
        uid = meta["uid"]
        if self._gc_finalizing(obj):
            fins = meta.get("finalizers") or []
            if ORPHAN in fins:
                return self._orphan(resource, obj)
            if FOREGROUND in fins:
                return self._foreground(resource, obj)
        refs = meta.get("ownerReferences") or []
        if not refs:
            return None
        dangling = [r for r in refs if r.get("uid") not in self.alive]
        if not dangling:
            return None
        if len(dangling) == len(refs):
            if meta.get("deletionTimestamp"):
                return None
            log.debug("collecting %s %s/%s: owners gone", resource, ns, name)
            try:
                self.api.delete(resource, ns or None, name,
                                propagation_policy="Background",
                                preconditions={"uid": uid})
            except ApiError as exc:
                if exc.code not in (404, 409):
                    raise
            return None
        keep = [r for r in refs if r.get("uid") in self.alive]
        self._patch_refs(resource, obj, keep)
        return None

    def _live_dependents(self, uid: str) -> list[tuple[Ref, Obj]]:
        out = []
        for dep in sorted(self.dependents.get(uid, ())):
            if self.api.registry.find(dep[0]) is None:
                continue
            obj = try_get(self.api, dep[0], dep[1] or None, dep[2])
            if obj is not None and uid in _owner_uids(obj):
                out.append((dep, obj))
        return out

    def _orphan(self, resource: str, owner: Obj) -> float | None:
        uid = owner["metadata"]["uid"]
        for dep, obj in self._live_dependents(uid):
            keep = [r for r in obj["metadata"].get("ownerReferences") or [] if r.get("uid") != uid]
            if not self._patch_refs(dep[0], obj, keep):
                return 0.05
        return self._drop_finalizer(resource, owner, ORPHAN)

    def _foreground(self, resource: str, owner: Obj) -> float | None:
        uid = owner["metadata"]["uid"]
        deps = self._live_dependents(uid)
        if not deps:
            return self._drop_finalizer(resource, owner, FOREGROUND)
        # blocking dependents first, then the rest (all are deleted; all are waited for)
        deps.sort(key=lambda d: not any(r.get("uid") == uid and r.get("blockOwnerDeletion")
                                        for r in d[1]["metadata"].get("ownerReferences") or []))
        for (res, ns, name), obj in deps:
            if obj["metadata"].get("deletionTimestamp"):
                continue
            policy = "Foreground" if self.dependents.get(obj["metadata"]["uid"]) else "Background"
            try:
                self.api.delete(res, ns or None, name, propagation_policy=policy,
                                preconditions={"uid": obj["metadata"]["uid"]})
            except ApiError as exc:
                if exc.code not in (404, 409):
                    raise
        return 0.5  # dependents' DELETED events requeue sooner

    def _patch_refs(self, resource: str, obj: Obj, refs: list[Obj]) -> bool:
        meta = obj["metadata"]
        try:
            self.api.patch(resource, meta.get("namespace") or None, meta["name"],
                           {"metadata": {"ownerReferences": refs or None,
                                         "resourceVersion": meta["resourceVersion"]}})
        except ApiError as exc:
            if exc.code == 404:
                return True
            if exc.code == 409:
                return False
            raise
        return True

    def _drop_finalizer(self, resource: str, obj: Obj, finalizer: str) -> float | None:
        meta = obj["metadata"]
        rest = [f for f in meta.get("finalizers") or [] if f != finalizer]
        try:
            self.api.patch(resource, meta.get("namespace") or None, meta["name"],
                           {"metadata": {"finalizers": rest or None,
                                         "resourceVersion": meta["resourceVersion"]}})
        except ApiError as exc:
            if exc.code == 404:
                return None
            if exc.code == 409:
                return 0.05
            raise
        return None
