# -*- coding: utf-8 -*-
"""Jinja2 filters of the torchdev operator roles.

Everything the templates should not compute lives here as a *pure* function (no
Ansible imports in the logic, so ``tests/plugins`` can unit-test it directly);
``FilterModule`` at the bottom is a thin adapter that turns ``ValueError`` into
``AnsibleFilterError``.

Reconcile model (see roles/devserver/tasks/apply.yml):

* ``render.yml`` renders the desired objects; ``torchdev_stamp`` puts a hash of each
  object's desired state into the annotation ``torchdev.io/desired-hash``;
* ``observe.yml`` GETs what exists; ``torchdev_drift`` keeps only the desired
  objects that are missing, whose desired-hash differs (our intent changed, which
  also catches *removed* keys) or that drifted from it (someone edited a field we
  manage: every field we render must be present with an equal value in the live
  object, lists element by element with the same length, quantities compared by
  value);
* only those are written, in one server-side-apply task.  Unchanged DevServer =>
  zero write requests.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import hashlib
import json
import re
from decimal import Decimal, InvalidOperation

try:  # Ansible is not needed to unit-test the pure functions.
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover
    AnsibleFilterError = ValueError

API_GROUP = "torchdev.io"
API_VERSION = "torchdev.io/v1alpha1"
FIELD_MANAGER = "torchdev-operator"
DESIRED_HASH_ANNOTATION = "torchdev.io/desired-hash"
FLAVOR_HASH_ANNOTATION = "torchdev.io/flavor-hash"
GPU_RESOURCE = "nvidia.com/gpu"
EXTENDED_RESOURCES = ("nvidia.com/gpu", "vpc.amazonaws.com/efa")
# Flavor fields that change what a pod looks like.  description and pricePerHour are
# informational: editing them must not restart everybody's dev server.
FLAVOR_POD_FIELDS = ("resources", "gpu", "nodeSelector", "tolerations", "shmSize")
# Degraded reasons of a spec / flavor problem: permanent until the spec or the flavor
# changes, so the run records them and ends successfully (no retries).
PROBLEM_REASONS = ("FlavorNotFound", "InvalidSpec", "InsufficientGPUs")

_QUANTITY_RE = re.compile(
    r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"((?:[KMGTPE]i)|[numkMGTPE]|(?:[eE][+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)))?$"
)
_BINARY = {"Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50, "Ei": 2 ** 60}
_DECIMAL = {
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
    "P": Decimal("1e15"), "E": Decimal("1e18"),
}
_LABEL_VALUE_BAD = re.compile(r"[^A-Za-z0-9._-]+")
_EMPTY = (None, False, 0, "", [], {})


# --------------------------------------------------------------------------- quantities
def parse_quantity(value):
    """Return the Decimal value of a Kubernetes quantity (int, float or string)."""
    if isinstance(value, bool) or value is None:
        raise ValueError("invalid quantity: %r" % (value,))
    if isinstance(value, (int, float)):
        return Decimal(str(value))
    match = _QUANTITY_RE.match(str(value).strip())
    if not match:
        raise ValueError("invalid quantity: %r" % (value,))
    number, suffix = match.group(1), match.group(2) or ""
    try:
        base = Decimal(number)
    except InvalidOperation:  # pragma: no cover - the regex already checked it
        raise ValueError("invalid quantity: %r" % (value,))
    if suffix in _BINARY:
        return base * _BINARY[suffix]
    if suffix in _DECIMAL:
        return base * _DECIMAL[suffix]
    return base * (Decimal(10) ** Decimal(suffix[1:]))


def quantity(value):
    """Normalise a quantity for a manifest: always a string, validated."""
    parse_quantity(value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value).strip()


def quantity_cmp(left, right):
    """-1, 0 or 1 comparing two quantities by value."""
    a, b = parse_quantity(left), parse_quantity(right)
    return (a > b) - (a < b)


def is_quantity(value):
    try:
        parse_quantity(value)
    except ValueError:
        return False
    return True


# --------------------------------------------------------------------------- hashing
def _plain(obj):
    """A plain-JSON copy: faster than copy.deepcopy, and it sheds Ansible's tagged types."""
    return json.loads(json.dumps(obj, default=str))


def checksum(obj, length=16):
    """Stable short sha256 of any JSON-serialisable object (key order independent)."""
    data = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(data.encode("utf-8")).hexdigest()[: int(length)]


def flavor_hash(flavor_spec):
    """Hash of the flavor fields that shape a pod (see FLAVOR_POD_FIELDS)."""
    spec = flavor_spec or {}
    return checksum({k: spec.get(k) for k in FLAVOR_POD_FIELDS if spec.get(k) not in _EMPTY})


# --------------------------------------------------------------------------- labels
def owner_label(email):
    """jane.doe@example.com -> jane.doe_at_example.com, a valid label value (<= 63)."""
    value = _LABEL_VALUE_BAD.sub("-", str(email or "").replace("@", "_at_"))
    if len(value) > 63:
        value = value[:54] + "-" + checksum(email, 8)
    return value.strip("-_.")


def selector_labels(name):
    """The stable subset used in selectors (immutable in a StatefulSet)."""
    return {
        "app.kubernetes.io/name": "devserver",
        "app.kubernetes.io/instance": str(name),
    }


