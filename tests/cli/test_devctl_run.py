"""devctl run: a real gloo job over a 2-replica DevServer in kubesim.

No operator runs: the test plays it, creating the StatefulSet whose pods carry the env
``rendezvous_env`` renders (kubesim's StatefulSet controller makes the pods
``<name>-<i>`` with the pod-index label, its kubelet makes them Ready). A fake kubectl
(fake_kubectl.py) runs ``kubectl exec POD -- CMD`` locally with the pod's env, and
``devrun`` on PATH is a shim for the real launcher, so every rank runs real torchrun.
"""
from __future__ import annotations

import importlib.util
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from devctl_helpers import REPO, as_json

HERE = Path(__file__).resolve().parent
FAKE_KUBECTL = HERE / "fake_kubectl.py"
LAUNCHER_CANDIDATES = ("roles/devserver/files/pytorch/devrun", "roles/devserver/files/devrun",
                       "scripts/pytorch/devrun")
DIST_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK", "MASTER_ADDR",
             "MASTER_PORT", "NNODES", "NPROC_PER_NODE", "NODE_RANK", "TORCHDEV_BACKEND",
             "TORCHDEV_RDZV_ENDPOINT", "TORCHELASTIC_RUN_ID")

TRAIN = """
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
print(f"rank={dist.get_rank()} world={dist.get_world_size()} sum={int(t.item())}", flush=True)
dist.destroy_process_group()
"""

FAIL_ON_RANK1 = """
import os, sys
rank = int(os.environ["RANK"])
print(f"rank {rank} says hi", flush=True)
if rank == 1:
    print("rank 1 fails", file=sys.stderr, flush=True)
    sys.exit(3)
"""

# Prints first, then records its pids: once both workers' files exist, their output is on
# its way to devctl and every process the test checks is known.
SLEEPER = """
import os, sys, time
print("sleeping", flush=True)
open(os.path.join(sys.argv[1], f"agent-{os.environ['RANK']}.{os.getppid()}"), "w").close()
open(os.path.join(sys.argv[1], f"worker-{os.environ['RANK']}.{os.getpid()}"), "w").close()
time.sleep(600)
"""


def launcher() -> Path:
    for rel in LAUNCHER_CANDIDATES:
        path = REPO / rel
        if path.is_file():
            return path
    pytest.fail(f"devrun launcher not found in any of {LAUNCHER_CANDIDATES}")


def load_rendezvous():
    from ansible_collections.torchdev.operator.plugins.module_utils import rendezvous

    return rendezvous


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _exe(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def fake_bin(tmp_path, monkeypatch):
    """bin/ with kubectl (fake_kubectl.py) and devrun (the real launcher), first on PATH;
    a clean torch.distributed env; a free MASTER_PORT; a pid directory; the pods' /tmp."""
    if importlib.util.find_spec("torch") is None:  # (not imported here: the ranks import it)
        pytest.fail("torch is not installed: run `make setup`", pytrace=False)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _exe(bin_dir / "kubectl", f"#!/bin/sh\nexec {sys.executable} {FAKE_KUBECTL} \"$@\"\n")
    _exe(bin_dir / "devrun", f"#!/bin/sh\nexec {sys.executable} {launcher()} \"$@\"\n")
    pids = tmp_path / "pids"
    pids.mkdir()
    for var in DIST_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.path.dirname(sys.executable)}{os.pathsep}"
                               f"{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_KUBECTL_MASTER_PORT", str(free_port()))
    monkeypatch.setenv("FAKE_KUBECTL_PIDS", str(pids))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("PYTHONUNBUFFERED", "1")
    monkeypatch.setenv("PYTHONWARNINGS", "ignore")
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    import devctl.run

    monkeypatch.setattr(devctl.run, "REMOTE_DIR", str(tmp_path / "podfs"))
    return {"bin": bin_dir, "pids": pids}


def make_server(cluster, name: str, replicas: int = 2, ready: bool = True, distributed: bool = True) -> dict:
    """Play the operator: DevServer + StatefulSet with the rendezvous env; wait for the pods."""
    from kubernetes import client

    spec = {"flavor": "cpu-small"}
    if distributed:
        spec.update(mode="distributed", distributed={"worldSize": replicas, "nprocsPerNode": 1, "backend": "gloo"})
    obj = cluster.create_devserver(name, **spec)
    flavor = cluster.custom.get_cluster_custom_object("torchdev.io", "v1alpha1", "devserverflavors", "cpu-small")
    env = load_rendezvous().rendezvous_env(obj, flavor)
    labels = {"torchdev.io/devserver": name}
    n = replicas if distributed else 1
    client.AppsV1Api(cluster.sim.k8s).create_namespaced_stateful_set(cluster.ns, {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name, "labels": labels},
        "spec": {"replicas": n, "serviceName": name, "podManagementPolicy": "Parallel",
                 "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels,
                                           "annotations": {"kubectl.kubernetes.io/default-container": "dev"}},
                              "spec": {"containers": [
                                  {"name": "sidecar", "image": "busybox"},
                                  {"name": "dev", "image": "pytorch", "env": env}]}}}})

    def pods_ready():
        pods = cluster.core.list_namespaced_pod(cluster.ns, label_selector=f"torchdev.io/devserver={name}").items
        return len(pods) == n and all(p.status.container_statuses and all(c.ready for c in p.status.container_statuses)
                                      for p in pods)

    cluster.sim.wait_for(pods_ready, timeout=20, message=f"pods of {name} ready")
    if ready:
        cluster.set_status(name, phase="Running", replicas=n, readyReplicas=n, ready=f"{n}/{n}",
                           conditions=[{"type": "Ready", "status": "True", "reason": "ServerReady",
                                        "message": "ok", "lastTransitionTime": "2026-01-01T00:00:00Z"}])
    return obj


