"""Render every object the devuser role creates, without a cluster, and validate it.

One ansible-playbook run includes roles/devuser/tasks/normalize.yml and render.yml (pure
tasks, no API calls) for a matrix of DevUsers (the samples and edge cases) with and without
Kueue (one inventory host per case), dumps ``devuser_objects`` per case, and validates every
manifest strictly: built-in kinds against the Kubernetes 1.33 OpenAPI schema
(kubernetes-validate), Kueue kinds through the real Kueue v0.19.2 CRDs (kubesim's admission:
OpenAPI schema, unknown fields rejected, CEL rules).
"""
from __future__ import annotations

import copy

import kubernetes_validate
import pytest

from _devuser_helpers import KEY, kueue_model, subset
from ansible_collections.torchdev.operator.plugins.module_utils import plan, quantity
from hack import render_manifests
from hack.render_cases import devuser_cases, flavors

K8S_VERSION = "1.33.0"
FLAVORS = flavors()
GPU_FLAVORS = sorted(f["metadata"]["name"] for f in FLAVORS if (f["spec"].get("gpu") or {}).get("count"))
BUILTIN = {"Namespace", "RoleBinding", "ResourceQuota", "LimitRange", "NetworkPolicy", "PersistentVolumeClaim",
           "Secret"}


CASES = devuser_cases()


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    """{"objects": {case: [objects]}, "stdout": the playbook's output} through
    hack/render_manifests.py (the renderer `make checkov` and tests/security use)."""
    tmp = tmp_path_factory.mktemp("render")
    cases = {key: render_manifests.devuser_hostvars(case) for key, case in CASES.items()}
    objects = render_manifests.render_roles(tmp, {"devuser": cases})["devuser"]
    return {"objects": objects, "stdout": (tmp / "ansible.log").read_text()}


def _by_kind(objects):
    return {(o["kind"], o["metadata"]["name"]): o for o in objects}


def _names(case):
    name = CASES[case]["cr"]["metadata"]["name"]
    return name, f"dev-{name}"


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_object_is_valid(rendered, case):
    for obj in rendered["objects"][case]:
        kind = obj["kind"]
        if kind in BUILTIN:
            try:
                kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
            except kubernetes_validate.ValidationError as exc:  # pragma: no cover - report nicely
                pytest.fail(f"{case} {kind}/{obj['metadata']['name']} invalid: {exc}")
        else:
            assert obj["apiVersion"] == "kueue.x-k8s.io/v1beta2", obj["apiVersion"]
            stored = kueue_model(kind).admit(copy.deepcopy(obj), field_validation="Strict")
            assert subset(obj, stored), f"{case} {kind}: the CRD prunes or rewrites rendered fields"


