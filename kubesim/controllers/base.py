"""Controller framework: a work queue per controller fed by store events.

A controller declares the resources it watches; every change to one of them
enqueues the keys `keys_for()` returns, and `reconcile(key)` runs once per key
(coalesced while queued). `reconcile` may return seconds after which to run
again (time-based behaviour such as a container failing after N seconds).
"""
from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Hashable, Iterable

from kubesim.deletions import ORIGIN

if TYPE_CHECKING:  # pragma: no cover
    from kubesim.cluster import Cluster

log = logging.getLogger("kubesim.controllers")

REGISTRY: dict[str, type["Controller"]] = {}


def register(cls: type["Controller"]) -> type["Controller"]:
    """Class decorator: make a controller available to every Cluster."""
    REGISTRY[cls.name] = cls
    return cls


def owner_key(obj: dict[str, Any], kind: str) -> tuple[str, str] | None:
    """(namespace, name) of the controlling owner of `obj` with the given kind."""
    for ref in obj.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("kind") == kind and ref.get("controller", True):
            return (obj["metadata"].get("namespace", ""), ref["name"])
    return None


class Controller:
    name: str = ""
    watches: tuple[str, ...] = ()
    primary: str | None = None  # resource whose objects are the keys (default watches[0])

    def __init__(self, cluster: "Cluster"):
        self.cluster = cluster
        self.api = cluster.api
        self.queue: asyncio.Queue[Hashable] = asyncio.Queue()
        self._queued: set[Hashable] = set()
        self._timers: dict[Hashable, asyncio.TimerHandle] = {}
        self._task: asyncio.Task | None = None

    # -- hooks -----------------------------------------------------------
    @property
    def primary_resource(self) -> str:
        return self.primary or self.watches[0]

    def keys_for(self, resource: str, obj: dict[str, Any]) -> Iterable[Hashable]:
        meta = obj.get("metadata", {})
        if resource == self.primary_resource:
            return [(meta.get("namespace", ""), meta["name"])]
        kind = self.api.registry.get(self.primary_resource).kind
        key = owner_key(obj, kind)
        return [key] if key else []

    async def reconcile(self, key: Hashable) -> float | None:  # pragma: no cover
        raise NotImplementedError

    def initial_keys(self) -> Iterable[Hashable]:
        try:
            items = self.api.list(self.primary_resource)["items"]
        except Exception:  # resource may not exist (yet)
            return []
        return [(o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in items]

    # -- machinery ---------------------------------------------------------
    def enqueue(self, key: Hashable) -> None:
        if key not in self._queued:
            self._queued.add(key)
            self.queue.put_nowait(key)

    def enqueue_after(self, key: Hashable, delay: float) -> None:
        loop = asyncio.get_running_loop()
        old = self._timers.pop(key, None)
        if old:
            old.cancel()
        self._timers[key] = loop.call_later(max(delay, 0.0), self._fire, key)

    def _fire(self, key: Hashable) -> None:
        self._timers.pop(key, None)
        self.enqueue(key)

    def on_event(self, event_type: str, resource: str, obj: dict[str, Any],
                 old: dict[str, Any] | None) -> None:
        if resource not in self.watches:
            return
        for key in self.keys_for(resource, obj):
            self.enqueue(key)

    async def run(self) -> None:
        # what this task deletes is the controller's doing (kubesim/deletions.py)
        ORIGIN.set({"via": "controller", "controller": self.name})
        for key in self.initial_keys():
            self.enqueue(key)
        while True:
            key = await self.queue.get()
            self._queued.discard(key)
            try:
                delay = await self.reconcile(key)
            except asyncio.CancelledError:
                raise
            except Exception:  # a controller bug must not kill the simulator
                log.exception("controller %s failed on %s", self.name, key)
                delay = 1.0
            if delay is not None:
                self.enqueue_after(key, delay)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self.run(), name=f"ctrl-{self.name}")

    async def stop(self) -> None:
        for t in self._timers.values():
            t.cancel()
        self._timers.clear()
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass


class Manager:
    """Starts the enabled controllers and feeds them the ApiServer's events."""

    def __init__(self, cluster: "Cluster", disabled: Iterable[str] = ()):
        self.cluster = cluster
        disabled = set(disabled)
        unknown = disabled - set(REGISTRY)
        if unknown:
            raise ValueError(f"unknown controllers: {', '.join(sorted(unknown))}; "
                             f"known: {', '.join(sorted(REGISTRY))}")
        self.controllers = [cls(cluster) for name, cls in REGISTRY.items() if name not in disabled]
        cluster.api.subscribe(self._dispatch)

    def _dispatch(self, event_type: str, resource: str, obj: dict[str, Any],
                  old: dict[str, Any] | None) -> None:
        for c in self.controllers:
            c.on_event(event_type, resource, obj, old)

    def get(self, name: str) -> Controller | None:
        return next((c for c in self.controllers if c.name == name), None)

    def start(self) -> None:
        for c in self.controllers:
            c.start()

    async def stop(self) -> None:
        for c in self.controllers:
            await c.stop()