def stable_labels(name):
    """Labels that never change for a DevServer (volumeClaimTemplates are immutable)."""
    labels = selector_labels(name)
    labels.update({
        "app.kubernetes.io/part-of": "torchdev",
        "app.kubernetes.io/managed-by": "torchdev-operator",
        "torchdev.io/devserver": str(name),
    })
    return labels


def labels(name, owner, flavor, component="server"):
    """The full recommended label set of every object a DevServer renders."""
    result = stable_labels(name)
    result.update({
        "app.kubernetes.io/component": str(component),
        "torchdev.io/owner": owner_label(owner),
        "torchdev.io/flavor": str(flavor),
    })
    return result


def owner_reference(obj):
    """A controller ownerReference to the (raw) custom resource ``obj``."""
    meta = (obj or {}).get("metadata") or {}
    if not meta.get("uid") or not meta.get("name"):
        raise ValueError("torchdev_owner_reference needs an object with metadata.name and metadata.uid")
    return {
        "apiVersion": obj.get("apiVersion") or API_VERSION,
        "kind": obj.get("kind") or "DevServer",
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


# --------------------------------------------------------------------------- flavors
def flavor_gpu_count(flavor_spec):
    """GPUs per replica of a flavor: ``gpu.count`` when set, else the nvidia.com/gpu limit
    (or request) in ``resources``, else 0.  ``gpu`` is optional: a flavor that only lists
    nvidia.com/gpu in its resources (seed 000's ``gpu-large``) has that many GPUs."""
    spec = flavor_spec or {}
    count = (spec.get("gpu") or {}).get("count")
    if count is None:
        res = spec.get("resources") or {}
        count = (res.get("limits") or {}).get(GPU_RESOURCE, (res.get("requests") or {}).get(GPU_RESOURCE, 0))
    value = parse_quantity(count)
    if value != value.to_integral_value() or value < 0:
        raise ValueError("the GPU count of a flavor must be a whole number >= 0, got %r" % (count,))
    return int(value)


def flavor_errors(flavor_spec):
    """Consistency problems of a DevServerFlavor spec beyond what the CRD's CEL catches."""
    spec = flavor_spec or {}
    errors = []
    res = spec.get("resources") or {}
    requests, limits = res.get("requests") or {}, res.get("limits") or {}
    for section, values in (("requests", requests), ("limits", limits)):
        for key, value in values.items():
            if not is_quantity(value):
                errors.append("resources.%s[%s]: invalid quantity %r" % (section, key, value))
    if errors:
        return errors
    for key in sorted(set(requests) & set(limits)):
        if quantity_cmp(limits[key], requests[key]) < 0:
            errors.append("resources.limits[%s] (%s) is lower than the request (%s)" % (key, limits[key], requests[key]))
    for key in EXTENDED_RESOURCES:
        if key in requests and key in limits and quantity_cmp(requests[key], limits[key]) != 0:
            errors.append("resources.requests[%s] must equal the limit (extended resources cannot be overcommitted)" % key)
        for section, values in (("requests", requests), ("limits", limits)):
            if key in values and parse_quantity(values[key]) != parse_quantity(values[key]).to_integral_value():
                errors.append("resources.%s[%s] must be a whole number" % (section, key))
    count = (spec.get("gpu") or {}).get("count")
    declared = limits.get(GPU_RESOURCE, requests.get(GPU_RESOURCE))
    if count is not None and declared is not None and parse_quantity(declared) != Decimal(count):
        errors.append("gpu.count (%s) must equal resources.limits[nvidia.com/gpu] (%s); "
                      "set one of them, or both to the same number" % (count, declared))
    shm = spec.get("shmSize", "1Gi")
    if not is_quantity(shm):
        errors.append("shmSize: invalid quantity %r" % (shm,))
    elif "memory" in limits and quantity_cmp(shm, limits["memory"]) > 0:
        errors.append("shmSize (%s) exceeds the memory limit (%s); /dev/shm is charged to the pod's memory" % (shm, limits["memory"]))
    return errors


def resources(flavor_spec):
    """Container resources of a flavor: quantities as strings, the GPU count as nvidia.com/gpu."""
    errors = flavor_errors(flavor_spec)
    if errors:
        raise ValueError("invalid DevServerFlavor: " + "; ".join(errors))
    spec = flavor_spec or {}
    res = spec.get("resources") or {}
    result = {}
    for section in ("requests", "limits"):
        values = {str(k): quantity(v) for k, v in (res.get(section) or {}).items()}
        if values:
            result[section] = values
    count = flavor_gpu_count(spec)
    if count > 0:
        # Extended resources: the limit is what the scheduler counts; request == limit.
        result.setdefault("limits", {})[GPU_RESOURCE] = str(count)
        result.setdefault("requests", {})[GPU_RESOURCE] = str(count)
    return result


# --------------------------------------------------------------------------- env
# Set by the operator on every pod of a distributed DevServer (plugins/filter/rendezvous.py);
# NCCL_* / FI_* go through spec.distributed.ncclSettings, merged over the safe defaults.
DISTRIBUTED_ENV = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "NNODES", "NPROC_PER_NODE", "NODE_RANK")
DISTRIBUTED_ENV_PREFIXES = ("NCCL_", "FI_")


