"""End to end through the real entry points (issue 27.2): the operator started exactly as
`make run` starts it without ansible-operator (the Makefile's own `torchdev-runtime` command
line, as a subprocess) and as `make demo` starts it (hack/demo.py ``start_operator``, on the
embedded simulator and, narrowed to one namespace, on a cluster), against kubesim.

A DevServer with a short idle timeout; the in-pod agent's idle report is written into
<name>-activity as the agent writes it (tests/e2e/test_lifecycle_e2e.py ``report``); the server
must stop with an IdleShutdown. That needs the activity ConfigMap watched as a dependent of the
DevServer from the start (torchdev_runtime/dependents.py): the DevServer's role hides its
results (no_log), and nothing else runs it again (no reconcilePeriod).
"""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
from datetime import datetime, timezone

import urllib.request

import pytest

from torchdev_runtime.gotime import parse_duration

from _e2e_helpers import GROUP, ROOT, VERSION, condition, devserver, get_ds, wait_ready

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

BIN = ROOT / ".venv" / "bin"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_run_command(metrics_port: int) -> str:
    """The command `make run` runs when ansible-operator is not installed, read from the
    Makefile's run recipe (so this test follows the Makefile), with its variables set."""
    text = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^run:.*\n((?:\t.*\n)+)", text, re.M)
    assert recipe, "the Makefile has no run target"
    lines = [ln.strip().rstrip("\\").strip() for ln in recipe.group(1).splitlines()]
    cmd = [ln for ln in lines if "$(BIN)/torchdev-runtime" in ln]
    assert len(cmd) == 1, f"make run's torchdev-runtime command line not found in {lines}"
    return (cmd[0].rstrip(";").replace("$(BIN)", str(BIN))
            .replace("$(RUNTIME_METRICS_PORT)", str(metrics_port)))


def start_make_run(sim, workdir, _ns, metrics_port) -> subprocess.Popen:
    """`make run` (the Makefile exports ANSIBLE_CONFIG; the operator reads $KUBECONFIG)."""
    env = dict(os.environ, KUBECONFIG=sim.kubeconfig, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    command = make_run_command(metrics_port)
    assert command.startswith(f"{BIN}/torchdev-runtime --watches-file watches.yaml"), command
    return subprocess.Popen(["bash", "-c", command], cwd=ROOT, env=env, start_new_session=True,
                            stdout=open(workdir / "operator.log", "w"), stderr=subprocess.STDOUT)


def start_demo(sim, workdir, ns, metrics_port) -> subprocess.Popen:
    """hack/demo.py's operator: watches.yaml on the embedded simulator (ns None), or the demo's
    own watches narrowed to its namespace on a cluster in $KUBECONFIG."""
    from hack import demo

    env = dict(os.environ, KUBECONFIG=sim.kubeconfig, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    env["PATH"] = f"{demo.BIN}{os.pathsep}{env.get('PATH', '')}"
    return demo.start_operator(workdir, ns, metrics_port, env)


ENTRY_POINTS = {
    "make-run": lambda sim, workdir, ns, port: start_make_run(sim, workdir, ns, port),
    "make-demo": lambda sim, workdir, ns, port: start_demo(sim, workdir, None, port),
    "make-demo-on-a-cluster": lambda sim, workdir, ns, port: start_demo(sim, workdir, ns, port),
}


def devserver_metrics(port: int) -> dict[str, float]:
    """The DevServer controller's samples of the runtime's metrics (name{labels} -> value)."""
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        if 'controller="devserver-controller"' in line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def settled(port: int, log, ns: str, name: str) -> bool:
    """The operator is done with the server for now: no DevServer reconcile running or queued,
    and its last run asked for no requeue within a minute (a server still starting is looked
    at again within seconds, and such a look would see the idle report without any watch)."""
    m = devserver_metrics(port)
    if m.get('controller_runtime_active_workers{controller="devserver-controller"}', 1) != 0 or \
            m.get('workqueue_depth{controller="devserver-controller",name="devserver-controller"}', 1) != 0:
        return False
    runs = re.findall(rf"^.* DevServer {re.escape(ns)}/{re.escape(name)}: reconcile (.*)$", log.read_text(), re.M)
    if not runs:
        return False
    requeue = re.search(r", requeue after (\S+)$", runs[-1])
    return requeue is None or parse_duration(requeue.group(1)) >= 60


def dependent_reconciles(port: int) -> float:
    return devserver_metrics(port).get(
        'torchdev_runtime_reconciles_total{cause="dependent",controller="devserver-controller"}', 0.0)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def report_idle(kube, ns, name, since: datetime) -> None:
    """What the agent of pod <name>-0 sends when it goes idle (docs/lifecycle-agent.md)."""
    body = {"data": {f"{name}-0": json.dumps({"state": "idle", "since": since.strftime("%Y-%m-%dT%H:%M:%SZ"),
                                              "reasons": []})}}
    kube["core"].patch_namespaced_config_map(f"{name}-activity", ns, body)


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_idle_report_stops_the_server(sim, kube, ns, tmp_path, entry):
    port = free_port()
    proc = ENTRY_POINTS[entry](sim, tmp_path, ns, port)
    log = tmp_path / "operator.log"
    try:
        kube["custom"].create_namespaced_custom_object(
            GROUP, VERSION, ns, "devservers", devserver("idler", lifecycle={"idleTimeout": 5, "autoShutdown": True}))
        try:
            wait_ready(sim, kube, ns, "idler", timeout=180)
        except Exception:
            print(log.read_text())
            raise
        assert proc.poll() is None, log.read_text()
        sim.wait_for(lambda: settled(port, log, ns, "idler"), 120, interval=0.2,
                     message=f"{entry}: the operator done with {ns}/idler")
        dependents_before = dependent_reconciles(port)

        report_idle(kube, ns, "idler", datetime.now(timezone.utc))

        def stopped():
            obj = get_ds(kube, ns, "idler")
            return obj if (obj.get("status") or {}).get("phase") == "Stopped" else None
        try:
            obj = sim.wait_for(stopped, 120, interval=0.2, message=f"{entry}: {ns}/idler Stopped")
        except Exception:
            print(log.read_text())
            raise
        assert condition(obj, "Ready")["reason"] == "IdleTimeout"
        assert obj["status"]["reservation"]["endReason"] == "Idle"
        events = kube["core"].list_namespaced_event(ns, field_selector="involvedObject.name=idler").items
        assert [e.reason for e in events].count("IdleShutdown") == 1
        assert kube["apps"].read_namespaced_stateful_set("idler", ns).spec.replicas == 0
        # ... because the report reconciled the server (the activity ConfigMap is a dependent)
        assert dependent_reconciles(port) > dependents_before
        # The runtime said which dependents it watches: the activity ConfigMap's kind among them.
        assert re.search(r"DevServer: watching dependent resource v1/ConfigMap", log.read_text())
    finally:
        stop(proc)
