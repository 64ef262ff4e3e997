"""Test helpers for DevUsers and what their role renders (docs/api.md, DevUser and Kueue).

No operator runs in the devctl tests: these write the objects and statuses the roles
would, through the API, so devctl reads them like it would in a cluster.
"""
from __future__ import annotations

import json
import re
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import yaml

from devctl_helpers import GROUP, VERSION

KUEUE_GROUP, KUEUE_VERSION = "kueue.x-k8s.io", "v1beta2"
ED25519 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExampleKeyForTests0123456789abcdef {}"
SSR_PATH = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
# (method, path regex) for ApiProxy(forbidden=...)
LIST_DEVUSERS = ("GET", "/apis/torchdev.io/v1alpha1/devusers")
GET_DEVUSER = ("GET", "/apis/torchdev.io/v1alpha1/devusers/.+")
GET_CLUSTERQUEUE = ("GET", "/apis/kueue.x-k8s.io/v1beta2/clusterqueues/.+")
READY = [{"type": "Ready", "status": "True", "reason": "UserReady", "message": "user is ready",
          "lastTransitionTime": "2026-01-01T00:00:00Z"},
         {"type": "Degraded", "status": "False", "reason": "AsExpected", "message": "",
          "lastTransitionTime": "2026-01-01T00:00:00Z"}]


class Users:
    """DevUsers, LocalQueues, ClusterQueues, ResourceQuotas through the kubernetes client."""

    def __init__(self, sim):
        from kubernetes import client

        self.sim = sim
        self.custom = client.CustomObjectsApi(sim.k8s)
        self.core = client.CoreV1Api(sim.k8s)

    # DevUsers ----------------------------------------------------------------------------
    def get(self, name: str) -> dict:
        return self.custom.get_cluster_custom_object(GROUP, VERSION, "devusers", name)

    def exists(self, name: str) -> bool:
        from kubernetes.client.exceptions import ApiException

        try:
            self.get(name)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def create(self, name: str, email: str, **spec) -> dict:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "DevUser", "metadata": {"name": name},
                "spec": {"email": email, **spec}}
        return self.custom.create_cluster_custom_object(GROUP, VERSION, "devusers", body)

    def set_status(self, name: str, **status) -> dict:
        """Play the operator: merge-patch the status subresource."""
        return self.custom.patch_cluster_custom_object_status(GROUP, VERSION, "devusers", name,
                                                              {"status": status})

    def ready(self, name: str, *, kueue: bool, cluster_queue: str | None = None) -> dict:
        obj = self.get(name)
        status = {"phase": "Active", "namespace": f"dev-{name}", "kueue": kueue,
                  "sharedVolumeClaimName": f"{name}-shared-efs", "conditions": READY,
                  "observedGeneration": obj["metadata"].get("generation", 1)}
        if kueue:
            status.update(queueName="torchdev", clusterQueue=cluster_queue or f"torchdev-{name}")
        return self.set_status(name, **status)

    # namespace objects -----------------------------------------------------------------------
    def namespace(self, name: str, labels: dict | None = None, annotations: dict | None = None) -> None:
        self.core.create_namespace({"apiVersion": "v1", "kind": "Namespace",
                                    "metadata": {"name": name, "labels": labels or {},
                                                 "annotations": annotations or {}}})

    def resource_quota(self, namespace: str, hard: dict, used: dict) -> None:
        """ResourceQuota ``torchdev-quota`` with a status like the quota controller's."""
        self.core.create_namespaced_resource_quota(namespace, {
            "apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "torchdev-quota"},
            "spec": {"hard": hard}})
        self.core.patch_namespaced_resource_quota_status("torchdev-quota", namespace,
                                                         {"status": {"hard": hard, "used": used}})

    # Kueue -------------------------------------------------------------------------------------
    def resource_flavor(self, name: str) -> None:
        self.custom.create_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "resourceflavors", {
            "apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}", "kind": "ResourceFlavor",
            "metadata": {"name": name}, "spec": {}})

    def cluster_queue(self, name: str, quotas: dict[str, dict[str, str]]) -> None:
        """``quotas``: {flavor: {"nvidia.com/gpu": "8", "cpu": "64", "memory": "256Gi"}}."""
        resources = ["cpu", "memory", "nvidia.com/gpu"]
        self.custom.create_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", {
            "apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}", "kind": "ClusterQueue",
            "metadata": {"name": name},
            "spec": {"namespaceSelector": {}, "resourceGroups": [{
                "coveredResources": resources,
                "flavors": [{"name": flavor, "resources": [
                    {"name": r, "nominalQuota": q.get(r, "0")} for r in resources]}
                    for flavor, q in quotas.items()]}]}})

    def local_queue(self, namespace: str, cluster_queue: str, name: str = "torchdev") -> None:
        self.custom.create_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, namespace, "localqueues", {
            "apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}", "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": namespace}, "spec": {"clusterQueue": cluster_queue}})

    def local_queue_status(self, namespace: str, name: str = "torchdev") -> dict:
        obj = self.custom.get_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, namespace,
                                                       "localqueues", name)
        return obj.get("status") or {}

    def queued_statefulset(self, namespace: str, name: str, *, gpus: int, cpu: str, memory: str,
                           replicas: int = 1) -> None:
        """What the devserver role renders under Kueue: a queue-labelled StatefulSet."""
        from kubernetes import client

        requests = {"cpu": cpu, "memory": memory, "nvidia.com/gpu": str(gpus)}
        client.AppsV1Api(self.sim.k8s).create_namespaced_stateful_set(namespace, {
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": "torchdev"}},
            "spec": {"replicas": replicas, "serviceName": name,
                     "selector": {"matchLabels": {"torchdev.io/devserver": name}},
                     "template": {"metadata": {"labels": {"torchdev.io/devserver": name}},
                                  "spec": {"containers": [{
                                      "name": "dev", "image": "pytorch",
                                      "resources": {"requests": requests, "limits": requests}}]}}}})


