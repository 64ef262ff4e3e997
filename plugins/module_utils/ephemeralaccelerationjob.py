# -*- coding: utf-8 -*-
# Apache-2.0
"""EphemeralAccelerationJob: spec rules and what the role renders (plugins/filter/
ephemeralaccelerationjob.py adapts these functions; the lifecycle and the status are
ephemeralaccelerationjob_status.py).

An EphemeralAccelerationJob ``<name>`` renders (roles/ephemeralaccelerationjob/templates):

* the artifacts volume ``artifacts-<name>`` (a PersistentVolumeClaim owned by the job,
  ReadWriteOnce, spec.pvcSize, spec.storageClass): the user's project, the input images,
  model files and the results; devctl infer may create it first (same spec, ``claim_spec``)
  and upload into it, the role then adopts it;
* the ConfigMap ``<name>-infer``: the torchdev_infer runner (files/torchdev_infer);
* the inference pod ``ephemeralaccelerationjob-<name>`` (restartPolicy Never): the runner
  with the volume at /artifacts, spec.resources.gpu GPUs.

Paths in the spec (model file, input, output) are paths in the volume: they start with
/artifacts/ (the CRD says so too).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import posixpath

from ansible_collections.torchdev.operator.plugins.module_utils.constants import (
    EAJ_ARTIFACTS_DIR, EAJ_CLAIM_PREFIX, EAJ_LABEL, EAJ_MODEL_SUFFIXES, EAJ_MODELS, EAJ_POD_PREFIX, EAJ_RUNNER_DIR,
    EAJ_RUNNER_SUFFIX, GPU_RESOURCE, LABEL_COMPONENT, LABEL_INSTANCE, LABEL_MANAGED_BY, LABEL_NAME, LABEL_PART_OF,
    MANAGED_BY, PART_OF, REASON_INVALID_SPEC)
from ansible_collections.torchdev.operator.plugins.module_utils.quantity import is_quantity, parse_quantity

# The inference pod's caches (TORCH_HOME, XDG_CACHE_HOME, HF_HOME): in its /tmp emptyDir, off the volume.
EAJ_CACHE_DIR = "/tmp/.cache"

SPEC_DEFAULTS = {
    "output": {"path": EAJ_ARTIFACTS_DIR + "/output.json"},
    "resources": {"gpu": 1},
    "ttlSecondsAfterFinished": 0,
    "pvcTTLSecondsAfterFinished": 3600,
    "pvcSize": "1Gi",
    "image": "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime",
}
INPUT_TYPES = ("image", "directory")
NAME_MAX = 53


def normalize(spec):
    """The spec over the CRD's defaults (the apiserver applies them; an object admitted before
    a default existed must not trip the role)."""
    out = json.loads(json.dumps(SPEC_DEFAULTS))
    for key, value in json.loads(json.dumps(spec or {})).items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key].update({k: v for k, v in value.items() if v is not None})
        elif value is not None:
            out[key] = value
    return out


# --------------------------------------------------------------------------- names and labels
def claim_name(name):
    """The artifacts volume of job ``name``."""
    return EAJ_CLAIM_PREFIX + str(name)


def pod_name(name):
    """The inference pod of job ``name``."""
    return EAJ_POD_PREFIX + str(name)


def runner_name(name):
    """The ConfigMap holding the runner of job ``name``."""
    return str(name) + EAJ_RUNNER_SUFFIX


def selector_labels(name):
    """The labels that find a job's objects."""
    return {LABEL_NAME: "ephemeralaccelerationjob", LABEL_INSTANCE: str(name)}


def labels(name, component="inference"):
    """The labels of every object a job renders (``component``: inference, artifacts, runner;
    devctl's helper pods: transfer, debug)."""
    result = selector_labels(name)
    result.update({LABEL_PART_OF: PART_OF, LABEL_MANAGED_BY: MANAGED_BY, LABEL_COMPONENT: str(component),
                   EAJ_LABEL: str(name)})
    return result


# --------------------------------------------------------------------------- paths
def in_volume(path):
    """True when ``path`` names something inside the artifacts volume (no '..' escapes)."""
    if not isinstance(path, str) or not path.startswith(EAJ_ARTIFACTS_DIR + "/"):
        return False
    norm = posixpath.normpath(path)
    return (norm == EAJ_ARTIFACTS_DIR or norm.startswith(EAJ_ARTIFACTS_DIR + "/")) and "/../" not in path + "/"


def is_model_file(model):
    return isinstance(model, str) and model.startswith("/") and model.endswith(EAJ_MODEL_SUFFIXES)


