"""Table-driven tests of plugins/module_utils/devuser.py."""
from __future__ import annotations

import pytest

from ansible_collections.torchdev.operator.plugins.module_utils import devuser as du, labels, quantity
from hack.render_cases import flavors

A10G = {"metadata": {"name": "gpu-a10g-1"}, "spec": {
    "resources": {"requests": {"cpu": "7", "memory": "28Gi", "ephemeral-storage": "100Gi", "nvidia.com/gpu": 1},
                  "limits": {"cpu": "8", "memory": "30Gi", "nvidia.com/gpu": 1}},
    "gpu": {"type": "nvidia-a10g", "count": 1}}}
CPU = {"metadata": {"name": "cpu-small"}, "spec": {"resources": {"requests": {"cpu": "2", "memory": "8Gi"}}}}
EFA = {"metadata": {"name": "efa"}, "spec": {
    "resources": {"limits": {"cpu": "4", "memory": "16Gi", "vpc.amazonaws.com/efa": 4}}, "gpu": {"count": 2}}}


def _nominal(groups):
    return {f["name"]: {r["name"]: r["nominalQuota"] for r in f["resources"]} for f in groups[0]["flavors"]}


def test_spec_merges_defaults_and_drops_keys():
    raw = {"email": "a@b.c", "sshPublicKeys": ["k"], "quota": {"gpus": 2}}
    out = du.spec(raw, {"quota": {"gpus": 0, "cpu": "64"}, "deletionPolicy": "Retain"})
    assert out == {"email": "a@b.c", "quota": {"gpus": 2, "cpu": "64"}, "deletionPolicy": "Retain"}
    assert raw["sshPublicKeys"] == ["k"]  # the input is left alone


@pytest.mark.parametrize("spec, problem", [
    ({"network": {"sshAllowedCIDRs": ["10.0.0.0/8", "fd00::/8"]}}, None),
    ({"network": {"sshAllowedCIDRs": []}}, None),
    ({"network": {"sshAllowedCIDRs": ["10.1.2.3/8"]}}, "sshAllowedCIDRs[0]: 10.1.2.3/8 has host bits set"),
    ({"network": {"sshAllowedCIDRs": ["10.0.0.0/8", "nonsense"]}}, "sshAllowedCIDRs[1]"),
    ({"quota": {"cpu": "lots"}}, "spec.quota.cpu: invalid quantity"),
])
def test_problem(spec, problem):
    got = du.problem(spec)
    if problem is None:
        assert got is None
    else:
        assert got["reason"] == "InvalidSpec" and problem in got["message"]


def test_labels():
    got = labels.devuser_labels("jane", "jane.doe@example.com", "network")
    assert got["torchdev.io/user"] == "jane" and got["app.kubernetes.io/component"] == "network"
    assert got["torchdev.io/owner"] == "jane.doe_at_example.com"
    assert got["app.kubernetes.io/managed-by"] == "torchdev-operator"


@pytest.mark.parametrize("discovery, served", [
    (None, False), ([], False), (["workloads"], False),
    (["clusterqueues", "localqueues", "resourceflavors", "workloads"], True),
])
def test_kueue_served(discovery, served):
    assert du.kueue_served(discovery) is served


def test_resource_groups_per_flavor_quota():
    quota = {"gpus": 3, "cpu": "24", "memory": "96Gi", "flavors": [{"name": "cpu-small", "cpu": "4"}]}
    (group,) = du.resource_groups([CPU, A10G], quota)
    assert group["coveredResources"] == ["cpu", "memory", "nvidia.com/gpu", "ephemeral-storage"]
    assert _nominal([group]) == {
        # override cpu 4 -> 2 pods; memory 96Gi / 8Gi = 12: the pods' ephemeral storage is 0 (none requested)
        "cpu-small": {"cpu": "4", "memory": "96Gi", "nvidia.com/gpu": "0", "ephemeral-storage": "0"},
        # 3 GPUs -> 3 pods (cpu 24/7 = 3, memory 96/28 = 3) -> 3 x 100Gi
        "gpu-a10g-1": {"cpu": "24", "memory": "96Gi", "nvidia.com/gpu": "3", "ephemeral-storage": "300Gi"},
    }


