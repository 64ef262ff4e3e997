"""Real tools against the simulator, as subprocesses: kubectl (server-side apply, get -o json,
wait on conditions set by the simulated controllers, delete) and ansible-playbook with the
kubernetes.core collection (k8s present/absent/apply, k8s_info with selectors, wait on a
Deployment, idempotence)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
KUBECTL = shutil.which("kubectl", path=BIN) or shutil.which("kubectl")
ANSIBLE_PLAYBOOK = shutil.which("ansible-playbook", path=BIN) or shutil.which("ansible-playbook")
PLAYBOOKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "playbooks")

NAMESPACE = """\
apiVersion: v1
kind: Namespace
metadata:
  name: cli
"""

MANIFEST = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: cli
  labels: {app: demo}
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
        - name: web
          image: nginx:1.27
          ports: [{containerPort: 80}]
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: cli
  labels: {app: demo}
data:
  mode: fast
---
apiVersion: v1
kind: Pod
metadata:
  name: solo
  namespace: cli
  labels: {app: solo}
  annotations: {kubesim.io/ready-after: "1.5"}  # not Ready yet when kubectl wait starts
spec:
  containers:
    - name: main
      image: busybox
"""


def kubectl(sim, *args, check=True, timeout=60):
    assert KUBECTL, "kubectl not found"
    proc = subprocess.run([KUBECTL, "--kubeconfig", sim.kubeconfig, *args],
                          capture_output=True, text=True, timeout=timeout)
    if check:
        assert proc.returncode == 0, f"kubectl {' '.join(args)}: {proc.stderr}"
    return proc


def kubectl_requests(sim):
    return [r for r in sim.requests(20000) if r["user_agent"].startswith("kubectl")]


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("kubectl")
    (tmp / "namespace.yaml").write_text(NAMESPACE)
    (tmp / "manifest.yaml").write_text(MANIFEST)
    return str(tmp / "manifest.yaml")


def test_kubectl_apply_get_wait_delete(kubesim_module, manifest):
    sim = kubesim_module
    sim.reset_metrics()
    kubectl(sim, "apply", "--server-side", "-f", manifest.replace("manifest", "namespace"))
    out = kubectl(sim, "apply", "--server-side", "-f", manifest).stdout
    assert "deployment.apps/web serverside-applied" in out
    assert "configmap/settings serverside-applied" in out
    rv = sim.call(sim.api.get, "configmaps", "cli", "settings")["metadata"]["resourceVersion"]
    kubectl(sim, "apply", "--server-side", "-f", manifest)  # again: a no-op
    assert sim.call(sim.api.get, "configmaps", "cli",
                    "settings")["metadata"]["resourceVersion"] == rv

    deploy = json.loads(kubectl(sim, "get", "deployment", "web", "-n", "cli", "-o", "json").stdout)
    assert deploy["kind"] == "Deployment" and deploy["spec"]["replicas"] == 2
    stored = sim.call(sim.api.get, "deployments.apps", "cli", "web")
    assert any(m["manager"] == "kubectl" and m["operation"] == "Apply"
               for m in stored["metadata"]["managedFields"])
    listed = json.loads(kubectl(sim, "get", "configmaps", "-n", "cli", "-l", "app=demo",
                                "-o", "json").stdout)
    assert [i["metadata"]["name"] for i in listed["items"]] == ["settings"]

    kubectl(sim, "wait", "--for=condition=Available", "deployment/web", "-n", "cli",
            "--timeout=30s")
    kubectl(sim, "wait", "--for=condition=Ready", "pod/solo", "-n", "cli", "--timeout=30s")
    kubectl(sim, "wait", "--for=jsonpath={.status.readyReplicas}=2", "deployment/web",
            "-n", "cli", "--timeout=30s")
    pods = json.loads(kubectl(sim, "get", "pods", "-n", "cli", "-l", "app=web",
                              "-o", "json").stdout)["items"]
    assert len(pods) == 2 and all(p["status"]["phase"] == "Running" for p in pods)

    out = kubectl(sim, "delete", "-f", manifest, "--wait=true", "--timeout=30s").stdout
    assert 'deployment.apps "web" deleted' in out
    gone = kubectl(sim, "get", "deployment", "web", "-n", "cli", check=False)
    assert gone.returncode == 1 and "NotFound" in gone.stderr

    reqs = kubectl_requests(sim)
    assert reqs
    bad = [(r["verb"], r["path"], r["code"]) for r in reqs if r["code"] >= 400 and not (
        r["code"] == 404 and (r["path"] == "/openapi/v2" or r["verb"] == "get"))]
    assert bad == []


