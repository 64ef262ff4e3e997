"""End to end with Kueue: kubesim installs Kueue's real v0.19.2 CRDs (KubeSim(kueue=True)),
so the LocalQueue and the per-user ClusterQueue are admitted through them; the test validates
them once more, strictly, and follows them through flavor and spec changes and deletion."""
from __future__ import annotations

import copy

import pytest

from _devuser_helpers import (GROUP, KUEUE as KUEUE_GROUP, VERSION, assert_reconcile_writes_nothing, create_devuser, flavors, gone, kueue_model,
                              reconcile_again, samples, wait_ready)

from ansible_collections.torchdev.operator.plugins.module_utils.quantity import parse_quantity

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
KUEUE = True
KV = "v1beta2"
SAMPLE_FLAVORS = sorted(f["metadata"]["name"] for f in flavors())


def _cq(kube, name):
    return kube["custom"].get_cluster_custom_object(KUEUE_GROUP, KV, "clusterqueues", name)


def _lq(kube, namespace, name="torchdev"):
    return kube["custom"].get_namespaced_custom_object(KUEUE_GROUP, KV, namespace, "localqueues", name)


def _strictly_valid(obj):
    clean = copy.deepcopy(obj)
    clean.pop("status", None)
    for key in ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields"):
        clean["metadata"].pop(key, None)
    kueue_model(obj["kind"]).admit(clean, field_validation="Strict")


def _flavor_names(cq):
    return [f["name"] for rg in cq["spec"]["resourceGroups"] for f in rg["flavors"]]


def test_queues_exist_and_validate(sim, kube, runtime):
    create_devuser(kube, "kara", quota={"gpus": 4})
    obj = wait_ready(sim, kube, "kara")
    st = obj["status"]
    assert st["kueue"] is True and st["queueName"] == "torchdev" and st["clusterQueue"] == "torchdev-kara"
    lq, cq = _lq(kube, "dev-kara"), _cq(kube, "torchdev-kara")
    _strictly_valid(lq)
    _strictly_valid(cq)
    assert lq["spec"]["clusterQueue"] == "torchdev-kara"
    assert not lq["metadata"].get("ownerReferences")  # retained with the namespace
    assert [r["uid"] for r in cq["metadata"]["ownerReferences"]] == [obj["metadata"]["uid"]]
    assert cq["spec"]["cohortName"] == "torchdev"  # watches.yaml vars
    assert cq["spec"]["preemption"]["reclaimWithinCohort"] == "Any"
    assert cq["spec"]["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "dev-kara"}}
    assert _flavor_names(cq) == SAMPLE_FLAVORS
    gpus = {f["name"]: {r["name"]: r["nominalQuota"] for r in f["resources"]}["nvidia.com/gpu"]
            for f in cq["spec"]["resourceGroups"][0]["flavors"]}
    assert gpus == {f["metadata"]["name"]: "4" if (f["spec"].get("gpu") or {}).get("count") else "0"
                    for f in flavors()}
    assert gpus["cpu-small"] == "0" and gpus["gpu-a10g-1"] == "4"
    # The namespace quota caps GPUs/CPU/memory at what the ClusterQueue admits (its nominal quotas
    # over the flavors): a pod Kueue does not queue gets no more than that (issue 25.3).
    hard = kube["core"].read_namespaced_resource_quota("torchdev-quota", "dev-kara").spec.hard
    for res in ("nvidia.com/gpu", "cpu", "memory"):
        nominal = sum(parse_quantity(r["nominalQuota"]) for f in cq["spec"]["resourceGroups"][0]["flavors"]
                      for r in f["resources"] if r["name"] == res)
        assert parse_quantity(hard["requests." + res]) == nominal, res
    assert hard["requests.nvidia.com/gpu"] == str(4 * sum(1 for g in gpus.values() if g == "4"))
    assert hard["requests.storage"] == "2Ti"


def test_reconcile_of_unchanged_devuser_writes_nothing(sim, kube, runtime):
    create_devuser(kube, "quiet")
    wait_ready(sim, kube, "quiet")
    assert_reconcile_writes_nothing(sim, runtime, "quiet")


def test_cluster_queue_follows_the_flavors(sim, kube, runtime):
    create_devuser(kube, "lena")
    wait_ready(sim, kube, "lena")
    flavor = copy.deepcopy(samples("torchdev_v1alpha1_devserverflavor_cpu-small.yaml")
                           ["torchdev_v1alpha1_devserverflavor_cpu-small.yaml"])
    flavor["metadata"]["name"] = "cpu-large"
    kube["custom"].create_cluster_custom_object(GROUP, VERSION, "devserverflavors", flavor)
    try:
        # the watch's reconcilePeriod brings it; here the resync is enqueued at once
        reconcile_again(sim, runtime, "DevUser", "", "lena")
        assert _flavor_names(_cq(kube, "torchdev-lena")) == sorted(SAMPLE_FLAVORS + ["cpu-large"])
    finally:
        kube["custom"].delete_cluster_custom_object(GROUP, VERSION, "devserverflavors", "cpu-large")
    reconcile_again(sim, runtime, "DevUser", "", "lena")
    assert "cpu-large" not in _flavor_names(_cq(kube, "torchdev-lena"))


def test_team_queue_replaces_the_local_queue_and_prunes_the_users(sim, kube, runtime):
    create_devuser(kube, "mona")
    wait_ready(sim, kube, "mona")
    first = _lq(kube, "dev-mona")
    kube["custom"].patch_cluster_custom_object(GROUP, VERSION, "devusers", "mona",
                                               {"spec": {"queue": {"clusterQueue": "team-vision"}}})
    obj = wait_ready(sim, kube, "mona")
    assert obj["status"]["clusterQueue"] == "team-vision"
    lq = _lq(kube, "dev-mona")
    assert lq["spec"]["clusterQueue"] == "team-vision"  # immutable: replaced, not patched
    assert lq["metadata"]["uid"] != first["metadata"]["uid"]
    assert gone(_cq, kube, "torchdev-mona")


def test_delete_with_retain_removes_the_cluster_queue_only(sim, kube, runtime):
    create_devuser(kube, "nina")
    wait_ready(sim, kube, "nina")
    kube["custom"].delete_cluster_custom_object(GROUP, VERSION, "devusers", "nina")
    sim.wait_for(lambda: gone(kube["custom"].get_cluster_custom_object, GROUP, VERSION, "devusers", "nina"), 120,
                 interval=0.2, message="the DevUser to go")
    assert gone(_cq, kube, "torchdev-nina")
    assert _lq(kube, "dev-nina")["metadata"].get("deletionTimestamp") is None
    assert kube["core"].read_namespace("dev-nina").metadata.deletion_timestamp is None


def test_kueue_crds_are_the_real_ones(kube):
    """The simulator serves Kueue from the v0.19.2 CRDs the test validates with."""
    from kubernetes import client

    from kubesim import kueue

    crd = client.ApiextensionsV1Api(kube["client"]).read_custom_resource_definition("clusterqueues.kueue.x-k8s.io")
    (real,) = [c for c in kueue.load_crds() if c["metadata"]["name"] == "clusterqueues.kueue.x-k8s.io"]
    assert [v.name for v in crd.spec.versions] == [v["name"] for v in real["spec"]["versions"]]
