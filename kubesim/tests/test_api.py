"""The Kubernetes API surface of kubesim, through the official Python client and raw HTTP.

Covers discovery (incl. CRD-published kinds appearing/disappearing for DynamicClient), the
verbs on namespaced and cluster-scoped resources, selectors and pagination, object
semantics (uid, resourceVersion, generation, timestamps, Status errors, status and scale
subresources, namespaces, finalizers, ownerReference GC), patches (merge, JSON, strategic,
server-side apply), validation of built-ins and CRs (defaults, pruning, CEL), and bad input
(including a small fuzz loop that must never produce a 500).
"""
from __future__ import annotations

import json
import random
import re
import tempfile

import pytest
import yaml
from kubernetes import client
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import ResourceNotFoundError


from .conftest import (WIDGET_CRD, WIDGET_GROUP, Http, api_client, assert_status, make_namespace,
                       status_of, widget)

RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


def cm(name: str, data: dict | None = None, labels: dict | None = None) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "labels": labels or {}}, "data": data or {"k": "v"}}


def pod(name: str, labels: dict | None = None, node: str | None = None, **meta) -> dict:
    spec = {"containers": [{"name": "main", "image": "busybox"}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": labels or {}, **meta}, "spec": spec}


def deployment(name: str, replicas: int = 1, image: str = "nginx:1") -> dict:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "labels": labels},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "app", "image": image}]}}}}


def statefulset(name: str, replicas: int = 1) -> dict:
    d = deployment(name, replicas)
    d["kind"] = "StatefulSet"
    d["spec"]["serviceName"] = name
    return d


# ------------------------------------------------------------------------------------------
# discovery
# ------------------------------------------------------------------------------------------

def test_version_and_api_roots(k8s):
    info = client.VersionApi(k8s).get_code()
    assert info.major == "1" and info.git_version.startswith("v1.")
    assert client.CoreApi(k8s).get_api_versions().versions == ["v1"]
    groups = {g.name: g for g in client.ApisApi(k8s).get_api_versions().groups}
    for name in ("apps", "batch", "rbac.authorization.k8s.io", "apiextensions.k8s.io"):
        assert name in groups
    assert groups["apps"].preferred_version.group_version == "apps/v1"
    assert client.AppsApi(k8s).get_api_group().name == "apps"


@pytest.mark.parametrize("path,resource,namespaced,kind", [
    ("/api/v1", "pods", True, "Pod"),
    ("/api/v1", "namespaces", False, "Namespace"),
    ("/api/v1", "nodes", False, "Node"),
    ("/apis/apps/v1", "deployments", True, "Deployment"),
    ("/apis/apps/v1", "statefulsets/scale", True, "Scale"),
    ("/apis/apps/v1", "deployments/status", True, "Deployment"),
    ("/apis/batch/v1", "jobs", True, "Job"),
    ("/apis/rbac.authorization.k8s.io/v1", "clusterroles", False, "ClusterRole"),
])
def test_resource_discovery(http, path, resource, namespaced, kind):
    code, data = http.get(path)
    assert code == 200 and data["kind"] == "APIResourceList"
    found = {r["name"]: r for r in data["resources"]}
    assert found[resource]["namespaced"] is namespaced
    assert found[resource]["kind"] == kind


def test_openapi_v3_advertises_server_side_field_validation(http):
    """kubectl validates through the server (fieldValidation=Strict) when the PATCH
    operation of a kind lists that query parameter in /openapi/v3."""
    code, root = http.get("/openapi/v3")
    assert code == 200 and {"api/v1", "apis/apps/v1"} <= set(root["paths"])
    code, doc = http.get(root["paths"]["apis/apps/v1"]["serverRelativeURL"])
    assert code == 200
    op = doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"]
    assert op["x-kubernetes-group-version-kind"] == {"group": "apps", "version": "v1",
                                                     "kind": "Deployment"}
    assert {"name": "fieldValidation", "in": "query"}.items() <= op["parameters"][2].items()
    assert http.get("/openapi/v3/apis/nope/v1")[0] == 404