def test_resource_groups_limits_stand_in_for_requests_and_gpu_count_counts():
    (group,) = du.resource_groups([EFA], {"gpus": 4, "cpu": "8", "memory": "64Gi"})
    # 4 GPUs / 2 = 2 pods, cpu 8/4 = 2, memory 64/16 = 4 -> 2 x 4 EFA
    assert _nominal([group])["efa"] == {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "4",
                                        "vpc.amazonaws.com/efa": "8"}


@pytest.mark.parametrize("objects, names", [
    ([], []),
    ([dict(CPU, metadata={"name": "cpu-small", "deletionTimestamp": "2025-01-01T00:00:00Z"})], []),
    ([{"metadata": {"name": "f%02d" % i}, "spec": {}} for i in range(70)], ["f%02d" % i for i in range(64)]),
])
def test_resource_groups_flavor_selection(objects, names):
    groups = du.resource_groups(objects, {})
    assert [f["name"] for g in groups for f in g["flavors"]] == names
    assert groups == [] or len(groups) == 1


def test_resource_groups_for_the_samples_cover_every_request():
    (group,) = du.resource_groups(flavors(), {"gpus": 1})
    requested = {r for f in flavors() for s in ("requests", "limits") for r in f["spec"]["resources"].get(s, {})}
    assert requested <= set(group["coveredResources"])
    assert all(len(f["resources"]) == len(group["coveredResources"]) for f in group["flavors"])


FIXED = {"requests.storage": "2Ti", "persistentvolumeclaims": "32", "count/devservers.torchdev.io": "10"}


@pytest.mark.parametrize("quota, kueue, flavors, compute", [
    # without Kueue: the DevUser's quota as it is (flavors do not matter)
    ({}, False, [CPU, A10G], {"requests.cpu": "64", "requests.memory": "256Gi", "requests.nvidia.com/gpu": "0"}),
    ({"gpus": 2, "cpu": 8, "memory": "32Gi"}, False, [],
     {"requests.cpu": "8", "requests.memory": "32Gi", "requests.nvidia.com/gpu": "2"}),
    # with Kueue: the ClusterQueue's nominal quotas added up over the flavors (GPUs: GPU flavors only)
    ({"gpus": 2, "cpu": 8, "memory": "32Gi"}, True, [CPU, A10G],
     {"requests.cpu": "16", "requests.memory": "64Gi", "requests.nvidia.com/gpu": "2"}),
    ({"gpus": 3, "cpu": "24", "memory": "96Gi", "flavors": [{"name": "cpu-small", "cpu": "4", "memory": "8Gi"},
                                                            {"name": "gpu-a10g-1", "gpus": 1}]}, True, [CPU, A10G, EFA],
     {"requests.cpu": "52", "requests.memory": "200Gi", "requests.nvidia.com/gpu": "4"}),
    ({"cpu": "500m", "memory": "1Gi", "flavors": [{"name": "cpu-small", "cpu": "1", "memory": "512Mi"}]}, True,
     [CPU, A10G], {"requests.cpu": "1.5", "requests.memory": "1610612736", "requests.nvidia.com/gpu": "0"}),
    # with Kueue and no flavor (nothing to queue on): the DevUser's quota as it is, never unlimited
    ({"gpus": 1}, True, [], {"requests.cpu": "64", "requests.memory": "256Gi", "requests.nvidia.com/gpu": "1"}),
    ({}, True, None, {"requests.cpu": "64", "requests.memory": "256Gi", "requests.nvidia.com/gpu": "0"}),
])
def test_quota_hard_caps_cpu_memory_and_gpus_in_both_modes(quota, kueue, flavors, compute):
    assert du.quota_hard(quota, kueue, flavors) == dict(FIXED, **compute)


