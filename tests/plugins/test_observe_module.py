"""k8s_observe: the pure parts (paths, query checks) and a real run against kubesim."""

import importlib

import pytest

import _support as support

observe = importlib.import_module("ansible_collections.torchdev.operator.plugins.modules.k8s_observe")


@pytest.mark.parametrize("query,ns,path", [
    ({"api_version": "v1", "plural": "services", "name": "x"}, "dev", "/api/v1/namespaces/dev/services/x"),
    ({"api_version": "apps/v1", "plural": "statefulsets", "name": "x", "namespace": "other"}, "dev",
     "/apis/apps/v1/namespaces/other/statefulsets/x"),
    ({"api_version": "torchdev.io/v1alpha1", "plural": "devserverflavors", "name": "f", "cluster": True}, None,
     "/apis/torchdev.io/v1alpha1/devserverflavors/f"),
    ({"api_version": "v1", "plural": "persistentvolumeclaims", "label_selector": "a=b,c in (d)"}, "dev",
     "/api/v1/namespaces/dev/persistentvolumeclaims?labelSelector=a%3Db%2Cc+in+%28d%29"),
    ({"api_version": "v1", "plural": "events", "all": True,
      "field_selector": "involvedObject.kind=StatefulSet,involvedObject.name=x,reason=FailedCreate"}, "dev",
     "/api/v1/namespaces/dev/events?fieldSelector=involvedObject.kind%3DStatefulSet%2CinvolvedObject.name%3Dx"
     "%2Creason%3DFailedCreate"),
    ({"api_version": "v1", "plural": "pods", "label_selector": "a=b", "field_selector": "spec.nodeName=n"}, "dev",
     "/api/v1/namespaces/dev/pods?labelSelector=a%3Db&fieldSelector=spec.nodeName%3Dn"),
])
def test_query_path(query, ns, path):
    assert observe.query_path(query, ns) == path


def test_query_path_needs_a_namespace():
    with pytest.raises(ValueError, match="needs a namespace"):
        observe.query_path({"api_version": "v1", "plural": "services", "name": "x"}, None)


@pytest.mark.parametrize("query,error", [
    ({"plural": "services", "name": "x"}, "needs api_version"),
    ({"api_version": "v1", "name": "x"}, "needs plural"),
    ({"api_version": "v1", "plural": "services"}, "exactly one of name and label_selector"),
    ({"api_version": "v1", "plural": "services", "name": "x", "label_selector": "a=b"}, "exactly one"),
    ("nope", "must be a dict"),
    ({"api_version": "v1", "plural": "services", "name": "x"}, None),
    ({"api_version": "v1", "plural": "services", "name": "", "optional": True}, None),
    ({"api_version": "v1", "plural": "services", "name": ""}, "exactly one of name"),
    ({"api_version": "v1", "plural": "services", "optional": True}, "exactly one of name"),
    ({"api_version": "v1", "plural": "services", "all": True, "skip": True}, None),
    ({"api_version": "v1", "plural": "services", "all": True, "skip": "False"}, None),
    ({"plural": "services", "all": True, "skip": True}, "needs api_version"),
    ({"api_version": "v1", "plural": "events", "all": True, "field_selector": "reason=FailedCreate"}, None),
    ({"api_version": "v1", "plural": "events", "name": "x", "field_selector": "reason=FailedCreate"},
     "field_selector is for a list"),
])
def test_validate_query(query, error):
    got = observe.validate_query("q", query)
    assert (got is None) if error is None else (error in got)


def run_module(sim, args, tmp_path):
    """One real run of the module (a process, as Ansible runs it) against `sim`; its JSON result."""
    return support.run_module("k8s_observe", args["ANSIBLE_MODULE_ARGS"], {"K8S_AUTH_KUBECONFIG": sim.kubeconfig})


