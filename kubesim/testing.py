"""Run kubesim in a background thread for tests and benchmarks."""
from __future__ import annotations

import asyncio
import concurrent.futures
import os
import tempfile
import threading
import time
from typing import Any, Callable, Iterable, TypeVar

from kubesim.cluster import Cluster

T = TypeVar("T")



def wait_for(predicate: Callable[[], T], timeout: float = 30.0,
             interval: float = 0.02, message: str = "condition") -> T:
    """Poll predicate until it returns a truthy value (exceptions count as not yet); TimeoutError
    naming `message` and the last exception after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            result = predicate()
            if result:
                return result
        except Exception as exc:  # noqa: BLE001 - keep polling; report the last one
            last_exc = exc
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout}s waiting for {message}"
                       + (f" (last error: {last_exc})" if last_exc else ""))


class KubeSim:
    """A simulator on its own event loop thread, on a free loopback port."""

    def __init__(self, nodes: str | None = None, disabled: Iterable[str] = (),
                 validate: bool = True, kubeconfig: str | None = None, kueue: bool = False,
                 tokens: Iterable[str] | None = None):
        self.cluster = Cluster(nodes=nodes, disabled=disabled, validate=validate, kueue=kueue,
                               tokens=tokens)
        self._tmpdir: tempfile.TemporaryDirectory | None = None
        if kubeconfig is None:
            self._tmpdir = tempfile.TemporaryDirectory(prefix="kubesim-")
            kubeconfig = os.path.join(self._tmpdir.name, "kubeconfig")
        self.kubeconfig = kubeconfig
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="kubesim", daemon=True)

    # -- lifecycle -----------------------------------------------------------
    def start(self) -> "KubeSim":
        self._thread.start()
        self._run(self.cluster.start())
        self.cluster.write_kubeconfig(self.kubeconfig)
        return self

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        try:
            self._run(self.cluster.stop(), timeout=10)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=10)
            self.loop.close()
            if self._tmpdir:
                self._tmpdir.cleanup()

    def stop_http(self) -> None:
        """Stop serving HTTP (connections cut, new ones refused); the store and the
        controllers keep running (``sim.call`` still works)."""
        self._run(self.cluster.stop_http())

    def start_http(self, compact: bool = False) -> None:
        """Serve HTTP again on the same port (``compact``: no watch history survives, so
        clients resuming a watch get 410 Gone)."""
        self._run(self.cluster.start_http(compact=compact))

    def restart_http(self, compact: bool = False) -> None:
        """An API server restart that keeps its store (etcd)."""
        self.stop_http()
        self.start_http(compact=compact)

    def end_watches(self) -> int:
        """End every open watch stream, as the server does at a watch's timeout."""
        return self.call(self.cluster.server.end_watches)

    def compact(self) -> int:
        """Forget the event history: watches resumed from before now get 410 Gone."""
        return self.call(self.cluster.api.store.compact)

    def deletions(self, resource: str | None = None) -> list[dict[str, Any]]:
        """Every object removed so far, with who asked (kubesim/deletions.py)."""
        return self.call(self.cluster.deletions.records, resource)

    def deletion_requests(self, resource: str | None = None) -> list[dict[str, Any]]:
        """Every deletion asked for so far (also of objects still held by finalizers)."""
        return self.call(self.cluster.deletions.requests, resource)

    def __enter__(self) -> "KubeSim":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _run(self, coro, timeout: float = 30) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    # -- access ----------------------------------------------------------------
    @property
    def url(self) -> str:
        return self.cluster.url

    @property
    def api(self):
        return self.cluster.api

    @property
    def faults(self):
        return _ThreadSafe(self.cluster.faults, self)

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run fn on the simulator's loop thread and return its result."""
        fut: concurrent.futures.Future = concurrent.futures.Future()

        def run() -> None:
            try:
                fut.set_result(fn(*args, **kwargs))
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
                fut.set_exception(exc)

        self.loop.call_soon_threadsafe(run)
        return fut.result(30)

    def metrics(self) -> dict[str, Any]:
        return self.call(self.cluster.metrics.snapshot)

    def reset_metrics(self) -> None:
        self.call(self.cluster.metrics.reset)

    def writes(self, resource: str | None = None) -> int:
        from kubesim.metrics import WRITE_VERBS

        return self.call(self.cluster.metrics.total, WRITE_VERBS, resource)

    def requests(self, limit: int = 1000) -> list[dict[str, Any]]:
        return self.call(self.cluster.metrics.recent, limit)

    def wait_for(self, predicate: Callable[[], T], timeout: float = 30.0,
                 interval: float = 0.02, message: str = "condition") -> T:
        """Poll predicate (run in the caller's thread) until it returns a truthy value."""
        return wait_for(predicate, timeout, interval, message)


class _ThreadSafe:
    """Proxy that runs method calls of `target` on the simulator's loop thread."""

    def __init__(self, target: Any, sim: KubeSim):
        self._target, self._sim = target, sim

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if not callable(attr):
            return attr
        return lambda *a, **kw: self._sim.call(attr, *a, **kw)