def env(raw_env, builtin, reserved_env=None, default_env=None, distributed=False):
    """User env (raw, never snake_cased) plus the operator's variables.

    ``builtin`` is a mapping name -> value and ``reserved_env`` a list of EnvVar dicts
    (``valueFrom`` allowed, e.g. the rendezvous env): both are the operator's and come
    first, sorted by name, so that a user's ``$(TORCHDEV_NAME)`` reference expands.
    ``default_env`` (EnvVar dicts) are defaults a user variable of the same name
    replaces (e.g. PATH).  Users may not set reserved names, nor in a ``distributed``
    DevServer the rendezvous variables or NCCL_/FI_ ones (ValueError -> InvalidSpec).
    """
    ops = [{"name": str(k), "value": str(v)} for k, v in (builtin or {}).items()]
    ops += [_plain(item) for item in reserved_env or []]
    reserved = {item["name"] for item in ops}
    user, seen = [], set()
    for item in raw_env or []:
        name = item.get("name")
        if not name:
            raise ValueError("spec.env entries need a name")
        if name in reserved or name.startswith("TORCHDEV_"):
            raise ValueError("spec.env: %s is reserved for the operator" % name)
        if distributed and (name in DISTRIBUTED_ENV or name.startswith(DISTRIBUTED_ENV_PREFIXES)):
            raise ValueError("spec.env: %s is set by the operator in distributed mode%s" % (
                name, " (use spec.distributed.ncclSettings)" if name.startswith(DISTRIBUTED_ENV_PREFIXES) else ""))
        if name in seen:
            raise ValueError("spec.env: duplicate variable %s" % name)
        seen.add(name)
        entry = {"name": name}
        if "valueFrom" in item and item["valueFrom"] is not None:
            entry["valueFrom"] = item["valueFrom"]
        else:
            entry["value"] = "" if item.get("value") is None else str(item["value"])
        user.append(entry)
    ops += [_plain(item) for item in default_env or [] if item["name"] not in seen and item["name"] not in reserved]
    return sorted(ops, key=lambda item: item["name"]) + user


# --------------------------------------------------------------------------- diffing
def _quantity_path(path):
    if not path:
        return False
    last = path[-1]
    parent = path[-2] if len(path) > 1 else ""
    # requests/limits: containers; hard: ResourceQuota; max/min/default/defaultRequest: LimitRange
    return parent in ("requests", "limits", "capacity", "hard", "max", "min", "default", "defaultRequest") \
        or last in ("sizeLimit", "storage")


def _scalar_equal(a, b):
    """Equal value *and* kind: 22 != "22", True != 1 (the status module's notion of kind)."""
    kind_of = _module_utils("torchdev_status")._kind_of
    return kind_of(a) == kind_of(b) and a == b


def is_subset(desired, live, path=()):
    """True when every field of ``desired`` is present with an equal value in ``live``."""
    if isinstance(desired, dict):
        if not isinstance(live, dict):
            return desired in _EMPTY and live in _EMPTY
        for key, value in desired.items():
            if key not in live or live[key] is None:
                if value in _EMPTY:
                    continue  # the apiserver omits empty / false / zero fields
                return False
            if not is_subset(value, live[key], path + (key,)):
                return False
        return True
    if isinstance(desired, list):
        if not isinstance(live, list) or len(desired) != len(live):
            return False
        return all(is_subset(d, l, path) for d, l in zip(desired, live))
    if _scalar_equal(desired, live):
        return True
    if _quantity_path(path) and is_quantity(desired) and is_quantity(live):
        return quantity_cmp(desired, live) == 0
    return False


def object_key(obj):
    meta = obj.get("metadata") or {}
    group = (obj.get("apiVersion") or "").rpartition("/")[0]
    return "%s/%s/%s/%s" % (group, obj.get("kind"), meta.get("namespace") or "", meta.get("name"))


def _strip(obj):
    clean = _plain(obj)
    clean.pop("status", None)
    meta = clean.get("metadata") or {}
    for key in ("resourceVersion", "uid", "creationTimestamp", "generation", "managedFields", "selfLink"):
        meta.pop(key, None)
    annotations = meta.get("annotations") or {}
    annotations.pop(DESIRED_HASH_ANNOTATION, None)
    if not annotations:
        meta.pop("annotations", None)
    return clean


def stamp(objects):
    """Annotate each desired object with the hash of its desired state."""
    result = []
    for obj in objects or []:
        if not obj:
            continue
        obj = _plain(obj)
        digest = checksum(_strip(obj), 32)
        obj.setdefault("metadata", {}).setdefault("annotations", {})[DESIRED_HASH_ANNOTATION] = digest
        result.append(obj)
    return result


def _index(observed):
    """``observed``: list of live objects, or k8s_info loop results (with .resources)."""
    index = {}
    for item in observed or []:
        if not item:
            continue
        if "resources" in item and "kind" not in item:
            for obj in item.get("resources") or []:
                index[object_key(obj)] = obj
        elif isinstance(item, dict) and item.get("kind"):
            index[object_key(item)] = item
    return index


def observed_objects(observed):
    """Flatten k8s_info loop results into a list of live objects."""
    return list(_index(observed).values())


def drift(desired, observed):
    """The desired objects that must be written (missing, intent changed, or drifted)."""
    index = _index(observed)
    result = []
    for obj in desired or []:
        live = index.get(object_key(obj))
        if live is None:
            result.append(obj)
            continue
        want = ((obj.get("metadata") or {}).get("annotations") or {}).get(DESIRED_HASH_ANNOTATION)
        have = ((live.get("metadata") or {}).get("annotations") or {}).get(DESIRED_HASH_ANNOTATION)
        if want is not None and want != have:
            result.append(obj)
        elif not is_subset(obj, live):
            result.append(obj)
    return result