def test_module_reads_objects_and_missing_ones(kubesim, tmp_path):
    args = {"ANSIBLE_MODULE_ARGS": {"namespace": "default", "queries": {
        "ns": {"api_version": "v1", "plural": "namespaces", "name": "default", "cluster": True},
        "missing": {"api_version": "v1", "plural": "services", "name": "nope"},
        "unnamed": {"api_version": "v1", "plural": "services", "name": "", "optional": True},
        "named": {"api_version": "v1", "plural": "namespaces", "name": "default", "cluster": True, "optional": True},
        "classes": {"api_version": "storage.k8s.io/v1", "plural": "storageclasses", "label_selector": "!x",
                    "cluster": True},
        "skipped": {"api_version": "v1", "plural": "namespaces", "all": True, "cluster": True, "skip": "True"},
        "not_skipped": {"api_version": "v1", "plural": "namespaces", "all": True, "cluster": True, "skip": False},
    }}}
    before = len([r for r in kubesim.requests(5000) if r["verb"] == "list" and r["resource"] == "namespaces"])
    result = run_module(kubesim, args, tmp_path)
    assert not result.get("failed"), result
    objects = result["objects"]
    assert objects["ns"]["metadata"]["name"] == "default"
    assert objects["missing"] is None
    assert objects["unnamed"] is None and objects["named"]["metadata"]["name"] == "default"
    assert {o["metadata"]["name"] for o in objects["classes"]} >= {"gp3", "efs-sc"}
    assert all(o["kind"] == "StorageClass" for o in objects["classes"])
    assert objects["skipped"] is None and "default" in {o["metadata"]["name"] for o in objects["not_skipped"]}
    lists = len([r for r in kubesim.requests(5000) if r["verb"] == "list" and r["resource"] == "namespaces"])
    assert lists == before + 1  # the skipped query made no request
    assert kubesim.writes() == 0


# -- kueue: one module run observes Kueue too ----------------------------------------------
KUEUE_OPTIONS = {"local_queue": "torchdev", "workload_owner": "statefulset", "user_label": "torchdev.io/user",
                 "resource_flavor": "gpu-2"}


def _sts_query(name):
    return {"statefulset": {"api_version": "apps/v1", "plural": "statefulsets", "name": name}}


def test_kueue_absent_costs_one_discovery_request(kubesim, tmp_path):
    kubesim.reset_metrics()
    result = run_module(kubesim, {"ANSIBLE_MODULE_ARGS": {"namespace": "default", "queries": _sts_query("x"),
                                                          "kueue": KUEUE_OPTIONS}}, tmp_path)
    assert result["kueue"] == {"served": False, "resource_flavor": None, "local_queue": None, "workload": None,
                               "pending": None, "priority_class": None, "eta": None, "cluster_queue": None}
    paths = [r["path"] for r in kubesim.requests()]
    assert paths == ["/apis/apps/v1/namespaces/default/statefulsets/x", "/apis/kueue.x-k8s.io/v1beta2"]


@pytest.fixture(scope="module")
def kueue_sim():
    from kubesim import kueue as kq
    from kubesim.testing import KubeSim

    with KubeSim(nodes="gpu:1x{cpu:64,memory:256Gi,nvidia.com/gpu:8}", kueue=True) as sim:
        # A DevUser kind to read the fallback priority class from (the module needs only its spec.queue).
        sim.call(sim.api.create, "customresourcedefinitions.apiextensions.k8s.io", {
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "devusers.torchdev.io"},
            "spec": {"group": "torchdev.io", "scope": "Cluster",
                     "names": {"plural": "devusers", "singular": "devuser", "kind": "DevUser"},
                     "versions": [{"name": "v1alpha1", "served": True, "storage": True, "schema": {
                         "openAPIV3Schema": {"type": "object", "properties": {"spec": {
                             "type": "object", "properties": {"queue": {"type": "object", "properties": {
                                 "priorityClass": {"type": "string"}}}}}}}}}]}})
        v1b2 = kq.API_VERSION
        for obj in (
                {"apiVersion": "v1", "kind": "Namespace",
                 "metadata": {"name": "dev-jane", "labels": {"torchdev.io/user": "jane"}}},
                {"apiVersion": "torchdev.io/v1alpha1", "kind": "DevUser", "metadata": {"name": "jane"},
                 "spec": {"queue": {"priorityClass": "torchdev-low"}}},
                {"apiVersion": v1b2, "kind": "WorkloadPriorityClass", "metadata": {"name": "torchdev-high"},
                 "value": 10000},
                {"apiVersion": v1b2, "kind": "ResourceFlavor", "metadata": {"name": "gpu-2"}, "spec": {}},
                {"apiVersion": v1b2, "kind": "ClusterQueue", "metadata": {"name": "torchdev-jane"},
                 "spec": {"namespaceSelector": {}, "resourceGroups": [{
                     "coveredResources": ["nvidia.com/gpu"],
                     "flavors": [{"name": "gpu-2", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 2}]}]}]}},
                {"apiVersion": v1b2, "kind": "LocalQueue", "metadata": {"name": "torchdev", "namespace": "dev-jane"},
                 "spec": {"clusterQueue": "torchdev-jane"}}):
            sim.call(sim.api.create, _resource(obj), obj, namespace=obj["metadata"].get("namespace"))
        for name in ("a", "b"):
            sim.call(sim.api.create, "statefulsets.apps", _gpu_sts(name), namespace="dev-jane")
        yield sim