def test_crd_kind_discoverable_then_gone(k8s, http):
    ext = client.ApiextensionsV1Api(k8s)
    crd = json.loads(json.dumps(WIDGET_CRD))
    crd["metadata"]["name"] = "gadgets.disco.kubesim.io"
    crd["spec"]["group"] = "disco.kubesim.io"
    crd["spec"]["names"] = {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"}
    ext.create_custom_resource_definition(crd)

    code, groups = http.get("/apis")
    assert "disco.kubesim.io" in {g["name"] for g in groups["groups"]}
    with tempfile.NamedTemporaryFile(suffix=".json") as cache:
        dyn = DynamicClient(k8s, cache_file=cache.name)
        res = dyn.resources.get(api_version="disco.kubesim.io/v1", kind="Gadget")
        assert res.namespaced and res.name == "gadgets"
        ns = make_namespace_via(k8s)
        created = res.create(body={"apiVersion": "disco.kubesim.io/v1", "kind": "Gadget",
                                   "metadata": {"name": "g1"}, "spec": {}}, namespace=ns)
        assert created.spec.size == 1  # schema default

    ext.delete_custom_resource_definition("gadgets.disco.kubesim.io")
    code, groups = http.get("/apis")
    assert "disco.kubesim.io" not in {g["name"] for g in groups["groups"]}
    assert http.get("/apis/disco.kubesim.io/v1")[0] == 404
    assert http.get(f"/apis/disco.kubesim.io/v1/namespaces/{ns}/gadgets")[0] == 404
    with tempfile.NamedTemporaryFile(suffix=".json") as cache:
        dyn = DynamicClient(k8s, cache_file=cache.name)
        with pytest.raises(ResourceNotFoundError):
            dyn.resources.get(api_version="disco.kubesim.io/v1", kind="Gadget")


def test_crd_deletion_waits_for_its_custom_resources_finalizers(k8s, http):
    """Like kube-apiserver: deleting a CRD deletes its custom resources, each honouring its
    finalizers, and the CRD stays (Terminating, finalizer customresourcecleanup) until the
    last has gone; no instance can be created meanwhile."""
    ext, co = client.ApiextensionsV1Api(k8s), client.CustomObjectsApi(k8s)
    crd = json.loads(json.dumps(WIDGET_CRD))
    group = "held.kubesim.io"
    crd["metadata"]["name"] = f"gizmos.{group}"
    crd["spec"]["group"] = group
    crd["spec"]["names"] = {"plural": "gizmos", "singular": "gizmo", "kind": "Gizmo"}
    ext.create_custom_resource_definition(crd)
    ns = make_namespace_via(k8s)

    def gizmo(name, **meta):
        return {"apiVersion": f"{group}/v1", "kind": "Gizmo", "metadata": {"name": name, **meta}, "spec": {}}

    co.create_namespaced_custom_object(group, "v1", ns, "gizmos", gizmo("held", finalizers=["example.com/hold"]))
    co.create_namespaced_custom_object(group, "v1", ns, "gizmos", gizmo("free"))

    ext.delete_custom_resource_definition(crd["metadata"]["name"])
    terminating = ext.read_custom_resource_definition(crd["metadata"]["name"])
    assert terminating.metadata.deletion_timestamp is not None
    assert terminating.metadata.finalizers == ["customresourcecleanup.apiextensions.k8s.io"]
    assert [(c.type, c.status, c.reason) for c in terminating.status.conditions if c.type == "Terminating"] == \
        [("Terminating", "True", "InstanceDeletionInProgress")]
    items = co.list_namespaced_custom_object(group, "v1", ns, "gizmos")["items"]
    assert [(i["metadata"]["name"], bool(i["metadata"].get("deletionTimestamp"))) for i in items] == [("held", True)]
    with pytest.raises(client.ApiException) as exc:
        co.create_namespaced_custom_object(group, "v1", ns, "gizmos", gizmo("late"))
    assert exc.value.status == 405
    assert "terminating" in status_of(exc.value)["message"]

    co.patch_namespaced_custom_object(group, "v1", ns, "gizmos", "held", {"metadata": {"finalizers": None}},
                                      _content_type="application/merge-patch+json")
    with pytest.raises(client.ApiException) as exc:
        ext.read_custom_resource_definition(crd["metadata"]["name"])
    assert exc.value.status == 404
    assert http.get(f"/apis/{group}/v1/namespaces/{ns}/gizmos")[0] == 404


def make_namespace_via(k8s) -> str:
    ns = client.CoreV1Api(k8s).create_namespace(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"generateName": "t-"}})
    return ns.metadata.name


# ------------------------------------------------------------------------------------------
# verbs on namespaced and cluster-scoped resources (DynamicClient, table-driven)
# ------------------------------------------------------------------------------------------

def _configmap(name):
    return cm(name)


def _clusterrole(name):
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}


def _priorityclass(name):
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": name}, "value": 100}


def _secret(name):
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
            "stringData": {"k": "v"}, "type": "Opaque"}


@pytest.mark.parametrize("api_version,kind,make,namespaced,mutate", [
    ("v1", "ConfigMap", _configmap, True, lambda o: o["data"].update(k="v2")),
    ("v1", "Secret", _secret, True, lambda o: o.setdefault("data", {}).update(x="eA==")),
    ("rbac.authorization.k8s.io/v1", "ClusterRole", _clusterrole, False,
     lambda o: o["rules"][0]["verbs"].append("list")),
    ("scheduling.k8s.io/v1", "PriorityClass", _priorityclass, False,
     lambda o: o.update(description="changed")),
], ids=["configmap", "secret", "clusterrole", "priorityclass"])
def test_crud_verbs(k8s, dyn, ns, api_version, kind, make, namespaced, mutate):
    res = dyn.resources.get(api_version=api_version, kind=kind)
    where = {"namespace": ns} if namespaced else {}
    prefix = f"{kind.lower()}-{ns}"
    names = [f"{prefix}-a", f"{prefix}-b", f"{prefix}-c"]
    for n in names:
        body = make(n)
        body["metadata"]["labels"] = {"suite": prefix}
        created = res.create(body=body, **where).to_dict()
        assert created["metadata"]["name"] == n
        assert bool(created["metadata"].get("namespace")) is namespaced

    got = res.get(name=names[0], **where).to_dict()
    listed = res.get(label_selector=f"suite={prefix}", **where).to_dict()
    assert sorted(i["metadata"]["name"] for i in listed["items"]) == names
    assert listed["kind"] == f"{kind}List" and listed["metadata"]["resourceVersion"]

    mutate(got)  # update (PUT)
    replaced = res.replace(body=got, **where).to_dict()
    assert int(replaced["metadata"]["resourceVersion"]) > int(got["metadata"]["resourceVersion"])

    patched = res.patch(name=names[0], body={"metadata": {"annotations": {"a": "1"}}},
                        content_type="application/merge-patch+json", **where).to_dict()
    assert patched["metadata"]["annotations"] == {"a": "1"}

    res.delete(name=names[0], **where)
    with pytest.raises(client.ApiException) as e:
        res.get(name=names[0], **where)
    assert e.value.status == 404

    # deletecollection by label selector
    res.delete(label_selector=f"suite={prefix}", **where)
    assert res.get(label_selector=f"suite={prefix}", **where).to_dict()["items"] == []


def test_typed_client_verbs_and_deletecollection(k8s, ns):
    v1 = client.CoreV1Api(k8s)
    for i in range(3):
        v1.create_namespaced_config_map(ns, cm(f"c{i}", labels={"grp": "x" if i else "y"}))
    v1.delete_collection_namespaced_config_map(ns, label_selector="grp=x")
    assert [c.metadata.name for c in v1.list_namespaced_config_map(ns).items] == ["c0"]
    body = v1.read_namespaced_config_map("c0", ns)
    body.data = {"new": "data"}
    assert v1.replace_namespaced_config_map("c0", ns, body).data == {"new": "data"}
    # list across all namespaces includes ours
    assert any(c.metadata.namespace == ns for c in v1.list_config_map_for_all_namespaces().items)


def test_dry_run_does_not_persist(k8s, ns):
    v1 = client.CoreV1Api(k8s)
    out = v1.create_namespaced_config_map(ns, cm("dry"), dry_run="All")
    assert out.metadata.uid
    with pytest.raises(client.ApiException) as e:
        v1.read_namespaced_config_map("dry", ns)
    assert e.value.status == 404


