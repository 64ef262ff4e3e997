"""Namespace controller: lifecycle and content deletion.

Active namespaces get status.phase Active and a `default` ServiceAccount. A namespace
being deleted (the apiserver sets deletionTimestamp, phase Terminating and keeps the
`kubernetes` spec finalizer) has every namespaced object of every type (custom
resources included) deleted; objects held by finalizers are waited for (the
NamespaceContentRemaining / NamespaceFinalizersRemaining conditions say what is left).
When it is empty the `kubernetes` finalizer is removed through the `finalize`
subresource and the apiserver removes the namespace.
"""
from __future__ import annotations

from typing import Any, Hashable

from kubesim.controllers._util import fmt_time, now, set_condition, try_get
from kubesim.controllers.base import Controller, register
from kubesim.errors import ApiError

Obj = dict[str, Any]
POLL = 0.1


@register
class NamespaceController(Controller):
    name = "namespace"
    watches = ("namespaces", "serviceaccounts")

    def keys_for(self, resource: str, obj: Obj):
        meta = obj["metadata"]
        if resource == "namespaces":
            return [("", meta["name"])]
        if resource == "serviceaccounts" and meta["name"] == "default":
            return [("", meta.get("namespace", ""))]
        return []

    async def reconcile(self, key: Hashable) -> float | None:
        _, name = key  # type: ignore[misc]
        ns = try_get(self.api, "namespaces", None, name)
        if ns is None:
            return None
        if not ns["metadata"].get("deletionTimestamp"):
            if (ns.get("status") or {}).get("phase") != "Active":
                self._status(ns, dict(ns.get("status") or {}, phase="Active"))
            self._default_service_account(name)
            return None
        return self._finalize(ns)

    def _default_service_account(self, namespace: str) -> None:
        if self.api.registry.find("serviceaccounts") is None:
            return
        if try_get(self.api, "serviceaccounts", namespace, "default") is not None:
            return
        try:
            self.api.create("serviceaccounts", {"apiVersion": "v1", "kind": "ServiceAccount",
                                                "metadata": {"name": "default",
                                                             "namespace": namespace}},
                            namespace=namespace)
        except ApiError as exc:
            if exc.code not in (403, 404, 409):
                raise

    def _types(self) -> list[Any]:
        reg = self.api.registry
        fn = getattr(reg, "storage_types", None) or getattr(reg, "all")
        return [rt for rt in fn() if rt.namespaced]

    def _finalize(self, ns: Obj) -> float | None:
        name = ns["metadata"]["name"]
        remaining: dict[str, int] = {}
        finalizers: dict[str, int] = {}
        for rt in self._types():
            try:
                items = self.api.list(rt.key, name)["items"]
            except ApiError:
                continue
            for obj in items:
                meta = obj["metadata"]
                try:
                    self.api.delete(rt.key, name, meta["name"],
                                    preconditions={"uid": meta["uid"]})
                except ApiError as exc:
                    if exc.code not in (404, 409):
                        raise
                    continue
                if try_get(self.api, rt.key, name, meta["name"]) is not None:
                    remaining[rt.key] = remaining.get(rt.key, 0) + 1
                    for f in meta.get("finalizers") or []:
                        finalizers[f] = finalizers.get(f, 0) + 1
        if remaining:
            when = fmt_time(now(self.cluster))
            status = dict(ns.get("status") or {})
            conds = set_condition(status.get("conditions"), "NamespaceContentRemaining", "True",
                                  "SomeResourcesRemain", "Some resources are remaining: " + ", ".join(
                                      f"{k} has {v} resource instances"
                                      for k, v in sorted(remaining.items())), when)
            if finalizers:
                conds = set_condition(conds, "NamespaceFinalizersRemaining", "True",
                                      "SomeFinalizersRemain", "Some content in the namespace has "
                                      "finalizers remaining: " + ", ".join(
                                          f"{k} in {v} resource instances"
                                          for k, v in sorted(finalizers.items())), when)
            status["conditions"] = conds
            self._status(ns, status)
            return POLL
        spec_fins = (ns.get("spec") or {}).get("finalizers") or []
        if "kubernetes" in spec_fins:
            new = dict(ns)
            new["spec"] = dict(ns.get("spec") or {},
                               finalizers=[f for f in spec_fins if f != "kubernetes"])
            try:
                self.api.update("namespaces", new, subresource="finalize")
            except ApiError as exc:
                if exc.code == 409:
                    return POLL
                if exc.code != 404:
                    raise
        return None

    def _status(self, ns: Obj, status: Obj) -> None:
        if ns.get("status") == status:
            return
        new = dict(ns)
        new["status"] = status
        try:
            self.api.update("namespaces", new, subresource="status")
        except ApiError as exc:
            if exc.code not in (404, 409):
                raise