def lines_of(text: str, prefix: str) -> list[str]:
    return [line[len(prefix):] for line in text.splitlines() if line.startswith(prefix)]


# -- real runs -------------------------------------------------------------------------

def test_run_allreduce_over_two_replicas(devctl, cluster, tmp_path, fake_bin):
    make_server(cluster, "job")
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    result = devctl("run", "job", str(script))
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert lines_of(result.stdout, "[rank 0] ") == ["rank=0 world=2 sum=3"]
    assert lines_of(result.stdout, "[rank 1] ") == ["rank=1 world=2 sum=3"]
    assert all(line.startswith("[rank ") for line in result.stdout.splitlines())
    assert "running devrun" in result.stderr and "2 replica(s)" in result.stderr
    # the script was copied into the "pods" (content-addressed), once
    copied = list((tmp_path / "podfs").glob("*/train.py"))
    assert len(copied) == 1 and copied[0].read_text() == TRAIN


def test_run_worst_rank_exit_code_and_script_args(devctl, cluster, tmp_path, fake_bin):
    make_server(cluster, "bad")
    script = tmp_path / "fail.py"
    script.write_text(FAIL_ON_RANK1 + "print('args', sys.argv[1:], flush=True)\n")
    # words after SCRIPT belong to the script, even devctl's own option names
    result = devctl("run", "bad", "--fail-grace", "1", str(script), "--timeout", "5", "-n", "x")
    assert result.exit_code == 3, (result.stdout, result.stderr)
    assert "[rank 0] rank 0 says hi" in result.stdout
    assert "[rank 0] args ['--timeout', '5', '-n', 'x']" in result.stdout
    assert "[rank 1] rank 1 fails" in result.stderr  # stderr stays on stderr, prefixed
    # torchrun exits 1 for any worker failure: devctl reports the worker's own code. Rank 0's
    # agent then waits in torchrun's exit barrier for rank 1: --fail-grace stops it.
    assert "stopping 1 rank(s) still running after rank failure" in result.stderr
    assert "devctl run: exit 3 (rank 0: stopped, rank 1: 3)" in result.stderr


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def _pids(directory: Path, prefix: str = "") -> list[int]:
    return [int(p.name.rsplit(".", 1)[1]) for p in directory.iterdir() if p.name.startswith(prefix)]