# ------------------------------------------------------------------------------------------
# selectors and pagination
# ------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def labelled(kubesim_module):
    """Pods with labels/phases/nodes, created in-process (no controllers touch them:
    they are already bound to a node that does not exist and get their phase directly)."""
    sim = kubesim_module
    ns = make_namespace(sim, "sel")
    specs = [
        ("p1", {"app": "web", "tier": "front"}, "node-a", "Running"),
        ("p2", {"app": "web", "tier": "back"}, "node-b", "Pending"),
        ("p3", {"app": "db", "tier": "back"}, "node-a", "Running"),
        ("p4", {"app": "cache"}, "node-b", "Succeeded"),
        ("p5", {}, "node-c", "Failed"),
    ]
    for name, labels, node, phase in specs:
        p = pod(name, labels, node, annotations={"kubesim.io/ready-after": "3600"})
        created = sim.call(sim.api.create, "pods", p, ns)
        created["status"] = {"phase": phase}
        sim.call(sim.api.update, "pods", created, ns, "status")
    return ns


@pytest.mark.parametrize("selector,expected", [
    ("app=web", ["p1", "p2"]),
    ("app==web", ["p1", "p2"]),
    ("app!=web", ["p3", "p4", "p5"]),
    ("app in (web,db)", ["p1", "p2", "p3"]),
    ("app notin (web,db)", ["p4", "p5"]),
    ("tier", ["p1", "p2", "p3"]),
    ("!tier", ["p4", "p5"]),
    ("app=web,tier=back", ["p2"]),
    ("tier,app notin (db)", ["p1", "p2"]),
])
def test_label_selectors(k8s, labelled, selector, expected):
    items = client.CoreV1Api(k8s).list_namespaced_pod(labelled, label_selector=selector).items
    assert sorted(p.metadata.name for p in items) == expected


@pytest.mark.parametrize("selector,expected", [
    ("metadata.name=p3", ["p3"]),
    ("metadata.name!=p3", ["p1", "p2", "p4", "p5"]),
    ("status.phase=Running", ["p1", "p3"]),
    ("status.phase!=Running", ["p2", "p4", "p5"]),
    ("spec.nodeName=node-b", ["p2", "p4"]),
    ("spec.nodeName=node-a,status.phase=Running", ["p1", "p3"]),
])
def test_field_selectors(k8s, labelled, selector, expected):
    items = client.CoreV1Api(k8s).list_namespaced_pod(labelled, field_selector=selector).items
    assert sorted(p.metadata.name for p in items) == expected


def test_field_selector_metadata_namespace_across_namespaces(k8s, labelled):
    items = client.CoreV1Api(k8s).list_pod_for_all_namespaces(
        field_selector=f"metadata.namespace={labelled}").items
    assert sorted(p.metadata.name for p in items) == ["p1", "p2", "p3", "p4", "p5"]


@pytest.mark.parametrize("kind,selector,message", [
    ("label", "app in (web", "unable to parse requirement"),
    ("field", "spec.unknown=x", "field label not supported: spec.unknown"),
])
def test_bad_selectors_are_400(http, labelled, kind, selector, message):
    code, data = http.get(f"/api/v1/namespaces/{labelled}/pods?{kind}Selector={selector}")
    assert code == 400
    assert_status(data, 400, "BadRequest", message)


def test_limit_continue_pagination(k8s, ns):
    v1 = client.CoreV1Api(k8s)
    for i in range(7):
        v1.create_namespaced_config_map(ns, cm(f"page-{i}"))
    seen, token, pages = [], None, 0
    while True:
        page = v1.list_namespaced_config_map(ns, limit=3, _continue=token)
        pages += 1
        assert len(page.items) <= 3
        seen += [c.metadata.name for c in page.items]
        token = page.metadata._continue
        if not token:
            break
        assert page.metadata.remaining_item_count == 7 - len(seen)
    assert pages == 3
    assert seen == [f"page-{i}" for i in range(7)]
    with pytest.raises(client.ApiException) as e:
        v1.list_namespaced_config_map(ns, limit=3, _continue="garbage!!")
    assert e.value.status == 400


# ------------------------------------------------------------------------------------------
# object semantics
# ------------------------------------------------------------------------------------------

def test_uid_resource_version_and_timestamps(k8s, http, ns):
    v1 = client.CoreV1Api(k8s)
    a = v1.create_namespaced_config_map(ns, cm("sem-a"))
    b = v1.create_namespaced_secret(ns, _secret("sem-b"))
    c = v1.create_namespaced_config_map(ns, cm("sem-c"))
    assert len({a.metadata.uid, b.metadata.uid, c.metadata.uid}) == 3
    rvs = [int(o.metadata.resource_version) for o in (a, b, c)]
    assert rvs == sorted(rvs) and len(set(rvs)) == 3  # one global, monotonic counter
    a.data = {"x": "y"}
    a2 = v1.replace_namespaced_config_map("sem-a", ns, a)
    assert int(a2.metadata.resource_version) > rvs[-1]
    assert a2.metadata.uid == a.metadata.uid
    assert a2.metadata.creation_timestamp == a.metadata.creation_timestamp
    code, raw = http.get(f"/api/v1/namespaces/{ns}/configmaps/sem-a")
    assert RFC3339.match(raw["metadata"]["creationTimestamp"])


def test_generation_bumped_only_on_spec_change(quiet_sim):
    ns = make_namespace(quiet_sim)
    apps = client.AppsV1Api(api_client(quiet_sim))
    d = apps.create_namespaced_deployment(ns, deployment("gen"))
    assert d.metadata.generation == 1
    # metadata-only change: no bump
    d = apps.patch_namespaced_deployment("gen", ns, {"metadata": {"labels": {"x": "y"}}})
    assert d.metadata.generation == 1
    # status change through /status: no bump
    st = apps.patch_namespaced_deployment_status(
        "gen", ns, {"status": {"observedGeneration": 1, "replicas": 0}},
        _content_type="application/merge-patch+json")
    assert st.metadata.generation == 1
    # spec change: bump
    d = apps.patch_namespaced_deployment("gen", ns, {"spec": {"replicas": 3}})
    assert d.metadata.generation == 2
    # same spec again: no-op, same resourceVersion
    again = apps.patch_namespaced_deployment("gen", ns, {"spec": {"replicas": 3}})
    assert again.metadata.generation == 2
    assert again.metadata.resource_version == d.metadata.resource_version


