"""Helpers shared by the devctl tests (imported by conftest.py and the tests)."""
from __future__ import annotations

import itertools
import json
from pathlib import Path

from click.testing import CliRunner

REPO = Path(__file__).resolve().parents[2]
CRD_DIR = REPO / "config" / "crd" / "bases"
GROUP, VERSION = "torchdev.io", "v1alpha1"
OWNER = "alice@example.com"


def _flavor(name, description, cpu, memory, gpus=0, gpu_type=None, price="0.1920"):
    requests = {"cpu": cpu, "memory": memory}
    limits = {"cpu": cpu, "memory": memory}
    spec = {"description": description, "resources": {"requests": requests, "limits": limits},
            "gpu": {"count": gpus}, "pricePerHour": price}
    if gpus:
        limits["nvidia.com/gpu"] = str(gpus)
        requests["nvidia.com/gpu"] = str(gpus)
        spec["gpu"]["type"] = gpu_type
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "DevServerFlavor",
            "metadata": {"name": name}, "spec": spec}


FLAVORS = [
    _flavor("cpu-small", "2 vCPU, 8 GiB, no GPU", "2", "8Gi"),
    _flavor("gpu-a10g-1", "1x NVIDIA A10G 24 GiB", "7", "28Gi", 1, "nvidia-a10g", "1.2120"),
    _flavor("gpu-h100-8", "8x NVIDIA H100 80 GiB with EFA", "180", "1800Gi", 8, "nvidia-h100", "98.3200"),
]

_counter = itertools.count()


def unique(prefix: str) -> str:
    return f"{prefix}{next(_counter)}"


def invoke(args, input=None):
    from devctl.main import cli

    return CliRunner().invoke(cli, [str(a) for a in args], input=input, catch_exceptions=False)


class Cluster:
    """Direct kubernetes-client access for arranging and checking test state."""

    def __init__(self, sim, namespace: str):
        from kubernetes import client

        self.sim, self.ns = sim, namespace
        self.core = client.CoreV1Api(sim.k8s)
        self.custom = client.CustomObjectsApi(sim.k8s)
        self.events = client.EventsV1Api(sim.k8s)

    def devserver(self, name: str) -> dict:
        return self.custom.get_namespaced_custom_object(GROUP, VERSION, self.ns, "devservers", name)

    def devserver_names(self) -> list[str]:
        items = self.custom.list_namespaced_custom_object(GROUP, VERSION, self.ns, "devservers")["items"]
        return sorted(i["metadata"]["name"] for i in items)

    def create_devserver(self, name: str, **spec) -> dict:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "DevServer",
                "metadata": {"name": name, "namespace": self.ns},
                "spec": {"owner": OWNER, "flavor": "gpu-a10g-1", **spec}}
        return self.custom.create_namespaced_custom_object(GROUP, VERSION, self.ns, "devservers", body)

    def set_status(self, name: str, **status) -> dict:
        """Play the operator: merge-patch the status subresource."""
        return self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, self.ns, "devservers", name, {"status": status})

    def create_pvc(self, name: str, size: str = "100Gi", labels: dict | None = None) -> None:
        self.core.create_namespaced_persistent_volume_claim(self.ns, {
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "labels": labels or {}},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "gp3",
                     "resources": {"requests": {"storage": size}}},
        })

    def pvc_names(self) -> list[str]:
        items = self.sim.k8s.sanitize_for_serialization(
            self.core.list_namespaced_persistent_volume_claim(self.ns))["items"]
        return sorted(p["metadata"]["name"] for p in items if not p["metadata"].get("deletionTimestamp"))

    def create_event(self, obj_name: str, reason: str, message: str, kind: str = "DevServer",
                     type_: str = "Normal", when: str = "2026-01-01T00:00:00Z") -> None:
        self.core.create_namespaced_event(self.ns, {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{obj_name}.{next(_counter)}", "namespace": self.ns},
            "involvedObject": {"apiVersion": f"{GROUP}/{VERSION}" if kind == "DevServer" else "v1",
                               "kind": kind, "name": obj_name, "namespace": self.ns},
            "reason": reason, "message": message, "type": type_, "count": 1,
            "firstTimestamp": when, "lastTimestamp": when,
            "source": {"component": "torchdev-operator"},
        })

    def create_service(self, name: str, port: int = 22, target: int = 2222) -> dict:
        svc = self.core.create_namespaced_service(self.ns, {
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"type": "ClusterIP", "selector": {"torchdev.io/devserver": name},
                     "ports": [{"name": "ssh", "port": port, "targetPort": target}]},
        })
        return self.sim.k8s.sanitize_for_serialization(svc)


def as_json(result) -> dict:
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
    return json.loads(result.stdout)
