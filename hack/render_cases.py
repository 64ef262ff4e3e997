"""The render matrices: the sample custom resources and edge cases each rendering role is
rendered for. hack/render_manifests.py renders them (for `make checkov`), tests/test_render.py,
tests/devuser/test_devuser_render.py and tests/security validate what comes out.

    devserver_cases()  every sample DevServer x every sample flavor, plus suspended, a reservation, no-SSH,
                       env/shared/Secret keys, a growing home, Kueue and the DevUser's share
    devuser_cases()    the sample DevUsers and edge cases, with and without Kueue
    usage_cases()      the UsageRecords the devserver role writes: each end reason, distributed,
                       a deletion during a reservation, a record that exists already
"""
from __future__ import annotations

import copy
import functools
import zlib
from datetime import datetime, timedelta, timezone
from pathlib import Path

import yaml

from ansible_collections.torchdev.operator.plugins.module_utils.constants import API_VERSION, LOCAL_QUEUE, VERSION
from ansible_collections.torchdev.operator.plugins.module_utils.usage import record_name

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "config" / "samples"
DEVUSER_CRD = ROOT / "config" / "crd" / "bases" / "torchdev.io_devusers.yaml"
NAMESPACE = "dev-jane"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE2eTestKeyForTorchdevEndToEndxxxxxxxxxxxxx e2e@test"


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def samples(pattern: str) -> dict[str, dict]:
    return {p.name: load(p) for p in sorted(SAMPLES.glob(pattern))}


def flavors() -> list[dict]:
    return list(samples("torchdev_v1alpha1_devserverflavor_*.yaml").values())


# --------------------------------------------------------------------------- DevServer
def _devserver(obj, name=None, **spec_overrides):
    obj = copy.deepcopy(obj)
    meta = obj["metadata"]
    if name:
        meta["name"] = name
    meta.update(namespace=NAMESPACE, uid="00000000-0000-0000-0000-%012d" % zlib.crc32(meta["name"].encode()), generation=1)
    obj["spec"].update(spec_overrides)
    return obj


