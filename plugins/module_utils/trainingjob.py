# -*- coding: utf-8 -*-
# Apache-2.0
"""TrainingJob: spec rules and what the role renders (plugins/filter/trainingjob.py adapts
these functions; the status is trainingjob_status.py).

A TrainingJob ``<name>`` renders (roles/trainingjob/templates):

* the Indexed batch/v1 Job ``<name>`` (parallelism = completions = numWorkers,
  restartPolicy Never, backoffLimit 0 and a podFailurePolicy that fails the Job at the
  first failed worker: the operator restarts the whole group itself, see
  trainingjob_status.decide); pod hostnames ``<name>-<index>`` under the headless Service
  ``<name>`` (the pods' subdomain);
* the ConfigMaps ``<name>-hyperparameters`` (hyperparameters.json) and ``<name>-train-lib``
  (the torchdev_train library, on PYTHONPATH);
* the checkpoint claim ``<name>-checkpoints`` (pvc storage without claimName; never owned,
  so it outlives the TrainingJob: checkpoints are user data);
* the training code's identity: ServiceAccount, Role and RoleBinding ``<name>-trainer`` that
  may only get its own TrainingJob and patch its status (resourceNames).

The container env (``env``): the torch.distributed rendezvous of module_utils/rendezvous.py
(MASTER_ADDR = worker 0 ``<name>-0.<name>.<ns>.svc``, NODE_RANK from the completion index),
TORCHDEV_* (name, namespace, model, dataset, epochs, attempt, checkpoint location and
policy, success policy), monitoring variables, then spec.env.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.torchdev.operator.plugins.module_utils import rendezvous
from ansible_collections.torchdev.operator.plugins.module_utils.plan import is_subset
from ansible_collections.torchdev.operator.plugins.module_utils.constants import (
    API_GROUP, API_VERSION, GPU_RESOURCE, LABEL_COMPONENT, LABEL_INSTANCE, LABEL_MANAGED_BY, LABEL_NAME, LABEL_PART_OF,
    MANAGED_BY, PART_OF, REASON_INVALID_SPEC, TRAINING_ATTEMPT_ANNOTATION, TRAININGJOB_LABEL,
    TRAINING_FIELD_MANAGER, TRAINING_LIB_DIR, TRAINING_HYPERPARAMETERS_PATH)

COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
COMPLETION_INDEX_FIELD_PATH = "metadata.annotations['%s']" % COMPLETION_INDEX_ANNOTATION

# The operator's variables: spec.env may not set them (the CRD says so too).
RESERVED_ENV = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "NODE_RANK", "NNODES", "NPROC_PER_NODE",
                "JOB_COMPLETION_INDEX")

SPEC_DEFAULTS = {
    "framework": "pytorch",
    "gpusPerWorker": 1,
    "image": "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime",
    "command": [],
    "args": [],
    "env": [],
    "resources": {},
    "hyperparameters": {"learningRate": 0.001, "batchSize": 32, "epochs": 1, "optimizer": "adam",
                        "warmupSteps": 0, "gradientAccumulationSteps": 1, "mixedPrecision": False},
    "checkpoint": {"enabled": False, "frequency": 1, "retention": 3,
                   "storage": {"type": "pvc", "size": "10Gi", "mountPath": "/checkpoints"}},
    "scheduling": {},
    "monitoring": {"enabled": True, "metricsPort": 9090, "tensorboardEnabled": False},
    "networking": {"backend": "nccl", "masterPort": 29500, "rdmaEnabled": False},
    "failurePolicy": {"restartPolicy": "OnFailure", "backoffLimit": 3},
    "successPolicy": {},
    "suspend": False,
}


def _merge(base, over):
    out = dict(base)
    for key, value in (over or {}).items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        elif value is not None:
            out[key] = value
    return out


def normalize(spec):
    """The spec over the CRD's defaults (the apiserver applies them; the role must not trip
    over a missing key when it runs against an object written before a default existed)."""
    return _merge(SPEC_DEFAULTS, json.loads(json.dumps(spec or {})))


# --------------------------------------------------------------------------- labels
def selector_labels(name):
    """The Job's pods and the headless Service's selector."""
    return {LABEL_NAME: "trainingjob", LABEL_INSTANCE: str(name)}


def labels(name, component="worker"):
    """The labels of every object a TrainingJob renders."""
    result = selector_labels(name)
    result.update({
        LABEL_PART_OF: PART_OF,
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_COMPONENT: str(component),
        TRAININGJOB_LABEL: str(name),
    })
    return result


# --------------------------------------------------------------------------- names
def trainer_name(name):
    """ServiceAccount / Role / RoleBinding of the training code."""
    return "%s-trainer" % name


def checkpoint_claim(spec, name):
    """The claim the checkpoints live on (pvc storage), or ""."""
    ckpt = normalize(spec)["checkpoint"]
    if not ckpt.get("enabled") or ckpt["storage"].get("type") != "pvc":
        return ""
    return ckpt["storage"].get("claimName") or "%s-checkpoints" % name


def _bad_segment(path):
    """The first ``.``, ``..`` or empty segment of a /-separated path (or a backslash), else None."""
    for segment in str(path).split("/"):
        if "\\" in segment:
            return "a backslash"
        if segment in ("", ".", ".."):
            return "a %r segment" % segment if segment else "an empty segment (//)"
    return None


def _checkpoint_parts(spec):
    """(spec.checkpoint, its storage) over the defaults; (None, None) when either is not an object."""
    ckpt = normalize(spec).get("checkpoint") if isinstance(spec, dict) else None
    storage = ckpt.get("storage") if isinstance(ckpt, dict) else None
    return (ckpt, storage) if isinstance(storage, dict) else (None, None)


def s3_prefix(spec, name, namespace):
    """The effective key prefix of an s3 job's checkpoints: always inside ``<namespace>/``.

    spec.checkpoint.storage.s3Prefix without its leading and trailing slashes, with
    ``<namespace>/`` put in front unless it already starts with it (``<namespace>/<name>``
    when empty, ``<namespace>`` for "/"): one user cannot point a job at (and rotate away)
    another namespace's checkpoints.  "" when the prefix has a ``.``, ``..`` or empty segment
    (checkpoint_problem names it)."""
    _, storage = _checkpoint_parts(spec)
    if storage is None:
        return ""
    namespace = str(namespace)
    raw = storage.get("s3Prefix")
    if raw is None or raw == "":
        return "%s/%s" % (namespace, name)
    if not isinstance(raw, str):
        return ""
    prefix = raw.strip("/")
    if not prefix:  # "/": the namespace's own prefix
        return namespace
    if _bad_segment(prefix):
        return ""
    if prefix == namespace or prefix.startswith(namespace + "/"):
        return prefix
    return "%s/%s" % (namespace, prefix)


def checkpoint_problem(spec, namespace):
    """The message (naming the field) of a checkpoint location outside the job's namespace or
    volume, or None: s3Prefix with a ``.``, ``..`` or empty segment; resumeFrom that is an
    s3:// URL whose key is not under ``<namespace>/``, or a path that is not absolute, has such
    a segment, or is not inside the checkpoint volume (storage.mountPath)."""
    ckpt, storage = _checkpoint_parts(spec)
    if storage is None:
        return "spec.checkpoint.storage: must be an object"
    namespace = str(namespace)
    raw = storage.get("s3Prefix")
    if raw is not None and not isinstance(raw, str):
        return "spec.checkpoint.storage.s3Prefix: must be a string"
    if raw and str(raw).strip("/") and _bad_segment(str(raw).strip("/")):
        return ("spec.checkpoint.storage.s3Prefix: %r has %s: use a plain key prefix (it is put under %s/)"
                % (raw, _bad_segment(str(raw).strip("/")), namespace))
    resume = ckpt.get("resumeFrom")
    if resume is None or resume == "":
        return None
    if not isinstance(resume, str):
        return "spec.checkpoint.resumeFrom: must be a string"
    if resume.startswith("s3://"):
        bucket, _, key = resume[5:].partition("/")
        key = key.rstrip("/")
        if not bucket or _bad_segment(key) or not key.startswith(namespace + "/"):
            return ("spec.checkpoint.resumeFrom: %s is outside this namespace's checkpoints: an s3:// URL must be "
                    "s3://<bucket>/%s/... (without '.', '..' or empty segments)" % (resume, namespace))
        return None
    mount = str(storage.get("mountPath") or "/checkpoints").rstrip("/")
    path = resume.rstrip("/")
    if storage.get("type") != "pvc" or not path.startswith(mount + "/") or _bad_segment(path[1:]):
        return ("spec.checkpoint.resumeFrom: %s is outside the checkpoint volume: use a path under its mountPath "
                "%s/ (pvc storage, without '.', '..' or empty segments) or an s3:// URL" % (resume, mount))
    return None


def checkpoint_uri(spec, name, namespace):
    """Where the checkpoints of this job go: a directory in the volume or an s3:// prefix
    (under ``<namespace>/``: s3_prefix); ""."""
    ckpt = normalize(spec)["checkpoint"]
    if not ckpt.get("enabled"):
        return ""
    storage = ckpt["storage"]
    if storage.get("type") == "s3":
        prefix = s3_prefix(spec, name, namespace)
        return "s3://%s/%s" % (storage["s3Bucket"], prefix) if prefix else ""
    return "%s/%s" % (storage.get("mountPath", "/checkpoints").rstrip("/"), name)


# --------------------------------------------------------------------------- spec rules
def _rendezvous_spec(spec):
    """The DevServer-shaped spec module_utils/rendezvous.py takes: one node per worker,
    gpusPerWorker processes per node (1 for a CPU worker)."""
    spec = normalize(spec)
    nprocs = max(int(spec["gpusPerWorker"]), 1)
    return {"mode": "distributed",
            "distributed": {"worldSize": int(spec["numWorkers"]) * nprocs, "nprocsPerNode": nprocs,
                            "backend": spec["networking"]["backend"]}}


def _flavor(spec):
    return {"gpu": {"count": int(normalize(spec)["gpusPerWorker"])}}


def spec_problem(spec, name=None, namespace=None):
    """{reason, message} of a spec the operator cannot run (a permanent problem), or None.

    The CRD rejects most of them at admission; these are the rules it cannot express or
    that an object admitted by an older CRD may still break."""
    raw = spec or {}
    spec = normalize(raw)
    if spec.get("framework") != "pytorch":
        return {"reason": REASON_INVALID_SPEC, "message": "spec.framework: only pytorch is supported"}
    workers = spec.get("numWorkers")
    if not isinstance(workers, int) or isinstance(workers, bool) or not 1 <= workers <= 100:
        return {"reason": REASON_INVALID_SPEC, "message": "spec.numWorkers: must be an integer from 1 to 100"}
    storage = spec["checkpoint"]["storage"]
    if storage.get("type") not in ("pvc", "s3"):
        return {"reason": REASON_INVALID_SPEC,
                "message": "spec.checkpoint.storage.type: %s is not supported (pvc or s3; GCS and Azure are out of scope)"
                           % storage.get("type")}
    if storage.get("type") == "s3" and not storage.get("s3Bucket"):
        return {"reason": REASON_INVALID_SPEC, "message": "spec.checkpoint.storage.s3Bucket: required for s3 storage"}
    message = checkpoint_problem(spec, namespace or "")
    if message:
        return {"reason": REASON_INVALID_SPEC, "message": message}
    limits = (spec.get("resources") or {}).get("limits") or {}
    if GPU_RESOURCE in limits and str(limits[GPU_RESOURCE]) != str(spec["gpusPerWorker"]):
        return {"reason": REASON_INVALID_SPEC,
                "message": "spec.resources.limits['%s']: %s differs from spec.gpusPerWorker %s"
                           % (GPU_RESOURCE, limits[GPU_RESOURCE], spec["gpusPerWorker"])}
    for item in spec.get("env") or []:
        if item.get("name") in RESERVED_ENV or str(item.get("name", "")).startswith("TORCHDEV_"):
            return {"reason": REASON_INVALID_SPEC,
                    "message": "spec.env: %s is set by the operator" % item.get("name")}
    errors = rendezvous.rendezvous_errors(_rendezvous_spec(spec), _flavor(spec), name=name or "x",
                                          namespace=namespace or "x")
    if errors:
        reason, _, message = errors[0].partition(": ")
        return {"reason": reason, "message": "spec.networking.backend: " + message}
    return None


# --------------------------------------------------------------------------- rendering
def _var(name, value):
    return {"name": name, "value": str(value)}


def env(spec, name, namespace, attempt=0):
    """The training container's env: the rendezvous (NODE_RANK = the completion index),
    TORCHDEV_*, checkpoint and monitoring variables, then spec.env in order."""
    spec = normalize(spec)
    rdzv = rendezvous.rendezvous_env(_rendezvous_spec(spec), _flavor(spec), name=name, namespace=namespace)
    port = int(spec["networking"]["masterPort"])
    result = []
    for item in rdzv:
        if item["name"] == "NODE_RANK":
            item = {"name": "NODE_RANK", "valueFrom": {"fieldRef": {"apiVersion": "v1",
                                                                    "fieldPath": COMPLETION_INDEX_FIELD_PATH}}}
        elif item["name"] == "MASTER_PORT":
            item = _var("MASTER_PORT", port)
        elif item["name"] == "TORCHDEV_RDZV_ENDPOINT":
            item = _var("TORCHDEV_RDZV_ENDPOINT", "%s:%d" % (item["value"].rsplit(":", 1)[0], port))
        result.append(item)
    hp = spec["hyperparameters"]
    ckpt = spec["checkpoint"]
    success = spec.get("successPolicy") or {}
    monitoring = spec["monitoring"]
    values = {
        "TORCHDEV_NAME": name,
        "TORCHDEV_NAMESPACE": namespace,
        "TORCHDEV_KIND": "TrainingJob",
        "TORCHDEV_API_VERSION": API_VERSION,
        "TORCHDEV_MODEL": spec["model"],
        "TORCHDEV_DATASET": spec["dataset"],
        "TORCHDEV_EPOCHS": hp["epochs"],
        "TORCHDEV_ATTEMPT": int(attempt),
        "TORCHDEV_HYPERPARAMETERS": TRAINING_HYPERPARAMETERS_PATH,
        "TORCHDEV_FIELD_MANAGER": TRAINING_FIELD_MANAGER,
        "TORCHDEV_GPUS": spec["gpusPerWorker"],
        "PYTHONPATH": TRAINING_LIB_DIR,
    }
    uri = checkpoint_uri(spec, name, namespace)
    if uri:
        values.update({"TORCHDEV_CHECKPOINT_URI": uri, "TORCHDEV_CHECKPOINT_FREQUENCY": ckpt["frequency"],
                       "TORCHDEV_CHECKPOINT_RETENTION": ckpt["retention"]})
        if ckpt.get("resumeFrom"):
            values["TORCHDEV_RESUME_FROM"] = ckpt["resumeFrom"]
    if success.get("targetAccuracy") is not None:
        values["TORCHDEV_TARGET_ACCURACY"] = success["targetAccuracy"]
    if success.get("earlyStoppingPatience") is not None:
        values["TORCHDEV_EARLY_STOPPING_PATIENCE"] = success["earlyStoppingPatience"]
    if monitoring.get("enabled"):
        values["TORCHDEV_METRICS_PORT"] = monitoring["metricsPort"]
    if monitoring.get("tensorboardEnabled"):
        values["TORCHDEV_TENSORBOARD_DIR"] = (uri + "/tensorboard") if uri and not uri.startswith("s3://") \
            else "/tmp/tensorboard"
    if monitoring.get("mlflowTrackingUri"):
        values["MLFLOW_TRACKING_URI"] = monitoring["mlflowTrackingUri"]
    if monitoring.get("wandbProject"):
        values["WANDB_PROJECT"] = monitoring["wandbProject"]
    storage = ckpt["storage"]
    if uri and storage.get("type") == "s3":
        if storage.get("s3Endpoint"):
            values["AWS_ENDPOINT_URL"] = storage["s3Endpoint"]
        if storage.get("s3Region"):
            values["AWS_DEFAULT_REGION"] = storage["s3Region"]
    result.extend(_var(k, values[k]) for k in sorted(values))
    if uri and storage.get("type") == "s3" and storage.get("secretName"):
        for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            result.append({"name": key, "valueFrom": {"secretKeyRef": {"name": storage["secretName"], "key": key}}})
    result = sorted(result, key=lambda item: item["name"])
    return result + [dict(item) for item in spec.get("env") or []]


def resources(spec):
    """The worker container's resources: spec.resources with nvidia.com/gpu = gpusPerWorker."""
    spec = normalize(spec)
    res = json.loads(json.dumps(spec.get("resources") or {}))
    gpus = int(spec["gpusPerWorker"])
    if gpus > 0:
        res.setdefault("limits", {})[GPU_RESOURCE] = str(gpus)
        res.setdefault("requests", {})[GPU_RESOURCE] = str(gpus)
    return {k: {rk: str(rv) for rk, rv in sorted(v.items())} for k, v in sorted(res.items()) if v}