class ApiProxy:
    """An HTTP proxy in front of kubesim that answers SelfSubjectReviews with ``user_info``
    (kubesim does not serve them) and 403s what ``forbidden`` names, like the RBAC of a plain
    user; it forwards everything else."""

    def __init__(self, upstream: str, user_info: dict, forbidden: set[tuple[str, str]]):
        """``forbidden``: (method, path regex) pairs answered 403."""
        proxy = self
        self.reviews: list[dict] = []
        self.forbidden_hits = 0

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, code, body: bytes, ctype="application/json"):
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _handle(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                path = self.path.split("?")[0]
                if self.command == "POST" and path == SSR_PATH:
                    review = json.loads(body)
                    proxy.reviews.append(review)
                    review["status"] = {"userInfo": user_info}
                    return self._send(201, json.dumps(review).encode())
                if any(self.command == verb and re.fullmatch(pattern, path) for verb, pattern in forbidden):
                    proxy.forbidden_hits += 1
                    status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 403,
                              "reason": "Forbidden", "message": f'cannot {self.command} "{path}"'}
                    return self._send(403, json.dumps(status).encode())
                req = urllib.request.Request(upstream + self.path, data=body, method=self.command,
                                             headers={k: v for k, v in self.headers.items()
                                                      if k.lower() not in ("host", "content-length")})
                try:
                    with urllib.request.urlopen(req, timeout=30) as resp:
                        code, data, ctype = resp.status, resp.read(), resp.headers.get("Content-Type")
                except urllib.error.HTTPError as exc:
                    code, data, ctype = exc.code, exc.read(), exc.headers.get("Content-Type")
                self._send(code, data, ctype or "application/json")

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def kubeconfig(self, sim, path) -> str:
        with open(sim.kubeconfig) as fh:
            cfg = yaml.safe_load(fh)
        cfg["clusters"][0]["cluster"]["server"] = f"http://127.0.0.1:{self.server.server_port}"
        path.write_text(yaml.safe_dump(cfg))
        return str(path)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