def devserver_cases() -> dict[str, dict]:
    """{case: {cr, flavor, observed?, pvcs?, storage_class?, kueue?, devuser?}} (hack/render_manifests.py devserver_hostvars)."""
    devservers = samples("torchdev_v1alpha1_devserver_*.yaml")
    flavor_samples = samples("torchdev_v1alpha1_devserverflavor_*.yaml")
    assert devservers and flavor_samples, "config/samples must hold DevServer and DevServerFlavor samples"
    cases = {}
    for ds_file, ds in devservers.items():
        for fl_file, flavor in flavor_samples.items():
            key = "%s__%s" % (ds["metadata"]["name"], flavor["metadata"]["name"])
            cr = _devserver(ds, flavor=flavor["metadata"]["name"])
            if cr["spec"].get("mode") == "distributed" and not (flavor["spec"].get("gpu") or {}).get("count"):
                cr["spec"]["distributed"]["backend"] = "gloo"  # nccl without GPUs is InsufficientGPUs
            cases[key] = {"cr": cr, "flavor": flavor}
    standalone = devservers["torchdev_v1alpha1_devserver_standalone.yaml"]
    gpu = flavor_samples["torchdev_v1alpha1_devserverflavor_gpu-a10g-1.yaml"]
    cpu = flavor_samples["torchdev_v1alpha1_devserverflavor_cpu-small.yaml"]
    cases["suspended"] = {"cr": _devserver(standalone, "sleepy", suspend=True), "flavor": gpu}
    cases["reservation"] = {"cr": _devserver(standalone, "booked", lifecycle={
        "duration": "4h", "idleTimeout": 1800, "autoShutdown": True}), "flavor": gpu}
    cases["no_ssh"] = {"cr": _devserver(standalone, "quiet", enableSSH=False, homeRetentionPolicy="Delete"), "flavor": cpu}
    cases["env_shared_keys"] = {
        "cr": _devserver(standalone, "full", sharedVolumeClaimName="team-efs",
                         env=[{"name": "NCCL_DEBUG", "value": "INFO"}, {"name": "A", "value": "$(TORCHDEV_NAME)"}],
                         sshKeySecretRef={"name": "keys", "key": "authorized_keys"}),
        "flavor": gpu,
    }
    # An existing server whose home grows from 100Gi to 200Gi: the StatefulSet keeps its
    # (immutable) volumeClaimTemplate and the live PVC gets a resize patch instead.
    grown = _devserver(standalone, "grown", persistentHomeSize="200Gi")
    live_vct = {"metadata": {"name": "home"}, "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "gp3",
                                                       "resources": {"requests": {"storage": "100Gi"}},
                                                       "volumeMode": "Filesystem"}, "status": {"phase": "Pending"}}
    cases["grown_home"] = {
        "cr": grown, "flavor": gpu,
        "observed": [{"apiVersion": "apps/v1", "kind": "StatefulSet",
                      "metadata": {"name": "grown", "namespace": NAMESPACE},
                      "spec": {"serviceName": "grown", "volumeClaimTemplates": [live_vct],
                               "selector": {"matchLabels": {"app.kubernetes.io/name": "devserver",
                                                            "app.kubernetes.io/instance": "grown"}}}}],
        "pvcs": [{"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                  "metadata": {"name": "home-grown-0", "namespace": NAMESPACE},
                  "spec": {"storageClassName": "gp3", "resources": {"requests": {"storage": "100Gi"}}},
                  "status": {"phase": "Bound"}}],
        "storage_class": {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "gp3"},
                          "allowVolumeExpansion": True},
    }
    # ... but not when its StorageClass does not allow volume expansion (kube-apiserver would
    # refuse the patch): nothing is written, the status says so (HomeResized ResizeNotSupported).
    cases["grown_home_fixed_class"] = dict(cases["grown_home"], storage_class=dict(
        cases["grown_home"]["storage_class"], allowVolumeExpansion=False))
    # In a DevUser's namespace the user's shared claim is mounted at /shared by default.
    # ... and the user's SSH keys (the Secret devctl admin onboard fills) are accepted by sshd
    # (issue 27.1), unless mountUserSSHKeys is false or sshKeySecretRef names another Secret.
    jane = {"apiVersion": API_VERSION, "kind": "DevUser", "metadata": {"name": "jane"},
            "status": {"sharedVolumeClaimName": "jane-shared-efs", "sshKeySecretName": "ssh-public-keys"}}
    cases["user_share"] = {"cr": _devserver(standalone, "withshare"), "flavor": cpu, "devuser": jane}
    cases["user_share_opt_out"] = {"cr": _devserver(standalone, "noshare", mountSharedVolume=False), "flavor": cpu,
                                   "devuser": jane}
    cases["user_keys_opt_out"] = {"cr": _devserver(standalone, "nokeys", mountUserSSHKeys=False), "flavor": cpu,
                                  "devuser": jane}
    cases["user_keys_own_secret"] = {"cr": _devserver(standalone, "ownkeys", sshKeySecretRef={"name": "team-keys"}),
                                     "flavor": cpu, "devuser": jane}
    # SSH without kubectl (issue 27.6): a NodePort Service, and in a DevUser's namespace (default-deny)
    # the NetworkPolicy <name>-ssh that lets the clients reach sshd; a LoadBalancer one elsewhere
    # (no policy of torchdev isolates the pod there).
    cases["ssh_nodeport"] = {"cr": _devserver(standalone, "direct", ssh={"serviceType": "NodePort"}), "flavor": cpu,
                             "devuser": jane}
    cases["ssh_loadbalancer"] = {"cr": _devserver(standalone, "balanced", ssh={"serviceType": "LoadBalancer"}),
                                 "flavor": cpu}
    # Kueue served and the namespace has LocalQueue torchdev: the new StatefulSet (only it,
    # not its pod template) is queued, with the WorkloadPriorityClass that applies.
    cases["kueue_queued"] = {
        "cr": _devserver(standalone, "queued", priorityClassName="torchdev-high"), "flavor": gpu,
        "kueue": {"served": True, "local_queue": {"metadata": {"name": LOCAL_QUEUE, "namespace": NAMESPACE},
                                                  "spec": {"clusterQueue": "torchdev-jane"}},
                  "priority_class": {"name": "torchdev-high", "source": "spec.priorityClassName", "exists": True}},
    }
    return cases


