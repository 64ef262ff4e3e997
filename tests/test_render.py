"""Render every object the devserver role creates, without a cluster, and validate it.

This is the role's real rendering path: one ansible-playbook run includes
roles/devserver/tasks/normalize.yml and render.yml (pure tasks, no API calls) for a
matrix of sample DevServers x sample flavors (one inventory host per case, so the
whole matrix costs a single playbook run), dumps ``devserver_objects`` per case, and
every manifest is validated strictly against the Kubernetes 1.33 OpenAPI schema.
"""

from __future__ import annotations

import copy
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from ansible_collections.torchdev.operator.plugins.module_utils import plan
from hack import render_manifests
from hack.render_cases import NAMESPACE, devserver_cases, usage_cases

ROOT = Path(__file__).resolve().parents[1]
K8S_VERSION = "1.33.0"
CASES = devserver_cases()
USAGE = usage_cases()  # the UsageRecords the role writes (tasks/usage.yml), rendered as "usage_<case>"
QUEUE_LABELS = ("kueue.x-k8s.io/queue-name", "kueue.x-k8s.io/priority-class")


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    """{case: [objects]} through hack/render_manifests.py (the renderer `make checkov` and
    tests/security use): one ansible-playbook run for the whole matrix."""
    cases = {key: render_manifests.devserver_hostvars(case) for key, case in CASES.items()}
    cases.update({"usage_" + key: render_manifests.usage_hostvars(case) for key, case in USAGE.items()})
    return render_manifests.render_roles(tmp_path_factory.mktemp("render"), {"devserver": cases})["devserver"]


def _by_kind(objects):
    return {(o["kind"], o["metadata"]["name"]): o for o in objects}


@pytest.mark.parametrize("case", sorted(CASES))
def test_manifests_are_valid_kubernetes(rendered, case):
    objects = rendered[case]
    assert objects, case
    for obj in objects:
        try:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:  # pragma: no cover - report nicely
            pytest.fail("%s %s/%s invalid: %s" % (case, obj["kind"], obj["metadata"]["name"], exc))