@pytest.mark.parametrize("case", ["stale_rv", "already_exists", "not_found"])
def test_errors_are_status_objects(k8s, ns, case):
    v1 = client.CoreV1Api(k8s)
    obj = v1.create_namespaced_config_map(ns, cm("err"))
    with pytest.raises(client.ApiException) as e:
        if case == "stale_rv":
            obj.data = {"a": "1"}
            v1.replace_namespaced_config_map("err", ns, obj)
            obj.data = {"a": "2"}  # obj still carries the old resourceVersion
            v1.replace_namespaced_config_map("err", ns, obj)
        elif case == "already_exists":
            v1.create_namespaced_config_map(ns, cm("err"))
        else:
            v1.read_namespaced_config_map("missing", ns)
    expected = {"stale_rv": (409, "Conflict", "the object has been modified"),
                "already_exists": (409, "AlreadyExists", 'configmaps "err" already exists'),
                "not_found": (404, "NotFound", 'configmaps "missing" not found')}[case]
    assert e.value.status == expected[0]
    assert_status(status_of(e.value), *expected)


def test_status_subresource_isolation(k8s, ns):
    apps = client.AppsV1Api(k8s)
    apps.create_namespaced_deployment(ns, deployment("st", replicas=0))
    # main endpoint ignores .status
    d = apps.read_namespaced_deployment("st", ns).to_dict()
    status_before = d.get("status")
    body = deployment("st", replicas=0)
    body["metadata"]["resourceVersion"] = d["metadata"]["resource_version"]
    body["spec"]["template"]["spec"]["containers"][0]["image"] = "nginx:2"
    body["status"] = {"replicas": 42, "observedGeneration": 99}
    out = apps.replace_namespaced_deployment("st", ns, body).to_dict()
    assert out["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:2"
    assert (out.get("status") or {}).get("replicas") != 42
    # /status ignores everything but .status
    cur = apps.read_namespaced_deployment("st", ns)
    cur.spec.template.spec.containers[0].image = "nginx:3"
    cur.metadata.labels = {"changed": "yes"}
    cur.status = client.V1DeploymentStatus(replicas=7, observed_generation=5)
    out = apps.replace_namespaced_deployment_status("st", ns, cur)
    assert out.status.replicas == 7
    assert out.spec.template.spec.containers[0].image == "nginx:2"
    assert out.metadata.labels == {"app": "st"}
    assert status_before is None or status_before.get("replicas") != 7


@pytest.mark.parametrize("kind", ["deployment", "statefulset"])
def test_scale_subresource(quiet_sim, kind):
    ns = make_namespace(quiet_sim)
    apps = client.AppsV1Api(api_client(quiet_sim))
    make = deployment if kind == "deployment" else statefulset
    getattr(apps, f"create_namespaced_{kind.replace('statefulset', 'stateful_set')}")(
        ns, make("sc", replicas=1))
    k = kind.replace("statefulset", "stateful_set")
    scale = getattr(apps, f"read_namespaced_{k}_scale")("sc", ns)
    assert scale.kind == "Scale" and scale.spec.replicas == 1
    assert scale.status.selector == "app=sc"
    scale.spec.replicas = 3
    assert getattr(apps, f"replace_namespaced_{k}_scale")("sc", ns, scale).spec.replicas == 3
    out = getattr(apps, f"patch_namespaced_{k}_scale")("sc", ns, {"spec": {"replicas": 5}})
    assert out.spec.replicas == 5
    out = getattr(apps, f"patch_namespaced_{k}_scale")(
        "sc", ns, {"spec": {"replicas": 2}}, _content_type="application/merge-patch+json")
    assert out.spec.replicas == 2
    assert getattr(apps, f"read_namespaced_{k}")("sc", ns).spec.replicas == 2
    with pytest.raises(client.ApiException) as e:
        getattr(apps, f"patch_namespaced_{k}_scale")("sc", ns, {"spec": {"replicas": -1}})
    assert e.value.status == 422


def test_namespaced_object_needs_existing_namespace(k8s):
    with pytest.raises(client.ApiException) as e:
        client.CoreV1Api(k8s).create_namespaced_config_map("no-such-ns", cm("x"))
    assert e.value.status == 404
    assert_status(status_of(e.value), 404, "NotFound", 'namespaces "no-such-ns" not found')


def test_finalizers_and_deletion_timestamp(k8s, ns):
    v1 = client.CoreV1Api(k8s)
    body = cm("fin")
    body["metadata"]["finalizers"] = ["example.com/hold"]
    v1.create_namespaced_config_map(ns, body)
    v1.delete_namespaced_config_map("fin", ns)
    held = v1.read_namespaced_config_map("fin", ns)
    assert held.metadata.deletion_timestamp is not None
    assert held.metadata.finalizers == ["example.com/hold"]
    # no new finalizers once deletion started
    with pytest.raises(client.ApiException) as e:
        v1.patch_namespaced_config_map(
            "fin", ns, {"metadata": {"finalizers": ["example.com/hold", "other/x"]}},
            _content_type="application/merge-patch+json")
    assert e.value.status == 422
    # deleting again is accepted and changes nothing
    v1.delete_namespaced_config_map("fin", ns)
    v1.patch_namespaced_config_map("fin", ns, {"metadata": {"finalizers": None}},
                                   _content_type="application/merge-patch+json")
    with pytest.raises(client.ApiException) as e:
        v1.read_namespaced_config_map("fin", ns)
    assert e.value.status == 404


# -- ownerReference garbage collection (garbagecollector controller) ----------------------

def _owner_and_children(v1, ns, n=2):
    owner = v1.create_namespaced_config_map(ns, cm("owner"))
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid,
           "blockOwnerDeletion": True}
    for i in range(n):
        child = cm(f"child-{i}")
        child["metadata"]["ownerReferences"] = [ref]
        v1.create_namespaced_config_map(ns, child)
    return owner