def prune(observed, desired, owner_uid):
    """Live objects we control (ownerReference uid) that are no longer desired."""
    wanted = {object_key(obj) for obj in desired or []}
    result = []
    for key, live in sorted(_index(observed).items()):
        if key in wanted:
            continue
        refs = (live.get("metadata") or {}).get("ownerReferences") or []
        if any(ref.get("uid") == owner_uid and ref.get("controller") for ref in refs):
            meta = live["metadata"]
            result.append({
                "apiVersion": live.get("apiVersion"),
                "kind": live.get("kind"),
                "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace")},
            })
    return result


def plan(desired, observed, owner_uid, kept=None):
    """{objects, to_apply, to_prune} of a reconcile, computed once (a role reads the parts).

    ``to_apply``: drift() of ``desired`` against ``observed`` + ``kept``; ``to_prune``:
    prune() of ``observed`` (objects in ``kept``, e.g. home PVCs that follow their own
    retention policy, are compared but never pruned).
    """
    desired = list(desired or [])
    return {
        "objects": desired,
        "to_apply": drift(desired, list(observed or []) + list(kept or [])),
        "to_prune": prune(observed, desired, owner_uid),
    }


def find(objects, kind, name=None):
    """First object of ``kind`` (and ``name``) in a list, or {}."""
    for obj in objects or []:
        if obj and obj.get("kind") == kind and (name is None or (obj.get("metadata") or {}).get("name") == name):
            return obj
    return {}


# --------------------------------------------------------------------------- StatefulSets
_IMMUTABLE_STS_FIELDS = ("selector", "serviceName", "podManagementPolicy", "volumeClaimTemplates")


def preserve_immutable(desired, live):
    """See _preserve_immutable; ``desired`` may be a list (only StatefulSets are touched)."""
    if isinstance(desired, list):
        return [_preserve_immutable(o, live) if o and o.get("kind") == "StatefulSet" else o for o in desired]
    return _preserve_immutable(desired, live)


def _preserve_immutable(desired, live):
    """Keep a live StatefulSet's immutable fields in the desired one.

    ``volumeClaimTemplates`` (and selector, serviceName, podManagementPolicy) cannot
    change after creation.  A grown ``persistentHomeSize`` is applied to the existing
    PVCs instead (``pvc_resizes``); the template keeps the size it was created with.
    """
    if not desired or not live:
        return desired
    result = _plain(desired)
    live_spec = live.get("spec") or {}
    for field in _IMMUTABLE_STS_FIELDS:
        if field not in live_spec:
            continue
        value = _plain(live_spec[field])
        if field == "volumeClaimTemplates":
            for template in value:
                template.pop("status", None)
                template.pop("apiVersion", None)
                template.pop("kind", None)
                meta = template.get("metadata") or {}
                meta.pop("creationTimestamp", None)
        result["spec"][field] = value
    return result


def pvc_resizes(pvcs, name, size, claim="home"):
    """Partial PVC manifests that grow ``<claim>-<name>-<i>`` claims smaller than ``size``."""
    prefix = "%s-%s-" % (claim, name)
    result = []
    for pvc in observed_objects(pvcs):
        meta = pvc.get("metadata") or {}
        if pvc.get("kind") not in (None, "PersistentVolumeClaim") or not str(meta.get("name", "")).startswith(prefix):
            continue
        if not str(meta["name"])[len(prefix):].isdigit():
            continue
        current = (((pvc.get("spec") or {}).get("resources") or {}).get("requests") or {}).get("storage")
        if current is None or quantity_cmp(size, current) > 0:
            result.append({
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": meta["name"], "namespace": meta.get("namespace")},
                "spec": {"resources": {"requests": {"storage": quantity(size)}}},
            })
    return result


def applied_objects(register):
    """Objects returned by a kubernetes.core.k8s task (one definition or a list)."""
    reg = register or {}
    if reg.get("skipped") or not reg.get("result"):
        return []
    result = reg["result"]
    if isinstance(result, dict) and "results" in result and "kind" not in result:
        return [r.get("result") for r in result["results"] if r.get("result")]
    return [result]


def flavor_users(devservers, flavor_name):
    """DevServers (not being deleted) whose spec.flavor is ``flavor_name``."""
    return [
        ds for ds in devservers or []
        if (ds.get("spec") or {}).get("flavor") == flavor_name
        and not (ds.get("metadata") or {}).get("deletionTimestamp")
    ]


def flavor_notices(devservers, flavor_name, digest, annotation=FLAVOR_HASH_ANNOTATION):
    """Merge-patch bodies that set ``annotation: digest`` on the users that lack it."""
    result = []
    for ds in flavor_users(devservers, flavor_name):
        meta = ds.get("metadata") or {}
        if (meta.get("annotations") or {}).get(annotation) == digest:
            continue
        result.append({
            "apiVersion": ds.get("apiVersion") or API_VERSION,
            "kind": ds.get("kind") or "DevServer",
            "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace"), "annotations": {annotation: digest}},
        })
    return result