def test_quota_hard_storage_claims_and_devservers():
    hard = du.quota_hard({"storage": "1Ti", "persistentVolumeClaims": 5, "devServers": 1}, False)
    assert {k: hard[k] for k in FIXED} == {"requests.storage": "1Ti", "persistentvolumeclaims": "5",
                                           "count/devservers.torchdev.io": "1"}


def test_quota_hard_is_what_the_cluster_queue_admits():
    """With Kueue the namespace's quota is the ClusterQueue's nominal quotas added up: whatever
    Kueue admits fits, nothing beyond it does."""
    quota = {"gpus": 4, "cpu": "32", "memory": "128Gi", "flavors": [{"name": "efa", "gpus": 2}]}
    groups = du.resource_groups([CPU, A10G, EFA], quota)
    hard = du.quota_hard(quota, True, [CPU, A10G, EFA])
    for res in ("cpu", "memory", "nvidia.com/gpu"):
        nominal = sum(quantity.parse_quantity(r["nominalQuota"]) for f in groups[0]["flavors"]
                      for r in f["resources"] if r["name"] == res)
        assert quantity.parse_quantity(hard["requests." + res]) == nominal, res


@pytest.mark.parametrize("quota, kueue, item", [
    ({"cpu": "64", "memory": "256Gi"}, False,
     {"type": "Container", "max": {"cpu": "64", "memory": "256Gi"},
      "defaultRequest": {"cpu": "100m", "memory": "256Mi"}}),
    ({"cpu": "8", "memory": "32Gi", "flavors": [{"name": "big", "cpu": "200", "memory": "2Ti"}]}, True,
     {"type": "Container", "max": {"cpu": "200", "memory": "2Ti"},
      "defaultRequest": {"cpu": "100m", "memory": "256Mi"}}),
    ({"cpu": "8", "memory": "32Gi", "flavors": [{"name": "big", "cpu": "200"}]}, False,
     {"type": "Container", "max": {"cpu": "8", "memory": "32Gi"},
      "defaultRequest": {"cpu": "100m", "memory": "256Mi"}}),
    ({"cpu": "0", "memory": "100Mi"}, False,
     {"type": "Container", "max": {"cpu": "0", "memory": "100Mi"}, "defaultRequest": {"cpu": "0", "memory": "100Mi"}}),
])
def test_limits(quota, kueue, item):
    assert du.limits(quota, kueue, {"cpu": "100m", "memory": "256Mi"}) == item


def _obj(kind, name, ns="dev-jane", user="jane", api="v1", **meta):
    labels = {"torchdev.io/user": user, "app.kubernetes.io/managed-by": "torchdev-operator"} if user else {}
    return {"apiVersion": api, "kind": kind, "metadata": dict(name=name, namespace=ns, labels=labels, **meta)}


def test_prune_only_ours_and_never_the_namespace():
    desired = [_obj("NetworkPolicy", "default-deny", api="networking.k8s.io/v1")]
    live = desired + [
        _obj("NetworkPolicy", "allow-ssh", api="networking.k8s.io/v1"),
        _obj("NetworkPolicy", "theirs", api="networking.k8s.io/v1", user=None),
        _obj("NetworkPolicy", "other-user", api="networking.k8s.io/v1", user="bob"),
        _obj("Namespace", "dev-jane", ns=None),
        _obj("NetworkPolicy", "going", api="networking.k8s.io/v1", deletionTimestamp="x"),
    ]
    assert du.prune(live, desired, "jane") == [
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
         "metadata": {"name": "allow-ssh", "namespace": "dev-jane"}}]


def test_replace_local_queue_with_another_cluster_queue():
    lq = dict(_obj("LocalQueue", "torchdev", api="kueue.x-k8s.io/v1beta2"), spec={"clusterQueue": "torchdev-jane"})
    same = dict(lq, spec={"clusterQueue": "torchdev-jane"})
    team = dict(lq, spec={"clusterQueue": "team"})
    assert du.replace([lq], [same]) == []
    assert du.replace([lq], [team]) == [{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                                         "metadata": {"name": "torchdev", "namespace": "dev-jane"}}]
    assert du.replace([], [team]) == []