def _names(v1, ns):
    return sorted(c.metadata.name for c in v1.list_namespaced_config_map(ns).items
                  if c.metadata.name != "kube-root-ca.crt")


@pytest.mark.parametrize("policy", ["Background", None])
def test_gc_background_delete(kubesim_module, k8s, ns, policy):
    assert kubesim_module.cluster.manager.get("garbagecollector") is not None
    v1 = client.CoreV1Api(k8s)
    _owner_and_children(v1, ns)
    v1.delete_namespaced_config_map("owner", ns, propagation_policy=policy)
    with pytest.raises(client.ApiException) as e:  # the owner goes at once
        v1.read_namespaced_config_map("owner", ns)
    assert e.value.status == 404
    kubesim_module.wait_for(lambda: _names(v1, ns) == [], 10, message="children collected")


def test_gc_foreground_delete(kubesim_module, k8s, ns):
    assert kubesim_module.cluster.manager.get("garbagecollector") is not None
    v1 = client.CoreV1Api(k8s)
    _owner_and_children(v1, ns)
    v1.patch_namespaced_config_map("child-0", ns, {"metadata": {"finalizers": ["test/hold"]}})
    v1.delete_namespaced_config_map("owner", ns, propagation_policy="Foreground")

    def child0_terminating():
        return (_names(v1, ns) == ["child-0", "owner"] and
                v1.read_namespaced_config_map("child-0", ns).metadata.deletion_timestamp)
    kubesim_module.wait_for(child0_terminating, 10, message="children being deleted first")
    owner = v1.read_namespaced_config_map("owner", ns)  # blocked by child-0's finalizer
    assert owner.metadata.deletion_timestamp is not None
    assert "foregroundDeletion" in owner.metadata.finalizers
    v1.patch_namespaced_config_map("child-0", ns, {"metadata": {"finalizers": None}},
                                   _content_type="application/merge-patch+json")
    kubesim_module.wait_for(lambda: _names(v1, ns) == [], 10, message="owner deleted last")


def test_gc_orphan(kubesim_module, k8s, ns):
    assert kubesim_module.cluster.manager.get("garbagecollector") is not None
    v1 = client.CoreV1Api(k8s)
    _owner_and_children(v1, ns)
    v1.delete_namespaced_config_map("owner", ns, propagation_policy="Orphan")
    kubesim_module.wait_for(lambda: _names(v1, ns) == ["child-0", "child-1"], 10,
                            message="owner gone, children kept")

    def orphaned():
        return all(not c.metadata.owner_references
                   for c in v1.list_namespaced_config_map(ns).items)
    kubesim_module.wait_for(orphaned, 10, message="ownerReferences removed")


# ------------------------------------------------------------------------------------------
# patches over HTTP with their content types
# ------------------------------------------------------------------------------------------

MERGE = "application/merge-patch+json"
JSONP = "application/json-patch+json"
SMP = "application/strategic-merge-patch+json"
APPLY = "application/apply-patch+yaml"


def _two_container_deploy(name):
    d = deployment(name)
    d["spec"]["template"]["spec"]["containers"] = [
        {"name": "app", "image": "app:1", "env": [{"name": "A", "value": "1"},
                                                  {"name": "B", "value": "2"}],
         "ports": [{"containerPort": 80, "name": "http"}, {"containerPort": 443}]},
        {"name": "sidecar", "image": "side:1"},
    ]
    return d


@pytest.mark.parametrize("ctype,body,check", [
    (MERGE, {"metadata": {"labels": {"new": "1"}}, "spec": {"replicas": 4}},
     lambda d: d["metadata"]["labels"] == {"app": "pt", "new": "1"} and d["spec"]["replicas"] == 4),
    (MERGE, {"spec": {"template": {"spec": {"containers": [{"name": "only", "image": "x"}]}}}},
     lambda d: [c["name"] for c in d["spec"]["template"]["spec"]["containers"]] == ["only"]),
    (JSONP, [{"op": "replace", "path": "/spec/replicas", "value": 6},
             {"op": "add", "path": "/metadata/annotations", "value": {"a": "b"}},
             {"op": "test", "path": "/spec/replicas", "value": 6}],
     lambda d: d["spec"]["replicas"] == 6 and d["metadata"]["annotations"] == {"a": "b"}),
    (JSONP, [{"op": "remove", "path": "/spec/template/spec/containers/1"}],
     lambda d: len(d["spec"]["template"]["spec"]["containers"]) == 1),
    # strategic merge: containers merged by name, env by name, ports by containerPort
    (SMP, {"spec": {"template": {"spec": {"containers": [
        {"name": "app", "image": "app:2", "env": [{"name": "B", "value": "20"},
                                                   {"name": "C", "value": "3"}],
         "ports": [{"containerPort": 443, "name": "https"}]}]}}}},
     lambda d: (
         [c["name"] for c in d["spec"]["template"]["spec"]["containers"]] == ["app", "sidecar"]
         and d["spec"]["template"]["spec"]["containers"][0]["image"] == "app:2"
         and {e["name"]: e["value"] for e in d["spec"]["template"]["spec"]["containers"][0]["env"]}
         == {"A": "1", "B": "20", "C": "3"}
         and sorted((p["containerPort"], p.get("name")) for p in
                    d["spec"]["template"]["spec"]["containers"][0]["ports"])
         == [(80, "http"), (443, "https")])),
    (SMP, {"spec": {"template": {"spec": {"containers": [
        {"name": "sidecar", "$patch": "delete"}]}}}},
     lambda d: [c["name"] for c in d["spec"]["template"]["spec"]["containers"]] == ["app"]),
], ids=["merge", "merge-replaces-lists", "json", "json-remove", "strategic", "strategic-delete"])
def test_patch_types(http, ns, ctype, body, check):
    base = f"/apis/apps/v1/namespaces/{ns}/deployments"
    assert http.post(base, _two_container_deploy("pt"))[0] == 201
    code, out = http.patch(f"{base}/pt", body, ctype)
    assert code == 200, out
    assert check(out), out
    assert http.get(f"{base}/pt")[1]["spec"] == out["spec"]


