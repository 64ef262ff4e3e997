"""devctl quota with Kueue: kubesim with Kueue's real CRDs and its admission controller.

The tests render what the DevUser role would (ResourceFlavors, the user's ClusterQueue, the
LocalQueue ``torchdev``, the ResourceQuota) and a queue-labelled StatefulSet like the devserver
role's; kubesim's Kueue controller admits it and writes the LocalQueue's ``flavorsUsage``.
"""
from __future__ import annotations

import pytest

from devctl_helpers import FLAVORS, as_json, invoke
from devuser_helpers import GET_CLUSTERQUEUE, GET_DEVUSER, LIST_DEVUSERS, ApiProxy

GPU = "nvidia.com/gpu"
HARD = {"requests.storage": "2Ti", "persistentvolumeclaims": "32", "count/devservers.torchdev.io": "10"}
USED = {"requests.storage": "100Gi", "persistentvolumeclaims": "1", "count/devservers.torchdev.io": "1"}


@pytest.fixture(scope="module")
def sim(kueue_sim):
    """Every fixture of this module (ns, devctl, users) works against the Kueue simulator."""
    return kueue_sim


@pytest.fixture(scope="module")
def resource_flavors(kueue_sim):
    from devuser_helpers import Users

    for flavor in FLAVORS:  # the DevUser role's ResourceFlavor per DevServerFlavor
        Users(kueue_sim).resource_flavor(flavor["metadata"]["name"])


@pytest.fixture
def user(users, ns, resource_flavors):
    """A DevUser onboarded with Kueue: its ClusterQueue, LocalQueue and ResourceQuota."""
    name = ns[len("dev-"):]
    users.create(name, f"{name}@example.com",
                 quota={"gpus": 8, "flavors": [{"name": "gpu-h100-8", "gpus": 16}]})
    users.ready(name, kueue=True)
    users.cluster_queue(f"torchdev-{name}", {
        "gpu-a10g-1": {GPU: "8", "cpu": "64", "memory": "256Gi"},
        "gpu-h100-8": {GPU: "16", "cpu": "64", "memory": "256Gi"},
        "cpu-small": {GPU: "0", "cpu": "64", "memory": "256Gi"}})
    users.local_queue(ns, f"torchdev-{name}")
    users.resource_quota(ns, HARD, USED)
    return name


def _admitted(users, ns, sim):
    """A 1-GPU server admitted by kubesim's Kueue controller, counted in the LocalQueue."""
    users.queued_statefulset(ns, "box", gpus=1, cpu="7", memory="28Gi")
    sim.wait_for(lambda: any(r.get("total") == "1" for f in users.local_queue_status(ns).get("flavorsUsage", [])
                             for r in f["resources"] if r["name"] == GPU),
                 timeout=20, message="the LocalQueue to count the admitted workload")


def test_quota_limits_from_the_cluster_queue_usage_from_the_local_queue(devctl, users, user, ns, sim):
    _admitted(users, ns, sim)
    report = as_json(devctl("quota", "-o", "json"))
    assert report["kueue"] is True and report["user"] == user
    assert report["localQueue"] == "torchdev" and report["clusterQueue"] == f"torchdev-{user}"
    assert report["limitsFrom"] == "ClusterQueue" and report["usageFrom"] == "LocalQueue"
    rows = {r["flavor"]: r for r in report["flavors"]}
    assert list(rows) == ["gpu-a10g-1", "gpu-h100-8", "cpu-small"]
    assert rows["gpu-a10g-1"]["gpus"] == {"used": "1", "limit": "8"}
    assert rows["gpu-a10g-1"]["cpu"] == {"used": "7", "limit": "64"}
    assert rows["gpu-a10g-1"]["memory"] == {"used": "28Gi", "limit": "256Gi"}
    assert rows["gpu-h100-8"]["gpus"] == {"used": "0", "limit": "16"}
    assert report["namespaceQuota"]["devServers"] == {"used": "1", "limit": "10"}

    table = devctl("quota")
    assert table.exit_code == 0, table.stderr
    lines = [line.split() for line in table.stdout.split("\n\n")[0].splitlines()]
    assert lines[:2] == [["FLAVOR", "GPUS", "CPU", "MEMORY"], ["gpu-a10g-1", "1/8", "7/64", "28Gi/256Gi"]]
    assert f"ClusterQueue torchdev-{user}" in table.stderr