def test_kubectl_server_side_apply_conflict(kubesim_module, tmp_path):
    sim = kubesim_module
    sim.call(sim.api.create, "namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                            "metadata": {"name": "cli-ssa"}})
    path = tmp_path / "cm.yaml"
    path.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: cli-ssa}\n"
                    "data: {k: one}\n")
    kubectl(sim, "apply", "--server-side", "-f", str(path))
    path.write_text(path.read_text().replace("one", "two"))
    clash = kubectl(sim, "apply", "--server-side", "--field-manager", "other", "-f", str(path),
                    check=False)
    assert clash.returncode == 1 and "conflict" in clash.stderr.lower(), clash.stderr
    kubectl(sim, "apply", "--server-side", "--field-manager", "other", "--force-conflicts",
            "-f", str(path))
    got = json.loads(kubectl(sim, "get", "cm", "c", "-n", "cli-ssa", "-o", "json").stdout)
    assert got["data"] == {"k": "two"}
    # client-side apply and delete by name work too
    kubectl(sim, "apply", "-f", str(path))
    kubectl(sim, "delete", "configmap", "c", "-n", "cli-ssa")


# ------------------------------------------------------------------------------------------
# ansible-playbook + kubernetes.core
# ------------------------------------------------------------------------------------------

def playbook(sim, name, *extra):
    assert ANSIBLE_PLAYBOOK, "ansible-playbook not found"
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
               K8S_AUTH_KUBECONFIG=sim.kubeconfig, ANSIBLE_NOCOLOR="1",
               ANSIBLE_FORCE_COLOR="0", PATH=BIN + os.pathsep + os.environ.get("PATH", ""))
    env.pop("KUBECONFIG", None)
    proc = subprocess.run([ANSIBLE_PLAYBOOK, os.path.join(PLAYBOOKS, name), *extra],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=240)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    recap = re.search(r"localhost\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+"
                      r"failed=(\d+)", proc.stdout)
    assert recap, proc.stdout
    ok, changed, unreachable, failed = map(int, recap.groups())
    assert unreachable == 0 and failed == 0
    return changed, proc.stdout


@pytest.mark.slow
def test_ansible_kubernetes_core(kubesim):
    sim = kubesim
    changed, _ = playbook(sim, "present.yml", "-e", "ns=ansible-test")
    assert changed == 5  # namespace, configmap, applied configmap, service, deployment
    dep = sim.call(sim.api.get, "deployments.apps", "ansible-test", "web")
    assert any(c["type"] == "Available" and c["status"] == "True"
               for c in dep["status"]["conditions"])
    applied = sim.call(sim.api.get, "configmaps", "ansible-test", "applied")
    assert "kubectl.kubernetes.io/last-applied-configuration" in applied["metadata"]["annotations"]
    svc = sim.call(sim.api.get, "services", "ansible-test", "web")
    assert [m["manager"] for m in svc["metadata"]["managedFields"]] == ["ansible-test"]

    changed, out = playbook(sim, "present.yml", "-e", "ns=ansible-test")
    assert changed == 0, out  # idempotent

    changed, out = playbook(sim, "absent.yml", "-e", "ns=ansible-test")
    assert changed == 2, out  # deployment + configmap loops (the second passes did nothing)
    assert sim.call(sim.api.store.get, "deployments.apps", "ansible-test", "web") is None
    assert sim.call(sim.api.store.get, "configmaps", "ansible-test", "settings") is None

    # every request kubernetes.core made succeeded, apart from the GETs it uses to find
    # out that an object does not exist yet
    reqs = [r for r in sim.requests(20000) if r["user_agent"].startswith("OpenAPI-Generator")]
    assert len(reqs) > 20
    failures = [(r["verb"], r["path"], r["code"]) for r in reqs
                if r["code"] >= 400 and not (r["verb"] == "get" and r["code"] == 404)]
    assert failures == []
    assert {r["verb"] for r in reqs} >= {"get", "list", "create", "patch", "delete"}
