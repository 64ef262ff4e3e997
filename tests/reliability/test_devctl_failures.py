"""Issue 17, item 8: devctl against a failing cluster.

Each failure -- a server that cannot be reached, credentials it refuses (kubesim authenticates
bearer tokens when started with ``tokens``: an unknown token is a 401, as an expired one is), a
403, a 404, a 409 on apply, a connection that breaks while ``--wait`` polls -- ends devctl with
ONE ``error:`` line on stderr (its last line; progress lines before it are informational), a
non-zero exit status and no traceback; and a command that made something before failing says
that it is left in place (and how to use or remove it).

devctl runs as the user runs it: a process of its own (``python -m devctl.main``)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

from _e2e_helpers import ROOT
from _workload import get
from _reliability import start_sim

pytestmark = [pytest.mark.e2e]

TOKEN = "valid-token"
NS = "dev-failing"


@pytest.fixture(scope="module")
def sim():
    from _reliability import check_data_safety

    s = start_sim(tokens=[TOKEN])
    s.call(s.api.create, "namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    try:
        yield s
        check_data_safety(s)
    finally:
        s.stop()


@pytest.fixture(autouse=True)
def no_faults(sim):
    sim.faults.clear()
    yield
    sim.faults.clear()


@pytest.fixture
def home(tmp_path):
    return tmp_path


def kubeconfig(sim, tmp_path, token=TOKEN, server=None) -> str:
    cfg = yaml.safe_load(open(sim.kubeconfig))
    cfg["users"][0]["user"]["token"] = token
    if server:
        cfg["clusters"][0]["cluster"]["server"] = server
    path = tmp_path / f"kubeconfig-{token}-{bool(server)}"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def devctl(kubeconfig_path: str, home, *args, timeout=120) -> subprocess.CompletedProcess:
    env = dict(os.environ, HOME=str(home), DEVCTL_CONFIG=str(home / "devctl.yaml"))
    env.pop("KUBECONFIG", None)
    return subprocess.run([sys.executable, "-m", "devctl.main", "--kubeconfig", kubeconfig_path, "-n", NS, *args],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout)


def one_line_error(result, *fragments) -> str:
    """The failure is one ``error:`` line, the last on stderr; non-zero exit; no traceback."""
    assert result.returncode != 0, result
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    lines = result.stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1 and lines[-1] == errors[0], result.stderr
    for fragment in fragments:
        assert fragment in errors[0], errors[0]
    return errors[0]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_server(sim, home, tmp_path):
    closed = f"http://127.0.0.1:{free_port()}"
    result = devctl(kubeconfig(sim, tmp_path, server=closed), home, "list")
    one_line_error(result, "cannot reach the Kubernetes API at " + closed, "Connection refused")


def test_expired_credentials(sim, home, tmp_path):
    result = devctl(kubeconfig(sim, tmp_path, token="expired-token"), home, "list")
    one_line_error(result, "unauthorized")
    assert sim.requests(5)[-1]["code"] == 401  # the server refused it, not devctl


def test_forbidden(sim, home, tmp_path):
    sim.faults.add(verb="create", resource="devservers", code=403, count=1)
    result = devctl(kubeconfig(sim, tmp_path), home, "create", "denied", "--flavor", "cpu-small", "--owner", "a@example.com")
    one_line_error(result, "forbidden", "cannot create resource \"devservers\"")
    assert get(sim, "devservers.torchdev.io", NS, "denied") is None


@pytest.mark.parametrize("args,fault,fragment", [
    (["get", "nope"], None, 'devserver "nope" not found in namespace "dev-failing"'),
    (["list"], {"verb": "list", "resource": "devservers", "code": 404, "count": 1},
     "the server has no resource devservers.torchdev.io: the torchdev CRDs are not installed"),
    (["delete", "nope"], None, 'devserver "nope" not found'),
])
def test_not_found(sim, home, tmp_path, args, fault, fragment):
    if fault:
        sim.faults.add(**fault)
    one_line_error(devctl(kubeconfig(sim, tmp_path), home, *args), fragment)


def test_conflict_on_apply(sim, home, tmp_path):
    sim.faults.add(verb="patch", resource="devusers", code=409, count=1)
    result = devctl(kubeconfig(sim, tmp_path), home, "admin", "onboard", "conflicted", "--email", "c@example.com")
    one_line_error(result, "Conflict (409)", "--force-conflicts")
    assert get(sim, "devusers.torchdev.io", "", "conflicted") is None


def test_conflict_on_create_of_an_existing_server(sim, home, tmp_path):
    cfg = kubeconfig(sim, tmp_path)
    assert devctl(cfg, home, "create", "twice", "--flavor", "cpu-small", "--owner", "a@example.com").returncode == 0
    result = devctl(cfg, home, "create", "twice", "--flavor", "cpu-small", "--owner", "a@example.com")
    one_line_error(result, 'devserver "twice" already exists in namespace "dev-failing"')


def test_connection_breaking_during_wait_names_what_is_left(sim, home, tmp_path):
    """Every poll of --wait loses its connection: devctl retries, then gives up at its timeout
    with one line that says the DevServer it created is still there."""
    sim.faults.add(verb="get", resource="devservers", code="drop", fraction=1.0)
    result = devctl(kubeconfig(sim, tmp_path), home, "create", "waiting", "--flavor", "cpu-small",
                    "--owner", "a@example.com", "--wait", "--timeout", "3s")
    error = one_line_error(result, "cannot reach the Kubernetes API", "devserver waiting (created) is left in place",
                           "'devctl delete waiting -n dev-failing' deletes it")
    assert "retrying after" in result.stderr  # it did retry while the connection broke
    assert get(sim, "devservers.torchdev.io", NS, "waiting") is not None, error


def test_connection_breaking_for_a_while_during_wait_is_survived(sim, home, tmp_path):
    """Two polls lose their connection, then the server is Ready (played here): --wait succeeds."""
    sim.faults.add(verb="get", resource="devservers", code="drop", count=2)
    cfg = kubeconfig(sim, tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "devctl.main", "--kubeconfig", cfg, "-n", NS, "create", "survivor", "--flavor",
         "cpu-small", "--owner", "a@example.com", "--wait", "--timeout", "120s"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        env=dict(os.environ, HOME=str(home), DEVCTL_CONFIG=str(home / "devctl.yaml")))
    sim.wait_for(lambda: get(sim, "devservers.torchdev.io", NS, "survivor"), 60, message="the DevServer created")
    sim.wait_for(lambda: sim.call(sim.cluster.faults.injected).get("drop", 0) >= 2, 60, message="two polls dropped")
    obj = get(sim, "devservers.torchdev.io", NS, "survivor")
    sim.call(sim.api.patch, "devservers.torchdev.io", NS, "survivor", {"status": {
        "phase": "Running", "observedGeneration": obj["metadata"]["generation"],
        "conditions": [{"type": "Ready", "status": "True", "reason": "ServerReady", "message": "ready",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}, subresource="status")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "retrying after" in err and "is Ready" in err and "Traceback" not in err


def test_half_made_volume_is_announced(sim, home, tmp_path):
    """devctl infer create makes the job's volume, then the job: when the job cannot be created the
    volume stays, and the error says so."""
    sim.faults.add(verb="create", resource="ephemeralaccelerationjobs", code=500, count=1)
    result = devctl(kubeconfig(sim, tmp_path), home, "infer", "create", "halfway", "--input-path", "/artifacts/in.jpg",
                    "--gpus", "0")
    one_line_error(result, "InternalError (500)", "the volume artifacts-halfway is left in place",
                   "'devctl infer cleanup' deletes it")
    assert get(sim, "persistentvolumeclaims", NS, "artifacts-halfway") is not None
    assert get(sim, "ephemeralaccelerationjobs.torchdev.io", NS, "halfway") is None


def test_half_done_purge_is_announced(sim, home, tmp_path):
    """devctl delete --purge deletes the DevServer, then its home volumes: when a volume cannot be
    deleted, the error says which are left and how to finish."""
    cfg = kubeconfig(sim, tmp_path)
    sim.call(sim.api.create, "devservers.torchdev.io", {
        "apiVersion": "torchdev.io/v1alpha1", "kind": "DevServer", "metadata": {"name": "purged"},
        "spec": {"owner": "a@example.com", "flavor": "cpu-small"}}, NS)
    sim.call(sim.api.create, "persistentvolumeclaims", {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "home-purged-0", "labels": {"torchdev.io/devserver": "purged"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}, NS)
    sim.faults.add(verb="delete", resource="persistentvolumeclaims", code=500, count=1)
    result = devctl(cfg, home, "delete", "purged", "--purge", "--yes")
    one_line_error(result, "home volume(s) home-purged-0 is left in place", "devserver purged is deleted",
                   "'devctl delete purged -n dev-failing --purge' deletes them")
    assert get(sim, "persistentvolumeclaims", NS, "home-purged-0") is not None
    # finishing it as the message says works
    result = devctl(cfg, home, "delete", "purged", "--purge", "--yes")
    assert result.returncode == 0, result.stderr
    assert get(sim, "persistentvolumeclaims", NS, "home-purged-0") is None
