"""The runtime against kubesim, with the tiny test roles in tests/runtime/roles.

One simulator and one Runtime for the module (starting them is the slow part); each test
uses its own objects.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

from kubesim.testing import KubeSim
from _support import open_crd
from torchdev_runtime import Runtime

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
ANSIBLE_CFG = os.path.join(REPO, "ansible.cfg")
GROUP = "rt.torchdev.io"


def crd(kind: str, plural: str) -> dict:
    return open_crd(GROUP, kind, plural)


def write_watches(path, counter_dir) -> str:
    text = textwrap.dedent(f"""\
        - version: v1
          group: {GROUP}
          kind: Widget
          role: {HERE}/roles/rt_widget
          vars:
            greeting: hello
          finalizer:
            name: {GROUP}/finalizer
            vars:
              finalizing: true
              greeting: bye
        - version: v1
          group: {GROUP}
          kind: Flaky
          role: {HERE}/roles/rt_flaky
          manageStatus: false
          watchDependentResources: false
          vars:
            counter_dir: {counter_dir}
        """)
    path.write_text(text)
    return str(path)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rt-e2e")
    counters = tmp / "counters"
    counters.mkdir()
    watches = write_watches(tmp / "watches.yaml", counters)
    sim = KubeSim().start()
    for kind, plural in (("Widget", "widgets"), ("Flaky", "flakies")):
        sim.call(sim.api.create, "customresourcedefinitions.apiextensions.k8s.io",
                 crd(kind, plural))
    rt = Runtime(watches, sim.kubeconfig, ansible_config=ANSIBLE_CFG,
                 max_concurrent_reconciles=2, health_interval=0).start()
    try:
        yield sim, rt, watches
    finally:
        rt.stop(timeout=10)
        sim.stop()


def get(sim, resource, ns, name):
    try:
        return sim.call(sim.api.get, resource, ns, name)
    except Exception:  # noqa: BLE001 - not found
        return None


def conditions(obj) -> dict:
    return {c["type"]: c for c in ((obj or {}).get("status") or {}).get("conditions") or []}


def test_widget_lifecycle(env):
    sim, rt, _ = env
    sim.call(sim.api.create, f"widgets.{GROUP}",
             {"apiVersion": f"{GROUP}/v1", "kind": "Widget",
              "metadata": {"name": "w1", "namespace": "default"},
              "spec": {"replicaCount": 3}}, "default")
    cm = rt.wait_for(lambda: get(sim, "configmaps", "default", "w1-cm"), timeout=30)
    assert cm["data"] == {"replicas": "3", "greeting": "hello", "raw_spec_keys": "replicaCount"}
    assert cm["metadata"]["ownerReferences"][0]["name"] == "w1"

    # manageStatus: conditions written by the runtime; finalizer added before the run
    w = rt.wait_for(lambda: (lambda o: o if conditions(o).get("Successful", {}).get("status")
                             == "True" else None)(get(sim, f"widgets.{GROUP}", "default", "w1")),
                    timeout=10)
    c = conditions(w)
    assert c["Running"]["reason"] == "Successful"
    assert c["Running"]["ansibleResult"]["changed"] == 1
    assert c["Failure"]["status"] == "False"
    assert w["metadata"]["finalizers"] == [f"{GROUP}/finalizer"]
    assert rt.dependent_kinds("Widget") == {"v1/ConfigMap": ["owner"]}
    assert rt.wait_idle(180)
    runs_before = rt.counters("Widget")["runs"]

    # status / finalizer writes did not trigger extra runs; deleting the owned ConfigMap does
    sim.call(sim.api.delete, "configmaps", "default", "w1-cm")
    cm2 = rt.wait_for(lambda: get(sim, "configmaps", "default", "w1-cm"), timeout=30)
    assert cm2["metadata"]["uid"] != cm["metadata"]["uid"]
    assert rt.wait_idle(180)
    assert rt.counters("Widget")["runs"] == runs_before + 1

    # deletion: the finalizer run gets the finalizer vars, then the finalizer is removed
    sim.call(sim.api.delete, f"widgets.{GROUP}", "default", "w1")
    fin = rt.wait_for(lambda: get(sim, "configmaps", "default", "w1-finalized"), timeout=30)
    assert fin["data"] == {"greeting": "bye"}
    rt.wait_for(lambda: get(sim, f"widgets.{GROUP}", "default", "w1") is None, timeout=10)
    assert rt.counters("Widget")["finalizer_runs"] == 1
    assert rt.wait_idle(180)
    assert rt.counters("Widget")["failed"] == 0


def test_failure_conditions_then_recovery(env):
    sim, rt, _ = env
    sim.call(sim.api.create, f"widgets.{GROUP}",
             {"apiVersion": f"{GROUP}/v1", "kind": "Widget",
              "metadata": {"name": "w2", "namespace": "default"},
              "spec": {"replicaCount": 1, "fail": True}}, "default")

    def failed():
        o = get(sim, f"widgets.{GROUP}", "default", "w2")
        return o if conditions(o).get("Failure", {}).get("status") == "True" else None

    w = rt.wait_for(failed, timeout=30)
    c = conditions(w)
    assert c["Failure"]["reason"] == "Failed"
    assert c["Failure"]["message"] == "asked to fail"
    assert c["Failure"]["ansibleResult"]["failures"] == 1
    assert c["Successful"]["status"] == "False"
    # retried with backoff while failing
    rt.wait_for(lambda: sum(1 for r in rt.history("Widget")
                            if r.name == "w2" and not r.ok) >= 2, timeout=30)
    fails = [r for r in rt.history("Widget") if r.name == "w2" and not r.ok]
    assert fails[0].failed_tasks == [("Fail on request", "asked to fail")]

    sim.call(sim.api.patch, f"widgets.{GROUP}", "default", "w2", {"spec": {"fail": False}},
             "merge")

    def succeeded():
        o = get(sim, f"widgets.{GROUP}", "default", "w2")
        return o if conditions(o).get("Successful", {}).get("status") == "True" else None

    w = rt.wait_for(succeeded, timeout=30)
    assert conditions(w)["Failure"]["status"] == "False"
    assert get(sim, "configmaps", "default", "w2-cm") is not None


def test_failing_role_is_retried_with_backoff_and_no_status(env):
    sim, rt, _ = env
    sim.call(sim.api.create, f"flakies.{GROUP}",
             {"apiVersion": f"{GROUP}/v1", "kind": "Flaky",
              "metadata": {"name": "f1", "namespace": "default"},
              "spec": {"failTimes": 2}}, "default")  # -> fail_times
    rt.wait_for(lambda: any(r.ok and r.ran for r in rt.history("Flaky") if r.name == "f1"),
                timeout=40)
    recs = [r for r in rt.history("Flaky") if r.name == "f1" and r.ran]
    assert [r.ok for r in recs] == [False, False, True]
    assert recs[-2].failed_tasks[0][1] == "attempt 2 of 2 failed"
    # retries were spaced by the controller-runtime backoff (5ms, 10ms, ...) after failures:
    # i.e. immediately, not after the 10h reconcile period
    assert recs[-1].started - recs[-2].started < recs[-2].duration + 5
    # manageStatus: false -> the runtime writes no status
    assert "status" not in (get(sim, f"flakies.{GROUP}", "default", "f1") or {}) or \
        not get(sim, f"flakies.{GROUP}", "default", "f1").get("status")
    assert rt.wait_idle(180)


def test_cli_runs_and_stops_on_sigterm(env, tmp_path):
    sim, _, watches = env
    sim.call(sim.api.create, "namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                            "metadata": {"name": "cli"}})
    proc = subprocess.Popen(
        [sys.executable, "-m", "torchdev_runtime", "--watches-file", watches,
         "--kubeconfig", sim.kubeconfig, "--namespace", "cli",
         "--ansible-config", ANSIBLE_CFG, "--health-interval", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)
    reader.start()
    try:
        sim.call(sim.api.create, f"widgets.{GROUP}",
                 {"apiVersion": f"{GROUP}/v1", "kind": "Widget",
                  "metadata": {"name": "wc", "namespace": "cli"},
                  "spec": {"replicaCount": 5}}, "cli")
        # The module's runtime reconciles the widget too: wait for the CLI's own reconcile (its
        # signal handlers are installed by then), not for the ConfigMap either may write.
        sim.wait_for(lambda: any("Widget cli/wc: reconcile ok=" in line for line in list(lines))
                     or proc.poll() is not None, 120, message="the CLI's reconcile of cli/wc")
        assert get(sim, "configmaps", "cli", "wc-cm")["data"]["replicas"] == "5"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        reader.join(timeout=30)
    out = "".join(lines)
    assert proc.returncode == 0, out
    assert "Widget cli/wc: reconcile ok=" in out
    assert "stopped" in out
