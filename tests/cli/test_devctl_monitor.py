"""devctl monitor: per-replica snapshots from kubesim (pods made by kubesim's StatefulSet
controller; metrics.k8s.io is not served there, so usage shows "-")."""
from __future__ import annotations

import json

import pytest

from devctl_helpers import as_json


def make_server(cluster, name: str, replicas: int = 2, status_replicas: int | None = None) -> None:
    from kubernetes import client

    cluster.create_devserver(name, flavor="cpu-small", mode="distributed",
                             distributed={"worldSize": replicas, "nprocsPerNode": 1, "backend": "gloo"})
    labels = {"torchdev.io/devserver": name}
    client.AppsV1Api(cluster.sim.k8s).create_namespaced_stateful_set(cluster.ns, {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name, "labels": labels},
        "spec": {"replicas": replicas, "serviceName": name, "podManagementPolicy": "Parallel",
                 "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels},
                              "spec": {"containers": [{"name": "dev", "image": "pytorch"}]}}}})

    def ready():
        pods = cluster.core.list_namespaced_pod(cluster.ns, label_selector=f"torchdev.io/devserver={name}").items
        return len(pods) == replicas and all(
            p.spec.node_name and p.status.container_statuses and p.status.container_statuses[0].ready for p in pods)

    cluster.sim.wait_for(ready, timeout=20, message=f"pods of {name} ready")
    n = replicas if status_replicas is None else status_replicas
    cluster.set_status(name, phase="Running", replicas=n, readyReplicas=replicas, ready=f"{replicas}/{n}")


def test_monitor_once_json(devctl, cluster, ns):
    make_server(cluster, "mon", replicas=2, status_replicas=3)  # replica 2 has no pod
    snap = as_json(devctl("monitor", "mon", "--once", "-o", "json"))
    assert snap["devserver"] == "mon" and snap["namespace"] == ns and snap["mode"] == "distributed"
    assert snap["phase"] == "Running" and snap["ready"] == "2/3"
    assert snap["metricsAvailable"] is False
    rows = snap["replicas"]
    assert [r["index"] for r in rows] == [0, 1, 2]
    for i, row in enumerate(rows[:2]):
        assert row["pod"] == f"mon-{i}"
        assert row["phase"] == "Running" and row["ready"] is True and row["readyContainers"] == "1/1"
        assert row["restarts"] == 0 and row["node"]
        assert row["cpu"] is None and row["memory"] is None and row["gpus"] == 0
        assert row["age"].endswith("s")
    assert rows[2]["pod"] == "mon-2" and rows[2]["phase"] == "Missing" and rows[2]["ready"] is False


def test_monitor_once_table(devctl, cluster):
    make_server(cluster, "tab")
    result = devctl("monitor", "tab", "--once")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["REPLICA", "POD", "PHASE", "READY", "RESTARTS", "NODE", "AGE", "CPU", "MEMORY",
                                "GPUS"]
    assert len(lines) == 3
    for i, line in enumerate(lines[1:]):
        cols = line.split()
        assert cols[:5] == [str(i), f"tab-{i}", "Running", "1/1", "0"]
        assert cols[7:9] == ["-", "-"]  # no metrics.k8s.io in kubesim
    assert "metrics unavailable" in result.stderr and "2/2 ready" in result.stderr


def test_monitor_streams_one_snapshot_per_interval(devctl, cluster, monkeypatch):
    """Not a TTY: one JSON document per line per --interval (sleep is patched: no waiting)."""
    from devctl import monitor as mon

    make_server(cluster, "stream", replicas=1)
    sleeps: list[float] = []

    def fake_sleep(seconds):
        sleeps.append(seconds)
        if len(sleeps) == 2:
            raise KeyboardInterrupt  # Ctrl-C ends the monitor quietly

    monkeypatch.setattr(mon, "_sleep", fake_sleep)
    result = devctl("monitor", "stream", "--interval", "3", "-o", "json")
    assert result.exit_code == 0, result.stderr
    docs = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(docs) == 2 and sleeps == [3.0, 3.0]
    assert all(d["replicas"][0]["pod"] == "stream-0" for d in docs)


def test_monitor_tty_redraws_in_place(devctl, cluster, monkeypatch):
    from devctl import monitor as mon

    make_server(cluster, "tty", replicas=1)
    calls = []

    def fake_sleep(seconds):
        calls.append(seconds)
        if len(calls) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(mon, "_sleep", fake_sleep)
    monkeypatch.setattr(mon, "_stdout_is_tty", lambda: True)
    result = devctl("monitor", "tty", "--interval", "0.5")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.count(mon.CLEAR) == 2
    assert "every 0.5s, Ctrl-C to quit" in result.stdout and "REPLICA" in result.stdout


def test_monitor_shows_metrics_when_served(devctl, cluster, monkeypatch):
    """PodMetrics (as metrics-server serves them) summed over containers."""

    make_server(cluster, "met", replicas=1)
    calls = []

    def fake_call(self_api, fn, *args, **kwargs):
        if args[:2] == ("metrics.k8s.io", "v1beta1"):
            calls.append(kwargs.get("label_selector"))
            return {"kind": "PodMetricsList", "items": [
                {"metadata": {"name": "met-0"}, "containers": [
                    {"name": "dev", "usage": {"cpu": "1500000000n", "memory": "2Gi"}},
                    {"name": "side", "usage": {"cpu": "250m", "memory": "512Mi"}}]}]}
        return original(self_api, fn, *args, **kwargs)

    from devctl.api import Api

    original = Api._call
    monkeypatch.setattr(Api, "_call", fake_call)
    snap = as_json(devctl("monitor", "met", "--once", "-o", "json"))
    assert calls == ["torchdev.io/devserver=met"]
    assert snap["metricsAvailable"] is True
    assert snap["replicas"][0]["cpu"] == "1750m" and snap["replicas"][0]["memory"] == "2560Mi"


def test_monitor_errors(devctl, ns):
    result = devctl("monitor", "ghost", "--once")
    assert result.exit_code == 1
    assert result.stderr.strip() == f'error: devserver "ghost" not found in namespace "{ns}"'
    result = devctl("monitor", "ghost", "--interval", "0")
    assert result.exit_code == 2 and "--interval" in result.stderr


@pytest.mark.parametrize("text,value", [("250m", 0.25), ("1500000000n", 1.5), ("2", 2.0), ("1Gi", 2 ** 30),
                                        ("1k", 1000.0), ("12345Ki", 12345 * 1024), ("bogus", None), (None, None)])
def test_parse_quantity(text, value):
    from devctl.monitor import parse_quantity

    assert parse_quantity(text) == value
