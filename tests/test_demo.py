"""`make demo` (hack/demo.py) against a cluster in $KUBECONFIG: it says what it will create and
asks, refuses without a terminal and without --yes, runs in a namespace of its own and removes
exactly what it created. A kubesim stands in for the real cluster; on the embedded simulator
(no $KUBECONFIG) the demo is what `make demo` runs (CI runs that too)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from _support import ROOT, tool
from kubesim.testing import KubeSim

from hack import demo

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PLAN = demo.Plan(context="prod", namespace="torchdev-demo-abc123", flavor="gpu-a10g-1",
                 crds=["devservers.torchdev.io"], flavors=["cpu-small"])


def test_confirm_with_yes_does_not_ask(capsys):
    demo.confirm(PLAN, yes=True, interactive=False, ask=lambda _: pytest.fail("asked"))
    out = capsys.readouterr().out
    assert "torchdev-demo-abc123" in out and "devservers.torchdev.io" in out and "cpu-small" in out


def test_confirm_refuses_without_a_terminal():
    with pytest.raises(SystemExit, match="DEMO_ARGS=--yes"):
        demo.confirm(PLAN, yes=False, interactive=False)


@pytest.mark.parametrize("answer,agreed", [("y", True), ("yes", True), ("n", False), ("", False)])
def test_confirm_asks_on_a_terminal(answer, agreed):
    if agreed:
        demo.confirm(PLAN, yes=False, interactive=True, ask=lambda _: answer)
    else:
        with pytest.raises(SystemExit, match="nothing was created"):
            demo.confirm(PLAN, yes=False, interactive=True, ask=lambda _: answer)


def _kubectl(sim, *args):
    proc = subprocess.run([tool("kubectl"), "--kubeconfig", sim.kubeconfig, *args], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _names(sim, kind):
    return {i["metadata"]["name"] for i in json.loads(_kubectl(sim, "get", kind, "-o", "json"))["items"]}


def _demo(sim, *args):
    env = dict(os.environ, KUBECONFIG=sim.kubeconfig)
    return subprocess.run([sys.executable, str(ROOT / "hack" / "demo.py"), *args], env=env, cwd=ROOT,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)


@pytest.fixture
def cluster():
    with KubeSim(nodes=demo.NODES) as sim:
        yield sim


def test_on_a_cluster_it_refuses_without_yes_and_creates_nothing(cluster):
    proc = _demo(cluster)
    assert proc.returncode != 0
    assert "refusing to install into a real cluster" in proc.stderr
    assert "CustomResourceDefinitions (cluster-wide): devserverflavors.torchdev.io" in proc.stdout
    assert not [n for n in _names(cluster, "crd") if n.endswith(".torchdev.io")]
    assert not [n for n in _names(cluster, "namespaces") if n.startswith("torchdev-demo-")]


def test_on_a_cluster_it_removes_what_it_created(cluster):
    proc = _demo(cluster, "--yes")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "Ready in" in proc.stdout
    namespace = next(w for w in proc.stdout.split() if w.startswith("torchdev-demo-"))
    assert not [n for n in _names(cluster, "crd") if n.endswith(".torchdev.io")]  # installed by it: removed
    gone = cluster.wait_for(lambda: namespace not in _names(cluster, "namespaces"), 60,
                            message=f"namespace {namespace} deleted")
    assert gone


def test_on_a_cluster_it_keeps_what_existed_before(cluster):
    for crd in sorted((ROOT / "config" / "crd" / "bases").glob("*.yaml")):
        _kubectl(cluster, "apply", "--server-side", "-f", str(crd))
    _kubectl(cluster, "wait", "--for=condition=Established", "crd/devserverflavors.torchdev.io")
    _kubectl(cluster, "apply", "--server-side", "-f",
             str(ROOT / "config" / "samples" / "torchdev_v1alpha1_devserverflavor_gpu-a10g-1.yaml"))
    _kubectl(cluster, "create", "namespace", "dev-demo")  # someone's: not the demo's to use
    crds_before = _names(cluster, "crd")

    proc = _demo(cluster, "--yes")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "none (installed already)" in proc.stdout
    assert _names(cluster, "crd") == crds_before
    assert _names(cluster, "devserverflavors.torchdev.io") == {"gpu-a10g-1"}  # only its own are removed
    assert "dev-demo" in _names(cluster, "namespaces")
    assert not json.loads(_kubectl(cluster, "get", "devservers", "-n", "dev-demo", "-o", "json"))["items"]
