"""Tests for the torchdev CRDs (config/crd) and the samples (config/samples).

1. Structural checks that need no server: descriptions, bounds, printer columns, names.
2. CEL / OpenAPI validation exercised through kubesim's admission path
   (``CRDModel(crd).version("v1alpha1").admit(obj, old=None)``).
3. ``kubectl kustomize`` builds and every sample is admitted unchanged.
"""
from __future__ import annotations

import copy
import re
import subprocess
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from _support import tool
import yaml

ROOT = Path(__file__).resolve().parents[1]
CRD_DIR = ROOT / "config" / "crd"
SAMPLES_DIR = ROOT / "config" / "samples"
DEVSERVER_CRD = CRD_DIR / "bases" / "torchdev.io_devservers.yaml"
FLAVOR_CRD = CRD_DIR / "bases" / "torchdev.io_devserverflavors.yaml"
DEVUSER_CRD = CRD_DIR / "bases" / "torchdev.io_devusers.yaml"  # admission cases: tests/devuser/test_crd.py
USAGE_CRD = CRD_DIR / "bases" / "torchdev.io_usagerecords.yaml"
VERSION = "v1alpha1"
YAMLLINT_CONFIG = "{extends: default, rules: {line-length: {max: 160}, document-start: disable}}"

SSH_KEY = ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOzZGzFR0f+1ZFGx6AAdT7rUzNFxsF7E2fG10UTfOV8Y "
           "jane@laptop")


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------

def load(path: Path) -> dict:
    with path.open() as f:
        return yaml.safe_load(f)


CRDS = {"DevServer": load(DEVSERVER_CRD), "DevServerFlavor": load(FLAVOR_CRD), "DevUser": load(DEVUSER_CRD),
        "UsageRecord": load(USAGE_CRD)}
CRDS["TrainingJob"] = load(CRD_DIR / "bases" / "torchdev.io_trainingjobs.yaml")  # admission cases: tests/trainingjob/test_trainingjob_crd.py
CRDS["EphemeralAccelerationJob"] = load(CRD_DIR / "bases" / "torchdev.io_ephemeralaccelerationjobs.yaml")  # admission cases: tests/eaj/test_eaj_crd.py


def version_of(crd: dict, name: str = VERSION) -> dict:
    return next(v for v in crd["spec"]["versions"] if v["name"] == name)


def root_schema(crd: dict) -> dict:
    return version_of(crd)["schema"]["openAPIV3Schema"]


def walk(schema: dict, path: str = "") -> Iterator[tuple[str, dict]]:
    """Yield (path, schema) for every node; list items are `path[]`, map values `path{}`."""
    yield path, schema
    for name, sub in (schema.get("properties") or {}).items():
        yield from walk(sub, f"{path}.{name}" if path else name)
    if isinstance(schema.get("items"), dict):
        yield from walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from walk(schema["additionalProperties"], f"{path}{{}}")


def properties(schema: dict, path: str = "") -> Iterator[tuple[str, str, dict]]:
    """Yield (path, property name, schema) for every named property, recursively."""
    for p, node in walk(schema, path):
        for name, sub in (node.get("properties") or {}).items():
            yield (f"{p}.{name}" if p else name), name, sub


def all_rules() -> list[tuple[str, str, dict]]:
    out = []
    for kind, crd in CRDS.items():
        for path, node in walk(root_schema(crd)):
            for rule in node.get("x-kubernetes-validations") or []:
                out.append((kind, path or "<root>", rule))
    return out


def kustomize(directory: Path) -> list[dict]:
    out = subprocess.run([tool("kubectl"), "kustomize", str(directory)], check=True, capture_output=True,
                         text=True, timeout=120).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def is_subset(small: Any, big: Any) -> bool:
    """True when every leaf of `small` is present, unchanged, in `big`."""
    if isinstance(small, dict):
        return isinstance(big, dict) and all(k in big and is_subset(v, big[k]) for k, v in small.items())
    if isinstance(small, list):
        return isinstance(big, list) and len(small) == len(big) and all(
            is_subset(a, b) for a, b in zip(small, big))
    return small == big


# ---------------------------------------------------------------------------------------------
# 1. structural checks (no server)
# ---------------------------------------------------------------------------------------------

PROPERTY_CASES = [pytest.param(kind, path, name, sub, id=f"{kind}:{path}")
                  for kind, crd in CRDS.items()
                  for path, name, sub in properties(root_schema(crd))
                  if path != "metadata"]


@pytest.mark.parametrize("kind,path,name,schema", PROPERTY_CASES)
def test_property_description_starts_with_name(kind, path, name, schema):
    desc = schema.get("description") or ""
    assert desc, f"{kind} {path} has no description"
    assert re.match(rf"^{re.escape(name)}\b", desc, re.IGNORECASE), \
        f"{kind} {path}: description must start with {name!r}: {desc[:60]!r}"