def tolerations(spec):
    """spec.scheduling.tolerations, plus nvidia.com/gpu:NoSchedule for GPU workers."""
    spec = normalize(spec)
    result = [dict(t) for t in (spec.get("scheduling") or {}).get("tolerations") or []]
    if int(spec["gpusPerWorker"]) > 0 and not any(t.get("key") == GPU_RESOURCE for t in result):
        result.append({"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"})
    return result


def hyperparameters(spec):
    """The hyperparameters.json document of the <name>-hyperparameters ConfigMap."""
    spec = normalize(spec)
    doc = dict(spec["hyperparameters"])
    doc["model"] = spec["model"]
    doc["dataset"] = spec["dataset"]
    return json.dumps(doc, sort_keys=True, indent=2) + "\n"


def trainer_rules(name):
    """The Role of the training code: its own TrainingJob only (resourceNames), read it and
    write the library's status fields through the status subresource."""
    return [
        {"apiGroups": [API_GROUP], "resources": ["trainingjobs"], "resourceNames": [str(name)], "verbs": ["get"]},
        {"apiGroups": [API_GROUP], "resources": ["trainingjobs/status"], "resourceNames": [str(name)],
         "verbs": ["get", "patch"]},
    ]


def keep_suspend(objects, live_job, queued):
    """With Kueue (``queued``: the Job carries the queue-name label) Kueue owns the Job's
    spec.suspend after creation: a new Job is created suspended, a live one keeps the value
    Kueue gave it (after stamping, so that the desired hash does not follow Kueue)."""
    if not queued:
        return objects
    suspended = True
    if live_job:
        suspended = bool(((live_job.get("spec") or {}).get("suspend")))
    result = []
    for obj in objects or []:
        if obj and obj.get("kind") == "Job":
            obj = json.loads(json.dumps(obj))
            obj["spec"]["suspend"] = suspended
        result.append(obj)
    return result


