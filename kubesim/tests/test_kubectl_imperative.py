"""The real kubectl's imperative commands against kubesim, as subprocesses.

`kubectl create namespace|configmap|secret|serviceaccount|role|...` go through client-go's
typed clients, which send protobuf (kubesim.protobuf decodes it); each object is read back
with `kubectl get -o json` and checked field by field. `kubectl explain` reads the OpenAPI v3
documents kubesim serves (kubesim.openapi): the project's CRDs, whose expected fields and
descriptions come from parsing config/crd/bases here.
"""
from __future__ import annotations

import base64
import json
import os

import pytest

from kubesim import protobuf
from kubesim.tests.test_cli_tools import kubectl

PROTOBUF = protobuf.MEDIA_TYPE


def get_json(sim, *args) -> dict:
    return json.loads(kubectl(sim, "get", *args, "-o", "json").stdout)


def writes_by_kubectl(sim, resource: str) -> list[tuple[str, str, int]]:
    """(verb, request content type, status code) of kubectl's writes to `resource`."""
    return [(r["verb"], r["content_type"], r["code"]) for r in sim.requests(20000)
            if r["user_agent"].startswith("kubectl") and r["resource"] == resource
            and r["verb"] in ("create", "update", "patch", "delete")]


@pytest.fixture(scope="module")
def sim(kubesim_module):
    kubectl(kubesim_module, "create", "namespace", "imp")
    return kubesim_module


def test_create_namespace(sim):
    sim.reset_metrics()
    out = kubectl(sim, "create", "namespace", "imp-ns", "--save-config").stdout
    assert out.strip() == "namespace/imp-ns created"
    assert writes_by_kubectl(sim, "namespaces") == [("create", PROTOBUF, 201)]
    ns = get_json(sim, "namespace", "imp-ns")
    assert ns["apiVersion"] == "v1" and ns["kind"] == "Namespace"
    assert ns["metadata"]["name"] == "imp-ns" and ns["metadata"]["uid"]
    assert "namespace" not in ns["metadata"]
    applied = json.loads(
        ns["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"])
    assert applied == {"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": "imp-ns"},
                       "spec": {}, "status": {}}
    assert ns["status"]["phase"] == "Active"


def test_create_configmap_from_literals_and_files(sim, tmp_path):
    (tmp_path / "app.conf").write_text("mode = fast\nlevel = 3\n")
    (tmp_path / "blob.bin").write_bytes(bytes(range(256)))
    sim.reset_metrics()
    kubectl(sim, "create", "configmap", "settings", "-n", "imp",
            "--from-literal=color=blue", "--from-literal=empty=",
            "--from-literal=greeting=grüß dich ✓",
            f"--from-file={tmp_path / 'app.conf'}", f"--from-file=raw={tmp_path / 'blob.bin'}")
    assert writes_by_kubectl(sim, "configmaps") == [("create", PROTOBUF, 201)]
    cm = get_json(sim, "configmap", "settings", "-n", "imp")
    assert cm["metadata"]["name"] == "settings" and cm["metadata"]["namespace"] == "imp"
    assert cm["data"] == {"color": "blue", "empty": "", "greeting": "grüß dich ✓",
                          "app.conf": "mode = fast\nlevel = 3\n"}
    assert base64.b64decode(cm["binaryData"]["raw"]) == bytes(range(256))
    assert "immutable" not in cm


def test_create_secret_generic(sim, tmp_path):
    values = {"user": "admin", "password": "pä55 wörd ✓ 🔑", "blank": ""}
    (tmp_path / "id_rsa").write_bytes(b"\x00\x01binary\xff")
    sim.reset_metrics()
    kubectl(sim, "create", "secret", "generic", "creds", "-n", "imp",
            *(f"--from-literal={k}={v}" for k, v in values.items()),
            f"--from-file={tmp_path / 'id_rsa'}")
    kubectl(sim, "create", "secret", "generic", "typed", "-n", "imp",
            "--type=example.com/custom", "--from-literal=k=v")
    assert writes_by_kubectl(sim, "secrets") == [("create", PROTOBUF, 201)] * 2
    secret = get_json(sim, "secret", "creds", "-n", "imp")
    decoded = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    assert decoded == {**{k: v.encode() for k, v in values.items()},
                       "id_rsa": b"\x00\x01binary\xff"}
    assert secret["type"] == "Opaque"  # defaulted by the server: kubectl sent type ""
    assert "stringData" not in secret
    typed = get_json(sim, "secret", "typed", "-n", "imp")
    assert typed["type"] == "example.com/custom"
    assert base64.b64decode(typed["data"]["k"]) == b"v"


def test_create_serviceaccount(sim):
    sim.reset_metrics()
    kubectl(sim, "create", "serviceaccount", "builder", "-n", "imp")
    assert writes_by_kubectl(sim, "serviceaccounts") == [("create", PROTOBUF, 201)]
    sa = get_json(sim, "serviceaccount", "builder", "-n", "imp")
    assert sa["kind"] == "ServiceAccount"
    assert sa["metadata"]["name"] == "builder" and sa["metadata"]["namespace"] == "imp"
    assert "secrets" not in sa and "automountServiceAccountToken" not in sa


def test_create_rbac(sim):
    kubectl(sim, "create", "role", "reader", "-n", "imp", "--verb=get,list",
            "--resource=pods,configmaps", "--resource-name=settings")
    kubectl(sim, "create", "rolebinding", "reader", "-n", "imp", "--role=reader",
            "--user=alice", "--serviceaccount=imp:builder")
    kubectl(sim, "create", "clusterrole", "aggregate", "--aggregation-rule=team=ml")
    kubectl(sim, "create", "clusterrolebinding", "aggregate", "--clusterrole=aggregate",
            "--group=ml-team")
    role = get_json(sim, "role", "reader", "-n", "imp")
    assert role["rules"] == [{"verbs": ["get", "list"], "apiGroups": [""],
                              "resources": ["pods", "configmaps"],
                              "resourceNames": ["settings"]}]
    binding = get_json(sim, "rolebinding", "reader", "-n", "imp")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": "reader"}
    assert binding["subjects"] == [
        {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice"},
        {"kind": "ServiceAccount", "name": "builder", "namespace": "imp"}]
    cluster_role = get_json(sim, "clusterrole", "aggregate")
    assert cluster_role["aggregationRule"] == {
        "clusterRoleSelectors": [{"matchLabels": {"team": "ml"}}]}
    cluster_binding = get_json(sim, "clusterrolebinding", "aggregate")
    assert cluster_binding["subjects"] == [
        {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "ml-team"}]


def test_create_of_a_kind_without_protobuf_support_says_so(sim):
    proc = kubectl(sim, "create", "deployment", "web", "-n", "imp", "--image=nginx",
                   check=False)
    assert proc.returncode == 1
    assert "kubesim decodes protobuf only for" in proc.stderr
    assert "Deployment apps/v1" in proc.stderr