def test_detach_keeps_other_owners():
    mine = {"uid": "u-1", "kind": "DevUser", "name": "jane"}
    other = {"uid": "u-2", "kind": "ConfigMap", "name": "x"}
    objs = [_obj("Namespace", "dev-jane", ns=None, ownerReferences=[mine]),
            _obj("PersistentVolumeClaim", "jane-shared-efs", ownerReferences=[other, mine]),
            _obj("Secret", "ssh-public-keys", ownerReferences=[other]),
            _obj("LimitRange", "torchdev-limits")]
    patches = du.detach(objs, "u-1")
    assert [(p["kind"], p["metadata"]["ownerReferences"]) for p in patches] == [
        ("Namespace", []), ("PersistentVolumeClaim", [other])]
    assert "namespace" not in patches[0]["metadata"]


def test_suspend():
    devservers = [
        {"apiVersion": "torchdev.io/v1alpha1", "kind": "DevServer", "metadata": {"name": "a", "namespace": "n"},
         "spec": {"suspend": False}},
        {"metadata": {"name": "b", "namespace": "n"}, "spec": {"suspend": True}},
        {"metadata": {"name": "c", "namespace": "n", "deletionTimestamp": "x"}, "spec": {}},
        {"metadata": {"name": "d", "namespace": "n"}, "spec": {}},
    ]
    assert [(p["kind"], p["metadata"]["name"], p["spec"]) for p in du.suspend(devservers)] == [
        ("DevServer", "a", {"suspend": True}), ("DevServer", "d", {"suspend": True})]


def test_redact():
    secret = dict(_obj("Secret", "s"), data={"authorized_keys": "c2VjcmV0"}, type="Opaque")
    out = du.redact([secret, _obj("LimitRange", "l"), None])
    assert "data" not in out[0] and out[0]["type"] == "Opaque" and secret["data"]
    assert out[1]["kind"] == "LimitRange"


# (devuser_status: tests/module_utils/test_devuser_status.py)


def _ns(labels=None, annotations=None):
    return {"metadata": {"name": "dev-ann", "labels": labels or {}, "annotations": annotations or {}}}


@pytest.mark.parametrize("namespace,adopt,created,managed,annotations,problem", [
    (None, False, True, True, {"torchdev.io/created-by": "devuser/ann"}, None),
    (_ns(annotations={"torchdev.io/created-by": "devuser/ann"}), False, True, True,
     {"torchdev.io/created-by": "devuser/ann"}, None),
    (_ns(annotations={"torchdev.io/adopted-by": "devuser/ann"}), False, False, True,
     {"torchdev.io/adopted-by": "devuser/ann"}, None),
    # labelled and annotated as ann's by a version before the created-by marker: adopted
    (_ns({"torchdev.io/user": "ann"}, {"operator-sdk/primary-resource": "/ann"}), False, False, True,
     {"torchdev.io/adopted-by": "devuser/ann"}, None),
    (_ns({"team": "x"}), True, False, True, {"torchdev.io/adopted-by": "devuser/ann"}, None),
    (_ns({"team": "x"}), False, False, False, {}, "NamespaceNotOwned"),
    # a label alone (anyone can set it) proves nothing
    (_ns({"torchdev.io/user": "ann"}), False, False, False, {}, "NamespaceNotOwned"),
    (_ns(annotations={"torchdev.io/created-by": "devuser/bob"}), False, False, False, {}, "NamespaceNotOwned"),
])
def test_namespace_claim(namespace, adopt, created, managed, annotations, problem):
    claim = du.namespace_claim(namespace, "ann", adopt)
    assert (claim["created"], claim["managed"], claim["annotations"]) == (created, managed, annotations)
    assert (claim["problem"] or {}).get("reason") == problem
    if problem:
        assert "dev-ann" in claim["problem"]["message"] and "spec.adoptNamespace: true" in claim["problem"]["message"]