def test_quota_limits_from_the_devuser_when_the_cluster_queue_cannot_be_read(devctl, users, ns,
                                                                             resource_flavors):
    """A team ClusterQueue the user may not read (here: not there): the DevUser's quota."""
    name = ns[len("dev-"):]
    users.create(name, f"{name}@example.com", quota={"gpus": 4, "cpu": "32",
                                                     "flavors": [{"name": "gpu-h100-8", "gpus": 16}]},
                 queue={"clusterQueue": "team-a"})
    users.ready(name, kueue=True, cluster_queue="team-a")
    users.local_queue(ns, "team-a")
    report = as_json(devctl("quota", "-o", "json"))
    assert report["clusterQueue"] == "team-a" and report["limitsFrom"] == "DevUser"
    rows = {r["flavor"]: r for r in report["flavors"]}
    assert rows["gpu-a10g-1"]["gpus"]["limit"] == "4" and rows["gpu-a10g-1"]["cpu"]["limit"] == "32"
    assert rows["gpu-h100-8"]["gpus"]["limit"] == "16"
    assert rows["cpu-small"]["gpus"]["limit"] == "0"  # GPUs per GPU flavor only
    assert rows["cpu-small"]["memory"]["limit"] == "256Gi"


def test_quota_devuser_without_kueue_reads_the_resource_quota(devctl, users, ns):
    name = ns[len("dev-"):]
    users.create(name, f"{name}@example.com")
    users.ready(name, kueue=False)
    users.resource_quota(ns, {**HARD, "requests.nvidia.com/gpu": "2"}, {**USED, "requests.nvidia.com/gpu": "0"})
    report = as_json(devctl("quota", "-o", "json"))
    assert report["kueue"] is False and report["limitsFrom"] == "ResourceQuota"
    assert report["flavors"][0]["flavor"] == "*" and report["flavors"][0]["gpus"] == {"used": "0", "limit": "2"}


def test_quota_table_shows_memory_and_storage_in_binary_units(devctl, users, ns):
    name = ns[len("dev-"):]
    users.create(name, f"{name}@example.com")
    users.ready(name, kueue=False)
    users.resource_quota(ns, {**HARD, "requests.nvidia.com/gpu": "2", "requests.cpu": "64", "requests.memory": "256Gi",
                              "requests.storage": "2199023255552"},
                         {**USED, "requests.nvidia.com/gpu": "1", "requests.cpu": "8", "requests.memory": "34359738368",
                          "requests.storage": "1536Mi"})
    lines = [line.split() for line in devctl("quota").stdout.splitlines()]
    assert ["*", "1/2", "8/64", "32Gi/256Gi"] in lines, lines
    assert ["storage", "1.5Gi", "2Ti"] in lines, lines
    report = as_json(devctl("quota", "-o", "json"))  # data stays as the API server wrote it
    assert report["flavors"][0]["memory"] == {"used": "34359738368", "limit": "256Gi"}
    assert report["namespaceQuota"]["storage"] == {"used": "1536Mi", "limit": "2199023255552"}


def test_quota_of_a_plain_user_shows_usage_and_says_limits_are_unknown(users, user, ns, sim, tmp_path):
    """config/rbac devserver-user: the LocalQueue and ResourceQuota, not the cluster-scoped
    DevUser and ClusterQueue."""
    _admitted(users, ns, sim)
    forbidden = {LIST_DEVUSERS, GET_DEVUSER, GET_CLUSTERQUEUE}
    with ApiProxy(sim.url, {"username": f"{user}@example.com"}, forbidden) as proxy:
        kubeconfig = proxy.kubeconfig(sim, tmp_path / "kc")
        result = invoke(["--kubeconfig", kubeconfig, "-n", ns, "quota", "-o", "json"])
        table = invoke(["--kubeconfig", kubeconfig, "-n", ns, "quota"])
    report = as_json(result)
    assert proxy.forbidden_hits >= 2
    assert report["limitsFrom"] is None and report["usageFrom"] == "LocalQueue"
    assert {"flavor": "gpu-a10g-1", "gpus": {"used": "1", "limit": None}, "cpu": {"used": "7", "limit": None},
            "memory": {"used": "28Gi", "limit": None}} in report["flavors"]
    assert report["namespaceQuota"]["storage"] == {"used": "100Gi", "limit": "2Ti"}
    assert "limits are unknown" in result.stderr
    assert ["gpu-a10g-1", "1/-", "7/-", "28Gi/-"] in [line.split() for line in table.stdout.splitlines()]