@pytest.mark.parametrize("case", sorted(CASES))
def test_objects_and_metadata(rendered, case):
    cr = CASES[case]["cr"]
    name, ns = _names(case)
    kueue = CASES[case]["kueue"]
    objs = _by_kind(rendered["objects"][case])
    expected = {("Namespace", ns), ("RoleBinding", "devserver-user"), ("ResourceQuota", "torchdev-quota"),
                ("LimitRange", "torchdev-limits"), ("NetworkPolicy", "default-deny"),
                ("NetworkPolicy", "allow-same-namespace"), ("PersistentVolumeClaim", f"{name}-shared-efs"),
                ("Secret", "ssh-public-keys")}
    if cr["spec"].get("network", {}).get("sshAllowedCIDRs", ["default"]):
        expected.add(("NetworkPolicy", "allow-ssh"))
    if kueue:
        expected.add(("LocalQueue", "torchdev"))
        if not cr["spec"]["queue"].get("clusterQueue"):
            expected.add(("ClusterQueue", f"torchdev-{name}"))
    assert set(objs) == expected
    owner = {"apiVersion": "torchdev.io/v1alpha1", "kind": "DevUser", "name": name, "uid": cr["metadata"]["uid"],
             "controller": True, "blockOwnerDeletion": True}
    for (kind, oname), obj in objs.items():
        meta = obj["metadata"]
        if kind in ("Namespace", "ClusterQueue"):
            assert "namespace" not in meta
        else:
            assert meta["namespace"] == ns
        # Only what goes with the DevUser in any case is owned by it (Retain keeps the rest).
        assert meta.get("ownerReferences", []) == ([owner] if kind in ("RoleBinding", "ClusterQueue") else [])
        assert meta["labels"]["torchdev.io/user"] == name
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "torchdev-operator"
        assert "@" not in meta["labels"]["torchdev.io/owner"]
        assert meta["annotations"]["operator-sdk/primary-resource"] == f"/{name}"
        assert meta["annotations"]["operator-sdk/primary-resource-type"] == "DevUser.torchdev.io"
        assert meta["annotations"]["torchdev.io/desired-hash"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_namespace_access_and_storage(rendered, case):
    cr = CASES[case]["cr"]
    name, ns = _names(case)
    objs = _by_kind(rendered["objects"][case])
    assert objs[("Namespace", ns)]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    rb = objs[("RoleBinding", "devserver-user")]
    assert rb["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                             "name": "torchdev-devserver-user"}  # config/default's name for it
    assert rb["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": cr["spec"]["email"]}]
    pvc = objs[("PersistentVolumeClaim", f"{name}-shared-efs")]
    shared = cr["spec"]["sharedStorage"]
    assert pvc["spec"] == {"accessModes": ["ReadWriteMany"], "storageClassName": shared["storageClassName"],
                           "resources": {"requests": {"storage": str(shared["size"])}}}
    import base64

    secret = objs[("Secret", "ssh-public-keys")]
    assert secret["type"] == "Opaque" and set(secret["data"]) == {"authorized_keys"}
    keys = base64.b64decode(secret["data"]["authorized_keys"]).decode().splitlines()
    assert keys == cr["spec"].get("sshPublicKeys", [])


@pytest.mark.parametrize("case", sorted(CASES))
def test_network_policies(rendered, case):
    cr = CASES[case]["cr"]
    objs = _by_kind(rendered["objects"][case])
    deny = objs[("NetworkPolicy", "default-deny")]["spec"]
    assert deny == {"podSelector": {}, "policyTypes": ["Ingress"]}
    same = objs[("NetworkPolicy", "allow-same-namespace")]["spec"]
    # every port between the user's pods: rendezvous 29500, NCCL 29501-29510 and the rest
    assert same["ingress"] == [{"from": [{"podSelector": {}}]}]
    cidrs = cr["spec"]["network"].get("sshAllowedCIDRs", ["10.0.0.0/8"])
    if not cidrs:
        assert ("NetworkPolicy", "allow-ssh") not in objs  # an empty `from` would allow everybody
        return
    ssh = objs[("NetworkPolicy", "allow-ssh")]["spec"]
    assert ssh["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": "devserver"}}
    (rule,) = ssh["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 2222}]
    assert [f["ipBlock"]["cidr"] for f in rule["from"]] == cidrs


@pytest.mark.parametrize("case", sorted(CASES))
def test_quota_and_limits(rendered, case):
    cr, kueue = CASES[case]["cr"], CASES[case]["kueue"]
    quota = cr["spec"]["quota"]
    objs = _by_kind(rendered["objects"][case])
    hard = objs[("ResourceQuota", "torchdev-quota")]["spec"]["hard"]
    assert hard["requests.storage"] == str(quota["storage"])
    assert hard["persistentvolumeclaims"] == str(quota["persistentVolumeClaims"])
    assert hard["count/devservers.torchdev.io"] == str(quota["devServers"])
    # cpu, memory and GPUs in both modes (issue 25.3: with Kueue nothing capped them, so a pod Kueue
    # does not queue got any number of GPUs): the DevUser's quota, with Kueue over every live flavor
    # as its ClusterQueue's nominal quotas (each flavor's override, GPUs for GPU flavors only)
    live = [f for f in CASES[case]["flavors"] if not f["metadata"].get("deletionTimestamp")]
    overrides = {o["name"]: o for o in quota.get("flavors", [])}
    per_flavor = [(overrides.get(f["metadata"]["name"], {}), f["metadata"]["name"] in GPU_FLAVORS) for f in live]
    if kueue and per_flavor:
        want = {"cpu": sum(quantity.parse_quantity(o.get("cpu", quota["cpu"])) for o, _ in per_flavor),
                "memory": sum(quantity.parse_quantity(o.get("memory", quota["memory"])) for o, _ in per_flavor),
                "nvidia.com/gpu": sum(int(o.get("gpus", quota["gpus"] if gpu else 0)) for o, gpu in per_flavor)}
    else:
        want = {"cpu": quantity.parse_quantity(quota["cpu"]), "memory": quantity.parse_quantity(quota["memory"]),
                "nvidia.com/gpu": int(quota["gpus"])}
    assert {r: quantity.parse_quantity(hard["requests." + r]) for r in want} == want
    (item,) = objs[("LimitRange", "torchdev-limits")]["spec"]["limits"]
    assert item["type"] == "Container" and "nvidia.com/gpu" not in item["max"]
    for res in ("cpu", "memory"):
        assert quantity.parse_quantity(item["defaultRequest"][res]) <= quantity.parse_quantity(item["max"][res])


def _queue_case_ids():
    return sorted(k for k, c in CASES.items() if c["kueue"] and not c["cr"]["spec"]["queue"].get("clusterQueue"))


@pytest.mark.parametrize("case", _queue_case_ids())
def test_cluster_queue(rendered, case):
    cr = CASES[case]["cr"]
    name, ns = _names(case)
    quota = cr["spec"]["quota"]
    objs = _by_kind(rendered["objects"][case])
    cq = objs[("ClusterQueue", f"torchdev-{name}")]["spec"]
    lq = objs[("LocalQueue", "torchdev")]["spec"]
    assert lq == {"clusterQueue": f"torchdev-{name}"}
    assert cq["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": ns}}
    watch_vars = CASES[case].get("vars", {})
    if watch_vars.get("kueue_cohort") == "":
        assert "cohortName" not in cq
    else:
        assert cq["cohortName"] == "torchdev"
    assert cq["preemption"] == watch_vars.get("kueue_preemption", {
        "reclaimWithinCohort": "Any", "borrowWithinCohort": {"policy": "Never"}, "withinClusterQueue": "LowerPriority"})
    assert cq["fairSharing"] == {"weight": watch_vars.get("kueue_fair_sharing_weight", 1)}
    live_flavors = sorted(f["metadata"]["name"] for f in CASES[case]["flavors"]
                          if not f["metadata"].get("deletionTimestamp"))
    if not live_flavors:
        assert cq["resourceGroups"] == []
        return
    (group,) = cq["resourceGroups"]
    assert group["coveredResources"][:3] == ["cpu", "memory", "nvidia.com/gpu"]
    # every resource a flavor requests is covered (Kueue rejects uncovered requests)
    assert set(group["coveredResources"]) >= {"ephemeral-storage", "vpc.amazonaws.com/efa"}
    assert [f["name"] for f in group["flavors"]] == live_flavors
    overrides = {o["name"]: o for o in quota.get("flavors", [])}
    for entry in group["flavors"]:
        nominal = {r["name"]: r["nominalQuota"] for r in entry["resources"]}
        assert list(nominal) == group["coveredResources"]
        over = overrides.get(entry["name"], {})
        gpus = over.get("gpus", quota["gpus"] if entry["name"] in GPU_FLAVORS else 0)
        assert nominal["nvidia.com/gpu"] == str(gpus)
        assert nominal["cpu"] == str(over.get("cpu", quota["cpu"]))
        assert nominal["memory"] == str(over.get("memory", quota["memory"]))


