"""Test helpers for DevUsers and what their role renders (docs/api.md, DevUser and Kueue).

No operator runs in the devctl tests: these write the objects and statuses the roles
would, through the API, so devctl reads them like it would in a cluster.
"""
from __future__ import annotations

from devctl_helpers import GROUP, VERSION

KUEUE_GROUP, KUEUE_VERSION = "kueue.x-k8s.io", "v1beta2"
ED25519 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExampleKeyForTests0123456789abcdef {}"
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
    def namespace(self, name: str) -> None:
        self.core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

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
