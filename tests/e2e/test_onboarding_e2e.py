"""The platform flow end to end, through devctl only: onboard a user with a 4-GPU quota, the
user creates three 2-GPU DevServers, the third waits in the queue (with its position, in
`devctl queue` and in its status) and starts when the user deletes another.

kubesim with Kueue's real CRDs and its admission controller, the local runtime running every
role (DevUser, DevServerFlavor, DevServer): nothing Kueue-related is created by the test, the
DevUser role renders the LocalQueue and the per-user ClusterQueue, the devserverflavor role
the ResourceFlavors.
"""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from _e2e_helpers import get_ds, wait_ready

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


USER, FLAVOR = "alice", "gpu-h100-2"
NS = f"dev-{USER}"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOnboardingE2eKeyForTorchdevxxxxxxxxxxxxxxxxx alice"


# Kueue (its real CRDs and kubesim's admission controller; the real Kueue on the real tier):
# tests/_cluster.py's `sim` reads this.
KUEUE = True


@pytest.fixture
def devctl(sim, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("DEVCTL_CONFIG", str(tmp_path / "devctl.yaml"))
    monkeypatch.delenv("KUBECONFIG", raising=False)

    def run(*args):
        from devctl.main import cli

        res = CliRunner().invoke(cli, ["--kubeconfig", sim.kubeconfig, *map(str, args)],
                                 catch_exceptions=False)
        assert res.exit_code == 0, res.output
        return res

    return run


def as_json(res):
    return json.loads(res.stdout)


def test_onboard_queue_and_start_when_quota_frees(sim, kube, runtime, devctl, tmp_path):
    key_file = tmp_path / "alice.pub"
    key_file.write_text(KEY + "\n")
    devctl("admin", "onboard", USER, "--email", "alice@example.com", "--ssh-key-file", key_file,
           "--gpus", 4, "--cpu", 192, "--memory", "2000Gi", "--wait", "--timeout", "120s",
           "-o", "json")
    user = kube["custom"].get_cluster_custom_object("torchdev.io", "v1alpha1", "devusers", USER)
    assert user["status"]["namespace"] == NS and user["status"]["kueue"] is True

    for name in ("one", "two", "three"):
        devctl("-n", NS, "create", name, "--flavor", FLAVOR, "--ssh-key-file", key_file,
               "--owner", "alice@example.com")
        if name != "three":  # FIFO: the third is created last
            wait_ready(sim, kube, NS, name, timeout=120)

    def queued():
        st = get_ds(kube, NS, "three").get("status") or {}
        return st if st.get("phase") == "Queued" and (st.get("queue") or {}).get("position") else None
    try:
        st = sim.wait_for(queued, 120, interval=0.1, message="three Queued with a position")
    except TimeoutError:
        wls = kube["custom"].list_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", NS, "workloads")
        cq = kube["custom"].get_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "clusterqueues",
                                                      f"torchdev-{USER}")
        pytest.fail(json.dumps({"three": get_ds(kube, NS, "three").get("status"),
                                "workloads": [(w["metadata"]["name"], w.get("status")) for w in wls["items"]],
                                "cq": cq}, indent=1, default=str))
    assert st["queue"]["position"] == 1
    assert st["queue"]["clusterQueue"] == f"torchdev-{USER}"

    rows = as_json(devctl("-n", NS, "queue", "-o", "json"))
    assert [(r["name"], r["position"]) for r in rows] == [("three", 1)]

    quota = as_json(devctl("-n", NS, "quota", "-o", "json"))
    gpu = next(r for r in quota["flavors"] if r["flavor"] == FLAVOR)
    assert (str(gpu["gpus"]["used"]), str(gpu["gpus"]["limit"])) == ("4", "4")

    devctl("-n", NS, "delete", "one", "--yes")
    wait_ready(sim, kube, NS, "three", timeout=120)
    assert as_json(devctl("-n", NS, "queue", "-o", "json")) == []
