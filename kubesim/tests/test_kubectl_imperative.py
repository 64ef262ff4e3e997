"""The real kubectl's imperative commands against kubesim, as subprocesses.

`kubectl create namespace|configmap|secret|serviceaccount|role|...` go through client-go's
typed clients, which send protobuf (kubesim.protobuf decodes it); each object is read back
with `kubectl get -o json` and checked field by field. `kubectl explain` reads the OpenAPI v3
documents kubesim serves (kubesim.openapi): the project's CRDs, whose expected fields and
descriptions come from parsing config/crd/bases here.
"""
from __future__ import annotations

import base64
import glob
import json
import os
import re

import pytest
import yaml

from kubesim import protobuf
from kubesim.tests.test_cli_tools import ROOT, kubectl

PROTOBUF = protobuf.MEDIA_TYPE
CRD_FILES = sorted(glob.glob(os.path.join(ROOT, "config", "crd", "bases", "*.yaml")))


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


# -- kubectl explain on the project's CRDs -------------------------------------------------------
def crd_schema(resource: str) -> tuple[dict, dict]:
    """(CRD, openAPIV3Schema of its storage version) for a plural or short name, from the YAML."""
    for path in CRD_FILES:
        with open(path) as fh:
            for crd in yaml.safe_load_all(fh):
                names = crd["spec"]["names"]
                if resource in (names["plural"], *names.get("shortNames", ())):
                    version = next(v for v in crd["spec"]["versions"] if v["storage"])
                    return crd, version["schema"]["openAPIV3Schema"]
    raise AssertionError(f"no CRD for {resource} in {CRD_FILES}")


def subschema(schema: dict, path: list[str]) -> dict:
    for name in path:
        schema = schema["properties"][name]
        schema = schema.get("items") or schema
    return schema


def words(text: str) -> str:
    """Text with every run of whitespace as one space (kubectl wraps descriptions)."""
    return " ".join(text.split())


@pytest.fixture(scope="module")
def crds(sim):
    assert CRD_FILES, "no CRDs in config/crd/bases"
    for path in CRD_FILES:
        kubectl(sim, "apply", "--server-side", "-f", path)
    for path in CRD_FILES:
        with open(path) as fh:
            name = yaml.safe_load(fh)["metadata"]["name"]
        kubectl(sim, "wait", "--for=condition=Established", f"crd/{name}", "--timeout=30s")
    return sim


@pytest.mark.parametrize("target", ["devservers.spec", "devservers.spec.lifecycle",
                                    "devservers.spec.distributed", "devserverflavors.spec.resources",
                                    "dsf.spec.resources"])
def test_explain_crd_fields(crds, target):
    resource, *path = target.split(".")
    crd, schema = crd_schema(resource)
    field = subschema(schema, path)
    out = kubectl(crds, "explain", target).stdout
    version = next(v["name"] for v in crd["spec"]["versions"] if v["storage"])
    assert out.startswith(f"GROUP:      {crd['spec']['group']}\n"
                          f"KIND:       {crd['spec']['names']['kind']}\n"
                          f"VERSION:    {version}\n"), out
    assert f"FIELD: {path[-1]} <Object>" in out
    assert words(field["description"]) in words(out)
    assert field["properties"]
    for name, prop in field["properties"].items():
        line = re.search(rf"^  {re.escape(name)}\t<[^>]+>( -required-)?$", out, re.M)
        assert line, (name, out)
        assert bool(line.group(1)) == (name in field.get("required", ())), name
        assert words(prop.get("description", "<no description>")) in words(out), name


def test_explain_crd_kind_and_metadata(crds):
    crd, schema = crd_schema("devservers")
    out = kubectl(crds, "explain", "devservers").stdout
    assert words(schema["description"]) in words(out)
    for name in ("apiVersion", "kind", "spec", "status"):
        assert re.search(rf"^  {name}\t<", out, re.M), name
    assert re.search(r"^  metadata\t<ObjectMeta>$", out, re.M)
    meta = kubectl(crds, "explain", "devservers.metadata.labels").stdout
    assert "FIELD: labels <map[string]string>" in meta


def test_explain_recursive(crds):
    _, schema = crd_schema("devservers")
    out = kubectl(crds, "explain", "devservers.spec", "--recursive").stdout

    def names(node: dict, depth: int):
        for name, prop in (node.get("properties") or {}).items():
            yield depth, name
            yield from names(prop.get("items") or prop, depth + 1)

    for depth, name in names(schema["properties"]["spec"], 1):
        assert re.search(rf"^{'  ' * depth}{re.escape(name)}\t<", out, re.M), name


def test_explain_builtin_kind(sim):
    out = kubectl(sim, "explain", "pods.spec.containers.resources").stdout
    assert out.startswith("KIND:       Pod\nVERSION:    v1\n"), out
    assert "FIELD: resources <ResourceRequirements>" in out
    assert re.search(r"^  limits\t<map\[string\]Quantity>$", out, re.M)


def test_apply_after_explain_still_validates_strictly(crds, tmp_path):
    """kubectl apply finds fieldValidation on the CRD's PATCH operation and sends Strict:
    an unknown field is an error instead of being pruned."""
    path = tmp_path / "flavor.yaml"
    path.write_text("apiVersion: torchdev.io/v1alpha1\nkind: DevServerFlavor\n"
                    "metadata: {name: strict-check}\nspec: {bogusField: 1}\n")
    proc = kubectl(crds, "apply", "-f", str(path), check=False)
    assert proc.returncode == 1
    assert 'strict decoding error: unknown field "spec.bogusField"' in proc.stderr