# --------------------------------------------------------------------------- spec checks
def spec_errors(spec):
    """Problems of a (defaulted, raw camelCase) DevServer spec the CRD cannot express."""
    spec = spec or {}
    errors = []
    for field in ("owner", "flavor"):
        if not spec.get(field):
            errors.append("spec.%s is required" % field)
    try:
        size = parse_quantity(spec.get("persistentHomeSize", "100Gi"))
        if size < parse_quantity("1Gi"):
            errors.append("spec.persistentHomeSize must be at least 1Gi")
    except ValueError as exc:
        errors.append("spec.persistentHomeSize: %s" % exc)
    try:
        env(spec.get("env"), {}, distributed=spec.get("mode", "standalone") == "distributed")
    except ValueError as exc:
        errors.append(str(exc))
    if spec.get("mode", "standalone") == "distributed":
        dist = spec.get("distributed") or {}
        world, nprocs = dist.get("worldSize"), dist.get("nprocsPerNode", 1) or 1
        if not world:
            errors.append("spec.distributed.worldSize is required in distributed mode")
        elif int(world) % int(nprocs):
            errors.append("spec.distributed.worldSize (%s) must be a multiple of nprocsPerNode (%s)" % (world, nprocs))
    ref = spec.get("sshKeySecretRef") or {}
    if ref and not ref.get("name"):
        errors.append("spec.sshKeySecretRef.name is required")
    return errors


def spec_warnings(spec):
    """What the operator accepts in a DevServer spec but does not act on (status.warnings):
    a ``distributed`` block on a standalone server (seed 000's example has one) is ignored."""
    spec = spec or {}
    warnings = []
    if spec.get("mode", "standalone") != "distributed" and spec.get("distributed"):
        warnings.append("spec.distributed is ignored: spec.mode is standalone. Remove the block, "
                        "or create a new DevServer with mode: distributed (mode is immutable).")
    return warnings