def keep_live_template(objects, live_job):
    """A running Job keeps the pod template it was created with.

    The workers' fields of a TrainingJob (image, command, env, resources, hyperparameters, ...)
    may be edited while it runs, but a Job's ``spec.template`` is immutable unless the Job is
    suspended: applying the new one is rejected (422), and the run used to end as Failed
    InvalidSpec while its workers kept training.  The edit takes effect when the Job is created
    again: at the next attempt (a whole-group restart) or after suspend/resume.  Until then the
    desired Job carries the live template (after stamping: the desired hash is the new spec's,
    so the Job is written once with it and is then unchanged)."""
    if not live_job or (live_job.get("metadata") or {}).get("deletionTimestamp") \
            or (live_job.get("spec") or {}).get("suspend"):
        return objects
    live_template = (live_job.get("spec") or {}).get("template")
    result = []
    for obj in objects or []:
        if obj and obj.get("kind") == "Job" and live_template is not None \
                and not is_subset((obj.get("spec") or {}).get("template"), live_template):
            obj = json.loads(json.dumps(obj))
            obj["spec"]["template"] = json.loads(json.dumps(live_template))
        result.append(obj)
    return result


def attempt_of(job):
    """The attempt (status.restartCount when it was created) a live Job belongs to, or None."""
    raw = (((job or {}).get("metadata") or {}).get("annotations") or {}).get(TRAINING_ATTEMPT_ANNOTATION)
    try:
        return int(raw)
    except (TypeError, ValueError):
        return None
