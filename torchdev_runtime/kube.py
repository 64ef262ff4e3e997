"""A thin, thread-safe Kubernetes REST client on top of the kubernetes package's ApiClient.

Only what the runtime needs: discovery (kind -> resource), get, list, watch (streaming),
update (PUT) and update of the status subresource. Objects are plain dicts.
"""
from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from typing import Any, Iterator
from urllib.parse import quote, urlencode

from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.watch.watch import iter_resp_lines

from .watches import GVK

log = logging.getLogger("torchdev_runtime.kube")


class ApiError(Exception):
    def __init__(self, status: int, reason: str, body: Any = None, retry_after: float | None = None):
        self.status = status
        self.reason = reason
        self.body = body
        self.retry_after = retry_after  # seconds, when the answer said when to come back
        msg = reason
        if isinstance(body, dict) and body.get("message"):
            msg = body["message"]
        super().__init__(f"{status} {msg}")

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def gone(self) -> bool:
        return self.status == 410


class ResourceInfo:
    __slots__ = ("gvk", "plural", "namespaced", "verbs")

    def __init__(self, gvk: GVK, plural: str, namespaced: bool, verbs: list[str]):
        self.gvk, self.plural, self.namespaced, self.verbs = gvk, plural, namespaced, verbs

    def path(self, namespace: str | None = None, name: str | None = None,
             subresource: str | None = None) -> str:
        base = f"/apis/{self.gvk.group}/{self.gvk.version}" if self.gvk.group \
            else f"/api/{self.gvk.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name:
            base += f"/{quote(name, safe='')}"
            if subresource:
                base += f"/{subresource}"
        return base


def default_kubeconfig() -> str:
    env = os.environ.get("KUBECONFIG")
    if env:
        return env.split(os.pathsep)[0]
    return os.path.expanduser("~/.kube/config")