def replicas(spec):
    """Pods a DevServer runs when not suspended: 1, or worldSize / nprocsPerNode."""
    spec = spec or {}
    if spec.get("mode", "standalone") == "distributed":
        dist = spec.get("distributed") or {}
        return max(1, int(dist.get("worldSize", 1)) // max(1, int(dist.get("nprocsPerNode", 1) or 1)))
    return 1


# --------------------------------------------------------------------------- status
def condition(ctype, status, reason, message="", generation=None):
    """A metav1.Condition without lastTransitionTime (the status module sets it)."""
    if status in (True, False):
        status = "True" if status else "False"
    if status not in ("True", "False", "Unknown"):
        raise ValueError("condition status must be True, False or Unknown, got %r" % (status,))
    result = {"type": str(ctype), "status": status, "reason": str(reason), "message": str(message or "")}
    if generation is not None:
        result["observedGeneration"] = int(generation)
    return result


def _sts_counts(sts):
    status = (sts or {}).get("status") or {}
    meta = (sts or {}).get("metadata") or {}
    return {
        "ready": int(status.get("readyReplicas") or 0),
        "current": int(status.get("replicas") or 0),
        "updated": int(status.get("updatedReplicas") or 0),
        "observed": int(status.get("observedGeneration") or 0),
        "generation": int(meta.get("generation") or 0),
        "rolling": bool(status.get("updateRevision")) and status.get("updateRevision") != status.get("currentRevision"),
    }


def phase(desired_replicas, sts, suspended=False, failed=False):
    """Pending / Provisioning / Running / Suspended / Failed."""
    if failed:
        return "Failed"
    if suspended:
        return "Suspended"
    if not sts:
        return "Pending"
    counts = _sts_counts(sts)
    settled = counts["observed"] >= counts["generation"] and counts["updated"] >= desired_replicas and not counts["rolling"]
    if desired_replicas > 0 and counts["ready"] >= desired_replicas and settled:
        return "Running"
    return "Provisioning"


POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
# status.queue (docs/api.md): from torchdev_queue_status
QUEUE_STATUS_FIELDS = ("name", "clusterQueue", "workload", "position")
# Container waiting reasons that will not resolve by waiting (a replica is failing).
FAILING_WAIT_REASONS = ("CrashLoopBackOff", "ImagePullBackOff", "CreateContainerConfigError",
                        "CreateContainerError", "InvalidImageName", "RunContainerError")


def _pod_index(pod, name):
    meta = (pod or {}).get("metadata") or {}
    index = (meta.get("labels") or {}).get(POD_INDEX_LABEL)
    if index is None:
        pod_name = str(meta.get("name") or "")
        index = pod_name[len(name) + 1:] if pod_name.startswith("%s-" % name) else None
    try:
        return int(index)
    except (TypeError, ValueError):
        return None


def _pod_ready(pod):
    for cond in ((pod or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def pod_failure(pod):
    """Why a replica's pod is failing ("CrashLoopBackOff, 3 restarts"), or None.

    Failing: the pod phase is Failed, a container waits in CrashLoopBackOff (or another
    reason waiting will not fix, see FAILING_WAIT_REASONS), or a container's current
    state is terminated with a non-zero exit code.
    """
    status = (pod or {}).get("status") or {}
    containers = (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or [])
    restarts = sum(int(c.get("restartCount") or 0) for c in containers)
    why = None
    if status.get("phase") == "Failed":
        why = "pod Failed" + (" (%s)" % status["reason"] if status.get("reason") else "")
    for cs in containers:
        if why:
            break
        state = cs.get("state") or {}
        waiting, terminated = state.get("waiting") or {}, state.get("terminated") or {}
        if waiting.get("reason") in FAILING_WAIT_REASONS:
            why = waiting["reason"]
        elif terminated and int(terminated.get("exitCode") or 0) != 0:
            why = "container %s exited with code %s%s" % (
                cs.get("name"), terminated.get("exitCode"),
                " (%s)" % terminated["reason"] if terminated.get("reason") else "")
    if why is None:
        return None
    return "%s, %d restart%s" % (why, restarts, "" if restarts == 1 else "s")


def replica_statuses(name, pods, desired_replicas):
    """status.replicaStatuses: one entry per wanted replica 0..desired-1, from its pod
    (index, podName, phase, ready, nodeName, restarts); a replica without a pod yet has only
    index, podName and ready false.  Pods of other ordinals (scaling down) are ignored."""
    by_index = {}
    for pod in pods or []:
        index = _pod_index(pod, name)
        if index is not None and not ((pod.get("metadata") or {}).get("deletionTimestamp")):
            by_index[index] = pod
    result = []
    for index in range(int(desired_replicas or 0)):
        pod = by_index.get(index)
        entry = {"index": index, "podName": "%s-%d" % (name, index), "ready": False}
        if pod:
            status = pod.get("status") or {}
            entry["ready"] = _pod_ready(pod)
            if status.get("phase"):
                entry["phase"] = status["phase"]
            if (pod.get("spec") or {}).get("nodeName"):
                entry["nodeName"] = pod["spec"]["nodeName"]
            entry["restarts"] = sum(int(c.get("restartCount") or 0)
                                    for c in status.get("containerStatuses") or [])
        result.append(entry)
    return result


def failing_replicas(name, pods, desired_replicas):
    """"replica 2 (pod x-2): CrashLoopBackOff, 3 restarts" for each failing wanted replica."""
    result = []
    for pod in sorted(pods or [], key=lambda p: _pod_index(p, name) if _pod_index(p, name) is not None else -1):
        index = _pod_index(pod, name)
        if index is None or not 0 <= index < int(desired_replicas or 0):
            continue
        why = pod_failure(pod)
        if why:
            result.append("replica %d (pod %s): %s" % (index, (pod.get("metadata") or {}).get("name"), why))
    return result


def devserver_status(cr, sts, desired_replicas, flavor_spec_hash, ssh_service=None, now=None,
                     pods=None, rendezvous_endpoint=None, queue=None, shared_claim=None):
    """The complete DevServer status for a successful reconcile (conditions included).

    ``pods``: the live pods of the DevServer (label-selected), for replicaStatuses and
    the Degraded/PodFailed check; ``rendezvous_endpoint``: ``host:port`` of replica 0 in
    distributed mode (None/"" removes status.rendezvousEndpoint); ``queue``: where the
    StatefulSet stands in Kueue (``torchdev_queue_status``, None when it is not queued):
    while its Workload is not admitted the server is Queued, and status.queue says where;
    ``shared_claim``: the claim mounted at /shared (None/"" when none).
    """
    meta = (cr or {}).get("metadata") or {}
    spec = (cr or {}).get("spec") or {}
    old = (cr or {}).get("status") or {}
    generation = meta.get("generation")
    suspended = bool(spec.get("suspend", False))
    current = phase(desired_replicas, sts, suspended=suspended)
    queue = None if suspended else queue
    if queue and not queue.get("admitted"):
        current = "Queued"
    counts = _sts_counts(sts)
    ready_n = min(counts["ready"], desired_replicas) if sts else 0
    status = {
        "phase": current,
        "observedGeneration": generation,
        "replicas": desired_replicas,
        "readyReplicas": ready_n,
        "ready": "%d/%d" % (ready_n, desired_replicas),
        "flavorSpecHash": flavor_spec_hash,
        "sshEndpoint": None,
        "sshCommand": None,
        "rendezvousEndpoint": rendezvous_endpoint or None,
        "replicaStatuses": replica_statuses(meta.get("name"), pods, desired_replicas),
        # None values inside are removed by the status merge patch
        "queue": {key: queue.get(key) for key in QUEUE_STATUS_FIELDS} if queue else None,
        "warnings": spec_warnings(spec) or None,
        "sharedVolumeClaimName": shared_claim or None,
    }
    if ssh_service:
        status["sshEndpoint"] = "%s.%s.svc.cluster.local:22" % (ssh_service, meta.get("namespace"))
        status["sshCommand"] = "devctl ssh %s -n %s" % (meta.get("name"), meta.get("namespace"))
    if current == "Running":
        status["startTime"] = old.get("startTime") if old.get("phase") == "Running" and old.get("startTime") else now
    if current == "Running":
        ready = condition("Ready", "True", "ServerReady", "%d/%d replicas ready" % (ready_n, desired_replicas), generation)
        progressing = condition("Progressing", "False", "Reconciled", "all objects are up to date", generation)
    elif current == "Suspended":
        ready = condition("Ready", "False", "Suspended", "spec.suspend is true; scaled to 0, volumes kept", generation)
        progressing = condition("Progressing", "False", "Reconciled", "suspended", generation)
    elif current == "Queued":
        ready = condition("Ready", "False", "Queued", queue.get("message") or "queued", generation)
        progressing = condition("Progressing", "True", "Queued", queue.get("message") or "queued", generation)
    else:
        ready = condition("Ready", "False", "PodsNotReady", "%d/%d replicas ready" % (ready_n, desired_replicas), generation)
        if counts["rolling"] or (old.get("phase") == "Running" and sts):
            progressing = condition("Progressing", "True", "RollingUpdate", "rolling out a new pod template", generation)
        else:
            progressing = condition("Progressing", "True", "Provisioning", "waiting for the server pods", generation)
    failing = [] if suspended else failing_replicas(meta.get("name"), pods, desired_replicas)
    if failing:
        degraded = condition("Degraded", "True", "PodFailed", "; ".join(failing)[:1024], generation)
    else:
        degraded = condition("Degraded", "False", "AsExpected", "", generation)
    status["conditions"] = [ready, progressing, degraded]
    return status


# What a rejected spec leaves of the status computed from the live objects: the fields that
# describe the running pods. Everything derived from the spec (SSH endpoint, rendezvous, queue,
# /shared, flavor hash, warnings) keeps the value of the last spec that was applied.
LIVE_STATUS_FIELDS = ("phase", "replicas", "readyReplicas", "ready", "replicaStatuses", "startTime")


def rejected_spec_status(cr, problem, sts=None, pods=None, now=None):
    """The status when the spec or its flavor cannot be applied (``problem``: {reason, message}).

    Never created (no StatefulSet): phase Failed, Ready False ``ReconcileFailed``, Degraded True
    with the reason.  Already created: nothing running is touched, so the phase, Ready and
    replicaStatuses stay true to the live StatefulSet and pods (as a Deployment whose new
    template cannot roll out keeps serving); Degraded True with the reason and a message naming
    the field, Progressing False ``SpecRejected``.
    """
    meta = (cr or {}).get("metadata") or {}
    generation = meta.get("generation")
    message = str(problem.get("message") or "").strip()
    degraded = condition("Degraded", "True", problem["reason"], message[:1024], generation)
    if not sts:
        ready = condition("Ready", "False", "ReconcileFailed", message[:1024], generation)
        return {"phase": "Failed", "observedGeneration": generation, "conditions": [ready, degraded]}
    replicas = int(((sts or {}).get("spec") or {}).get("replicas") or 0)
    live_cr = dict(cr, spec=dict((cr or {}).get("spec") or {}, suspend=replicas == 0))
    live = devserver_status(live_cr, sts, replicas, None, now=now, pods=pods)
    status = {key: live[key] for key in LIVE_STATUS_FIELDS if key in live}
    status["observedGeneration"] = generation
    progressing = condition("Progressing", "False", "SpecRejected",
                            ("generation %s is not applied, the server keeps running its last applied spec: %s"
                             % (generation, message))[:1024], generation)
    status["conditions"] = [live["conditions"][0], progressing, degraded]
    return status


def failure_reason(failed_result=None, explicit=None):
    """Classify a failed task: (reason, transient).

    FlavorNotFound, InvalidSpec and InsufficientGPUs are permanent until the spec or the flavor changes
    (both trigger a reconcile), so the run ends successfully after recording them;
    anything else is a ReconcileError and the run fails so the runtime requeues with
    backoff.  A 422 (Invalid) from the apiserver is a spec problem -> InvalidSpec.
    """
    if explicit in PROBLEM_REASONS:
        return {"reason": explicit, "transient": False}
    result = failed_result or {}
    msg = str(result.get("msg") or "")
    for reason in PROBLEM_REASONS:
        if msg.startswith(reason + ":"):
            return {"reason": reason, "transient": False}
    text = " ".join(str(result.get(k, "")) for k in ("msg", "reason", "status", "error"))
    if result.get("status") == 422 or "Unprocessable Entity" in text or "(422)" in text or '"code":422' in text.replace(" ", ""):
        return {"reason": "InvalidSpec", "transient": False}
    return {"reason": "ReconcileError", "transient": True}


def failure_message(failed_result=None, limit=1024):
    result = failed_result or {}
    msg = result.get("msg") or result.get("message") or "reconcile failed"
    msg = re.sub(r"\s+", " ", str(msg)).strip()
    return msg[: int(limit)]


def spec_problem(spec):
    """{reason: InvalidSpec, message} for a DevServer spec the role cannot serve, else None."""
    errors = spec_errors(spec)
    return {"reason": "InvalidSpec", "message": "; ".join(errors)} if errors else None


def flavor_problem(flavor, name, rendezvous_errors=None):
    """{reason, message} when the DevServerFlavor ``name`` (the live object, or None when
    it does not exist) cannot be used, else None.

    ``rendezvous_errors``: the ``"<Reason>: <message>"`` strings of
    ``torchdev_rendezvous_errors`` (plugins/filter/rendezvous.py) for the DevServer and
    this flavor, e.g. ``InsufficientGPUs`` when nprocsPerNode exceeds the flavor's GPUs
    with the nccl backend; considered only once the flavor exists and is valid.
    """
    if not flavor:
        return {"reason": "FlavorNotFound",
                "message": "DevServerFlavor %s does not exist (kubectl get devserverflavors "
                           "lists the available ones)" % name}
    errors = flavor_errors(flavor.get("spec") or {})
    if errors:
        return {"reason": "InvalidSpec",
                "message": "DevServerFlavor %s is invalid: %s" % (name, "; ".join(errors))}
    for error in rendezvous_errors or []:
        reason, sep, message = str(error).partition(": ")
        if not sep or reason not in PROBLEM_REASONS:
            reason, message = "InvalidSpec", str(error)
        return {"reason": reason, "message": message}
    return None


def _module_utils(name):
    """Load one of our module_utils files (modules get them bundled; filters do not)."""
    import importlib.util
    import os
    import sys

    key = "_torchdev_module_utils_" + name
    if key not in sys.modules:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "module_utils", name + ".py")
        spec = importlib.util.spec_from_file_location(key, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[key] = module
    return sys.modules[key]


def _kueue(name):
    """A function of plugins/module_utils/torchdev_kueue.py, loaded when first called."""
    def call(*args, **kwargs):
        return getattr(_module_utils("torchdev_kueue"), name)(*args, **kwargs)

    call.__name__ = name
    return call


def status_changes(live_status, desired_status, conditions=None, observed_generation=None):
    """The merge patch torchdev_status would send for this status, or None: lets a role
    skip the module run (a process and a client import) when the status is unchanged."""
    patch, _result = _module_utils("torchdev_status").status_patch(
        _plain(live_status), _plain(desired_status), _plain(conditions),
        observed_generation=observed_generation)
    return patch


def requeue_period(status, now=None, minimum=2, maximum=60):
    """How soon to look again at a DevServer whose pods are not all ready ("" when settled).

    Pod readiness changes the StatefulSet's status only, which ansible-operator's
    dependent-resource predicate does not reliably see, and Kueue's admission changes
    a Workload that is not the DevServer's dependent, so a starting or Queued server is polled:
    every `minimum` seconds at first, backing off to a quarter of the time it has been
    provisioning, at most `maximum` seconds (a server queued for capacity is not hammered).
    """
    status = status or {}
    if status.get("phase") not in ("Pending", "Provisioning", "Queued"):
        return ""
    since = None
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Progressing" and cond.get("lastTransitionTime"):
            since = _parse_time(cond["lastTransitionTime"])
    current = _parse_time(now) if now else datetime.datetime.now(datetime.timezone.utc)
    waited = (current - since).total_seconds() if since and current else 0
    return "%ds" % int(max(minimum, min(maximum, waited / 4)))


def _parse_time(value):
    if isinstance(value, datetime.datetime):
        return value if value.tzinfo else value.replace(tzinfo=datetime.timezone.utc)
    try:
        return datetime.datetime.strptime(str(value), "%Y-%m-%dT%H:%M:%SZ").replace(
            tzinfo=datetime.timezone.utc)
    except ValueError:
        raise AnsibleFilterError("not an RFC 3339 UTC time: %r" % (value,))


class FilterModule(object):
    """torchdev filters."""

    _FILTERS = {
        "torchdev_quantity": quantity,
        "torchdev_quantity_cmp": quantity_cmp,
        "torchdev_is_quantity": is_quantity,
        "torchdev_checksum": checksum,
        "torchdev_flavor_hash": flavor_hash,
        "torchdev_owner_label": owner_label,
        "torchdev_selector_labels": selector_labels,
        "torchdev_stable_labels": stable_labels,
        "torchdev_labels": labels,
        "torchdev_owner_reference": owner_reference,
        "torchdev_flavor_errors": flavor_errors,
        "torchdev_flavor_gpu_count": flavor_gpu_count,
        "torchdev_resources": resources,
        "torchdev_env": env,
        "torchdev_is_subset": is_subset,
        "torchdev_stamp": stamp,
        "torchdev_observed": observed_objects,
        "torchdev_drift": drift,
        "torchdev_prune": prune,
        "torchdev_plan": plan,
        "torchdev_find": find,
        "torchdev_preserve_immutable": preserve_immutable,
        "torchdev_pvc_resizes": pvc_resizes,
        "torchdev_applied": applied_objects,
        "torchdev_flavor_users": flavor_users,
        "torchdev_flavor_notices": flavor_notices,
        "torchdev_spec_errors": spec_errors,
        "torchdev_spec_warnings": spec_warnings,
        "torchdev_spec_problem": spec_problem,
        "torchdev_flavor_problem": flavor_problem,
        "torchdev_replicas": replicas,
        "torchdev_condition": condition,
        "torchdev_phase": phase,
        "torchdev_devserver_status": devserver_status,
        "torchdev_rejected_spec_status": rejected_spec_status,
        "torchdev_replica_statuses": replica_statuses,
        "torchdev_pod_failure": pod_failure,
        "torchdev_failure_reason": failure_reason,
        "torchdev_failure_message": failure_message,
        "torchdev_requeue_period": requeue_period,
        "torchdev_status_changes": status_changes,
        # Kueue (plugins/module_utils/torchdev_kueue.py)
        "torchdev_kueue_node_taints": _kueue("node_taints"),
        "torchdev_resource_flavor_errors": _kueue("resource_flavor_errors"),
        "torchdev_queue_labels": _kueue("queue_labels"),
        "torchdev_queue_problem": _kueue("queue_problem"),
        "torchdev_queue_status": _kueue("queue_status"),
    }

    def filters(self):
        return {name: _wrap(func) for name, func in self._FILTERS.items()}


def _wrap(func):
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except (ValueError, TypeError, KeyError) as exc:
            raise AnsibleFilterError("%s: %s" % (func.__name__, exc))

    wrapper.__name__ = func.__name__
    wrapper.__doc__ = func.__doc__
    return wrapper