# --------------------------------------------------------------------------- spec rules
def spec_problem(spec, name=None):
    """{reason, message} of a spec the operator cannot run (a permanent problem), or None.

    The CRD rejects these at admission; an object admitted by an older CRD may still break them."""
    spec = normalize(spec)
    fail = lambda message: {"reason": REASON_INVALID_SPEC, "message": message}  # noqa: E731
    if name is not None and len(str(name)) > NAME_MAX:
        return fail("metadata.name: at most %d characters (the volume is artifacts-<name>)" % NAME_MAX)
    model = spec.get("model")
    if model not in EAJ_MODELS and not (is_model_file(model) and in_volume(model)):
        return fail("spec.model: %r is neither %s nor a model file in %s (%s)" % (
            model, " nor ".join(EAJ_MODELS), EAJ_ARTIFACTS_DIR, ", ".join(EAJ_MODEL_SUFFIXES)))
    inp = spec.get("input") or {}
    if inp.get("type") not in INPUT_TYPES:
        return fail("spec.input.type: must be image or directory")
    if not in_volume(inp.get("path")):
        return fail("spec.input.path: must be a path in %s" % EAJ_ARTIFACTS_DIR)
    out = spec["output"].get("path")
    if not in_volume(out) or not str(out).endswith(".json"):
        return fail("spec.output.path: must be a .json path in %s" % EAJ_ARTIFACTS_DIR)
    gpu = spec["resources"].get("gpu")
    if not isinstance(gpu, int) or isinstance(gpu, bool) or not 0 <= gpu <= 8:
        return fail("spec.resources.gpu: must be an integer from 0 to 8")
    if int(spec["pvcTTLSecondsAfterFinished"]) < int(spec["ttlSecondsAfterFinished"]):
        return fail("spec.pvcTTLSecondsAfterFinished: must not be shorter than ttlSecondsAfterFinished")
    if not is_quantity(spec["pvcSize"]) or parse_quantity(spec["pvcSize"]) <= 0:
        return fail("spec.pvcSize: %r is not a positive quantity" % spec["pvcSize"])
    return None


# --------------------------------------------------------------------------- rendering
def claim_spec(spec):
    """The artifacts volume's spec (the role's template and devctl infer create render it alike:
    a claim devctl created is adopted by the role without a change)."""
    spec = normalize(spec)
    out = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": str(spec["pvcSize"])}}}
    if spec.get("storageClass"):
        out["storageClassName"] = spec["storageClass"]
    return out


def runner_args(spec):
    """The runner's arguments (python -m torchdev_infer ...)."""
    spec = normalize(spec)
    return ["--model", str(spec["model"]), "--input-type", str(spec["input"]["type"]),
            "--input", str(spec["input"]["path"]), "--output", str(spec["output"]["path"]),
            "--artifacts-dir", EAJ_ARTIFACTS_DIR]


def env(spec, name, namespace):
    """The inference container's env: where the runner is, caches in the pod's /tmp (an
    emptyDir), never on the volume: the volume holds what the user uploaded, and a planted
    ``$TORCH_HOME/hub/checkpoints/resnet50-*.pth`` there would be loaded as torchvision's
    weights (issue 25.4).  torchvision's weights are downloaded again by each run."""
    spec = normalize(spec)
    values = {
        "PYTHONPATH": EAJ_RUNNER_DIR,
        "TORCH_HOME": EAJ_CACHE_DIR + "/torch",
        "XDG_CACHE_HOME": EAJ_CACHE_DIR,
        "HF_HOME": EAJ_CACHE_DIR + "/huggingface",
        "HOME": "/tmp",
        "PYTHONUNBUFFERED": "1",
        "TORCHDEV_NAME": str(name),
        "TORCHDEV_NAMESPACE": str(namespace),
        "TORCHDEV_KIND": "EphemeralAccelerationJob",
    }
    return [{"name": key, "value": values[key]} for key in sorted(values)]


def resources(spec, base=None):
    """The inference container's resources: ``base`` (the role's cpu/memory defaults) with
    nvidia.com/gpu = spec.resources.gpu (requests = limits) when it is not 0."""
    spec = normalize(spec)
    res = json.loads(json.dumps(base or {}))
    gpus = int(spec["resources"]["gpu"])
    if gpus > 0:
        res.setdefault("limits", {})[GPU_RESOURCE] = str(gpus)
        res.setdefault("requests", {})[GPU_RESOURCE] = str(gpus)
    return {k: {rk: str(rv) for rk, rv in sorted(v.items())} for k, v in sorted(res.items()) if v}


def tolerations(spec):
    """nvidia.com/gpu:NoSchedule for a GPU pod (GPU nodes are tainted), none for a CPU pod."""
    if int(normalize(spec)["resources"]["gpu"]) > 0:
        return [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}]
    return []
