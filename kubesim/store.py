"""In-memory object storage with one global resourceVersion and watch fan-out.

Stored objects are never mutated in place: every write stores a new dict, so
readers (the HTTP layer serialising a list, watch events in the history) can
hold references without copying.
"""
from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

Obj = dict[str, Any]
Match = Callable[[Obj], bool]


@dataclass(eq=False)
class Watcher:
    resource: str
    namespace: str | None
    match: Match | None
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)
    closed: bool = False

    def offer(self, event_type: str, obj: Obj, old: Obj | None, rv: int) -> None:
        if self.closed:
            return
        if self.namespace and obj.get("metadata", {}).get("namespace") != self.namespace:
            return
        if self.match is None:
            self.queue.put_nowait((event_type, obj))
            return
        now = event_type != "DELETED" and self.match(obj)
        before = old is not None and self.match(old)
        if event_type == "DELETED":
            if self.match(obj):
                self.queue.put_nowait(("DELETED", obj))
        elif now and before:
            self.queue.put_nowait(("MODIFIED", obj))
        elif now:
            self.queue.put_nowait(("ADDED", obj))
        elif before:
            self.queue.put_nowait(("DELETED", obj))

    def close(self) -> None:
        self.closed = True
        self.queue.put_nowait(None)


class Store:
    def __init__(self, history: int = 100_000):
        self.rv = 0
        self._objects: dict[str, dict[tuple[str, str], Obj]] = {}
        self._history: deque[tuple[int, str, str, Obj, Obj | None]] = deque(maxlen=history)
        self.compacted_rv = 0  # events at or below this rv are gone from the history
        self._watchers: dict[str, set[Watcher]] = {}
        self._subscribers: list[Callable[[str, str, Obj, Obj | None], None]] = []

    # -- reads --------------------------------------------------------------
    def get(self, resource: str, namespace: str, name: str) -> Obj | None:
        return self._objects.get(resource, {}).get((namespace, name))

    def items(self, resource: str, namespace: str | None = None) -> Iterator[Obj]:
        bucket = self._objects.get(resource, {})
        if namespace:
            return (o for (ns, _), o in bucket.items() if ns == namespace)
        return iter(bucket.values())

    def count(self, resource: str | None = None) -> int:
        if resource:
            return len(self._objects.get(resource, {}))
        return sum(len(b) for b in self._objects.values())

    def resources(self) -> list[str]:
        return list(self._objects)

    # -- writes -------------------------------------------------------------
    def next_rv(self) -> int:
        self.rv += 1
        return self.rv

    def put(self, resource: str, obj: Obj, old: Obj | None) -> None:
        """Store obj (which already carries its new resourceVersion)."""
        meta = obj["metadata"]
        self._objects.setdefault(resource, {})[(meta.get("namespace", ""), meta["name"])] = obj
        self._emit("ADDED" if old is None else "MODIFIED", resource, obj, old)

    def remove(self, resource: str, obj: Obj) -> None:
        """Remove obj; `obj` is the final state (with a new resourceVersion)."""
        meta = obj["metadata"]
        self._objects.get(resource, {}).pop((meta.get("namespace", ""), meta["name"]), None)
        self._emit("DELETED", resource, obj, None)

    def drop_resource(self, resource: str) -> list[Obj]:
        return list(self._objects.pop(resource, {}).values())

    def _emit(self, event_type: str, resource: str, obj: Obj, old: Obj | None) -> None:
        rv = int(obj["metadata"]["resourceVersion"])
        if len(self._history) == self._history.maxlen:
            self.compacted_rv = self._history[0][0]
        self._history.append((rv, resource, event_type, obj, old))
        for w in self._watchers.get(resource, ()):
            w.offer(event_type, obj, old, rv)
        for cb in self._subscribers:
            cb(event_type, resource, obj, old)

    # -- watch ----------------------------------------------------------------
    def subscribe(self, callback: Callable[[str, str, Obj, Obj | None], None]) -> None:
        self._subscribers.append(callback)

    def history_since(self, resource: str, rv: int) -> list[tuple[str, Obj, Obj | None]] | None:
        """Events of `resource` after rv, or None when rv is too old (410 Gone)."""
        if rv < self.compacted_rv:
            return None
        return [(et, o, old) for (erv, res, et, o, old) in self._history
                if erv > rv and res == resource]

    def compact(self) -> int:
        """Forget every event so far (etcd compaction): resuming a watch from an earlier
        resourceVersion is then 410 Gone. Returns the compacted resourceVersion."""
        self._history.clear()
        self.compacted_rv = self.rv
        return self.rv

    def add_watcher(self, w: Watcher) -> None:
        self._watchers.setdefault(w.resource, set()).add(w)

    def remove_watcher(self, w: Watcher) -> None:
        self._watchers.get(w.resource, set()).discard(w)

    def close_watchers(self, resource: str | None = None) -> None:
        for res, ws in list(self._watchers.items()):
            if resource is None or res == resource:
                for w in list(ws):
                    w.close()
                ws.clear()
