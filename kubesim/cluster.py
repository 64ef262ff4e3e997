"""A simulated cluster: ApiServer + controllers + HTTP server + seed objects."""
from __future__ import annotations

import asyncio
import datetime as _dt
import logging
import os
import tempfile
from typing import Any, Iterable

import yaml
from aiohttp import web

from kubesim.apiserver import ApiServer
from kubesim.deletions import DeletionLog
from kubesim.faults import FaultInjector
from kubesim.metrics import Metrics
from kubesim.server import KubeSimServer

log = logging.getLogger("kubesim")

SEED_OBJECTS: list[dict[str, Any]] = [
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}},
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-system"}},
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-public"}},
    {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
     "metadata": {"name": "gp3", "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
     "provisioner": "ebs.csi.aws.com", "parameters": {"type": "gp3", "encrypted": "true"},
     "reclaimPolicy": "Delete", "volumeBindingMode": "Immediate", "allowVolumeExpansion": True},
    {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "efs-sc"},
     "provisioner": "efs.csi.aws.com", "parameters": {"provisioningMode": "efs-ap",
                                                       "directoryPerms": "700"},
     "reclaimPolicy": "Retain", "volumeBindingMode": "Immediate"},
]


class Cluster:
    def __init__(self, nodes: str | None = None, disabled: Iterable[str] = (),
                 validate: bool = True, seed: bool = True, kueue: bool = False,
                 tokens: Iterable[str] | None = None):
        self.api = ApiServer(validate=validate)
        self.metrics = Metrics()
        self.faults = FaultInjector()
        self.deletions = DeletionLog()
        self.api.subscribe(self.deletions.on_event)
        # tokens: authenticate requests (the kubeconfig's token is the first one); None: none
        self.tokens = list(tokens) if tokens is not None else None
        self.server = KubeSimServer(self.api, self.metrics, self.faults, self.deletions,
                                    tokens=self.tokens)
        self.nodes_spec = nodes
        self.disabled = set(disabled)
        self.seed = seed
        self.kueue = kueue
        self.manager = None
        self._runner: web.AppRunner | None = None
        self.port: int | None = None
        self.host = "127.0.0.1"

    @staticmethod
    def now() -> _dt.datetime:
        return _dt.datetime.now(_dt.timezone.utc)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def _seed(self) -> None:
        from kubesim import nodes as nodes_mod

        for obj in SEED_OBJECTS:
            self.api.create(obj["kind"].lower() + "s" if obj["kind"] != "StorageClass"
                            else "storageclasses.storage.k8s.io", obj)
        spec = self.nodes_spec if self.nodes_spec is not None else nodes_mod.DEFAULT_NODES_SPEC
        for node in nodes_mod.parse_nodes(spec) if spec else []:
            status = node.pop("status", None)
            created = self.api.create("nodes", node)
            if status:
                created["status"] = status
                self.api.update("nodes", created, subresource="status")

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> None:
        from kubesim.controllers import Manager, load_builtins

        load_builtins()
        if self.seed:
            self._seed()
        if self.kueue:
            from kubesim.kueue import install_crds

            install_crds(self.api)
        self.manager = Manager(self, disabled=self.disabled)
        self.manager.start()
        await self.start_http(host, port)

    async def start_http(self, host: str | None = None, port: int | None = None,
                         compact: bool = False) -> None:
        """Serve HTTP (again, after stop_http: on the same address by default). ``compact``:
        the restarted server remembers no watch history (as a kube-apiserver whose watch
        cache starts afresh): a watch resumed from before it is 410 Gone."""
        host = host or self.host
        port = self.port if port is None and self.port is not None else (port or 0)
        if compact:
            self.api.store.compact()
        self._runner = web.AppRunner(self.server.app, access_log=None, handle_signals=False,
                                     shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, reuse_address=True)
        await site.start()
        sock = site._server.sockets[0]  # type: ignore[union-attr]
        self.host, self.port = host, sock.getsockname()[1]
        log.info("kubesim listening on %s", self.url)

    async def stop_http(self) -> None:
        """Stop serving HTTP: open watches and connections are cut, new ones refused; the
        store, the controllers and the volumes stay (a kube-apiserver restart: etcd keeps
        the objects)."""
        await self.server.close_watches()
        if self._runner:
            await self._runner.cleanup()
            self._runner = None

    async def stop(self) -> None:
        await self.server.close_watches()
        if self.manager:
            await self.manager.stop()
        if self._runner:
            await self._runner.cleanup()
        self.server.volumes.close()

    def kubeconfig(self) -> dict[str, Any]:
        return {
            "apiVersion": "v1", "kind": "Config", "preferences": {},
            "clusters": [{"name": "kubesim", "cluster": {"server": self.url}}],
            "users": [{"name": "kubesim-admin",
                       "user": {"token": self.tokens[0] if self.tokens else "kubesim"}}],
            "contexts": [{"name": "kubesim", "context": {"cluster": "kubesim",
                                                         "user": "kubesim-admin",
                                                         "namespace": "default"}}],
            "current-context": "kubesim",
        }

    def write_kubeconfig(self, path: str) -> None:
        """Atomically: the file appearing means the server is ready."""
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".kubeconfig-", dir=directory)
        with os.fdopen(fd, "w") as fh:
            yaml.safe_dump(self.kubeconfig(), fh, sort_keys=False)
        os.replace(tmp, path)


async def serve_forever(cluster: Cluster, host: str, port: int, kubeconfig: str,
                        stop: asyncio.Event) -> None:
    await cluster.start(host, port)
    cluster.write_kubeconfig(kubeconfig)
    try:
        await stop.wait()
    finally:
        await cluster.stop()
