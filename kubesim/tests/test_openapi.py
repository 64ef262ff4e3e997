"""kubesim.openapi and /openapi/v3: documents per group-version with component schemas for
built-in kinds (kubernetes-validate's definitions) and CRDs, paths with the GVK of each
operation, and hashes that change only when a document does."""
from __future__ import annotations

import copy
import json

import pytest
import urllib3

from kubesim import openapi
from kubesim.tests.conftest import WIDGET_CRD, WIDGET_GROUP
from kubesim.testing import KubeSim

CRD_KEY = "customresourcedefinitions.apiextensions.k8s.io"
WIDGET = "io.kubesim.tests.v1.Widget"


@pytest.mark.parametrize("group,version,kind,name", [
    ("torchdev.io", "v1alpha1", "DevServer", "io.torchdev.v1alpha1.DevServer"),
    ("kueue.x-k8s.io", "v1beta2", "ClusterQueue", "io.x-k8s.kueue.v1beta2.ClusterQueue"),
    ("tests.kubesim.io", "v1", "WidgetList", "io.kubesim.tests.v1.WidgetList"),
])
def test_rest_friendly_name(group, version, kind, name):
    assert openapi.rest_friendly_name(group, version, kind) == name


@pytest.mark.parametrize("schema,expected", [
    ({"type": ["string", "null"]}, {"type": "string"}),
    ({"type": "array", "items": {"type": ["integer", "null"], "format": "int32"}},
     {"type": "array", "items": {"type": "integer", "format": "int32"}}),
    ({"$ref": "#/$defs/io.k8s.api.core.v1.PodSpec"},
     {"$ref": "#/components/schemas/io.k8s.api.core.v1.PodSpec"}),
    ({"$ref": "#/$defs/io.k8s.api.core.v1.PodSpec", "description": "the pod"},
     {"allOf": [{"$ref": "#/components/schemas/io.k8s.api.core.v1.PodSpec"}],
      "description": "the pod"}),
    ({"properties": {"$ref": {"type": ["string", "null"]}}},  # JSONSchemaProps has a "$ref"
     {"properties": {"$ref": {"type": "string"}}}),
    ({"oneOf": [{"type": ["string", "null"]}, {"type": ["integer", "null"]}]},
     {"oneOf": [{"type": "string"}, {"type": "integer"}]}),
])
def test_convert_json_schema_to_openapi(schema, expected):
    assert openapi._convert(schema) == expected


def _all_refs(node):
    return set(openapi._refs(node))


@pytest.fixture(scope="module")
def docs():
    sim = KubeSim(nodes="").start()
    try:
        sim.call(sim.api.create, CRD_KEY, copy.deepcopy(WIDGET_CRD))
        yield {path: json.loads(data)
               for path, (data, _) in sim.call(sim.cluster.server.openapi.documents).items()}
    finally:
        sim.stop()


def test_every_reference_resolves_within_its_document(docs):
    assert {"api/v1", "apis/apps/v1", f"apis/{WIDGET_GROUP}/v1"} <= set(docs)
    for path, doc in docs.items():
        schemas = doc["components"]["schemas"]
        assert _all_refs(doc) <= set(schemas), path
        assert "$defs" not in json.dumps(doc), path


def test_builtin_kind_schemas(docs):
    schemas = docs["api/v1"]["components"]["schemas"]
    pod = schemas["io.k8s.api.core.v1.Pod"]
    assert pod["x-kubernetes-group-version-kind"] == [
        {"group": "", "kind": "Pod", "version": "v1"}]
    assert pod["properties"]["apiVersion"] == {
        "type": "string", "description": pod["properties"]["apiVersion"]["description"]}
    assert pod["properties"]["metadata"]["allOf"] == [
        {"$ref": f"#/components/schemas/{openapi.OBJECT_META}"}]
    assert schemas["io.k8s.api.core.v1.Container"]["properties"]["name"]["type"] == "string"
    assert "io.k8s.api.apps.v1.Deployment" in docs["apis/apps/v1"]["components"]["schemas"]
    assert "io.k8s.api.apps.v1.Deployment" not in schemas


