"""A list+watch informer per (GVK, namespace) with a local cache, like client-go's.

* initial LIST (paginated), then WATCH from the list's resourceVersion with bookmarks;
* the watch is resumed from the last seen resourceVersion when it ends (server timeout,
  connection drop); a 410 Gone (HTTP status or ERROR event) triggers a re-LIST, whose
  differences with the cache are delivered as ADDED / MODIFIED / DELETED;
* handlers get ``(event_type, old, new)`` with event_type in ADDED, MODIFIED, DELETED
  (old is None for ADDED, new is the last known object for DELETED);
* a handler added after the first sync receives the cached objects as ADDED events
  (controller-runtime replays the cache to a new event handler the same way);
* ``transform`` (client-go's SetTransform) turns each object into what the cache keeps and
  the handlers get, e.g. less of it (controller.dependent_view).
"""
from __future__ import annotations

import logging
import random
import threading
import time
from typing import Any, Callable

from .kube import ApiError, KubeClient, WatchStream
from .watches import GVK

log = logging.getLogger("torchdev_runtime.informer")

Handler = Callable[[str, "dict[str, Any] | None", "dict[str, Any] | None"], None]


def object_key(obj: dict[str, Any]) -> tuple[str, str]:
    md = obj.get("metadata") or {}
    return (md.get("namespace") or "", md.get("name") or "")


class Informer:
    def __init__(self, client: KubeClient, gvk: GVK, namespace: str | None = None,
                 stop_event: threading.Event | None = None,
                 transform: Callable[[dict[str, Any]], dict[str, Any]] | None = None):
        self.client = client
        self.transform = transform
        self.gvk = gvk
        self.namespace = namespace or None
        self._stop = stop_event or threading.Event()
        self._own_stop = threading.Event()
        self._lock = threading.RLock()
        self._cache: dict[tuple[str, str], dict[str, Any]] = {}
        self._handlers: list[Handler] = []
        self._synced = threading.Event()
        self._thread: threading.Thread | None = None
        self._stream: WatchStream | None = None
        self.resource_version = ""
        self.relists = 0
        self.last_error: str | None = None

    # -- public -------------------------------------------------------------------------
    def add_handler(self, handler: Handler) -> None:
        with self._lock:
            self._handlers.append(handler)
            replay = list(self._cache.values()) if self._synced.is_set() else []
        for obj in replay:
            self._call(handler, "ADDED", None, obj)

    def start(self) -> "Informer":
        if self._thread is None:
            name = f"informer-{self.gvk.kind}.{self.gvk.group or 'core'}"
            self._thread = threading.Thread(target=self._run, name=name, daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._own_stop.set()
        s = self._stream
        if s is not None:
            s.abort()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def wait_synced(self, timeout: float | None = None) -> bool:
        return self._synced.wait(timeout)

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            return self._cache.get((namespace or "", name))

    def list(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._cache.values())

    # -- internals ----------------------------------------------------------------------
    def _stopping(self) -> bool:
        return self._stop.is_set() or self._own_stop.is_set()

    def _sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while not self._stopping():
            left = end - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(0.05, left))

    def _call(self, handler: Handler, etype: str, old, new) -> None:
        try:
            handler(etype, old, new)
        except Exception:  # noqa: BLE001
            log.exception("event handler failed for %s %s", self.gvk.kind, etype)

    def _dispatch(self, etype: str, old, new) -> None:
        with self._lock:
            handlers = list(self._handlers)
        for h in handlers:
            self._call(h, etype, old, new)

    def _list(self) -> None:
        items: list[dict[str, Any]] = []
        cont = None
        rv = ""
        api_version = self.gvk.api_version
        while True:
            data = self.client.list(self.gvk, self.namespace, limit=500, continue_=cont)
            for it in data.get("items") or []:
                it.setdefault("apiVersion", api_version)
                it.setdefault("kind", self.gvk.kind)
                items.append(self.transform(it) if self.transform else it)
            md = data.get("metadata") or {}
            rv = md.get("resourceVersion") or rv
            cont = md.get("continue")
            if not cont:
                break
        new_cache = {object_key(o): o for o in items}
        events: list[tuple[str, Any, Any]] = []
        with self._lock:
            old_cache = self._cache
            for k, o in new_cache.items():
                prev = old_cache.get(k)
                if prev is None:
                    events.append(("ADDED", None, o))
                elif (prev.get("metadata") or {}).get("resourceVersion") != \
                        (o.get("metadata") or {}).get("resourceVersion"):
                    events.append(("MODIFIED", prev, o))
            for k, prev in old_cache.items():
                if k not in new_cache:
                    events.append(("DELETED", prev, prev))
            self._cache = new_cache
            self.resource_version = rv
        for e in events:
            self._dispatch(*e)
        self._synced.set()

    def _apply(self, etype: str, obj: dict[str, Any]) -> None:
        key = object_key(obj)
        with self._lock:
            prev = self._cache.get(key)
            if etype == "DELETED":
                self._cache.pop(key, None)
            else:
                self._cache[key] = obj
        if etype == "DELETED":
            self._dispatch("DELETED", prev or obj, obj)
        elif prev is None:
            self._dispatch("ADDED", None, obj)
        else:
            self._dispatch("MODIFIED", prev, obj)

    def _run(self) -> None:
        backoff = 0.2
        need_list = True
        while not self._stopping():
            try:
                if need_list:
                    self._list()
                    self.relists += 1
                    need_list = False
                timeout = random.randint(240, 480)
                stream = self.client.watch(self.gvk, self.namespace, self.resource_version,
                                           timeout_seconds=timeout)
                self._stream = stream
                if self._stopping():
                    stream.close()
                    break
                # may have been stopped between the check above and the assignment

                for ev in stream:
                    if self._stopping():
                        break
                    etype = ev.get("type")
                    obj = ev.get("object") or {}
                    if etype == "ERROR":
                        code = obj.get("code")
                        if code == 410:
                            log.debug("%s watch expired (410), re-listing", self.gvk.kind)
                            need_list = True
                        else:
                            log.warning("%s watch error: %s", self.gvk.kind, obj.get("message"))
                        break
                    rv = (obj.get("metadata") or {}).get("resourceVersion")
                    if rv:
                        self.resource_version = rv
                    if etype == "BOOKMARK":
                        continue
                    if etype in ("ADDED", "MODIFIED", "DELETED"):
                        obj.setdefault("apiVersion", self.gvk.api_version)
                        obj.setdefault("kind", self.gvk.kind)
                        self._apply(etype, self.transform(obj) if self.transform else obj)
                self._stream = None
                backoff = 0.2
            except ApiError as exc:
                self._stream = None
                if self._stopping():
                    break
                self.last_error = str(exc)
                if exc.gone:
                    need_list = True
                    continue
                log.warning("%s informer: %s (retrying in %.1fs)", self.gvk.kind, exc, backoff)
                self._sleep(backoff)
                backoff = min(backoff * 2, 10.0)
            except Exception as exc:  # noqa: BLE001 - connection errors, decode errors
                self._stream = None
                if self._stopping():
                    break
                self.last_error = str(exc)
                log.warning("%s informer: %s: %s (retrying in %.1fs)", self.gvk.kind,
                            type(exc).__name__, exc, backoff)
                self._sleep(backoff)
                backoff = min(backoff * 2, 10.0)
