"""End to end: the lifecycle with Kueue (issue 12.1, 12.4, 12.5) on kubesim with Kueue's real
CRDs and admission controller, the local runtime and the real roles, driven through devctl.

- `devctl stop` of a running server releases its Kueue quota (a queued server is admitted);
  `devctl start` queues it again (it shows a queue position), and it keeps its home PVC (UID).
- `devctl reserve --wait` prints the queue position and the ETA on stderr while queued, then
  the SSH command (a real devctl process, read line by line while it waits).
- A DevUser's `spec.quota.maxReservation` caps the reservations in its namespace: more is
  refused naming the cap, by the operator and by `devctl reserve` / `devctl extend`.

The queue is tests/e2e/test_kueue_e2e.py's: a ClusterQueue with 4 GPUs of the 2-GPU flavor and
the LocalQueue `torchdev` in the test's namespace.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from _e2e_helpers import GROUP, VERSION, condition, get_ds, new_namespace, remove_all, wait_degraded, wait_ready
from e2e.test_kueue_e2e import FLAVOR, create, queue_for, resource_flavor, wait_queued
from e2e.test_lifecycle_e2e import devctl, wait_phase

# Each test goes through several operator reconciles and Kueue admissions in turn (one
# ansible-playbook run each): on a 2-core machine shared with other suites one took 510 s, so
# the bound on a hang is twice the suite's default (pyproject.toml: timeout = 300).
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(600)]

KUEUE = True  # tests/_cluster.py: this module's kubesim has Kueue
DEVCTL = Path(sys.executable).parent / "devctl"


@pytest.fixture
def ns(kube, sim):
    name = new_namespace(kube)
    yield name
    remove_all(sim, kube, name)


def home_uid(kube, ns, name):
    return kube["core"].read_namespaced_persistent_volume_claim(f"home-{name}-0", ns).metadata.uid


def ok(result):
    assert result.exit_code == 0, result.output
    return result


def two_running(sim, kube, ns, **spec):
    """A full ClusterQueue: `one` and `two` (2 GPUs each of 4) Running."""
    queue_for(kube, ns, gpus=4)
    sim.wait_for(lambda: resource_flavor(kube, FLAVOR), 60, message=f"ResourceFlavor {FLAVOR}")
    for name in ("one", "two"):
        create(kube, ns, name, **spec)
    return {name: wait_ready(sim, kube, ns, name, timeout=120) for name in ("one", "two")}


def test_stop_releases_the_quota_and_start_queues_again_keeping_the_home(sim, kube, runtime, ns):
    two_running(sim, kube, ns)
    create(kube, ns, "three")
    wait_queued(sim, kube, ns, "three", 1)
    home = home_uid(kube, ns, "one")

    ok(devctl(sim, ns, "stop", "one"))
    stopped = wait_phase(sim, kube, ns, "one", "Stopped")
    assert condition(stopped, "Ready")["reason"] == "UserStopped"
    # Its quota is released: the queued server is admitted and starts.
    obj = wait_ready(sim, kube, ns, "three", timeout=120)
    assert obj["status"]["phase"] == "Running"
    assert kube["apps"].read_namespaced_stateful_set("one", ns).spec.replicas == 0

    # Started again: it queues behind the full ClusterQueue and shows its position.
    ok(devctl(sim, ns, "start", "one"))
    obj = wait_queued(sim, kube, ns, "one", 1)
    assert "at position 1" in condition(obj, "Ready")["message"]
    listed = json.loads(ok(devctl(sim, ns, "queue")).stdout)
    assert [(e["name"], e["position"]) for e in listed] == [("one", 1)]

    # Another server stops: it is admitted, with the same home volume.
    ok(devctl(sim, ns, "stop", "two"))
    wait_ready(sim, kube, ns, "one", timeout=120)
    assert home_uid(kube, ns, "one") == home


def test_reserve_wait_prints_the_queue_position_and_eta_then_the_ssh_command(sim, kube, runtime, ns, tmp_path):
    holders = two_running(sim, kube, ns, lifecycle={"duration": "1h"})
    eta = min(h["status"]["reservation"]["expiresAt"] for h in holders.values())
    first = next(name for name, h in holders.items() if h["status"]["reservation"]["expiresAt"] == eta)
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env.update(HOME=str(tmp_path), DEVCTL_CONFIG=str(tmp_path / "devctl.yaml"))
    proc = subprocess.Popen([str(DEVCTL), "reserve", "--gpus", "2", "--hours", "1", "--name", "booked",
                             "--owner", "e2e@example.com", "--wait", "--timeout", "10m",
                             "-n", ns, "--kubeconfig", sim.kubeconfig, "-o", "json"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    stdout: list[str] = []
    # Both pipes are read by threads (never by communicate(), which would take stderr's last
    # lines from under the line reader).
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stderr.readline, "")), daemon=True)
    out_reader = threading.Thread(target=lambda: stdout.append(proc.stdout.read()), daemon=True)
    reader.start()
    out_reader.start()
    try:
        queued = sim.wait_for(lambda: next((line for line in list(lines) if "position 1" in line and "ETA " in line),
                                           None), 120, interval=0.1, message="devctl's queue position and ETA")
        assert "Queued" in queued and f"ETA {eta}" in queued, lines
        assert proc.poll() is None  # still waiting

        ok(devctl(sim, ns, "stop", first))  # its quota frees: the reservation is admitted
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(timeout=30)
    out_reader.join(timeout=30)
    assert proc.returncode == 0, lines
    obj = json.loads("".join(stdout))
    assert obj["metadata"]["name"] == "booked" and obj["spec"]["lifecycle"]["duration"] == "1h"
    assert lines[0].strip() == f"flavor {FLAVOR} (the cheapest with 2 GPU(s) per pod)"
    assert lines[-1].strip() == f"devserver/booked is Ready; connect with: {obj['status']['sshCommand']}"
    assert obj["status"]["sshCommand"] == f"devctl ssh booked -n {ns}"
    assert lines.index(queued) < len(lines) - 1


@pytest.fixture
def capped_user(sim, kube, runtime):
    """A DevUser whose reservations are capped at 1h (spec.quota.maxReservation), onboarded by
    the DevUser role: (its namespace, its e-mail)."""
    name = "capped-" + os.urandom(3).hex()
    email = f"{name}@example.com"
    kube["custom"].create_cluster_custom_object(GROUP, VERSION, "devusers", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "DevUser", "metadata": {"name": name},
        "spec": {"email": email, "quota": {"maxReservation": "1h", "cpu": 16, "memory": "64Gi"}}})

    def onboarded():
        user = kube["custom"].get_cluster_custom_object(GROUP, VERSION, "devusers", name)
        return (user.get("status") or {}).get("namespace") if condition(user, "Ready").get("status") == "True" else None
    namespace = sim.wait_for(onboarded, 120, interval=0.2, message=f"DevUser {name} Ready")
    yield namespace, email
    remove_all(sim, kube, namespace)


CAP = "exceeds the maximum of DevUser {user} (spec.quota.maxReservation) of 1h; ask for at most 1h"


def test_a_devusers_max_reservation_refuses_longer_reservations_naming_the_cap(sim, kube, runtime, capped_user):
    namespace, email = capped_user
    user = namespace.removeprefix("dev-")
    cap = CAP.format(user=user)

    # The operator refuses the spec, naming the field and the cap; nothing runs.
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "DevServer", "metadata": {"name": "long"},
            "spec": {"owner": email, "flavor": "cpu-small", "lifecycle": {"duration": "2h"}}}
    kube["custom"].create_namespaced_custom_object(GROUP, VERSION, namespace, "devservers", body)
    obj = wait_degraded(sim, kube, namespace, "long", "InvalidSpec", timeout=120)
    assert condition(obj, "Degraded")["message"] == f"spec.lifecycle.duration 2h {cap}"
    assert obj["status"]["phase"] == "Failed"
    assert not kube["apps"].list_namespaced_stateful_set(namespace).items

    # devctl reserve --wait: one clear line on stderr, non-zero exit.
    result = devctl(sim, namespace, "reserve", "--gpus", "0", "--hours", "1.5", "--flavor", "cpu-small",
                    "--name", "longer", "--owner", email, "--wait", "--timeout", "2m")
    assert result.exit_code != 0
    assert f"spec.lifecycle.duration 1h30m {cap}" in result.stderr.strip().splitlines()[-1]

    # Within the cap it runs; extending it past the cap is refused and the reservation kept.
    ok(devctl(sim, namespace, "reserve", "--gpus", "0", "--hours", "1", "--flavor", "cpu-small", "--name", "fits",
              "--owner", email, "--wait", "--timeout", "2m"))
    expires = get_ds(kube, namespace, "fits")["status"]["reservation"]["expiresAt"]
    result = devctl(sim, namespace, "extend", "fits", "--hours", "1")
    assert result.exit_code != 0
    assert f"cannot extend devserver/fits to 2h: spec.lifecycle.duration 2h {cap} (kept 1h)" in result.stderr
    obj = get_ds(kube, namespace, "fits")
    assert obj["spec"]["lifecycle"]["duration"] == "1h"
    assert obj["status"]["reservation"]["expiresAt"] == expires