def _resource(obj):
    group = obj["apiVersion"].rpartition("/")[0]
    plural = {"WorkloadPriorityClass": "workloadpriorityclasses"}.get(obj["kind"], obj["kind"].lower() + "s")
    return plural + ("." + group if group else "")


def _gpu_sts(name):
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": name, "namespace": "dev-jane", "labels": {"kueue.x-k8s.io/queue-name": "torchdev"}},
            "spec": {"replicas": 1, "serviceName": name, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{
                         "name": "main", "image": "busybox",
                         "resources": {"limits": {"nvidia.com/gpu": "2"}, "requests": {"nvidia.com/gpu": "2"}}}]}}}}


def _observe(sim, tmp_path, sts, **options):
    result = run_module(sim, {"ANSIBLE_MODULE_ARGS": {"namespace": "dev-jane", "queries": _sts_query(sts),
                                                      "kueue": dict(KUEUE_OPTIONS, **options)}}, tmp_path)
    assert not result.get("failed"), result
    return result["kueue"]


def _workload_settled(sim, name, admitted):
    def check():
        for wl in sim.call(sim.api.list, "workloads.kueue.x-k8s.io", "dev-jane")["items"]:
            if wl["metadata"]["ownerReferences"][0]["name"] == name:
                conds = {c["type"]: c for c in wl.get("status", {}).get("conditions", [])}
                got = conds.get("Admitted", {}).get("status") == "True"
                return got if admitted else conds.get("QuotaReserved", {}).get("reason") == "Pending"
        return False
    sim.wait_for(check, message=f"workload of {name} admitted={admitted}")


def test_kueue_pending_workload_and_position(kueue_sim, tmp_path):
    _workload_settled(kueue_sim, "a", True)
    _workload_settled(kueue_sim, "b", False)
    kueue_sim.reset_metrics()
    got = _observe(kueue_sim, tmp_path, "b")
    assert got["served"] is True
    assert got["resource_flavor"]["metadata"]["name"] == "gpu-2"
    assert got["local_queue"]["spec"]["clusterQueue"] == "torchdev-jane"
    assert got["workload"]["metadata"]["ownerReferences"][0]["name"] == "b"
    assert got["pending"]["metadata"]["name"] == got["workload"]["metadata"]["name"]
    assert got["pending"]["positionInClusterQueue"] == 0
    # the server exists: its priority class (the DevUser's) is not checked again
    assert got["priority_class"] == {"name": "torchdev-low", "source": "DevUser jane spec.queue.priorityClass",
                                     "exists": None}
    assert kueue_sim.writes() == 0
    assert "/apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/dev-jane/localqueues/torchdev/pendingworkloads" in \
        [r["path"] for r in kueue_sim.requests()]


def test_kueue_admitted_workload_has_no_pending_entry(kueue_sim, tmp_path):
    _workload_settled(kueue_sim, "a", True)
    kueue_sim.reset_metrics()
    got = _observe(kueue_sim, tmp_path, "a", priority_class="torchdev-high")
    assert got["workload"]["metadata"]["ownerReferences"][0]["name"] == "a"
    assert got["pending"] is None
    assert got["priority_class"] == {"name": "torchdev-high", "source": "spec.priorityClassName", "exists": None}
    paths = [r["path"] for r in kueue_sim.requests()]
    assert not [p for p in paths if "visibility" in p or p == "/api/v1/namespaces/dev-jane"], paths


