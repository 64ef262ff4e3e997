"""The CRDs on a real kube-apiserver (issue 26.1/26.5): every CRD of config/crd/bases and the
Kueue CRDs vendored in third_party install by server-side apply and become Established (the
real server checks the CEL cost budget and types that kubesim skips), every sample of
config/samples is accepted, and the tables of bad objects that tests/test_crds.py runs
through kubesim's admission are refused by the real server too, with the same message
naming the same field (a differential of kubesim's CRD validation).
"""
from __future__ import annotations

import copy
import json
import pathlib
import time

import pytest
import yaml

from test_crds import INVALID_DEVSERVERS, INVALID_FLAVORS, INVALID_USAGE_RECORDS, usage_record

ROOT = pathlib.Path(__file__).resolve().parents[2]
CRD_FILES = sorted((ROOT / "config" / "crd" / "bases").glob("*.yaml")) + sorted(
    (ROOT / "third_party").glob("kueue-*/kueue.x-k8s.io_*.yaml"))
SAMPLES = sorted(p for p in (ROOT / "config" / "samples").glob("*.yaml") if p.name != "kustomization.yaml")
GROUP, VERSION = "torchdev.io", "v1alpha1"
OURS = [yaml.safe_load(p.read_text()) for p in CRD_FILES if p.parent.name == "bases"]
PLURALS = {c["spec"]["names"]["kind"]: c["spec"]["names"]["plural"] for c in OURS}
CLUSTER_SCOPED = {c["spec"]["names"]["kind"] for c in OURS if c["spec"]["scope"] == "Cluster"}
NAMESPACE = "ml"  # the namespace of test_crds.py's objects


def _apply(cp, path: str, obj: dict) -> tuple[int, dict]:
    return cp.request("PATCH", f"{path}?fieldManager=torchdev-tests&force=true", obj,
                      content_type="application/apply-patch+yaml")


def _established(cp, name: str) -> bool:
    code, crd = cp.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
    conds = {c["type"]: c["status"] for c in (crd.get("status") or {}).get("conditions") or []} if code == 200 else {}
    return conds.get("Established") == "True" and conds.get("NamesAccepted") == "True"


@pytest.fixture(scope="module")
def crds(real_cluster):
    """Apply every CRD; returns {name: (status code, body)} of the applies."""
    cp = real_cluster
    out = {}
    for path in CRD_FILES:
        crd = yaml.safe_load(path.read_text())
        name = crd["metadata"]["name"]
        out[name] = _apply(cp, f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}", crd)
    deadline = time.monotonic() + 60
    for name, (code, _) in out.items():
        while code in (200, 201) and not _established(cp, name) and time.monotonic() < deadline:
            time.sleep(0.2)
    code, body = cp.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                          "metadata": {"name": NAMESPACE}})
    assert code in (201, 409), body
    return out


@pytest.mark.parametrize("path", CRD_FILES, ids=[p.name for p in CRD_FILES])
def test_crd_installs_and_is_established(real_cluster, crds, path):
    name = yaml.safe_load(path.read_text())["metadata"]["name"]
    code, body = crds[name]
    assert code in (200, 201), f"the real API server refused {path.name}: {json.dumps(body)[:4000]}"
    assert _established(real_cluster, name), f"{name} not Established"


def _resource_path(obj: dict, namespace: str | None) -> str:
    group_version = obj["apiVersion"]
    plural = PLURALS[obj["kind"]]
    ns = f"/namespaces/{namespace}" if namespace else ""
    return f"/apis/{group_version}{ns}/{plural}"


def _namespaced(kind: str) -> bool:
    return kind not in CLUSTER_SCOPED


@pytest.mark.parametrize("path", SAMPLES, ids=[p.name for p in SAMPLES])
def test_sample_is_accepted(real_cluster, crds, path):
    obj = yaml.safe_load(path.read_text())
    # a name of its own: another module of this worker's control plane may have created the sample
    obj["metadata"]["name"] = obj["metadata"]["name"][:40] + "-dry-run"
    ns = (obj["metadata"].get("namespace") or NAMESPACE) if _namespaced(obj["kind"]) else None
    if ns and ns != NAMESPACE:
        real_cluster.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                           "metadata": {"name": ns}})
    code, body = real_cluster.request("POST", _resource_path(obj, ns) + "?dryRun=All", obj)
    assert code == 201, f"{path.name}: {code} {json.dumps(body)[:2000]}"


def _flavor_with_name(obj: dict, i: int) -> dict:
    obj = copy.deepcopy(obj)
    obj["metadata"]["name"] = f"{obj['metadata']['name']}-{i}"
    return obj


# (kind, id, object, field the error must name, text the error must contain): the rows of
# tests/test_crds.py's tables, which kubesim's admission refuses the same way.
BAD_OBJECTS = (
    [("DevServer", i, o, f, t) for i, o, f, t in INVALID_DEVSERVERS]
    + [("DevServerFlavor", i, _flavor_with_name(o, n), f, t) for n, (i, o, f, t) in enumerate(INVALID_FLAVORS)]
    + [("UsageRecord", i, m, f, t) for i, m, f, t in INVALID_USAGE_RECORDS]
)


@pytest.mark.parametrize("kind,obj,field,text", [pytest.param(k, o, f, t, id=f"{k}:{i}")
                                                 for k, i, o, f, t in BAD_OBJECTS])
def test_bad_object_is_refused_naming_the_field(real_cluster, crds, kind, obj, field, text):
    if kind == "UsageRecord":
        obj = usage_record(**obj)
    obj = copy.deepcopy(obj)
    ns = (obj["metadata"].get("namespace") or NAMESPACE) if _namespaced(kind) else None
    if ns:
        obj["metadata"]["namespace"] = ns
        real_cluster.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                           "metadata": {"name": ns}})
    code, body = real_cluster.request("POST", _resource_path(obj, ns) + "?dryRun=All", obj)
    assert code == 422, f"accepted or refused otherwise: {code} {json.dumps(body)[:2000]}"
    message = body["message"]
    assert text in message, message
    if field:
        fields = [c.get("field", "") for c in body.get("details", {}).get("causes", [])]
        assert any(f == field or f.startswith(field) for f in fields) or f"{field}:" in message, (fields, message)