@pytest.mark.parametrize("ctype,body,code,reason", [
    (JSONP, [{"op": "test", "path": "/spec/replicas", "value": 99}], 422, "Invalid"),
    (JSONP, {"not": "a list"}, 400, "BadRequest"),
    (MERGE, [1, 2], 400, "BadRequest"),
    ("text/plain", {"a": 1}, 415, "UnsupportedMediaType"),
])
def test_bad_patches(http, ns, ctype, body, code, reason):
    base = f"/apis/apps/v1/namespaces/{ns}/deployments"
    http.post(base, deployment("bp"))
    got, data = http.patch(f"{base}/bp", body, ctype)
    assert got == code
    assert_status(data, code, reason)


def test_server_side_apply(http, ns):
    path = f"/api/v1/namespaces/{ns}/configmaps/ssa"
    cfg = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"},
           "data": {"owned-by-a": "1", "shared": "a"}}
    # create through apply (YAML body)
    code, out = http.patch(f"{path}?fieldManager=mgr-a", yaml.safe_dump(cfg), APPLY)
    assert code == 201, out
    assert out["data"] == {"owned-by-a": "1", "shared": "a"}
    assert [m["manager"] for m in out["metadata"]["managedFields"]] == ["mgr-a"]
    assert out["metadata"]["managedFields"][0]["operation"] == "Apply"
    # a second manager adding its own field merges
    code, out = http.patch(f"{path}?fieldManager=mgr-b", {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"},
        "data": {"owned-by-b": "2"}}, "application/apply-patch+json")
    assert code == 200, out
    assert out["data"] == {"owned-by-a": "1", "shared": "a", "owned-by-b": "2"}
    # changing a field that mgr-a owns conflicts
    conflicting = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"},
                   "data": {"owned-by-b": "2", "shared": "b"}}
    code, out = http.patch(f"{path}?fieldManager=mgr-b", conflicting, APPLY)
    assert code == 409
    assert_status(out, 409, "Conflict", "mgr-a")
    assert "shared" in json.dumps(out)
    # ...unless forced: mgr-b takes the field over
    code, out = http.patch(f"{path}?fieldManager=mgr-b&force=true", conflicting, APPLY)
    assert code == 200, out
    assert out["data"]["shared"] == "b"
    # mgr-a re-applies without the field it no longer owns: its other field stays
    code, out = http.patch(f"{path}?fieldManager=mgr-a", {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"},
        "data": {"owned-by-a": "1"}}, APPLY)
    assert code == 200 and out["data"] == {"owned-by-a": "1", "shared": "b", "owned-by-b": "2"}
    # mgr-a drops its field: it is removed
    code, out = http.patch(f"{path}?fieldManager=mgr-a", {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}}, APPLY)
    assert code == 200 and out["data"] == {"shared": "b", "owned-by-b": "2"}
    # apply without a fieldManager is invalid (422, the cause names fieldManager, as
    # kube-apiserver answers: tests/real/test_differential_real.py)
    code, out = http.patch(path, cfg, APPLY)
    assert code == 422 and out["details"]["causes"][0]["field"] == "fieldManager", out


def test_server_side_apply_noop_later_keeps_resource_version(http, ns, monkeypatch):
    """Re-applying the same configuration later is a no-op: no new resourceVersion and
    no new managedFields timestamp (tools such as kubernetes.core rely on this to report
    changed=false)."""
    import kubesim.apiserver as apiserver_mod

    path = f"/api/v1/namespaces/{ns}/configmaps/noop?fieldManager=m"
    cfg = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "noop"},
           "data": {"a": "1"}}
    code, first = http.patch(path, cfg, APPLY)
    assert code == 201
    monkeypatch.setattr(apiserver_mod, "now_rfc3339", lambda: "2099-01-01T00:00:00Z")
    code, again = http.patch(path, cfg, APPLY)
    assert code == 200
    assert again["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    assert again["metadata"]["managedFields"] == first["metadata"]["managedFields"]
    code, changed = http.patch(path, {**cfg, "data": {"a": "2"}}, APPLY)
    assert changed["metadata"]["managedFields"][0]["time"] == "2099-01-01T00:00:00Z"


def test_server_side_apply_official_client(k8s, ns):
    apps = client.AppsV1Api(k8s)
    d = deployment("ssa-deploy")
    out = apps.patch_namespaced_deployment("ssa-deploy", ns, d, field_manager="tool",
                                           _content_type=APPLY)
    assert out.spec.replicas == 1
    d["spec"]["replicas"] = 2
    out = apps.patch_namespaced_deployment("ssa-deploy", ns, d, field_manager="tool",
                                           _content_type=APPLY)
    assert out.spec.replicas == 2
    with pytest.raises(client.ApiException) as e:
        d["spec"]["replicas"] = 3
        apps.patch_namespaced_deployment("ssa-deploy", ns, d, field_manager="other",
                                         _content_type=APPLY)
    assert e.value.status == 409
    out = apps.patch_namespaced_deployment("ssa-deploy", ns, d, field_manager="other",
                                           force=True, _content_type=APPLY)
    assert out.spec.replicas == 3


# ------------------------------------------------------------------------------------------
# validation
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mutate,field", [
    (lambda p: p["spec"]["containers"][0].update(imagePullPolicyy="Always"),
     "spec.containers[0].imagePullPolicyy"),
    (lambda p: p["spec"].update(bogus=1), "spec.bogus"),
    (lambda p: p["metadata"].update(labelz={"a": "b"}), "metadata.labelz"),
], ids=["container-field", "spec-field", "metadata-field"])
def test_builtin_unknown_field_is_422(http, ns, mutate, field):
    p = pod("strict")
    mutate(p)
    code, data = http.post(f"/api/v1/namespaces/{ns}/pods", p)
    assert code == 422, data
    assert_status(data, 422, "Invalid", field)


def test_builtin_wrong_type_is_422(http, ns):
    d = deployment("wt")
    d["spec"]["replicas"] = "three"
    code, data = http.post(f"/apis/apps/v1/namespaces/{ns}/deployments", d)
    assert code == 422
    assert_status(data, 422, "Invalid", "spec.replicas")