class KubeClient:
    def __init__(self, kubeconfig: str | None = None, context: str | None = None):
        self.kubeconfig = os.path.abspath(kubeconfig or default_kubeconfig())
        cfg = type.__call__(k8s_client.Configuration)
        k8s_config.load_kube_config(config_file=self.kubeconfig, context=context,
                                    client_configuration=cfg, persist_config=False)
        # informers + workers share the pool
        cfg.connection_pool_maxsize = max(cfg.connection_pool_maxsize or 0, 64)
        self.api_client = k8s_client.ApiClient(configuration=cfg)
        self._disc_lock = threading.Lock()
        self._resources: dict[GVK, ResourceInfo] = {}
        self._fetched_gv: set[str] = set()

    # -- low level ----------------------------------------------------------------------
    # client-go's rest.Request: an answer that says when to come back (a 429, or a 5xx with
    # Retry-After) is tried again after that many seconds, up to 10 times.
    MAX_RETRIES = 10
    MAX_RETRY_AFTER = 10.0

    def _request(self, method: str, path: str, query: dict[str, Any] | None = None,
                 body: Any = None, timeout: Any = 30, stream: bool = False):
        for attempt in range(self.MAX_RETRIES + 1):
            try:
                return self._request_once(method, path, query, body, timeout, stream)
            except ApiError as exc:
                wait = exc.retry_after
                if attempt == self.MAX_RETRIES or wait is None or not (
                        exc.status == 429 or exc.status >= 500):
                    raise
                log.debug("%s %s: %s, again in %.1fs", method, path, exc, wait)
                time.sleep(min(wait, self.MAX_RETRY_AFTER))

    def _request_once(self, method: str, path: str, query: dict[str, Any] | None,
                      body: Any, timeout: Any, stream: bool):
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        _m, url, headers, _b, _p = self.api_client.param_serialize(
            method, path, header_params=headers, auth_settings=["BearerToken"])
        if query:
            url += "?" + urlencode({k: v for k, v in query.items() if v is not None})
        resp = self.api_client.call_api(method, url, header_params=headers, body=body,
                                        _request_timeout=timeout)
        raw = resp.response
        if stream and 200 <= resp.status < 300:
            return raw
        data = raw.data if not stream else raw.read()
        raw.release_conn()
        parsed: Any = None
        if data:
            try:
                parsed = json.loads(data)
            except ValueError:
                parsed = data.decode("utf-8", "replace")
        if not 200 <= resp.status < 300:
            retry_after = None
            try:
                retry_after = float(raw.headers.get("Retry-After"))
            except (TypeError, ValueError, AttributeError):
                pass
            raise ApiError(resp.status, resp.reason or "", parsed, retry_after)
        return parsed

    # -- discovery ----------------------------------------------------------------------
    def resource_for(self, gvk: GVK, refresh: bool = False) -> ResourceInfo:
        with self._disc_lock:
            info = self._resources.get(gvk)
            if info is not None and not refresh:
                return info
        gv = gvk.api_version
        path = f"/apis/{gv}" if gvk.group else f"/api/{gv}"
        data = self._request("GET", path)
        with self._disc_lock:
            for r in data.get("resources", []):
                if "/" in r.get("name", ""):
                    continue
                g = GVK(gvk.group, gvk.version, r["kind"])
                self._resources[g] = ResourceInfo(g, r["name"], bool(r.get("namespaced")),
                                                  r.get("verbs") or [])
            self._fetched_gv.add(gv)
            info = self._resources.get(gvk)
        if info is None:
            raise ApiError(404, f"no resource for {gvk} in {gv} (is the CRD installed?)")
        return info

    def resource_for_object(self, obj: dict[str, Any]) -> ResourceInfo:
        return self.resource_for(GVK.from_api_version(obj["apiVersion"], obj["kind"]))

    # -- verbs --------------------------------------------------------------------------
    def get(self, gvk: GVK, namespace: str | None, name: str) -> dict[str, Any]:
        info = self.resource_for(gvk)
        return self._request("GET", info.path(namespace, name))

    def list(self, gvk: GVK, namespace: str | None = None,
             label_selector: str | None = None, limit: int | None = None,
             continue_: str | None = None) -> dict[str, Any]:
        info = self.resource_for(gvk)
        return self._request("GET", info.path(namespace),
                             {"labelSelector": label_selector, "limit": limit,
                              "continue": continue_}, timeout=60)

    def watch(self, gvk: GVK, namespace: str | None, resource_version: str,
              timeout_seconds: int = 300) -> "WatchStream":
        info = self.resource_for(gvk)
        raw = self._request("GET", info.path(namespace),
                            {"watch": "true", "resourceVersion": resource_version,
                             "allowWatchBookmarks": "true", "timeoutSeconds": timeout_seconds},
                            timeout=(10, timeout_seconds + 30), stream=True)
        return WatchStream(raw)

    def update(self, obj: dict[str, Any]) -> dict[str, Any]:
        info = self.resource_for_object(obj)
        md = obj["metadata"]
        return self._request("PUT", info.path(md.get("namespace"), md["name"]), body=obj)

    def update_status(self, obj: dict[str, Any]) -> dict[str, Any]:
        info = self.resource_for_object(obj)
        md = obj["metadata"]
        return self._request("PUT", info.path(md.get("namespace"), md["name"], "status"),
                             body=obj)

    def create(self, obj: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        info = self.resource_for_object(obj)
        ns = namespace or obj.get("metadata", {}).get("namespace")
        return self._request("POST", info.path(ns), body=obj)

    def delete(self, gvk: GVK, namespace: str | None, name: str) -> Any:
        info = self.resource_for(gvk)
        return self._request("DELETE", info.path(namespace, name))

    def close(self) -> None:
        try:
            self.api_client.close()
        except Exception:  # noqa: BLE001
            pass


class WatchStream:
    """Iterates decoded watch events; close() from another thread ends the iteration."""

    def __init__(self, raw):
        self._raw = raw
        self._closed = False

    def __iter__(self) -> Iterator[dict[str, Any]]:
        try:
            for line in iter_resp_lines(self._raw):
                if not line:
                    continue
                yield json.loads(line)
        except Exception:
            if self._closed:
                return
            raise
        finally:
            self.close()

    def abort(self) -> None:
        """Called from another thread: shut the socket down so that the reader sees EOF.
        (Closing the response itself would block on the reader's buffer lock.)"""
        self._closed = True
        sock = None
        conn = getattr(self._raw, "_connection", None)
        sock = getattr(conn, "sock", None)
        if sock is None:
            try:
                sock = self._raw._fp.fp.raw._sock  # http.client -> SocketIO
            except AttributeError:
                sock = None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        if getattr(self, "_really_closed", False):
            return
        self._closed = True
        self._really_closed = True
        try:
            self._raw.close()
        except Exception:  # noqa: BLE001
            pass
        try:
            self._raw.release_conn()
        except Exception:  # noqa: BLE001
            pass
