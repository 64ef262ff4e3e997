"""devctl quota (without Kueue: the namespace ResourceQuota) and devctl queue, against kubesim.

No operator runs: tests write the ResourceQuota status (the quota controller's job), the
DevUser status and the DevServer status (``phase: Queued``, ``status.queue``) themselves.
The Kueue side of ``devctl quota`` is in test_devctl_quota_kueue.py.
"""
from __future__ import annotations

import json

import pytest

from devctl_helpers import as_json

HARD = {"requests.nvidia.com/gpu": "8", "requests.cpu": "64", "requests.memory": "256Gi",
        "requests.storage": "2Ti", "persistentvolumeclaims": "32", "count/devservers.torchdev.io": "10"}
USED = {"requests.nvidia.com/gpu": "1", "requests.cpu": "7", "requests.memory": "28Gi",
        "requests.storage": "200Gi", "persistentvolumeclaims": "2", "count/devservers.torchdev.io": "1"}


# -- quota without Kueue ---------------------------------------------------------------------------

def test_quota_from_the_namespace_resource_quota(devctl, users, ns):
    users.resource_quota(ns, HARD, USED)
    report = as_json(devctl("quota", "-o", "json"))
    assert report["namespace"] == ns and report["kueue"] is False
    assert report["limitsFrom"] == report["usageFrom"] == "ResourceQuota"
    assert report["flavors"] == [{"flavor": "*", "gpus": {"used": "1", "limit": "8"},
                                  "cpu": {"used": "7", "limit": "64"},
                                  "memory": {"used": "28Gi", "limit": "256Gi"}}]
    assert report["namespaceQuota"] == {
        "storage": {"used": "200Gi", "limit": "2Ti"},
        "persistentVolumeClaims": {"used": "2", "limit": "32"},
        "devServers": {"used": "1", "limit": "10"}}


def test_quota_table(devctl, users, ns):
    users.resource_quota(ns, HARD, USED)
    result = devctl("quota")
    assert result.exit_code == 0, result.stderr
    flavors, namespace = result.stdout.split("\n\n")
    assert [line.split() for line in flavors.splitlines()] == [
        ["FLAVOR", "GPUS", "CPU", "MEMORY"], ["*", "1/8", "7/64", "28Gi/256Gi"]]
    assert [line.split() for line in namespace.splitlines()] == [
        ["RESOURCE", "USED", "LIMIT"], ["storage", "200Gi", "2Ti"], ["persistentVolumeClaims", "2", "32"],
        ["devServers", "1", "10"]]
    assert f"namespace {ns}" in result.stderr


def test_quota_of_another_user(devctl, users, ns):
    name = ns[len("dev-"):]
    users.create(name, f"{name}@example.com")
    users.ready(name, kueue=False)
    users.resource_quota(ns, HARD, USED)
    report = as_json(devctl("quota", "--user", name, "-o", "json", namespace=False))
    assert report["user"] == name and report["namespace"] == ns
    assert report["flavors"][0]["gpus"] == {"used": "1", "limit": "8"}


def test_quota_unknown_user(devctl, users):
    result = devctl("quota", "--user", "no-such-user", namespace=False)
    assert result.exit_code == 1
    assert result.stderr.strip() == 'error: devuser "no-such-user" not found'


def test_quota_without_resource_quota_warns(devctl, users, ns):
    result = devctl("quota", "-o", "json")
    report = as_json(result)
    assert report["flavors"] == [] and report["namespaceQuota"] == {}
    assert 'resourcequota "torchdev-quota" not found' in result.stderr


# -- queue --------------------------------------------------------------------------------------

def _queued(cluster, name, position, *, cluster_queue="torchdev-alice", message="waiting for quota"):
    queue = {"name": "torchdev", "clusterQueue": cluster_queue, "workload": f"statefulset-{name}-abcde"}
    if position is not None:
        queue["position"] = position
    return cluster.set_status(name, phase="Queued", queue=queue, conditions=[
        {"type": "Ready", "status": "False", "reason": "Queued", "message": message,
         "lastTransitionTime": "2026-01-01T00:00:00Z"}])


@pytest.fixture
def queued(cluster):
    cluster.create_devserver("second", flavor="gpu-a10g-1")
    cluster.create_devserver("first", flavor="gpu-h100-8", mode="distributed",
                             distributed={"worldSize": 16, "nprocsPerNode": 8})
    cluster.create_devserver("unknown", flavor="gpu-a10g-1")
    cluster.create_devserver("running", flavor="gpu-a10g-1")
    _queued(cluster, "second", 2)
    _queued(cluster, "first", 1, message="couldn't assign flavors to pod set main: insufficient quota")
    _queued(cluster, "unknown", None)
    cluster.set_status("running", phase="Running")
    return cluster


def test_queue_lists_my_queued_servers_by_position(devctl, queued, ns):
    entries = as_json(devctl("queue", "-o", "json"))
    assert [e["name"] for e in entries] == ["first", "second", "unknown"]
    first, second, unknown = entries
    assert first["position"] == 1 and first["clusterQueue"] == "torchdev-alice"
    assert first["localQueue"] == "torchdev" and first["workload"] == "statefulset-first-abcde"
    assert first["flavor"] == "gpu-h100-8" and first["replicas"] == 2 and first["gpus"] == 16
    assert "insufficient quota" in first["message"]
    assert second["position"] == 2 and second["gpus"] == 1
    assert unknown["position"] is None
    assert all(e["namespace"] == ns for e in entries)


def test_queue_table(devctl, queued):
    result = devctl("queue")
    assert result.exit_code == 0, result.stderr
    header, *rows = result.stdout.splitlines()
    assert header.split() == ["NAME", "POSITION", "ETA", "CLUSTERQUEUE", "FLAVOR", "GPUS", "AGE", "MESSAGE"]
    assert [r.split()[:6] for r in rows] == [["first", "1", "unknown", "torchdev-alice", "gpu-h100-8", "16"],
                                             ["second", "2", "unknown", "torchdev-alice", "gpu-a10g-1", "1"],
                                             ["unknown", "-", "unknown", "torchdev-alice", "gpu-a10g-1", "1"]]


@pytest.mark.parametrize("fmt", ["json", "table"])
def test_queue_empty(devctl, cluster, ns, fmt):
    cluster.create_devserver("running", flavor="gpu-a10g-1")
    cluster.set_status("running", phase="Running")
    result = devctl("queue", "-o", fmt)
    assert result.exit_code == 0, result.stderr
    assert result.stderr.strip() == f'No queued devservers in namespace "{ns}".'
    if fmt == "json":
        assert json.loads(result.stdout) == []
    else:
        assert result.stdout == ""