@pytest.fixture(scope="module")
def widgets(kubesim_module):
    sim = kubesim_module
    sim.call(sim.api.create, "customresourcedefinitions.apiextensions.k8s.io", WIDGET_CRD)
    return f"/apis/{WIDGET_GROUP}/v1/namespaces/{make_namespace(sim, 'w')}/widgets"


def test_cr_defaults_and_pruning(http, widgets):
    body = widget("w1", widgets.split("/")[5], size=2)
    body["spec"]["unknownField"] = "dropped"
    body["topLevelJunk"] = {"x": 1}
    code, out = http.post(widgets, body)
    assert code == 201, out
    assert out["spec"] == {"size": 2, "maxSize": 10, "replicas": 1, "color": "blue"}
    assert "topLevelJunk" not in out
    assert http.get(f"{widgets}/w1")[1]["spec"] == out["spec"]


def test_cr_unknown_field_with_strict_field_validation(http, widgets):
    body = widget("w1s", widgets.split("/")[5], size=2)
    body["spec"]["unknownField"] = "x"
    code, out = http.post(widgets + "?fieldValidation=Strict", body)
    assert code == 400, out
    assert_status(out, 400, "BadRequest", 'unknown field "spec.unknownField"')
    assert http.get(f"{widgets}/w1s")[0] == 404


def test_cr_cel_rule_violation(http, widgets):
    code, out = http.post(widgets, widget("w2", widgets.split("/")[5], size=11))
    assert code == 422, out
    assert_status(out, 422, "Invalid", "spec", "size must not exceed maxSize")
    # the same rule on update
    assert http.post(widgets, widget("w3", widgets.split("/")[5], size=3))[0] == 201
    code, out = http.patch(f"{widgets}/w3", {"spec": {"maxSize": 2}}, MERGE)
    assert code == 422
    assert "size must not exceed maxSize" in out["message"]


def test_cr_transition_rule(http, widgets):
    path = f"{widgets}/w4"
    assert http.post(widgets, widget("w4", widgets.split("/")[5], storageClass="gp3"))[0] == 201
    code, out = http.patch(path, {"spec": {"storageClass": "efs"}}, MERGE)
    assert code == 422, out
    assert_status(out, 422, "Invalid", "spec.storageClass", "storageClass is immutable")
    code, out = http.patch(path, {"spec": {"color": "red"}}, MERGE)
    assert code == 200 and out["spec"]["storageClass"] == "gp3"


def test_cr_schema_type_error(http, widgets):
    code, out = http.post(widgets, widget("w5", widgets.split("/")[5], size="big"))
    assert code == 422
    assert_status(out, 422, "Invalid", "spec.size")


def test_cr_status_and_scale_subresources(http, widgets):
    assert http.post(widgets, widget("w6", widgets.split("/")[5]))[0] == 201
    code, out = http.patch(f"{widgets}/w6/status", {"status": {"phase": "Ready"},
                                                    "spec": {"size": 5}}, MERGE)
    assert code == 200 and out["status"]["phase"] == "Ready" and out["spec"]["size"] == 1
    code, out = http.patch(f"{widgets}/w6", {"status": {"phase": "Ignored"}}, MERGE)
    assert code == 200 and out["status"]["phase"] == "Ready"


# ------------------------------------------------------------------------------------------
# bad input
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("method,path,body,ctype,code,reason,message", [
    ("POST", "/api/v1/namespaces/{ns}/configmaps", b'{"apiVersion": "v1", "kind": ',
     "application/json", 400, "BadRequest", "json"),
    ("POST", "/api/v1/namespaces/{ns}/configmaps", b"apiVersion: v1\nkind: [ConfigMap\n",
     "application/yaml", 400, "BadRequest", ""),
    ("POST", "/api/v1/namespaces/{ns}/configmaps", b"[1, 2, 3]",
     "application/json", 400, "BadRequest", "JSON object"),
    ("POST", "/api/v1/namespaces/{ns}/configmaps",
     {"apiVersion": "v2", "kind": "ConfigMap", "metadata": {"name": "x"}},
     "application/json", 400, "BadRequest", "API version"),
    ("POST", "/api/v1/namespaces/{ns}/configmaps",
     {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}},
     "application/json", 400, "BadRequest", "kind"),
    ("POST", "/api/v1/namespaces/{ns}/configmaps",
     {"apiVersion": "v1", "metadata": {"name": "x"}},
     "application/json", 400, "BadRequest", "Kind"),
    ("POST", "/api/v1/namespaces/{ns}/configmaps",
     {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "Not_A_DNS_Name"}},
     "application/json", 422, "Invalid", "metadata.name"),
    ("POST", "/api/v1/namespaces/{ns}/configmaps",
     {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x" * 254}},
     "application/json", 422, "Invalid", "metadata.name"),
    ("POST", "/api/v1/namespaces",
     {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a.b"}},
     "application/json", 422, "Invalid", "metadata.name"),
    ("POST", "/api/v1/namespaces/missing-ns/configmaps",
     {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}},
     "application/json", 404, "NotFound", 'namespaces "missing-ns" not found'),
    ("GET", "/api/v1/namespaces/{ns}/foos", None, None, 404, "NotFound", "foos"),
    ("GET", "/apis/nope.example.com/v1/things", None, None, 404, "NotFound", ""),
    ("GET", "/apis/apps/v2/deployments", None, None, 404, "NotFound", ""),
    ("GET", "/totally/unknown", None, None, 404, "NotFound", ""),
    ("POST", "/api/v1/namespaces/{ns}/configmaps", b"\x00k8s\x01",
     "application/vnd.kubernetes.protobuf", 400, "BadRequest", "not appear to be a protobuf"),
    ("POST", "/api/v1/namespaces/{ns}/configmaps", b"\xa0",
     "application/cbor", 415, "UnsupportedMediaType", "application/cbor"),
    ("PUT", "/api/v1/namespaces/{ns}/configmaps", {"apiVersion": "v1"},
     "application/json", 405, "MethodNotAllowed", ""),
    ("POST", "/api/v1/namespaces/{ns}/configmaps", None, None, 400, "BadRequest", "empty"),
])
def test_bad_input(http, ns, method, path, body, ctype, code, reason, message):
    got, data = http.request(method, path.format(ns=ns), body, ctype or "application/json")
    assert got == code, data
    assert_status(data, code, reason, message)