def _descriptions(node, path=""):
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "description" and isinstance(value, str):
                yield path, value
            else:
                yield from _descriptions(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _descriptions(value, f"{path}[{i}]")


@pytest.mark.parametrize("kind", CRDS)
def test_descriptions_have_no_hard_line_breaks(kind):
    # kubectl explain wraps a description itself: a line break is kept only before a list item
    broken = [f"{path}: {line[:60]!r}" for path, desc in _descriptions(CRDS[kind])
              for line in desc.split("\n")[1:] if not line.startswith("- ")]
    assert not broken, f"{kind}: descriptions with hard line breaks (write them as '>-' blocks):\n" + "\n".join(broken)


@pytest.mark.parametrize("kind", CRDS)
def test_root_metadata_is_bare_object(kind):
    # the apiserver forbids anything but restrictions on name/generateName (even a description)
    assert root_schema(CRDS[kind])["properties"]["metadata"] == {"type": "object"}


@pytest.mark.parametrize("kind", CRDS)
def test_no_preserve_unknown_fields(kind):
    for path, node in walk(root_schema(CRDS[kind])):
        assert "x-kubernetes-preserve-unknown-fields" not in node, f"{kind} {path}"


@pytest.mark.parametrize("kind", CRDS)
def test_every_list_map_and_string_is_bounded(kind):
    """CEL cost estimation needs maxItems / maxProperties / maxLength everywhere."""
    for path, node in walk(root_schema(CRDS[kind])):
        t = node.get("type")
        if t == "array":
            assert "maxItems" in node, f"{kind} {path}: array without maxItems"
        elif t == "object" and isinstance(node.get("additionalProperties"), dict):
            assert "maxProperties" in node, f"{kind} {path}: map without maxProperties"
        elif t == "string" and path not in ("apiVersion", "kind"):  # set by the apiserver
            assert "maxLength" in node or "enum" in node or node.get("format") == "date-time", \
                f"{kind} {path}: string without maxLength/enum"


@pytest.mark.parametrize("kind,path,rule", [pytest.param(k, p, r, id=f"{k}:{p}:{i}")
                                            for i, (k, p, r) in enumerate(all_rules())])
def test_rule_has_message_and_compiles(kind, path, rule):
    import celpy

    assert rule.get("rule", "").strip()
    assert rule.get("message", "").strip(), f"{kind} {path}: rule without message: {rule['rule']}"
    assert rule.get("reason", "FieldValueInvalid") in (
        "FieldValueInvalid", "FieldValueForbidden", "FieldValueRequired", "FieldValueDuplicate")
    env = celpy.Environment()
    env.compile(rule["rule"])  # raises CELParseError on a syntax error
    # `string(x)` has no size estimate in the apiserver's cost model: quantity(string(x)) on an
    # int-or-string field makes the CRD exceed the per-expression cost budget.
    assert "quantity(string(" not in rule["rule"]


# The apiserver sizes an x-kubernetes-int-or-string value as the largest request (3 MiB) whatever
# its maxLength, and charges quantity()/isQuantity() 0.1 per character: ~314573 per call.
_INT_OR_STRING_QUANTITY_CALL = int((3 * 1024 * 1024 - 2) * 0.1)
_STATIC_ESTIMATED_COST_LIMIT = 10_000_000  # per expression (apiextensions validation)


def _node_at(schema: dict, path: str) -> dict:
    node = schema
    for part in filter(None, path.replace("[]", ".[]").replace("{}", ".{}").split(".")):
        node = node["items"] if part == "[]" else node["additionalProperties"] if part == "{}" \
            else node["properties"][part]
    return node


@pytest.mark.parametrize("kind,path,rule", [pytest.param(k, p, r, id=f"{k}:{p}:{i}")
                                            for i, (k, p, r) in enumerate(all_rules())
                                            if "uantity(" in r["rule"]])
def test_quantity_rules_fit_the_cost_budget(kind, path, rule):
    """A rough upper bound of the apiserver's static cost estimate for quantity rules."""
    expr = rule["rule"]
    calls = len(re.findall(r"(?:isQuantity|quantity)\((?!')", expr))
    loops = 1
    node = _node_at(root_schema(CRDS[kind]), "" if path == "<root>" else path)
    for m in re.finditer(r"self\.(\w+)\.all\(", expr):
        loops *= _node_at(node, m.group(1)).get("maxProperties") or _node_at(node, m.group(1))["maxItems"]
    for m in re.finditer(r"\[([^\]]*)\]\.all\(", expr):
        loops *= len(m.group(1).split(","))
    estimate = calls * _INT_OR_STRING_QUANTITY_CALL * loops
    assert estimate < 0.8 * _STATIC_ESTIMATED_COST_LIMIT, (estimate, expr)


def test_rule_inventory():
    """The rules the API contract promises exist where docs/api.md says."""
    by_path: dict[tuple[str, str], list[str]] = {}
    for kind, path, rule in all_rules():
        by_path.setdefault((kind, path), []).append(rule["rule"])
    ds = {p: rs for (k, p), rs in by_path.items() if k == "DevServer"}
    assert any("has(self.distributed)" in r for r in ds["spec"])
    assert any("% self.nprocsPerNode" in r for r in ds["spec.distributed"])
    assert any("startsWith('NCCL_')" in r for r in ds["spec.distributed.ncclSettings"])
    assert ds["spec.mode"] == ["self == oldSelf"]
    assert ds["spec.homeStorageClassName"] == ["self == oldSelf"]
    assert any("oldSelf" in r and "compareTo" in r for r in ds["spec.persistentHomeSize"])
    assert any("matches" in r for r in ds["spec.owner"])
    assert any("matches" in r for r in ds["spec.sshPublicKeys[]"])
    fl = {p: rs for (k, p), rs in by_path.items() if k == "DevServerFlavor"}
    assert any("compareTo" in r and ">= 0" in r for r in fl["spec.resources"])
    ur = {p: rs for (k, p), rs in by_path.items() if k == "UsageRecord"}
    assert "!has(oldSelf.endedAt) || self == oldSelf" in ur["spec"]  # written once it ended (issue 25.5: open before)
    assert any("matches" in r for r in ur["spec.user"])


def test_devserver_names_and_columns():
    crd = CRDS["DevServer"]
    spec = crd["spec"]
    assert crd["metadata"]["name"] == "devservers.torchdev.io"
    assert spec["scope"] == "Namespaced"
    assert {"dsv", "devsrv"} <= set(spec["names"]["shortNames"])
    assert "ds" not in spec["names"]["shortNames"]  # DaemonSet owns "ds" in kubectl
    assert set(spec["names"]["categories"]) == {"all", "torchdev"}
    v = version_of(crd)
    assert v["served"] and v["storage"] and v["subresources"] == {"status": {}}
    cols = {c["name"]: c for c in v["additionalPrinterColumns"]}
    assert [c["name"] for c in v["additionalPrinterColumns"] if not c.get("priority")] == \
        ["Flavor", "Mode", "Phase", "Ready", "Expires", "Age"]
    assert cols["Ready"]["jsonPath"] == ".status.ready"
    # a string: the API server prints a date column in the future as "<invalid>"
    assert cols["Expires"]["type"] == "string" and cols["Expires"]["jsonPath"] == ".status.reservation.expiresAt"
    assert cols["Age"] == {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


def test_flavor_names_and_columns():
    crd = CRDS["DevServerFlavor"]
    spec = crd["spec"]
    assert crd["metadata"]["name"] == "devserverflavors.torchdev.io"
    assert spec["scope"] == "Cluster"
    assert {"dsf", "flavor"} <= set(spec["names"]["shortNames"])
    assert spec["names"]["categories"] == ["torchdev"]  # not `all`: flavors are cluster-scoped
    v = version_of(crd)
    assert v["served"] and v["storage"] and v["subresources"] == {"status": {}}
    assert [c["name"] for c in v["additionalPrinterColumns"] if not c.get("priority")] == \
        ["GPU-Type", "GPUs", "CPU", "Memory", "Price/h", "Age"]


def test_usagerecord_names_and_columns():
    crd = CRDS["UsageRecord"]
    spec = crd["spec"]
    assert crd["metadata"]["name"] == "usagerecords.torchdev.io"
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["shortNames"] == ["ur"]
    assert spec["names"]["categories"] == ["torchdev"]  # not `all`: kubectl get all stays about what runs
    v = version_of(crd)
    assert v["served"] and v["storage"] and "subresources" not in v  # no status: nothing reconciles a record
    assert set(v["schema"]["openAPIV3Schema"]["properties"]) == {"apiVersion", "kind", "metadata", "spec"}
    assert [c["name"] for c in v["additionalPrinterColumns"] if not c.get("priority")] == \
        ["Kind", "User", "Server", "Flavor", "GPUs", "Reason", "GPU-Hours", "Cost", "Ended", "Age"]
    props = root_schema(crd)["properties"]["spec"]["properties"]
    from ansible_collections.torchdev.operator.plugins.module_utils.usage import KINDS, RECORD_END_REASONS
    assert props["endReason"]["enum"] == list(RECORD_END_REASONS)
    assert sorted(props["kind"]["enum"]) == sorted(KINDS)  # issue 25.3: jobs' records


@pytest.mark.parametrize("kind", [k for k in CRDS if k != "UsageRecord"])  # a record has no status
def test_conditions_are_metav1_conditions(kind):
    cond = root_schema(CRDS[kind])["properties"]["status"]["properties"]["conditions"]
    assert cond["x-kubernetes-list-type"] == "map"
    assert cond["x-kubernetes-list-map-keys"] == ["type"]
    item = cond["items"]
    assert set(item["required"]) == {"type", "status", "reason", "message", "lastTransitionTime"}
    props = item["properties"]
    assert props["status"]["enum"] == ["True", "False", "Unknown"]
    assert props["reason"]["pattern"] == "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
    assert props["lastTransitionTime"]["format"] == "date-time"
    assert props["observedGeneration"]["type"] == "integer"


def test_devserver_condition_reasons_documented():
    desc = root_schema(CRDS["DevServer"])["properties"]["status"]["properties"]["conditions"]["description"]
    for reason in ("ServerReady", "PodsNotReady", "Suspended", "ReconcileFailed", "Provisioning",
                   "RollingUpdate", "Reconciled", "AsExpected", "FlavorNotFound", "InvalidSpec",
                   "ReconcileError", "PodFailed", "Queued", "ImageLacksSSH"):
        assert reason in desc


def test_devserver_status_fields():
    status = root_schema(CRDS["DevServer"])["properties"]["status"]["properties"]
    for f in ("phase", "ready", "conditions", "observedGeneration", "replicas", "readyReplicas",
              "sshEndpoint", "sshCommand", "startTime", "lastReconcileTime", "replicaStatuses",
              "rendezvousEndpoint", "flavorSpecHash", "queue"):
        assert f in status, f
    assert status["phase"]["enum"] == ["Pending", "Queued", "Provisioning", "Running", "Suspended", "Stopped", "Expired", "Failed"]
    assert set(status["queue"]["properties"]) == {"name", "clusterQueue", "workload", "position", "estimatedStartTime"}
    assert status["queue"]["properties"]["position"]["minimum"] == 1
    rs = status["replicaStatuses"]
    assert rs["x-kubernetes-list-type"] == "map" and rs["x-kubernetes-list-map-keys"] == ["index"]
    assert {"index", "podName", "phase", "ready", "nodeName"} <= set(rs["items"]["properties"])


def test_yamllint_clean():
    exe = tool("yamllint")
    files = [str(p) for p in sorted((ROOT / "config").glob("crd/**/*.yaml"))
             + sorted(SAMPLES_DIR.glob("*.yaml"))]
    res = subprocess.run([str(exe), "-f", "parsable", "-d", YAMLLINT_CONFIG, *files],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


# ---------------------------------------------------------------------------------------------
# 2. admission: defaults, pruning, OpenAPI validation and CEL (kubesim)
# ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def kv():
    from kubesim import validation

    return validation


@pytest.fixture(scope="module")
def ApiError():
    from kubesim.errors import ApiError as error

    return error


@pytest.fixture(scope="module")
def models(kv):
    return {kind: kv.CRDModel(crd).version(VERSION) for kind, crd in CRDS.items()}


@pytest.mark.parametrize("kind", CRDS)
def test_validate_crd_accepts(kv, kind):
    kv.validate_crd(copy.deepcopy(CRDS[kind]))


def devserver(name: str = "jane-dev", **spec: Any) -> dict:
    base = {"owner": "jane@example.com", "flavor": "gpu-a10g-1"}
    base.update(spec)
    return {"apiVersion": "torchdev.io/v1alpha1", "kind": "DevServer",
            "metadata": {"name": name, "namespace": "ml"}, "spec": base}


def flavor(name: str = "gpu-a10g-1", **spec: Any) -> dict:
    return {"apiVersion": "torchdev.io/v1alpha1", "kind": "DevServerFlavor",
            "metadata": {"name": name}, "spec": spec}


def distributed(world: int = 4, nprocs: int = 1, **extra: Any) -> dict:
    return {"mode": "distributed", "distributed": {"worldSize": world, "nprocsPerNode": nprocs, **extra}}


A10G = {"requests": {"cpu": "7", "memory": "28Gi", "nvidia.com/gpu": 1},
        "limits": {"cpu": 8, "memory": "30Gi", "nvidia.com/gpu": 1}}


def test_standalone_defaults(models):
    out = models["DevServer"].admit(devserver())
    assert out["spec"] == {
        "owner": "jane@example.com",
        "flavor": "gpu-a10g-1",
        "image": "ghcr.io/torchdev/torchdev-devserver:0.1.0",
        "imagePullPolicy": "IfNotPresent",
        "mode": "standalone",
        "persistentHomeSize": "100Gi",
        "homeStorageClassName": "gp3",
        "homeRetentionPolicy": "Retain",
        "enableSSH": True,
        "lifecycle": {"idleTimeout": 3600, "autoShutdown": False},
        "suspend": False,
        "mountSharedVolume": True,
        "mountUserSSHKeys": True,
    }


def test_distributed_defaults(models):
    out = models["DevServer"].admit(devserver(mode="distributed", distributed={"worldSize": 2}))
    assert out["spec"]["distributed"] == {"worldSize": 2, "nprocsPerNode": 1, "backend": "nccl"}


def test_flavor_defaults(models):
    out = models["DevServerFlavor"].admit(flavor("cpu", resources={"requests": {"cpu": 1}}))
    assert out["spec"]["gpu"] == {"efa": False}  # count: derived from resources when absent
    assert out["spec"]["shmSize"] == "1Gi"


def test_unknown_fields_are_pruned(models):
    obj = devserver(bogus=True, lifecycle={"idleTimeout": 60, "colour": "red"})
    obj["status"] = {"phase": "Running", "whatever": 1}
    obj["spec"]["distributed"] = None  # null of a non-nullable field is dropped too
    out = models["DevServer"].admit(obj)
    assert "bogus" not in out["spec"]
    assert out["spec"]["lifecycle"] == {"idleTimeout": 60, "autoShutdown": False}
    assert "whatever" not in out.get("status", {})


VALID_DEVSERVERS = {
    "minimal": devserver(),
    "priority-class": devserver(priorityClassName="torchdev-high"),
    "distributed-4x1": devserver(**distributed(4, 1)),
    "distributed-16x8-nccl": devserver(**distributed(16, 8, ncclSettings={"NCCL_DEBUG": "INFO",
                                                                          "FI_EFA_USE_DEVICE_RDMA": "1"})),
    "distributed-gloo": devserver(**distributed(3, 3, backend="gloo")),
    "home-int-bytes": devserver(persistentHomeSize=2 ** 40),
    "home-decimal-suffix": devserver(persistentHomeSize="500G"),
    "owner-subdomain": devserver(owner="first.last+ml@corp.example.co.uk"),
    "ssh-keys": devserver(sshPublicKeys=[SSH_KEY, "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTY= a@b",
                                         "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQC7"]),
    "ssh-secret": devserver(sshKeySecretRef={"name": "jane-keys"}),
    "ssh-nodeport": devserver(ssh={"serviceType": "NodePort"}),
    "ssh-loadbalancer": devserver(ssh={"serviceType": "LoadBalancer"}),
    "ssh-clusterip": devserver(ssh={"serviceType": "ClusterIP"}),
    "ssh-empty": devserver(ssh={}),  # the operator's default applies
    "env": devserver(env=[
        {"name": "HF_HOME", "value": "/shared/hf"},
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}},
        {"name": "CFG", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "x", "optional": True}}},
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
    ]),
    "shared-claim": devserver(sharedVolumeClaimName="team-efs"),
    "suspended": devserver(suspend=True, lifecycle={"idleTimeout": 0, "autoShutdown": True}),
    "reservation": devserver(lifecycle={"duration": "1h30m"}),
    "reservation-seconds": devserver(lifecycle={"duration": "90s"}),
    "reservation-zero-hours": devserver(lifecycle={"duration": "0h30m"}),
    "name-52": devserver(name="a" * 52),
    # accepted and ignored (status.warnings says so): seed 000's example does this
    "standalone-with-distributed": devserver(distributed={"worldSize": 4, "nprocsPerNode": 1}),
}


