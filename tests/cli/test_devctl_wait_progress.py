"""`--wait` never goes silent (issue 28.2): the progress line carries the elapsed time, the phase,
the queue position and ETA while queued, and the scheduler's (or Kueue's, or the kubelet's)
reason while the pods wait; on a terminal it is one line rewritten in place at every poll,
otherwise a plain line per change; a timeout says why it is still waiting.

kubesim's scheduler marks a pod it cannot place (PodScheduled False, Unschedulable, "0/N nodes are
available: ... Insufficient nvidia.com/gpu"), as kube-scheduler does; the DevServer's status is
played here (no operator runs in the CLI tests)."""
from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone

import pytest

from devctl.wait import pod_reason, queue_state

OWNER = "jane@example.com"
PROVISIONING = [{"type": "Ready", "status": "False", "reason": "PodsNotReady", "message": "0/1 replicas ready",
                 "lastTransitionTime": "2026-01-01T00:00:00Z"},
                {"type": "Progressing", "status": "True", "reason": "Provisioning",
                 "message": "waiting for the server pods", "lastTransitionTime": "2026-01-01T00:00:00Z"}]


def _pod(name, **status):
    return {"metadata": {"name": name}, "status": status}


@pytest.mark.parametrize("pods, expected", [
    ([_pod("x-0", conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                               "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}])],
     "Unschedulable: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu."),
    ([_pod("x-0", conditions=[{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated",
                               "message": "Scheduling is blocked due to non-empty scheduling gates"}])],
     "SchedulingGated: Scheduling is blocked due to non-empty scheduling gates"),
    ([_pod("x-0", conditions=[{"type": "PodScheduled", "status": "True"}],
           containerStatuses=[{"state": {"waiting": {"reason": "ErrImagePull", "message": "not found"}}}])],
     "ErrImagePull: not found"),
    ([_pod("x-0", containerStatuses=[{"state": {"waiting": {"reason": "ContainerCreating"}}}])], None),
    ([_pod("x-0", phase="Running", conditions=[{"type": "PodScheduled", "status": "True"}])], None),
    ([], None),
    (["garbage", {"status": "x"}, {"status": {"conditions": ["y"], "containerStatuses": [None, "z"]}}], None),
    ([_pod("x-0", conditions=[{"type": "PodScheduled", "status": "False", "message": "a\nb " * 500}])], "Unschedulable: a b"),
])
def test_pod_reason(pods, expected):
    got = pod_reason(pods)
    if expected is None:
        assert got is None
    else:
        assert got.startswith(expected) and len(got) <= 300 and "\n" not in got


def test_queue_state():
    ref = datetime(2026, 1, 1, tzinfo=timezone.utc)
    eta = (ref + timedelta(minutes=25)).strftime("%Y-%m-%dT%H:%M:%SZ")
    obj = {"status": {"phase": "Queued", "queue": {"position": 2, "clusterQueue": "torchdev-ada",
                                                   "estimatedStartTime": eta}}}
    assert queue_state(obj, ref) == "queued #2 in torchdev-ada, ETA 25m"
    assert queue_state({"status": {"phase": "Queued", "queue": {"estimatedStartTime": "soon"}}}, ref) == "queued"
    assert queue_state({"status": {"phase": "Running", "queue": {"position": 1}}}, ref) is None


def _unschedulable_server(cluster, name):
    """The server and its pod as the operator and the scheduler leave them: the pod asks for more
    GPUs than any node has."""
    deadline = time.monotonic() + 20
    while name not in cluster.devserver_names():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    cluster.set_status(name, phase="Provisioning", conditions=PROVISIONING, replicas=1, readyReplicas=0)
    cluster.core.create_namespaced_pod(cluster.ns, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{name}-0", "labels": {"torchdev.io/devserver": name}},
        "spec": {"containers": [{"name": "dev", "image": "img", "resources": {"limits": {"nvidia.com/gpu": "64"}}}]}})


def test_wait_shows_the_schedulers_reason_and_times_out_saying_why(devctl, cluster):
    import threading

    thread = threading.Thread(target=_unschedulable_server, args=(cluster, "big"), daemon=True)
    thread.start()
    result = devctl("create", "big", "--flavor", "cpu-small", "--owner", OWNER, "--wait", "--timeout", "4s")
    thread.join(5)
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert any("Provisioning" in line and "Unschedulable: 0/" in line and "Insufficient nvidia.com/gpu" in line
               for line in lines[:-1]), result.stderr
    assert lines[-1].startswith("error: timed out after 4s waiting for devserver/big to become Ready; still waiting: "
                                "Provisioning"), lines[-1]
    assert "Insufficient nvidia.com/gpu" in lines[-1]
    assert "\r" not in result.stderr  # not a terminal: plain lines


def test_on_a_terminal_the_line_is_rewritten_in_place(sim, cluster):
    """devctl in a pseudo-terminal: the progress line is redrawn (carriage return, erase line)
    as the seconds pass, and ends with a newline before the error."""
    import threading

    thread = threading.Thread(target=_unschedulable_server, args=(cluster, "tty"), daemon=True)
    thread.start()
    env = dict(os.environ, DEVCTL_CONFIG=os.devnull, NO_COLOR="1")
    env.pop("KUBECONFIG", None)
    controller, terminal = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "devctl.main", "--kubeconfig", sim.kubeconfig, "-n", cluster.ns,
                             "create", "tty", "--flavor", "cpu-small", "--owner", OWNER, "--wait", "--timeout", "8s"],
                            stdin=terminal, stdout=terminal, stderr=terminal, env=env, close_fds=True)
    os.close(terminal)
    out = b""
    while True:
        ready, _, _ = select.select([controller], [], [], 60)
        if not ready:
            break
        try:
            chunk = os.read(controller, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    proc.wait(timeout=60)
    os.close(controller)
    thread.join(5)
    text = out.decode(errors="replace")
    assert proc.returncode == 1, text
    redraws = text.split("\r\x1b[K")
    assert len(redraws) >= 4, text  # one per poll, in place
    elapsed = [part.split("]")[0].lstrip("[") for part in redraws[1:]]
    assert len(set(elapsed)) >= 3, elapsed  # the clock moves on the same line
    assert any("Insufficient nvidia.com/gpu" in part for part in redraws[1:])
    assert "\nerror: timed out after 8s" in text.replace("\r\n", "\n")