def test_crd_kind_schema(docs):
    schemas = docs[f"apis/{WIDGET_GROUP}/v1"]["components"]["schemas"]
    widget = schemas[WIDGET]
    crd_schema = WIDGET_CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert widget["properties"]["spec"] == crd_schema["properties"]["spec"]
    assert widget["x-kubernetes-group-version-kind"] == [
        {"group": WIDGET_GROUP, "version": "v1", "kind": "Widget"}]
    assert widget["properties"]["metadata"] == {
        "allOf": [{"$ref": f"#/components/schemas/{openapi.OBJECT_META}"}],
        "description": openapi.OBJECT_META_DOC}
    assert widget["properties"]["kind"]["type"] == "string"
    assert "enum" not in widget["properties"]["kind"]
    listing = schemas[f"{WIDGET}List"]
    assert listing["properties"]["items"]["items"] == {"$ref": f"#/components/schemas/{WIDGET}"}
    assert listing["x-kubernetes-group-version-kind"][0]["kind"] == "WidgetList"


def test_crd_paths_carry_the_gvk_and_field_validation(docs):
    paths = docs[f"apis/{WIDGET_GROUP}/v1"]["paths"]
    base = f"/apis/{WIDGET_GROUP}/v1/namespaces/{{namespace}}/widgets"
    assert set(paths) == {base, f"{base}/{{name}}", f"{base}/{{name}}/status"}
    gvk = {"group": WIDGET_GROUP, "version": "v1", "kind": "Widget"}
    for path in (f"{base}/{{name}}", f"{base}/{{name}}/status"):
        patch = paths[path]["patch"]
        assert patch["x-kubernetes-group-version-kind"] == gvk
        assert "fieldValidation" in [p["name"] for p in patch["parameters"]]
        # no request body: kubectl's client-side apply keeps its compiled-in patch metadata
        assert "requestBody" not in patch
    assert paths[base]["get"]["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": f"#/components/schemas/{WIDGET}List"}
    assert paths[base]["post"]["operationId"] == "createNamespacedWidget"


# -- over HTTP: hashes, redirects, caching ---------------------------------------------------------
class Client:
    def __init__(self, sim):
        self.base = sim.url
        self.pool = urllib3.PoolManager(retries=False, timeout=10)

    def get(self, url: str):
        return self.pool.request("GET", self.base + url, redirect=False)

    def root(self) -> dict[str, str]:
        paths = json.loads(self.get("/openapi/v3").data)["paths"]
        return {path: entry["serverRelativeURL"] for path, entry in paths.items()}


def test_hashes_follow_crd_changes(kubesim):
    sim, http = kubesim, Client(kubesim)
    before = http.root()
    assert f"apis/{WIDGET_GROUP}/v1" not in before
    assert http.root() == before

    sim.call(sim.api.create, CRD_KEY, copy.deepcopy(WIDGET_CRD))
    with_crd = http.root()
    url = with_crd.pop(f"apis/{WIDGET_GROUP}/v1")
    assert with_crd == before  # the other documents did not change

    resp = http.get(url)
    assert resp.status == 200
    assert resp.headers["Cache-Control"] == "public, immutable"
    assert resp.headers["ETag"] == f'"{url.rpartition("hash=")[2]}"'
    assert WIDGET in json.loads(resp.data)["components"]["schemas"]

    crd = sim.call(sim.api.get, CRD_KEY, "", WIDGET_CRD["metadata"]["name"])
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["properties"]["shape"] = {"type": "string", "description": "the widget's shape"}
    sim.call(sim.api.update, CRD_KEY, crd)
    changed = http.root()[f"apis/{WIDGET_GROUP}/v1"]
    assert changed != url
    stale = http.get(url)
    assert stale.status == 301 and stale.headers["Location"] == changed
    doc = json.loads(http.get(changed).data)
    assert doc["components"]["schemas"][WIDGET]["properties"]["spec"]["properties"]["shape"] == {
        "type": "string", "description": "the widget's shape"}

    sim.call(sim.api.delete, CRD_KEY, "", WIDGET_CRD["metadata"]["name"])
    assert http.root() == before
    assert http.get(changed).status == 404


def test_documents_are_built_once_per_change(kubesim, monkeypatch):
    sim, http = kubesim, Client(kubesim)
    sim.call(sim.api.create, CRD_KEY, copy.deepcopy(WIDGET_CRD))
    http.root()  # builds every document
    built = []
    encode = openapi.encode
    monkeypatch.setattr(openapi, "encode", lambda doc: built.append(doc) or encode(doc))
    urls = http.root()
    for url in urls.values():
        assert http.get(url).status == 200
    assert built == []
    sim.call(sim.api.create, "namespaces",
             {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "unrelated"}})
    http.root()
    assert built == []  # objects other than CRDs do not touch the documents


def test_unknown_group_version_is_404(kubesim):
    assert Client(kubesim).get("/openapi/v3/apis/nope.example.com/v1").status == 404