@pytest.mark.parametrize("obj", [pytest.param(v, id=k) for k, v in VALID_DEVSERVERS.items()])
def test_valid_devservers(models, obj):
    out = models["DevServer"].admit(copy.deepcopy(obj))
    assert is_subset(obj["spec"], out["spec"])


# (id, object, field path the error must name, text the error must contain)
INVALID_DEVSERVERS = [
    ("distributed-without-config", devserver(mode="distributed"),
     "spec.distributed", "distributed is required when mode is distributed"),
    ("worldsize-6-nprocs-4", devserver(**distributed(6, 4)),
     "spec.distributed.worldSize", "worldSize must be a multiple of nprocsPerNode"),
    ("worldsize-too-big", devserver(**distributed(2048, 1)),
     "spec.distributed.worldSize", "less than or equal to 1024"),
    ("nprocs-zero", devserver(**distributed(4, 0)),
     "spec.distributed.nprocsPerNode", "greater than or equal to 1"),
    ("missing-worldsize", devserver(mode="distributed", distributed={"nprocsPerNode": 2}),
     "spec.distributed.worldSize", "Required value"),
    ("bad-backend", devserver(**distributed(2, 1, backend="mpi")),
     "spec.distributed.backend", "Unsupported value"),
    ("bad-nccl-key", devserver(**distributed(2, 1, ncclSettings={"CUDA_VISIBLE_DEVICES": "0"})),
     "spec.distributed.ncclSettings", "ncclSettings keys must start with NCCL_ or FI_"),
    ("shared-claim-and-no-shared", devserver(sharedVolumeClaimName="team-efs", mountSharedVolume=False),
     "spec.mountSharedVolume", "contradict each other"),
    ("owner-not-email", devserver(owner="jane"), "spec.owner", "owner must be an e-mail address"),
    ("owner-with-space", devserver(owner="jane doe@example.com"), "spec.owner", "e-mail"),
    ("owner-no-tld", devserver(owner="jane@localhost"), "spec.owner", "e-mail"),
    ("missing-owner", {**devserver(), "spec": {"flavor": "gpu-a10g-1"}}, "spec.owner", "Required value"),
    ("missing-flavor", {**devserver(), "spec": {"owner": "jane@example.com"}}, "spec.flavor", "Required value"),
    ("flavor-not-dns", devserver(flavor="GPU_A10G"), "spec.flavor", "should match"),
    ("priority-class-not-dns", devserver(priorityClassName="High_Priority"), "spec.priorityClassName",
     "should match"),
    ("home-10-GB", devserver(persistentHomeSize="10 GB"), "spec.persistentHomeSize", "should match"),
    ("home-too-small", devserver(persistentHomeSize="512Mi"),
     "spec.persistentHomeSize", "persistentHomeSize must be between 1Gi and 64Ti"),
    ("home-too-big", devserver(persistentHomeSize="100Ti"),
     "spec.persistentHomeSize", "between 1Gi and 64Ti"),
    ("unknown-mode", devserver(mode="cluster"), "spec.mode", "Unsupported value"),
    ("bad-pull-policy", devserver(imagePullPolicy="Sometimes"), "spec.imagePullPolicy", "Unsupported value"),
    ("bad-retention", devserver(homeRetentionPolicy="Snapshot"), "spec.homeRetentionPolicy", "Unsupported value"),
    ("ssh-service-type-externalname", devserver(ssh={"serviceType": "ExternalName"}),
     "spec.ssh.serviceType", "Unsupported value"),
    ("ssh-service-type-lowercase", devserver(ssh={"serviceType": "nodeport"}),
     "spec.ssh.serviceType", "Unsupported value"),
    ("bad-ssh-key", devserver(sshPublicKeys=["hello world"]),
     "spec.sshPublicKeys[0]", "OpenSSH public keys"),
    ("ssh-private-key", devserver(sshPublicKeys=["-----BEGIN OPENSSH PRIVATE KEY-----"]),
     "spec.sshPublicKeys[0]", "OpenSSH public keys"),
    ("too-many-ssh-keys", devserver(sshPublicKeys=[SSH_KEY + str(i) for i in range(33)]),
     "spec.sshPublicKeys", "must have at most 32 items"),
    ("env-value-and-valuefrom", devserver(env=[{"name": "A", "value": "1", "valueFrom": {
        "secretKeyRef": {"name": "s", "key": "k"}}}]),
     "spec.env[0]", "value and valueFrom are mutually exclusive"),
    ("env-valuefrom-two-sources", devserver(env=[{"name": "A", "valueFrom": {
        "secretKeyRef": {"name": "s", "key": "k"}, "fieldRef": {"fieldPath": "metadata.name"}}}]),
     "spec.env[0].valueFrom", "exactly one of"),
    ("env-duplicate-name", devserver(env=[{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]),
     "spec.env[1]", "Duplicate value"),
    ("env-bad-name", devserver(env=[{"name": "1A=", "value": "1"}]), "spec.env[0].name", "should match"),
    ("idle-timeout-too-long", devserver(lifecycle={"idleTimeout": 604801}),
     "spec.lifecycle.idleTimeout", "less than or equal to 604800"),
    ("zero-duration", devserver(lifecycle={"duration": "0h"}), "spec.lifecycle.duration",
     "duration must be longer than zero"),
    ("zero-duration-terms", devserver(lifecycle={"duration": "0h00m0s"}), "spec.lifecycle.duration",
     "duration must be longer than zero"),
    ("name-not-dns1035", devserver(name="1-jane"), "", "metadata.name must be a DNS-1035 label"),
    ("name-too-long", devserver(name="a" * 53), "", "at most 52 characters"),
]


@pytest.mark.parametrize("obj,field,text", [pytest.param(o, f, t, id=i) for i, o, f, t in INVALID_DEVSERVERS])
def test_invalid_devservers(models, ApiError, obj, field, text):
    with pytest.raises(ApiError) as ei:
        models["DevServer"].admit(copy.deepcopy(obj))
    err = ei.value
    assert err.code == 422, err.message
    assert text in err.message, err.message
    if field:
        fields = [c.get("field") for c in err.details.get("causes", [])]
        assert field in fields or f"{field}:" in err.message, (fields, err.message)


def usage_record(**spec: Any) -> dict:
    obj = load(SAMPLES_DIR / "torchdev_v1alpha1_usagerecord.yaml")
    obj["spec"].update(spec)
    obj["spec"] = {k: v for k, v in obj["spec"].items() if v is not None}
    return obj


# (id, mutation of the sample's spec, field path the error must name, text the error must contain)
INVALID_USAGE_RECORDS = [
    ("unknown-reason", {"endReason": "Vanished"}, "spec.endReason", "Unsupported value"),
    ("negative-gpus", {"gpus": -1}, "spec.gpus", "greater than or equal to 0"),
    ("gpus-not-per-replica", {"replicas": 2, "gpus": 3}, "spec.gpus", "replicas x the flavor's GPUs"),
    ("float-cost", {"cost": "1.23456"}, "spec.cost", "should match"),
    ("negative-gpu-hours", {"gpuHours": "-1.0000"}, "spec.gpuHours", "should match"),
    ("user-not-email", {"user": "jane"}, "spec.user", "user must be an e-mail address"),
    ("bad-time", {"endedAt": "yesterday"}, "spec.endedAt", "date-time"),
    ("no-replicas", {"replicas": 0}, "spec.replicas", "greater than or equal to 1"),
    # issue 25.3: jobs' records (spec.kind)
    ("unknown-kind", {"kind": "Pod"}, "spec.kind", "Unsupported value"),
    ("job-reason-on-a-devserver", {"endReason": "Succeeded"}, "spec.endReason",
     "endReason must be Succeeded, Failed or Deleted"),
    ("devserver-reason-on-a-job", {"kind": "TrainingJob", "endReason": "Expired"}, "spec.endReason",
     "endReason must be Succeeded, Failed or Deleted"),
    ("devserver-without-flavor", {"flavor": None}, "spec.flavor", "flavor is required in the record of a DevServer"),
    # issue 26.5: Preempted and Evicted end a TrainingJob's or a DevServer's admission by Kueue, not an EAJ's
    ("evicted-eaj", {"kind": "EphemeralAccelerationJob", "flavor": None, "endReason": "Evicted"}, "spec.endReason",
     "Preempted and Evicted only for a TrainingJob"),
]


def test_job_usage_records_are_admitted(models):
    """A job's record (issue 25.3): kind, no flavor, endReason Succeeded or Failed, or Deleted
    (the DevUser role closes the open record of a job deleted while it ran); a TrainingJob's also
    Preempted or Evicted (issue 26.5: Kueue evicted it, the admission's record is closed)."""
    for kind, reason in (("EphemeralAccelerationJob", "Succeeded"), ("TrainingJob", "Failed"), ("TrainingJob", "Deleted"),
                         ("TrainingJob", "Preempted"), ("TrainingJob", "Evicted")):  # Kueue evicted it (issue 26.5)
        obj = usage_record(kind=kind, endReason=reason, pricePerHour="0", cost="0.0000")
        del obj["spec"]["flavor"]
        assert models["UsageRecord"].admit(obj)["spec"]["kind"] == kind


@pytest.mark.parametrize("kind", [None, "DevServer"])
@pytest.mark.parametrize("reason", ["Preempted", "Evicted"])
def test_a_devserver_record_closed_by_an_eviction_is_admitted(models, kind, reason):
    """Issue 26.5: Kueue evicted a DevServer, the record of that admission is closed with
    Preempted or Evicted (spec.kind absent, as records from before it, or DevServer)."""
    obj = usage_record(kind=kind, endReason=reason)
    assert models["UsageRecord"].admit(obj)["spec"]["endReason"] == reason


@pytest.mark.parametrize("mutation,field,text", [pytest.param(m, f, t, id=i) for i, m, f, t in INVALID_USAGE_RECORDS])
def test_invalid_usage_records(models, ApiError, mutation, field, text):
    with pytest.raises(ApiError) as ei:
        models["UsageRecord"].admit(usage_record(**mutation))
    err = ei.value
    assert err.code == 422 and text in err.message, err.message
    fields = [c.get("field") for c in err.details.get("causes", [])]
    assert field in fields or f"{field}:" in err.message, (fields, err.message)


def test_usage_record_without_required_fields_is_rejected(models, ApiError):
    obj = usage_record()
    del obj["spec"]["startedAt"], obj["spec"]["user"]
    with pytest.raises(ApiError) as ei:
        models["UsageRecord"].admit(obj)
    assert "spec.startedAt" in ei.value.message and "spec.user" in ei.value.message
    half_closed = usage_record()
    del half_closed["spec"]["cost"]  # a closed record (endedAt) has all its totals
    with pytest.raises(ApiError) as ei:
        models["UsageRecord"].admit(half_closed)
    assert "spec.endedAt" in ei.value.message and "cost" in ei.value.message


CLOSING_FIELDS = ("endedAt", "endReason", "gpuHours", "cost", "idleSavedGPUHours")


def test_an_open_usage_record_is_closed_once(models, ApiError):
    """Issue 25.5: a record is open (no endedAt and totals) while its reservation runs; the
    operator may update it (an extension) and close it; closed, it is immutable."""
    closed = usage_record()
    opened = copy.deepcopy(closed)
    for field in CLOSING_FIELDS:
        del opened["spec"][field]
    old = models["UsageRecord"].admit(opened)
    extended = copy.deepcopy(old)
    extended["spec"]["expiresAt"] = "2026-11-24T23:00:00Z"
    old = models["UsageRecord"].admit(extended, old=copy.deepcopy(old))
    for field in ("server", "startedAt", "user"):  # who and which reservation never change
        moved = copy.deepcopy(old)
        moved["spec"][field] = {"server": "other", "startedAt": "2026-11-24T11:00:00Z", "user": "x@example.com"}[field]
        with pytest.raises(ApiError) as ei:
            models["UsageRecord"].admit(moved, old=copy.deepcopy(old))
        assert "immutable" in ei.value.message, field
    done = copy.deepcopy(old)
    done["spec"].update({field: closed["spec"][field] for field in CLOSING_FIELDS})
    old = models["UsageRecord"].admit(done, old=copy.deepcopy(old))
    reopened = copy.deepcopy(old)
    for field in CLOSING_FIELDS:
        del reopened["spec"][field]
    with pytest.raises(ApiError) as ei:
        models["UsageRecord"].admit(reopened, old=copy.deepcopy(old))
    assert "spec is immutable" in ei.value.message


def test_usage_record_spec_is_immutable(models, ApiError):
    old = models["UsageRecord"].admit(usage_record())
    for mutation in ({"cost": "0.0001"}, {"endReason": "Stopped"}, {"gpuType": None}):
        new = copy.deepcopy(old)
        new["spec"].update(mutation)
        new["spec"] = {k: v for k, v in new["spec"].items() if v is not None}
        with pytest.raises(ApiError) as ei:
            models["UsageRecord"].admit(new, old=copy.deepcopy(old))
        assert ei.value.code == 422 and "spec is immutable" in ei.value.message, mutation
    relabelled = copy.deepcopy(old)
    relabelled["metadata"]["labels"]["team"] = "ml"  # metadata is not the record
    assert models["UsageRecord"].admit(relabelled, old=copy.deepcopy(old))["metadata"]["labels"]["team"] == "ml"


def _update(models: dict, kind: str, old_obj: dict, mutate: Callable[[dict], None]) -> dict:
    model = models[kind]
    old = model.admit(copy.deepcopy(old_obj))
    new = copy.deepcopy(old)
    mutate(new)
    return model.admit(new, old=old)


def _set(path: str, value: Any) -> Callable[[dict], None]:
    def mutate(obj: dict) -> None:
        *parents, leaf = path.split(".")
        node = obj
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return mutate


def _make_distributed(obj: dict) -> None:
    obj["spec"].update(distributed(2, 1))


def _make_standalone(obj: dict) -> None:
    obj["spec"]["mode"] = "standalone"
    obj["spec"].pop("distributed", None)


# (id, old object, mutation, error text or None when the update must be accepted)
UPDATES = [
    ("mode-standalone-to-distributed", devserver(), _make_distributed, "mode is immutable"),
    ("mode-distributed-to-standalone", devserver(**distributed(4, 1)), _make_standalone, "mode is immutable"),
    ("home-shrink", devserver(persistentHomeSize="200Gi"), _set("spec.persistentHomeSize", "100Gi"),
     "persistentHomeSize may not shrink"),
    ("home-shrink-int", devserver(persistentHomeSize="200Gi"), _set("spec.persistentHomeSize", 2 ** 30),
     "persistentHomeSize may not shrink"),
    ("home-grow", devserver(), _set("spec.persistentHomeSize", "200Gi"), None),
    ("home-same-size-other-unit", devserver(persistentHomeSize="1Ti"), _set("spec.persistentHomeSize", "1024Gi"),
     None),
    ("storage-class-change", devserver(), _set("spec.homeStorageClassName", "gp2"),
     "homeStorageClassName is immutable"),
    ("worldsize-change", devserver(**distributed(4, 1)), _set("spec.distributed.worldSize", 8), None),
    ("flavor-change", devserver(), _set("spec.flavor", "gpu-h100-8"), None),
    ("suspend", devserver(), _set("spec.suspend", True), None),
]


@pytest.mark.parametrize("old,mutate,text", [pytest.param(o, m, t, id=i) for i, o, m, t in UPDATES])
def test_devserver_updates(models, ApiError, old, mutate, text):
    if text is None:
        _update(models, "DevServer", old, mutate)
        return
    with pytest.raises(ApiError) as ei:
        _update(models, "DevServer", old, mutate)
    assert ei.value.code == 422
    assert text in ei.value.message, ei.value.message


VALID_FLAVORS = {
    "cpu-only": flavor("cpu-small", resources={"requests": {"cpu": 2, "memory": "8Gi"},
                                               "limits": {"cpu": "4", "memory": "8Gi"}}),
    "a10g": flavor(resources=A10G, gpu={"type": "nvidia-a10g", "count": 1},
                   tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                   nodeSelector={"node.kubernetes.io/instance-type": "g5.2xlarge"}, pricePerHour="1.212"),
    "limits-only": flavor(resources={"limits": {"nvidia.com/gpu": 8, "vpc.amazonaws.com/efa": 32}},
                          gpu={"type": "nvidia-h100", "count": 8, "efa": True}),
    # seed 000's gpu-large: GPUs only in resources, no gpu block, no GPU type
    "gpus-in-resources-only": flavor(resources={"requests": {"memory": "32Gi", "cpu": 8, "nvidia.com/gpu": 1},
                                                "limits": {"memory": "64Gi", "cpu": 16, "nvidia.com/gpu": 1}}),
    "gpu-count-without-type": flavor(gpu={"count": 1}),
    "milli-cpu": flavor(resources={"requests": {"cpu": "500m"}, "limits": {"cpu": "0.5"}}),
    "tolerate-everything": flavor(tolerations=[{"operator": "Exists"}]),
    "toleration-seconds": flavor(tolerations=[{"key": "k", "operator": "Equal", "value": "v",
                                               "effect": "NoExecute", "tolerationSeconds": 30}]),
}


@pytest.mark.parametrize("obj", [pytest.param(v, id=k) for k, v in VALID_FLAVORS.items()])
def test_valid_flavors(models, obj):
    out = models["DevServerFlavor"].admit(copy.deepcopy(obj))
    assert is_subset(obj["spec"], out["spec"])


INVALID_FLAVORS = [
    ("limit-below-request", flavor(resources={"requests": {"cpu": 8, "memory": "32Gi"},
                                              "limits": {"cpu": "7500m", "memory": "64Gi"}}),
     "spec.resources.limits", "each limit must be greater than or equal to the request"),
    ("memory-limit-below-request", flavor(resources={"requests": {"memory": "2Gi"}, "limits": {"memory": "2000Mi"}}),
     "spec.resources.limits", "each limit must be greater than or equal to the request"),
    ("gpu-request-without-limit", flavor(resources={"requests": {"nvidia.com/gpu": 1}}),
     "spec.resources.requests", "need an equal limit"),
    ("unknown-resource", flavor(resources={"requests": {"amd.com/gpu": 1}}),
     "spec.resources.requests", "requests keys must be"),
    ("bad-quantity", flavor(resources={"requests": {"memory": "32 GB"}}),
     "spec.resources.requests.memory", "should match"),
    ("negative-quantity", flavor(resources={"requests": {"cpu": -1}}),
     "spec.resources.requests[cpu]", "must not be negative"),  # CEL names a map key [key]
    ("gpu-count-mismatch", flavor(resources=A10G, gpu={"type": "nvidia-a10g", "count": 2}),
     "spec.gpu.count", "gpu.count must equal resources.limits['nvidia.com/gpu']"),
    ("gpu-count-too-big", flavor(gpu={"type": "x", "count": 17}), "spec.gpu.count", "less than or equal to 16"),
    ("bad-price", flavor(pricePerHour="1.23456"), "spec.pricePerHour", "should match"),
    ("bad-toleration-operator", flavor(tolerations=[{"key": "k", "operator": "In"}]),
     "spec.tolerations[0].operator", "Unsupported value"),
    ("toleration-exists-with-value", flavor(tolerations=[{"key": "k", "operator": "Exists", "value": "v"}]),
     "spec.tolerations[0]", "value must be empty when operator is Exists"),
    ("toleration-empty-key-equal", flavor(tolerations=[{"operator": "Equal", "value": "v"}]),
     "spec.tolerations[0]", "operator must be Exists when key is empty"),
    ("toleration-seconds-noschedule", flavor(tolerations=[{"key": "k", "operator": "Exists",
                                                           "effect": "NoSchedule", "tolerationSeconds": 5}]),
     "spec.tolerations[0]", "tolerationSeconds may only be set when effect is NoExecute"),
    ("shm-too-small", flavor(shmSize="1Ki"), "spec.shmSize", "shmSize must be at least 1Mi"),
    ("description-too-long", flavor(description="x" * 257), "spec.description", "Too long"),
]


@pytest.mark.parametrize("obj,field,text", [pytest.param(o, f, t, id=i) for i, o, f, t in INVALID_FLAVORS])
def test_invalid_flavors(models, ApiError, obj, field, text):
    with pytest.raises(ApiError) as ei:
        models["DevServerFlavor"].admit(copy.deepcopy(obj))
    err = ei.value
    assert err.code == 422, err.message
    assert text in err.message, err.message
    fields = [c.get("field") for c in err.details.get("causes", [])]
    assert any(f == field or f.startswith(field) for f in fields) or f"{field}:" in err.message, \
        (fields, err.message)


def test_status_is_validated_on_the_status_subresource(models, ApiError):
    model = models["DevServer"]
    obj = model.admit(devserver())
    obj["status"] = {"phase": "Running", "ready": "1/1", "replicas": 1, "readyReplicas": 1,
                     "conditions": [{"type": "Ready", "status": "True", "reason": "ServerReady",
                                     "message": "", "lastTransitionTime": "2025-01-01T00:00:00Z",
                                     "observedGeneration": 1}],
                     "replicaStatuses": [{"index": 0, "podName": "jane-dev-0", "phase": "Running",
                                          "ready": True, "nodeName": "node-1"}]}
    model.admit(obj, old=obj, subresource="status")
    bad = copy.deepcopy(obj)
    bad["status"]["conditions"][0]["reason"] = "not a reason!"
    with pytest.raises(ApiError) as ei:
        model.admit(bad, old=obj, subresource="status")
    assert "status.conditions[0].reason" in ei.value.message


# ---------------------------------------------------------------------------------------------
# 3. kustomize builds, samples are valid
# ---------------------------------------------------------------------------------------------

def test_kustomize_crd_builds():
    docs = kustomize(CRD_DIR)
    assert sorted(d["metadata"]["name"] for d in docs) == ["devserverflavors.torchdev.io",
                                                           "devservers.torchdev.io", "devusers.torchdev.io",
                                                           "ephemeralaccelerationjobs.torchdev.io",
                                                           "trainingjobs.torchdev.io", "usagerecords.torchdev.io"]
    for d in docs:
        assert d == CRDS[d["spec"]["names"]["kind"]]


def test_kustomize_samples_build():
    docs = kustomize(SAMPLES_DIR)
    kinds = [(d["kind"], d["metadata"]["name"]) for d in docs]
    flavors = {n for k, n in kinds if k == "DevServerFlavor"}
    assert {"cpu-small", "gpu-a10g-1", "gpu-h100-8"} <= flavors
    servers = [d for d in docs if d["kind"] == "DevServer"]
    assert len(servers) >= 3
    for d in servers:
        assert d["spec"]["flavor"] in flavors, d["metadata"]["name"]
    for d in docs:
        if d["kind"] == "DevServerFlavor":
            assert "namespace" not in d["metadata"], "flavors are cluster-scoped"
    modes = [(d["spec"].get("mode", "standalone"), d["spec"].get("distributed")) for d in servers]
    assert ("distributed", {"worldSize": 4, "nprocsPerNode": 1, "backend": "nccl",
                            "ncclSettings": {"NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "eth0"}}) in modes
    assert any(d["spec"].get("env") and d["spec"].get("sharedVolumeClaimName") for d in servers)
    h100 = next(d for d in docs if d["metadata"]["name"] == "gpu-h100-8")
    assert h100["spec"]["gpu"]["efa"] is True


def _sample_files() -> list[Path]:
    return sorted(p for p in SAMPLES_DIR.glob("*.yaml") if p.name != "kustomization.yaml")


@pytest.mark.parametrize("path", [pytest.param(p, id=p.stem) for p in _sample_files()])
def test_sample_is_admitted_unchanged(models, path):
    obj = load(path)
    out = models[obj["kind"]].admit(copy.deepcopy(obj))
    assert is_subset(obj, out), "the sample has fields the schema prunes or rewrites"


# -- the same rules over HTTP, through kubesim as an API server -----------------------------

HTTP_CASES = [
    ("bad owner", {"owner": "not-an-email"}, "spec.owner"),
    ("distributed without settings", {"mode": "distributed"}, "spec"),
    ("indivisible world size", {"mode": "distributed", "distributed": {"worldSize": 6, "nprocsPerNode": 4}},
     "spec.distributed"),
    ("unknown mode", {"mode": "cluster"}, "spec.mode"),
    ("malformed quantity", {"persistentHomeSize": "10 GB"}, "spec.persistentHomeSize"),
]


@pytest.fixture(scope="module")
def crd_api(kubesim_module):
    from kubernetes import client, config

    api = config.new_client_from_config(kubesim_module.kubeconfig)
    ext = client.ApiextensionsV1Api(api)
    for path in (DEVSERVER_CRD, FLAVOR_CRD):
        ext.create_custom_resource_definition(load(path))
    client.CoreV1Api(api).create_namespace({"apiVersion": "v1", "kind": "Namespace",
                                            "metadata": {"name": "crd-http"}})
    return client.CustomObjectsApi(api)


def _http_devserver(name: str, **spec) -> dict:
    body = {"owner": "ada@example.com", "flavor": "gpu-a10g-1"}
    body.update(spec)
    return {"apiVersion": "torchdev.io/v1alpha1", "kind": "DevServer", "metadata": {"name": name},
            "spec": body}


@pytest.mark.parametrize("label,spec,field", HTTP_CASES, ids=[c[0] for c in HTTP_CASES])
def test_api_server_rejects_invalid_devserver(crd_api, label, spec, field):
    from kubernetes.client import ApiException

    with pytest.raises(ApiException) as err:
        crd_api.create_namespaced_custom_object("torchdev.io", "v1alpha1", "crd-http", "devservers",
                                                _http_devserver("bad", **spec))
    assert err.value.status == 422
    status = yaml.safe_load(err.value.body)
    assert status["kind"] == "Status" and status["reason"] == "Invalid"
    assert any(c["field"].startswith(field) for c in status["details"]["causes"]), status


def test_api_server_defaults_and_transition_rules(crd_api):
    from kubernetes.client import ApiException

    ds = crd_api.create_namespaced_custom_object("torchdev.io", "v1alpha1", "crd-http", "devservers",
                                                 _http_devserver("good"))
    assert ds["spec"]["mode"] == "standalone" and ds["spec"]["enableSSH"] is True
    assert ds["spec"]["persistentHomeSize"] == "100Gi"
    with pytest.raises(ApiException) as err:  # mode is immutable
        crd_api.patch_namespaced_custom_object("torchdev.io", "v1alpha1", "crd-http", "devservers", "good",
                                               {"spec": {"mode": "distributed",
                                                         "distributed": {"worldSize": 2}}})
    assert err.value.status == 422 and "spec.mode" in err.value.body
    with pytest.raises(ApiException) as err:  # the home volume may not shrink
        crd_api.patch_namespaced_custom_object("torchdev.io", "v1alpha1", "crd-http", "devservers", "good",
                                               {"spec": {"persistentHomeSize": "50Gi"}})
    assert err.value.status == 422 and "spec.persistentHomeSize" in err.value.body
    grown = crd_api.patch_namespaced_custom_object("torchdev.io", "v1alpha1", "crd-http", "devservers", "good",
                                                   {"spec": {"persistentHomeSize": "200Gi"}})
    assert grown["spec"]["persistentHomeSize"] == "200Gi"