def test_fuzz_never_500(kubesim):
    """Random garbage methods/paths/bodies/content types: every answer is a Status or an
    object, never a 500, and the simulator keeps answering."""
    http = Http(kubesim)
    ns = make_namespace(kubesim)
    rng = random.Random(1234)
    kubesim.call(kubesim.api.create, "customresourcedefinitions.apiextensions.k8s.io",
                 WIDGET_CRD)
    garbage = ["/api/v1/pods", "/apis/apps/v1/pods", "/apis", "/api", "", "/api/v1/%zz",
               "/apis/apps/v1/namespaces/../deployments", "/api/v1/" + "x" * 300,
               f"/api/v1/namespaces/{ns}/pods/a/b/c/d", "/apis/nope/v1/things"]
    tails = ["", "", "", "/fz", "/fz", "/fz", "/fz/status", "/fz/scale", "/fz/binding",
             "/fz/log", "/fz/eviction", "/fz/finalize", "/Bad_Name",
             "?watch=maybe", "?limit=-1", "?limit=abc&continue=%%%", "?labelSelector=((",
             "?fieldSelector=status.phase%3D", "?resourceVersion=abc&watch=true",
             "?timeoutSeconds=0&watch=1", "?dryRun=All", "?propagationPolicy=Sideways",
             "?fieldManager=&force=true"]
    ctypes = ["application/json", "application/yaml", "application/merge-patch+json",
              "application/json-patch+json", "application/strategic-merge-patch+json",
              "application/apply-patch+yaml", "text/plain", "application/octet-stream", ""]

    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "fz"},
           "spec": {"template": {"spec": {"restartPolicy": "Never",
                                          "containers": [{"name": "c", "image": "x"}]}}}}
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "fz"},
           "spec": {"ports": [{"port": 80}]}}
    valid = {  # collection path -> an object that belongs there
        f"/api/v1/namespaces/{ns}/configmaps": cm("fz"),
        f"/api/v1/namespaces/{ns}/pods": pod("fz"),
        f"/api/v1/namespaces/{ns}/services": svc,
        f"/api/v1/namespaces/{ns}/secrets": _secret("fz"),
        f"/apis/apps/v1/namespaces/{ns}/deployments": deployment("fz"),
        f"/apis/apps/v1/namespaces/{ns}/statefulsets": statefulset("fz"),
        f"/apis/batch/v1/namespaces/{ns}/jobs": job,
        f"/apis/{WIDGET_GROUP}/v1/namespaces/{ns}/widgets": widget("fz", ns),
        "/api/v1/namespaces": {"apiVersion": "v1", "kind": "Namespace",
                               "metadata": {"name": "fz"}},
        "/apis/rbac.authorization.k8s.io/v1/clusterroles": _clusterrole("fz"),
    }
    def body(template):
        kind = rng.randrange(10)
        if kind == 0:
            return None
        if kind == 1:
            return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))
        if kind == 2:
            return json.dumps(rng.choice([[], [1], "s", 3, None, {"op": "x"},
                                          [{"op": "remove", "path": "/metadata"}],
                                          [{"op": "move", "from": "/a", "path": "/b"}]]))
        if kind == 3:
            return "a: [b\n  - : :"
        if kind in (4, 5, 6):  # near-valid objects, possibly with one field broken
            obj = json.loads(json.dumps(template if rng.random() < 0.8 else
                                        rng.choice(list(valid.values()))))
            obj["metadata"]["name"] = "fz"
            if rng.random() < 0.5:
                target = obj.get("spec") or obj.get("data") or obj["metadata"]
                target[rng.choice(["replicas", "containers", "size", "k", "selector", "x"])] = \
                    rng.choice([None, -1, "x", [], {}, [{"name": 1}], 10**20, 1.5, True])
            return json.dumps(obj)
        if kind == 7:
            return json.dumps([{"op": rng.choice(["add", "remove", "replace", "test", "copy",
                                                  "move", "bogus"]),
                                "path": rng.choice(["/spec/replicas", "/metadata/name", "/",
                                                    "/data/k", "/spec/containers/9", "~1x",
                                                    "/metadata/labels/a"]),
                                "from": "/metadata/labels",
                                "value": rng.choice([1, "v", None, {"a": "b"}])}])
        obj = {"apiVersion": rng.choice(["v1", "apps/v1", "batch/v1", 5, None]),
               "kind": rng.choice(["Pod", "ConfigMap", "Deployment", "Job", [], "Namespace"]),
               "metadata": rng.choice([{"name": "fz"}, {"name": 5}, [], {"name": "fz",
                                                                         "labels": {"a": 1}},
                                       {"generateName": "fz-"}, {"name": "fz",
                                                                 "finalizers": 3}, None]),
               rng.choice(["spec", "data", "status"]): rng.choice(
                   [{"replicas": -3}, {"containers": "x"}, [1], "str", {"a": {"b": None}}, 7])}
        return json.dumps(obj)

    for i in range(600):
        method = rng.choices(["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"],
                             [3, 4, 3, 4, 2, 1, 1])[0]
        path = rng.choice(list(valid) if rng.random() < 0.85 else garbage)
        template = valid.get(path, cm("fz"))
        if method != "POST" or rng.random() < 0.2:
            path += rng.choice(tails)
        ctype = "application/json" if rng.random() < 0.4 else rng.choice(ctypes)
        try:
            code, data = http.request(method, path, body(template), ctype)
        except Exception as exc:  # noqa: BLE001 - a broken connection is a failure too
            pytest.fail(f"request {i} {method} {path} failed: {exc!r}")
        assert code != 500, (method, path, data)
        if code >= 400 and method != "HEAD":
            assert isinstance(data, dict) and data.get("kind") == "Status", (method, path, data)
    assert http.get("/version")[0] == 200
    errors_500 = {k: v for k, v in kubesim.metrics()["requests"].items() if k.endswith(" 500")}
    assert errors_500 == {}