# --------------------------------------------------------------------------- UsageRecord
def _ago(seconds: int) -> str:
    """A time `seconds` before now: a record that ended longer than the retention ago is not
    written again, so the cases end recently."""
    return (datetime.now(timezone.utc) - timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _reservation(started: int, ended: int | None, reason: str | None, duration: int | None = 4 * 3600) -> dict:
    """A reservation that started `started` seconds ago and ended `ended` seconds ago."""
    res = {"queuedAt": _ago(started + 90), "startedAt": _ago(started), "extensions": 0, "warningsSent": []}
    if duration:
        res.update(duration="%dh" % (duration // 3600), expiresAt=_ago(started - duration))
    if ended is not None:
        res.update(endedAt=_ago(ended), endReason=reason)
    return res


def usage_cases() -> dict[str, dict]:
    """{case: {cr, flavor, reservation?, observed?}} (hack/render_manifests.py usage_hostvars):
    ``reservation`` is what lifecycle.yml decided this run (absent: the status's, as on deletion)."""
    devservers = samples("torchdev_v1alpha1_devserver_*.yaml")
    flavor_samples = samples("torchdev_v1alpha1_devserverflavor_*.yaml")
    standalone = devservers["torchdev_v1alpha1_devserver_standalone.yaml"]
    distributed = devservers["torchdev_v1alpha1_devserver_distributed.yaml"]
    gpu = flavor_samples["torchdev_v1alpha1_devserverflavor_gpu-a10g-1.yaml"]
    h100 = flavor_samples["torchdev_v1alpha1_devserverflavor_gpu-h100-8.yaml"]
    cases = {}
    # Started 3 h ago; the 2 h reservation expired 1 h ago, the 4 h ones were stopped 2 h ago.
    for reason in ("Expired", "Cancelled", "Idle", "Stopped"):
        duration = 2 * 3600 if reason == "Expired" else 4 * 3600
        cr = _devserver(standalone, "used-" + reason.lower())
        cr["status"] = {"reservation": _reservation(3 * 3600, None, None, duration)}
        cases[reason.lower()] = {"cr": cr, "flavor": gpu, "reservation": _reservation(
            3 * 3600, 3600 if reason == "Expired" else 2 * 3600, reason, duration)}
    cr = _devserver(distributed, "used-distributed", flavor=h100["metadata"]["name"])
    cases["distributed"] = {"cr": cr, "flavor": h100, "reservation": _reservation(7200, 600, "Stopped", None)}
    deleted = _devserver(standalone, "used-deleted")
    deleted["metadata"]["deletionTimestamp"] = _ago(60)
    deleted["status"] = {"reservation": _reservation(1800, None, None)}
    cases["deleted"] = {"cr": deleted, "flavor": gpu}
    # A reservation under way: its record is open (no end, no totals yet).
    running = _devserver(standalone, "used-running")
    running["status"] = {"reservation": _reservation(1800, None, None, 4 * 3600)}
    cases["running"] = {"cr": running, "flavor": gpu, "reservation": running["status"]["reservation"]}
    # The record exists already, closed (observe.yml read it): nothing to write.
    written = copy.deepcopy(cases["cancelled"])
    written["observed"] = {"apiVersion": API_VERSION, "kind": "UsageRecord", "metadata": {
        "name": record_name(written["cr"]["metadata"]["name"], written["reservation"]["startedAt"]),
        "namespace": NAMESPACE}, "spec": {"endedAt": written["reservation"]["endedAt"]}}
    cases["written"] = written
    return cases


# --------------------------------------------------------------------------- DevUser
@functools.lru_cache(maxsize=1)
def _devuser_crd():
    return load(DEVUSER_CRD)


def admitted(obj: dict) -> dict:
    """The DevUser as the apiserver stores it (defaults applied), through kubesim's admission."""
    from kubesim import validation

    return validation.CRDModel(copy.deepcopy(_devuser_crd())).version(VERSION).admit(copy.deepcopy(obj))


def devuser(name: str, uid: str | None = None, **spec) -> dict:
    """A DevUser as the runtime hands it to the role: defaulted by the CRD, with uid and generation."""
    body = {"email": f"{name}@example.com", "sshPublicKeys": [KEY]}
    body.update(spec)
    obj = {"apiVersion": API_VERSION, "kind": "DevUser", "metadata": {"name": name}, "spec": body}
    obj = admitted(obj)
    obj["metadata"].update(uid=uid or "00000000-0000-0000-0000-%012d" % zlib.crc32(name.encode()), generation=1)
    return obj


def _sample(name):
    obj = samples(name)[name]
    obj = admitted(obj)
    obj["metadata"].update(uid="11111111-2222-3333-4444-%012d" % len(obj["metadata"]["name"]), generation=3)
    return obj


def devuser_cases() -> dict[str, dict]:
    """{case: {cr, kueue, flavors, vars?}} (hack/render_manifests.py devuser_hostvars)."""
    all_flavors = flavors()
    jane = _sample("torchdev_v1alpha1_devuser.yaml")
    ada = _sample("torchdev_v1alpha1_devuser_gpu.yaml")
    gone = copy.deepcopy(all_flavors[0])
    gone["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    cases = {}
    for kueue in (False, True):
        tag = "kueue" if kueue else "plain"
        cases[f"jane-{tag}"] = {"cr": jane, "kueue": kueue, "flavors": all_flavors}
        cases[f"ada-{tag}"] = {"cr": ada, "kueue": kueue, "flavors": all_flavors}
        cases[f"nossh-{tag}"] = {"cr": devuser("nossh", sshPublicKeys=[], network={"sshAllowedCIDRs": []}),
                                 "kueue": kueue, "flavors": all_flavors}
    cases["team-queue"] = {"cr": devuser("teamed", queue={"clusterQueue": "team-vision"}), "kueue": True,
                           "flavors": all_flavors}
    cases["no-flavors"] = {"cr": devuser("early"), "kueue": True, "flavors": []}
    cases["deleted-flavor"] = {"cr": devuser("late", quota={"gpus": 2}), "kueue": True, "flavors": all_flavors + [gone]}
    cases["no-cohort"] = {"cr": devuser("alone", quota={"gpus": 1, "cpu": 8, "memory": "64Gi"}), "kueue": True,
                          "flavors": all_flavors,
                          "vars": {"kueue_cohort": "", "kueue_fair_sharing_weight": "500m",
                                   "kueue_preemption": {"reclaimWithinCohort": "Never",
                                                        "withinClusterQueue": "LowerOrNewerEqualPriority"}}}
    cases["ipv6-small-quota"] = {"cr": devuser("v6", quota={"cpu": "50m", "memory": "100Mi", "storage": "10Gi"},
                                               network={"sshAllowedCIDRs": ["fd00:10::/32", "10.1.0.0/16"]}),
                                 "kueue": False, "flavors": all_flavors}
    return cases


# --------------------------------------------------------------------------- TrainingJob
def trainingjob_cases() -> dict[str, dict]:
    """{case: {cr, decision?, kueue?, job?}} (hack/render_manifests.py trainingjob_hostvars): the
    sample TrainingJobs, a user's checkpoint claim, a queued Kueue Job, a restarting run."""
    jobs = samples("torchdev_v1alpha1_trainingjob*.yaml")
    assert jobs, "config/samples must hold TrainingJob samples"
    cases = {}
    for obj in jobs.values():
        cases[obj["metadata"]["name"]] = {"cr": _devserver(obj)}
    cpu = jobs["torchdev_v1alpha1_trainingjob.yaml"]
    cases["user_claim"] = {"cr": _devserver(cpu, "userclaim", checkpoint={"enabled": True, "storage": {"claimName": "team-ckpt"}})}
    cases["kueue_queued"] = {
        "cr": _devserver(cpu, "queued", scheduling={"priority": "torchdev-high"}),
        "kueue": {"served": True, "local_queue": {"metadata": {"name": LOCAL_QUEUE, "namespace": NAMESPACE},
                                                  "spec": {"clusterQueue": "torchdev-jane"}},
                  "priority_class": {"name": "torchdev-high", "source": "spec.scheduling.priority", "exists": True}},
    }
    cases["restarting"] = {"cr": _devserver(cpu, "restarting"), "decision": {"run": False, "attempt": 1}}
    return cases


# --------------------------------------------------------------------------- EphemeralAccelerationJob
def ephemeralaccelerationjob_cases() -> dict[str, dict]:
    """{case: {cr, decision?}} (hack/render_manifests.py ephemeralaccelerationjob_hostvars): the
    sample jobs as they start (the volume, the runner, the pod), seed 004's example, and a
    finished job that keeps only its volume."""
    jobs = samples("torchdev_v1alpha1_ephemeralaccelerationjob*.yaml")
    assert jobs, "config/samples must hold EphemeralAccelerationJob samples"
    cases = {}
    for obj in jobs.values():
        cases[obj["metadata"]["name"]] = {"cr": _devserver(obj)}
    gpu = jobs["torchdev_v1alpha1_ephemeralaccelerationjob.yaml"]
    # seed 004's example, its image pinned (its :latest is the user's choice; the operator runs what it is given)
    cases["seed004"] = {"cr": _devserver(gpu, "my-inference-job", storageClass="longhorn", image="gpu-job-inference:1.0")}
    cases["finished"] = {"cr": _devserver(gpu, "finished"), "decision": {"phase": "Succeeded", "ensure": []}}
    return cases
