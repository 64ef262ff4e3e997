"""Who deleted what: every object kubesim removes, with the request or controller behind it.

The request log (metrics.py) says which DELETE requests were served; this log says which
objects went, and why: an object may go through a DELETE request, a collection DELETE, the
garbage collector (ownerReferences), the namespace controller (its namespace was deleted),
or an update that removed its last finalizer after a DELETE had marked it. Each record
holds the object's final state (labels, annotations, ownerReferences, spec) and two
origins: ``requested_by`` (who set deletionTimestamp or deleted it outright) and
``removed_by`` (who removed it from the store). An origin is a dict:

* ``{"via": "request", "verb": ..., "path": ..., "user_agent": ...}``: an HTTP request;
* ``{"via": "controller", "controller": "garbagecollector"}``: a simulated controller;
* ``{"via": "direct"}``: an in-process call (``sim.call(sim.api.delete, ...)``, tests).

``requests()`` lists the deletions asked for (also of objects still held by finalizers, such
as a Terminating namespace), ``records()`` the objects removed.

The log is never cleared by ``reset_metrics``: a data-safety invariant spans a whole test
module (tests/_data_safety.py reads it).
"""
from __future__ import annotations

import contextvars
import time
from collections import deque
from typing import Any

Obj = dict[str, Any]

DIRECT: dict[str, str] = {"via": "direct"}
# Set by the HTTP layer for each request and by the controllers for each reconcile.
ORIGIN: contextvars.ContextVar[dict[str, str]] = contextvars.ContextVar("kubesim_origin",
                                                                      default=DIRECT)


class DeletionLog:
    def __init__(self, size: int = 200_000):
        self._records: deque[dict[str, Any]] = deque(maxlen=size)
        self._requests: deque[dict[str, Any]] = deque(maxlen=size)
        self._requested: dict[str, tuple[float, dict[str, str]]] = {}

    def _request(self, resource: str, obj: Obj, origin: dict[str, str]) -> None:
        meta = obj.get("metadata") or {}
        self._requests.append({
            "time": time.time(), "resource": resource, "namespace": meta.get("namespace") or "",
            "name": meta.get("name") or "", "uid": meta.get("uid") or "",
            "requested_by": dict(origin), "object": obj})

    def on_event(self, event_type: str, resource: str, obj: Obj, old: Obj | None) -> None:
        """A store subscriber (ApiServer.subscribe)."""
        meta = obj.get("metadata") or {}
        uid = meta.get("uid") or ""
        if event_type == "MODIFIED":
            if meta.get("deletionTimestamp") and not ((old or {}).get("metadata") or {}).get(
                    "deletionTimestamp"):
                self._requested[uid] = (time.time(), ORIGIN.get())
                self._request(resource, obj, ORIGIN.get())
            return
        if event_type != "DELETED":
            return
        origin = ORIGIN.get()
        if uid not in self._requested:  # deleted outright (no finalizers)
            self._request(resource, obj, origin)
        requested_at, requested_by = self._requested.pop(uid, (time.time(), origin))
        self._records.append({
            "time": time.time(), "requested_at": requested_at, "resource": resource,
            "namespace": meta.get("namespace") or "", "name": meta.get("name") or "", "uid": uid,
            "labels": dict(meta.get("labels") or {}),
            "annotations": dict(meta.get("annotations") or {}),
            "ownerReferences": list(meta.get("ownerReferences") or []),
            "requested_by": dict(requested_by), "removed_by": dict(origin), "object": obj,
        })

    def records(self, resource: str | None = None) -> list[dict[str, Any]]:
        """The deletions, oldest first (``resource``: only that kubectl-style key)."""
        return [r for r in self._records if resource is None or r["resource"] == resource]

    def requests(self, resource: str | None = None) -> list[dict[str, Any]]:
        """Every deletion asked for, oldest first: the object as it was when deletionTimestamp
        was set (or when it went, without finalizers) and who asked; also those still
        waiting for their finalizers (a Terminating namespace)."""
        return [r for r in self._requests if resource is None or r["resource"] == resource]

    def clear(self) -> None:
        self._records.clear()
        self._requests.clear()
        self._requested.clear()
