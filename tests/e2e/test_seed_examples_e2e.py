"""Seed 000's DevServerFlavor and DevServer examples (tests/data/seed000, the design
document's YAML with only the API group changed) applied with the real kubectl, as a user
copying them would, then reconciled by the operator to a running server.

The flavor lists its GPU only in ``resources`` (no ``gpu`` block, no GPU type): that many
GPUs. The DevServer is standalone with a ``distributed`` block: accepted, ignored, and said
so in ``status.warnings``. The document's ``<...>`` placeholders are filled in here."""
from __future__ import annotations

import json
import subprocess

import pytest

from _e2e_helpers import GROUP, ROOT, VERSION, get_ds, wait_ready
from _support import tool

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SEED = ROOT / "tests" / "data" / "seed000"
PLACEHOLDERS = {"<server-name>": "my-dev", "<username>": "alice", "<user>": "alice"}
# This module's simulator (conftest.py): a node as the example's nodeSelector expects,
# label instance-type, one GPU, no taint.
NODES = "g4dn:1x{cpu:16,memory:64Gi,nvidia.com/gpu:1,labels:{instance-type:g4dn.xlarge}}"


def filled(name: str) -> str:
    text = (SEED / name).read_text()
    for placeholder, value in PLACEHOLDERS.items():
        text = text.replace(placeholder, value)
    return text


def kubectl(sim, *args: str, stdin: str | None = None) -> str:
    proc = subprocess.run([tool("kubectl"), "--kubeconfig", sim.kubeconfig, *args], input=stdin,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"kubectl {' '.join(args)}: {proc.stderr}"
    return proc.stdout


def test_seed_examples_are_accepted_and_run(sim, kube, runtime):
    kubectl(sim, "apply", "-f", "-", stdin=filled("devserverflavor.yaml"))
    flavor = sim.wait_for(lambda: (lambda f: f if (f.get("status") or {}).get("gpus") is not None else None)(
        kube["custom"].get_cluster_custom_object(GROUP, VERSION, "devserverflavors", "gpu-large")),
        60, message="flavor gpu-large reconciled")
    assert flavor["status"]["gpus"] == 1
    ready = next(c for c in flavor["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True", ready
    table = json.loads(kubectl(sim, "get", "dsf", "gpu-large", "-o", "json"))
    assert table["status"]["gpus"] == 1

    # the user's namespace and shared claim, as onboarding (a DevUser) makes them
    kube["core"].create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "dev-alice"}})
    kube["core"].create_namespaced_persistent_volume_claim("dev-alice", {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "alice-shared-efs"},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "10Gi"}}}})
    out = kubectl(sim, "apply", "-f", "-", stdin=filled("devserver.yaml"))
    assert "devserver.torchdev.io/my-dev created" in out

    obj = wait_ready(sim, kube, "dev-alice", "my-dev", timeout=120)
    assert obj["status"]["phase"] == "Running"
    assert [w.split(":")[0] for w in obj["status"]["warnings"]] == ["spec.distributed is ignored"]
    pod = kube["core"].read_namespaced_pod("my-dev-0", "dev-alice")
    assert pod.spec.node_name == "g4dn-0"
    container = pod.spec.containers[0]
    assert container.resources.limits["nvidia.com/gpu"] == "1"
    env = {e.name: e.value for e in container.env}
    assert env["TORCHDEV_GPUS"] == "1" and env["TORCHDEV_MODE"] == "standalone"
    assert env["WORLD_SIZE"] == "1" and "NCCL_DEBUG" not in env  # the distributed block is ignored
    claims = {v.persistent_volume_claim.claim_name for v in pod.spec.volumes if v.persistent_volume_claim}
    assert "alice-shared-efs" in claims
    mounts = {m.mount_path for m in container.volume_mounts}
    assert {"/home/dev", "/shared"} <= mounts

    # removing the ignored block clears the warning
    kube["custom"].patch_namespaced_custom_object(GROUP, VERSION, "dev-alice", "devservers", "my-dev",
                                                  {"spec": {"distributed": None}})
    sim.wait_for(lambda: "warnings" not in get_ds(kube, "dev-alice", "my-dev")["status"], 60,
                 message="status.warnings removed")