def test_extra_resources_never_bind_first(rendered):
    """ada: 8 GPUs on a10g-1 (1 GPU, 7 CPU, 28Gi each) with 96 CPU / 384Gi admits 8 pods by GPUs,
    13 by CPU, 13 by memory -> 8 pods -> ephemeral-storage 8 x 100Gi; h100-8 override: 16 GPUs ->
    2 pods (CPU 384/180 = 2, memory 4000/1800 = 2) -> 2 x 32 EFA, 2 x 1Ti."""
    cq = _by_kind(rendered["objects"]["ada-kueue"])[("ClusterQueue", "torchdev-ada")]["spec"]
    by_flavor = {f["name"]: {r["name"]: r["nominalQuota"] for r in f["resources"]}
                 for f in cq["resourceGroups"][0]["flavors"]}
    assert by_flavor["gpu-a10g-1"]["ephemeral-storage"] == "800Gi"
    assert by_flavor["gpu-a10g-1"]["vpc.amazonaws.com/efa"] == "0"
    assert by_flavor["gpu-h100-8"] == {"cpu": "384", "memory": "4000Gi", "nvidia.com/gpu": "16",
                                       "ephemeral-storage": "2Ti", "vpc.amazonaws.com/efa": "64"}
    # cpu-small: no GPUs, 96/2 CPU = 48, 384Gi/8Gi = 48 -> 48 x 20Gi
    assert by_flavor["cpu-small"]["nvidia.com/gpu"] == "0"
    assert by_flavor["cpu-small"]["ephemeral-storage"] == "960Gi"


def test_team_queue_has_no_cluster_queue(rendered):
    objs = _by_kind(rendered["objects"]["team-queue"])
    assert objs[("LocalQueue", "torchdev")]["spec"] == {"clusterQueue": "team-vision"}
    assert not [k for k in objs if k[0] == "ClusterQueue"]


def test_small_quota_caps_the_default_request(rendered):
    (item,) = _by_kind(rendered["objects"]["ipv6-small-quota"])[("LimitRange", "torchdev-limits")]["spec"]["limits"]
    assert item["max"] == {"cpu": "50m", "memory": "100Mi"}
    assert item["defaultRequest"] == {"cpu": "50m", "memory": "100Mi"}


def test_ssh_keys_never_reach_the_output(rendered):
    """The keys are in the Secret only: every task that carries them is no_log."""
    assert KEY.split()[1] not in rendered["stdout"]
    assert "AAAAC3NzaC1lZDI1NTE5AAAAIOzZGzFR0f" not in rendered["stdout"]


def test_unchanged_objects_need_no_write(rendered):
    """Rendered objects read back unchanged (plus server defaults) produce no drift."""
    for case, objects in rendered["objects"].items():
        live = copy.deepcopy(objects)
        for obj in live:
            obj["metadata"].update(uid="x", resourceVersion="7", creationTimestamp="2025-01-01T00:00:00Z")
            if obj["kind"] == "Namespace":
                obj["metadata"]["labels"]["kubernetes.io/metadata.name"] = obj["metadata"]["name"]
                obj["spec"] = {"finalizers": ["kubernetes"]}
            if obj["kind"] == "LimitRange":  # the apiserver defaults `default` from `max`
                obj["spec"]["limits"][0]["default"] = dict(obj["spec"]["limits"][0]["max"])
            if obj["kind"] in ("ClusterQueue", "LocalQueue"):
                obj["spec"] = kueue_model(obj["kind"]).admit(copy.deepcopy(obj))["spec"]
        assert plan.drift(objects, live) == [], case