def test_kueue_cluster_queue_only_for_a_queued_owner_scaled_to_zero(kueue_sim, tmp_path):
    """cluster_queue: the LocalQueue's ClusterQueue, read (one GET) only while the owner is queued
    and has 0 replicas (a DevServer whose pods are released after an eviction asks whether it has
    room again); nothing for a running owner."""
    _workload_settled(kueue_sim, "a", True)
    kueue_sim.reset_metrics()
    running = _observe(kueue_sim, tmp_path, "a", cluster_queue=True)
    assert running["cluster_queue"] is None
    assert not [r for r in kueue_sim.requests() if "/clusterqueues" in r["path"]]
    kueue_sim.call(kueue_sim.api.create, "statefulsets.apps", dict(_gpu_sts("zero"), spec=dict(
        _gpu_sts("zero")["spec"], replicas=0)), namespace="dev-jane")
    kueue_sim.reset_metrics()
    zero = _observe(kueue_sim, tmp_path, "zero", cluster_queue=True)
    assert zero["cluster_queue"]["metadata"]["name"] == "torchdev-jane"
    assert zero["cluster_queue"]["spec"]["resourceGroups"][0]["flavors"][0]["name"] == "gpu-2"
    paths = [r["path"] for r in kueue_sim.requests()]
    assert paths.count("/apis/kueue.x-k8s.io/v1beta2/clusterqueues/torchdev-jane") == 1, paths
    assert kueue_sim.writes() == 0
    assert _observe(kueue_sim, tmp_path, "zero")["cluster_queue"] is None  # not asked


@pytest.mark.parametrize("priority_class,expected", [
    ("torchdev-high", {"name": "torchdev-high", "source": "spec.priorityClassName", "exists": True}),
    ("nope", {"name": "nope", "source": "spec.priorityClassName", "exists": False}),
    ("", {"name": "torchdev-low", "source": "DevUser jane spec.queue.priorityClass", "exists": False}),
])
def test_kueue_priority_class_checked_before_creation(kueue_sim, tmp_path, priority_class, expected):
    got = _observe(kueue_sim, tmp_path, "new", priority_class=priority_class)
    assert got["workload"] is None and got["pending"] is None
    assert got["priority_class"] == expected


def test_kueue_without_local_queue(kueue_sim, tmp_path):
    got = _observe(kueue_sim, tmp_path, "new", local_queue="missing", resource_flavor="nope")
    assert got["served"] is True and got["local_queue"] is None and got["resource_flavor"] is None
    assert got["priority_class"] is None  # nothing will be queued


# -- devuser: the DevUser a namespace belongs to ------------------------------------------

@pytest.mark.parametrize("namespace,user", [("dev-jane", "jane"), ("default", None)])
def test_devuser_of_the_namespace(kueue_sim, tmp_path, namespace, user):
    result = run_module(kueue_sim, {"ANSIBLE_MODULE_ARGS": {
        "namespace": namespace, "queries": {}, "devuser": {"label": "torchdev.io/user"}}}, tmp_path)
    assert not result.get("failed"), result
    assert ((result["devuser"] or {}).get("metadata") or {}).get("name") == user


def test_devuser_and_kueue_fallback_read_the_namespace_and_devuser_once(kueue_sim, tmp_path):
    kueue_sim.reset_metrics()
    result = run_module(kueue_sim, {"ANSIBLE_MODULE_ARGS": {
        "namespace": "dev-jane", "queries": _sts_query("new"), "devuser": {"label": "torchdev.io/user"},
        "kueue": KUEUE_OPTIONS}}, tmp_path)
    assert result["devuser"]["metadata"]["name"] == "jane"
    assert result["kueue"]["priority_class"]["source"] == "DevUser jane spec.queue.priorityClass"
    paths = [r["path"] for r in kueue_sim.requests()]
    assert paths.count("/api/v1/namespaces/dev-jane") == 1
    assert paths.count("/apis/torchdev.io/v1alpha1/devusers/jane") == 1