def test_run_ctrl_c_stops_every_rank(sim, cluster, ns, tmp_path, fake_bin):
    make_server(cluster, "sleepy")
    script = tmp_path / "shared" / "sleep.py"  # a path "inside the pods" (not copied)
    script.parent.mkdir()
    script.write_text(SLEEPER)
    pids = fake_bin["pids"]
    env = dict(os.environ)
    proc = subprocess.Popen(
        [sys.executable, "-c", "from devctl.main import cli; cli()", "--kubeconfig", sim.kubeconfig,
         "-n", ns, "run", "sleepy", "--copy", "never", str(script), str(pids)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=str(tmp_path),
        # a terminal's Ctrl-C reaches a process that handles it, even when this test runs in a
        # background job (nohup, `make test &`), which starts with SIGINT ignored
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        sim.wait_for(lambda: len(_pids(pids, "worker-")) == 2 or proc.poll() is not None,
                     timeout=40, message="both workers started")
        assert proc.poll() is None, proc.communicate()
        recorded = _pids(pids)
        assert len(recorded) == 6  # 2 x (kubectl/sh, torchrun agent, worker), worker last
        assert all(_alive(p) for p in recorded)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, (out, err)
    assert "[rank 0] sleeping" in out and "[rank 1] sleeping" in out
    assert "interrupted: stopping 2 rank(s) (sleepy-0, sleepy-1)" in err
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(_alive(p) for p in recorded):
        time.sleep(0.05)
    assert [p for p in recorded if _alive(p)] == []


# -- planning and errors ---------------------------------------------------------------

def test_run_dry_run_plan(devctl, cluster, ns, sim, tmp_path, fake_bin):
    make_server(cluster, "plan")
    script = tmp_path / "t.py"
    script.write_text("print(1)\n")
    plan = as_json(devctl("run", "plan", "--dry-run", "-o", "json", "--nprocs-per-node", "2",
                          str(script), "--lr", "0.1"))
    assert plan["mode"] == "distributed" and plan["localScript"] == str(script)
    assert plan["script"].startswith(str(tmp_path / "podfs")) and plan["script"].endswith("/t.py")
    assert [r["pod"] for r in plan["ranks"]] == ["plan-0", "plan-1"]
    for i, rank in enumerate(plan["ranks"]):
        argv = rank["exec"]
        assert rank["rank"] == i and rank["container"] == "dev"  # the default-container annotation
        assert os.path.basename(argv[0]) == "kubectl"
        assert argv[1:argv.index("--")] == ["--kubeconfig", sim.kubeconfig, "exec", "-i", "-n", ns,
                                             f"plan-{i}", "-c", "dev"]
        assert argv[-6:] == ["devrun", "--nproc-per-node", "2", plan["script"], "--lr", "0.1"]
        assert rank["copy"][-3:-1] == ["sh", "-c"]
    text = devctl("run", "plan", "--dry-run", "--copy", "never", "/shared/train.py")
    assert text.exit_code == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0] == "# rank 0 (pod plan-0)" and lines[2] == "# rank 1 (pod plan-1)"
    assert lines[1].endswith("devrun devrun /shared/train.py") and " exec -i -n " in lines[1]


def test_run_standalone_uses_its_single_pod(devctl, cluster, fake_bin):
    make_server(cluster, "solo", distributed=False)
    plan = as_json(devctl("run", "solo", "--dry-run", "-o", "json", "--copy", "never", "train.py"))
    assert plan["mode"] == "standalone" and [r["pod"] for r in plan["ranks"]] == ["solo-0"]


def test_run_errors_are_one_line(devctl, cluster, ns, tmp_path, fake_bin):
    result = devctl("run", "ghost", "x.py")
    assert result.exit_code == 1
    assert result.stderr.strip() == f'error: devserver "ghost" not found in namespace "{ns}"'

    make_server(cluster, "notready", ready=False)
    cluster.set_status("notready", phase="Provisioning", replicas=2, readyReplicas=1)
    result = devctl("run", "notready", "x.py")
    assert result.exit_code == 1
    err = result.stderr.strip()
    assert len(err.splitlines()) == 1 and err.startswith('error: devserver "notready" is not Ready (Provisioning')

    # Ready according to the status, but a pod is gone
    cluster.create_devserver("nopods", mode="distributed", distributed={"worldSize": 2, "backend": "gloo"},
                             flavor="cpu-small")
    cluster.set_status("nopods", phase="Running", replicas=2, readyReplicas=2)
    result = devctl("run", "nopods", "x.py")
    assert result.exit_code == 1
    assert result.stderr.strip() == (f'error: pod(s) nopods-0, nopods-1 of devserver "nopods" not found in '
                                     f'namespace "{ns}" (see devctl get nopods)')

    result = devctl("run", "notready", "--copy", "always", "missing.py")
    assert result.exit_code == 2 and "missing.py is not a local file" in result.stderr
    result = devctl("run", "notready")
    assert result.exit_code == 2 and "SCRIPT" in result.stderr
    result = devctl("run", "notready", "--nprocs-per-node", "0", "x.py")
    assert result.exit_code == 2 and "'--nprocs-per-node'" in result.stderr


def test_run_timeout_stops_ranks(devctl, cluster, tmp_path, fake_bin):
    make_server(cluster, "slow", replicas=1)
    script = tmp_path / "slow.py"
    script.write_text("import time\nprint('started', flush=True)\ntime.sleep(600)\n")
    result = devctl("run", "slow", "--timeout", "0.1", str(script))
    assert result.exit_code == 124, (result.stdout, result.stderr)
    assert "timed out after 0.1s: stopping 1 rank(s)" in result.stderr


def test_worst_exit_code():
    from devctl.run import exit_code_of, worst

    assert worst([0, 0]) == 0
    assert worst([0, 3, 1]) == 3
    assert worst([]) == 0
    assert exit_code_of(-15) == 143 and exit_code_of(2) == 2


def test_ctrl_c_while_starting_a_rank_is_raised_after_it_is_recorded():
    """A SIGINT that lands between starting a rank and recording it waits for the record."""
    from devctl.run import _signals_deferred

    recorded = []
    before = signal.getsignal(signal.SIGINT)  # SIG_IGN when pytest runs in a background job
    with pytest.raises(KeyboardInterrupt):
        with _signals_deferred(True):
            os.kill(os.getpid(), signal.SIGINT)
            recorded.append("rank 0")  # still runs: the interrupt is held back
    assert recorded == ["rank 0"]
    assert signal.getsignal(signal.SIGINT) is before