@pytest.mark.parametrize("case", sorted(CASES))
def test_common_contract(rendered, case):
    cr = CASES[case]["cr"]
    name = cr["metadata"]["name"]
    for obj in rendered[case]:
        meta = obj["metadata"]
        assert meta["namespace"] == NAMESPACE
        if obj["kind"] == "PersistentVolumeClaim":
            continue  # resize patches of PVCs the StatefulSet controller owns
        assert meta["ownerReferences"] == [{
            "apiVersion": "torchdev.io/v1alpha1", "kind": "DevServer", "name": name,
            "uid": cr["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]
        labels = meta["labels"]
        assert labels["app.kubernetes.io/instance"] == name
        assert labels["app.kubernetes.io/managed-by"] == "torchdev-operator"
        assert labels["torchdev.io/devserver"] == name
        assert labels["torchdev.io/flavor"] == cr["spec"]["flavor"]
        assert "@" not in labels["torchdev.io/owner"]
        assert meta["annotations"]["torchdev.io/desired-hash"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_statefulset(rendered, case):
    cr, flavor = CASES[case]["cr"], CASES[case]["flavor"]
    spec, name = cr["spec"], cr["metadata"]["name"]
    objs = _by_kind(rendered[case])
    sts = objs[("StatefulSet", name)]
    pod = sts["spec"]["template"]["spec"]
    dev = pod["containers"][0]
    if spec.get("suspend"):
        assert sts["spec"]["replicas"] == 0
    elif spec.get("mode") == "distributed":
        d = spec["distributed"]
        assert sts["spec"]["replicas"] == d["worldSize"] // d.get("nprocsPerNode", 1)
    else:
        assert sts["spec"]["replicas"] == 1
    assert sts["spec"]["serviceName"] == name
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    assert sts["spec"]["persistentVolumeClaimRetentionPolicy"] == {
        "whenDeleted": "Delete" if spec.get("homeRetentionPolicy") == "Delete" else "Retain", "whenScaled": "Retain"}
    assert set(sts["spec"]["selector"]["matchLabels"].items()) <= set(sts["spec"]["template"]["metadata"]["labels"].items())
    # security
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 1000
    assert pod["securityContext"]["fsGroup"] == 1000
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert dev["securityContext"]["allowPrivilegeEscalation"] is False
    assert dev["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    # volumes
    mounts = {m["mountPath"]: m["name"] for m in dev["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert mounts["/home/dev"] == "home" and mounts["/dev/shm"] == "shm"
    assert volumes["shm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": str(flavor["spec"].get("shmSize", "1Gi"))}
    shared = spec.get("sharedVolumeClaimName") or (
        ((CASES[case].get("devuser") or {}).get("status") or {}).get("sharedVolumeClaimName")
        if spec.get("mountSharedVolume", True) else None)
    if shared:
        assert volumes[mounts["/shared"]]["persistentVolumeClaim"]["claimName"] == shared
    else:
        assert "/shared" not in mounts
    # SSH keys (issue 27.1): spec.sshKeySecretRef, else the DevUser's Secret (optional: it may not
    # be written yet), unless mountUserSSHKeys is false; sshd reads the file at this mount
    user_keys = ((CASES[case].get("devuser") or {}).get("status") or {}).get("sshKeySecretName")
    ref = spec.get("sshKeySecretRef") or ({"name": user_keys, "optional": True}
                                          if user_keys and spec.get("mountUserSSHKeys", True) else None)
    if ref and spec.get("enableSSH", True):
        secret = volumes[mounts["/etc/torchdev/ssh-secret"]]["secret"]
        assert secret == dict({"secretName": ref["name"], "defaultMode": 292,
                               "items": [{"key": ref.get("key", "authorized_keys"), "path": "authorized_keys"}]},
                              **({"optional": True} if ref.get("optional") else {}))
    else:
        assert "/etc/torchdev/ssh-secret" not in mounts and "ssh-secret" not in volumes
    # resources from the flavor, GPUs as nvidia.com/gpu
    gpus = (flavor["spec"].get("gpu") or {}).get("count", 0)
    limits = dev.get("resources", {}).get("limits", {})
    if gpus:
        assert limits["nvidia.com/gpu"] == str(gpus)
    else:
        assert "nvidia.com/gpu" not in limits
    assert pod.get("nodeSelector", {}) == flavor["spec"].get("nodeSelector", {})
    assert pod.get("tolerations", []) == flavor["spec"].get("tolerations", [])
    # env: TORCHDEV_* first, then the user's (raw names, valueFrom kept)
    env_names = [e["name"] for e in dev["env"]]
    assert "TORCHDEV_NAME" in env_names
    user = [e["name"] for e in spec.get("env", [])]
    assert env_names[-len(user):] == user if user else True
    annotations = sts["spec"]["template"]["metadata"]["annotations"]
    assert annotations["torchdev.io/flavor-hash"] and annotations["torchdev.io/config-hash"]
    # SSH
    if spec.get("enableSSH", True):
        assert "sshd -D -e -p 2222" in dev["args"][0]
        svc = objs[("Service", name + "-ssh")]
        assert svc["spec"]["ports"] == [{"name": "ssh", "port": 22, "targetPort": 2222, "protocol": "TCP"}]
        assert svc["spec"]["type"] == (spec.get("ssh") or {}).get("serviceType", "ClusterIP")
    else:
        assert ("Service", name + "-ssh") not in objs
    headless = objs[("Service", name)]
    assert headless["spec"]["clusterIP"] == "None"
    if spec.get("sshPublicKeys") and spec.get("enableSSH", True):
        cm = objs[("ConfigMap", name + "-ssh")]
        assert cm["data"]["authorized_keys"].strip().splitlines() == spec["sshPublicKeys"]
    else:
        assert ("ConfigMap", name + "-ssh") not in objs


@pytest.mark.parametrize("case", sorted(CASES))
def test_kueue_labels_only_on_the_statefulset(rendered, case):
    name = CASES[case]["cr"]["metadata"]["name"]
    objs = _by_kind(rendered[case])
    sts = objs[("StatefulSet", name)]
    labels = sts["metadata"]["labels"]
    if CASES[case].get("kueue"):
        assert labels["kueue.x-k8s.io/queue-name"] == "torchdev"
        assert labels["kueue.x-k8s.io/priority-class"] == CASES[case]["cr"]["spec"]["priorityClassName"]
    else:  # without Kueue everything renders as before
        assert not set(QUEUE_LABELS) & set(labels)
    for obj in rendered[case]:
        meta_labels = obj["metadata"].get("labels") or {}
        if obj is not sts:
            assert not set(QUEUE_LABELS) & set(meta_labels), obj["kind"]
    assert not set(QUEUE_LABELS) & set(sts["spec"]["template"]["metadata"]["labels"])


def test_home_volume_template(rendered):
    sts = _by_kind(rendered["jane-dev__gpu-a10g-1"])[("StatefulSet", "jane-dev")]
    (vct,) = sts["spec"]["volumeClaimTemplates"]
    assert vct["metadata"]["name"] == "home"
    assert vct["spec"] == {"accessModes": ["ReadWriteOnce"], "storageClassName": "gp3",
                           "resources": {"requests": {"storage": "100Gi"}}}


def test_grown_home_keeps_template_and_resizes_pvc(rendered):
    objs = _by_kind(rendered["grown_home"])
    sts = objs[("StatefulSet", "grown")]
    assert sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] == "100Gi"
    assert "status" not in sts["spec"]["volumeClaimTemplates"][0]
    pvc = objs[("PersistentVolumeClaim", "home-grown-0")]
    assert pvc["spec"] == {"resources": {"requests": {"storage": "200Gi"}}}


def test_grown_home_on_a_class_that_cannot_expand_is_not_patched(rendered):
    """kube-apiserver refuses to grow a claim whose StorageClass lacks allowVolumeExpansion:
    the role renders no patch for it (status.yml reports it, HomeResized ResizeNotSupported)."""
    objs = _by_kind(rendered["grown_home_fixed_class"])
    assert ("StatefulSet", "grown") in objs
    assert not [key for key in objs if key[0] == "PersistentVolumeClaim"]


def test_cpu_flavor_has_no_gpu(rendered):
    sts = _by_kind(rendered["jane-dev__cpu-small"])[("StatefulSet", "jane-dev")]
    resources = sts["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert "nvidia.com/gpu" not in resources.get("limits", {})
    assert "nvidia.com/gpu" not in resources.get("requests", {})


def test_raw_user_maps_are_not_snake_cased(rendered):
    sts = _by_kind(rendered["env_shared_keys"])[("StatefulSet", "full")]
    env = {e["name"]: e for e in sts["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["NCCL_DEBUG"]["value"] == "INFO"
    assert env["A"]["value"] == "$(TORCHDEV_NAME)"
    volumes = {v["name"]: v for v in sts["spec"]["template"]["spec"]["volumes"]}
    assert volumes["ssh-secret"]["secret"]["secretName"] == "keys"


def test_unchanged_objects_need_no_write(rendered):
    """Rendered objects read back unchanged (plus server defaults) produce no drift."""
    for case, objects in rendered.items():
        live = copy.deepcopy([o for o in objects if o["kind"] != "PersistentVolumeClaim"])
        for obj in live:
            obj["metadata"].update(uid="x", resourceVersion="7", creationTimestamp="2025-01-01T00:00:00Z")
            obj["status"] = {"observedGeneration": 1}
            if obj["kind"] == "Service":
                obj["spec"].setdefault("sessionAffinity", "None")
                obj["spec"]["clusterIPs"] = [obj["spec"].get("clusterIP", "10.0.0.1")]
        wanted = [o for o in objects if o["kind"] != "PersistentVolumeClaim"]
        assert plan.drift(wanted, live) == [], case


SCRIPTS = ROOT / "roles" / "devserver" / "files" / "pytorch"
SCRIPT_FILES = ("devrun", "allreduce_check.py", "gpu_check.py", "torchdev-agent")


@pytest.mark.parametrize("case", sorted(CASES))
def test_scripts_configmap_is_mounted_and_on_path(rendered, case):
    name = CASES[case]["cr"]["metadata"]["name"]
    objs = _by_kind(rendered[case])
    cm = objs[("ConfigMap", name + "-scripts")]
    assert cm["data"] == {f: (SCRIPTS / f).read_text() for f in SCRIPT_FILES}
    sts = objs[("StatefulSet", name)]
    pod = sts["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["scripts"]["configMap"] == {"name": name + "-scripts", "defaultMode": 0o755}
    dev = pod["containers"][0]
    assert {"name": "scripts", "mountPath": "/opt/torchdev/bin", "readOnly": True} in dev["volumeMounts"]
    env = {e["name"]: e for e in dev["env"]}
    assert env["PATH"]["value"].startswith("/opt/torchdev/bin:/opt/conda/bin:")
    annotations = sts["spec"]["template"]["metadata"]["annotations"]
    assert annotations["torchdev.io/scripts-hash"] == plan.checksum(cm["data"])


def _distributed_cases():
    return sorted(k for k, c in CASES.items() if c["cr"]["spec"].get("mode") == "distributed")


def test_distributed_cases_exist():
    assert len(_distributed_cases()) >= 3


@pytest.mark.parametrize("case", _distributed_cases())
def test_distributed_statefulset(rendered, case):
    cr, flavor = CASES[case]["cr"], CASES[case]["flavor"]
    name, dist = cr["metadata"]["name"], cr["spec"]["distributed"]
    objs = _by_kind(rendered[case])
    sts = objs[("StatefulSet", name)]
    nnodes = dist["worldSize"] // dist.get("nprocsPerNode", 1)
    assert sts["spec"]["replicas"] == nnodes and sts["spec"]["podManagementPolicy"] == "Parallel"
    headless = objs[("Service", name)]
    assert headless["spec"]["publishNotReadyAddresses"] is True and headless["spec"]["clusterIP"] == "None"
    assert {"name": "rdzv", "port": 29500, "targetPort": 29500, "protocol": "TCP"} in headless["spec"]["ports"]
    pod = sts["spec"]["template"]["spec"]
    dev = pod["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in dev["ports"]}
    assert ports == dict({"ssh": 2222, "rdzv": 29500}, **{"nccl-%d" % i: 29500 + i for i in range(1, 11)})
    assert all(len(n) <= 15 for n in ports) and len(set(ports.values())) == len(ports)
    # every replica: its own home PVC, the shared claim, /dev/shm from the flavor
    assert [t["metadata"]["name"] for t in sts["spec"]["volumeClaimTemplates"]] == ["home"]
    assert sts["spec"]["persistentVolumeClaimRetentionPolicy"]["whenScaled"] == "Retain"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["shared"]["persistentVolumeClaim"]["claimName"] == cr["spec"]["sharedVolumeClaimName"]
    assert volumes["shm"]["emptyDir"]["sizeLimit"] == flavor["spec"]["shmSize"]
    env = {e["name"]: e for e in dev["env"]}
    host = "%s-0.%s.%s.svc.cluster.local" % (name, name, NAMESPACE)
    assert env["MASTER_ADDR"]["value"] == host and env["MASTER_PORT"]["value"] == "29500"
    assert env["WORLD_SIZE"]["value"] == str(dist["worldSize"]) and env["NNODES"]["value"] == str(nnodes)
    assert env["NPROC_PER_NODE"]["value"] == str(dist.get("nprocsPerNode", 1))
    assert env["NODE_RANK"] == {"name": "NODE_RANK", "valueFrom": {"fieldRef": {
        "apiVersion": "v1", "fieldPath": "metadata.labels['apps.kubernetes.io/pod-index']"}}}
    assert env["TORCHDEV_BACKEND"]["value"] == dist.get("backend", "nccl")
    assert env["TORCHDEV_RDZV_ENDPOINT"]["value"] == host + ":29500"
    if dist.get("backend", "nccl") == "nccl":
        for key, value in dist.get("ncclSettings", {}).items():
            assert env[key]["value"] == value  # user settings merged over the defaults
        if (flavor["spec"].get("gpu") or {}).get("efa"):
            assert env["FI_PROVIDER"]["value"] == "efa" and "NCCL_IB_DISABLE" not in env
        else:
            assert env["NCCL_IB_DISABLE"]["value"] == "1"
    names = [e["name"] for e in dev["env"]]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("case,claim", [("user_share", "jane-shared-efs"), ("user_share_opt_out", None),
                                        ("env_shared_keys", "team-efs"), ("jane-dev__cpu-small", None)])
def test_shared_volume(rendered, case, claim):
    """/shared: spec.sharedVolumeClaimName, else the DevUser's shared claim unless mountSharedVolume is false."""
    name = CASES[case]["cr"]["metadata"]["name"]
    pod = _by_kind(rendered[case])[("StatefulSet", name)]["spec"]["template"]["spec"]
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v}
    mounts = {m["mountPath"]: m["name"] for m in pod["containers"][0]["volumeMounts"]}
    assert claims.get("shared") == claim
    assert ("/shared" in mounts) is (claim is not None)


def test_standalone_single_process_env_and_ports(rendered):
    sts = _by_kind(rendered["jane-dev__gpu-a10g-1"])[("StatefulSet", "jane-dev")]
    dev = sts["spec"]["template"]["spec"]["containers"][0]
    assert dev["ports"] == [{"name": "ssh", "containerPort": 2222, "protocol": "TCP"}]
    env = {e["name"]: e.get("value") for e in dev["env"]}
    assert env["MASTER_ADDR"] == "127.0.0.1" and env["WORLD_SIZE"] == "1" and env["NODE_RANK"] == "0"
    assert env["TORCHDEV_BACKEND"] == "nccl"
    assert not any(k.startswith(("NCCL_", "FI_")) for k in env)
    headless = _by_kind(rendered["jane-dev__gpu-a10g-1"])[("Service", "jane-dev")]
    assert [p["name"] for p in headless["spec"]["ports"]] == ["ssh"]


@pytest.mark.parametrize("case,service_type,policy", [
    ("jane-dev__cpu-small", "ClusterIP", False),   # the operator's default (devserver_ssh_service_type)
    ("user_share", "ClusterIP", False),            # a DevUser's namespace: its allow-ssh is the policy
    ("ssh_nodeport", "NodePort", True),            # ... a NodePort there gets its own, from the operator's CIDRs
    ("ssh_loadbalancer", "LoadBalancer", False),   # no DevUser: nothing of torchdev isolates the pod
])
def test_ssh_service_type_and_network_policy(rendered, case, service_type, policy):
    """spec.ssh.serviceType (issue 27.6): the <name>-ssh Service's type, the client's address kept for
    an external one, and the NetworkPolicy <name>-ssh to sshd of replica 0 only where a DevUser's
    default-deny would drop the clients."""
    name = CASES[case]["cr"]["metadata"]["name"]
    objects = _by_kind(rendered[case])
    svc = objects[("Service", name + "-ssh")]["spec"]
    assert svc["type"] == service_type
    assert svc.get("externalTrafficPolicy") == (None if service_type == "ClusterIP" else "Local")
    assert "nodePort" not in svc["ports"][0]  # the API server allocates it (and clears it on a change back)
    netpol = objects.get(("NetworkPolicy", name + "-ssh"))
    assert (netpol is not None) is policy
    if policy:
        assert netpol["spec"]["podSelector"]["matchLabels"] == svc["selector"]
        assert netpol["spec"]["ingress"] == [{"from": [{"ipBlock": {"cidr": "0.0.0.0/0"}}],
                                              "ports": [{"protocol": "TCP", "port": 2222}]}]


# --- UsageRecords (tasks/usage.yml) --------------------------------------------------------------

@pytest.fixture(scope="module")
def usage_model():
    from kubesim import validation

    crd = yaml.safe_load((ROOT / "config" / "crd" / "bases" / "torchdev.io_usagerecords.yaml").read_text())
    return validation.CRDModel(crd).version("v1alpha1")


@pytest.mark.parametrize("case", sorted(k for k in USAGE if k != "written"))
def test_usage_record(rendered, usage_model, case):
    """One record per ended reservation, valid against its CRD (strict), in the DevServer's
    namespace, labelled as the server's, with NO ownerReference (it outlives the DevServer)."""
    from ansible_collections.torchdev.operator.plugins.module_utils.flavor import flavor_gpu_count
    from ansible_collections.torchdev.operator.plugins.module_utils.usage import decimal, record_name

    (record,) = rendered["usage_" + case]
    cr, flavor = USAGE[case]["cr"], USAGE[case]["flavor"]
    reservation = USAGE[case].get("reservation") or cr["status"]["reservation"]
    stored = usage_model.admit(copy.deepcopy(record), field_validation="Strict")
    assert stored["spec"] == record["spec"]  # nothing pruned or defaulted
    meta, spec = record["metadata"], record["spec"]
    assert meta["namespace"] == NAMESPACE and "ownerReferences" not in meta
    assert meta["name"] == record_name(cr["metadata"]["name"], reservation["startedAt"])
    assert meta["labels"]["torchdev.io/devserver"] == cr["metadata"]["name"] == spec["server"]
    assert meta["labels"]["app.kubernetes.io/name"] == "usagerecord" and meta["labels"]["torchdev.io/flavor"] == spec["flavor"]
    assert spec["user"] == cr["spec"]["owner"] and spec["flavor"] == flavor["metadata"]["name"]
    assert spec["gpus"] == spec["replicas"] * flavor_gpu_count(flavor["spec"])
    if case == "running":  # open (issue 25.5): what it used is written when it ends
        assert not {"endedAt", "endReason", "gpuHours", "cost", "idleSavedGPUHours"} & set(spec), spec
        assert spec["startedAt"] == reservation["startedAt"] and spec["expiresAt"] == reservation["expiresAt"]
        return
    assert spec["endReason"] == ("Deleted" if case == "deleted" else reservation["endReason"])
    seconds = (datetime.fromisoformat(spec["endedAt"]) - datetime.fromisoformat(spec["startedAt"])).total_seconds()
    hours = Decimal(int(seconds)) / 3600
    assert decimal(hours * spec["gpus"]) == decimal(spec["gpuHours"])
    assert decimal(hours * decimal(flavor["spec"]["pricePerHour"]) * spec["replicas"]) == decimal(spec["cost"])
    assert (decimal(spec["idleSavedGPUHours"]) > 0) is (case == "idle")


def test_an_existing_usage_record_renders_nothing(rendered):
    """observe.yml found the record: nothing to write (zero write requests)."""
    assert rendered["usage_written"] == [] and rendered["usage_cancelled"]
