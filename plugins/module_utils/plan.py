# -*- coding: utf-8 -*-
# Apache-2.0
"""The reconcile plan: desired-state hashes, drift against the live objects, what to apply
and what to prune (docs/architecture.md, "Apply in bulk")."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json

from ansible_collections.torchdev.operator.plugins.module_utils.constants import DESIRED_HASH_ANNOTATION
from ansible_collections.torchdev.operator.plugins.module_utils.quantity import is_quantity, quantity, quantity_cmp

EMPTY = (None, False, 0, "", [], {})


# --------------------------------------------------------------------------- hashing
# isinstance, not type(): Ansible 2.19 hands plugins tagged str/int subclasses.
def kind_of(value):
    """The kind of a scalar for equality: 22 != "22", True != 1."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "str"
    return type(value).__name__


def plain(obj):
    """A plain-JSON copy: faster than copy.deepcopy, and it sheds Ansible's tagged types."""
    return json.loads(json.dumps(obj, default=str))


def checksum(obj, length=16):
    """Stable short sha256 of any JSON-serialisable object (key order independent)."""
    data = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(data.encode("utf-8")).hexdigest()[: int(length)]


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
    return kind_of(a) == kind_of(b) and a == b


def is_subset(desired, live, path=()):
    """True when every field of ``desired`` is present with an equal value in ``live``."""
    if isinstance(desired, dict):
        if not isinstance(live, dict):
            return desired in EMPTY and live in EMPTY
        for key, value in desired.items():
            if key not in live or live[key] is None:
                if value in EMPTY:
                    continue  # the apiserver omits empty / false / zero fields
                return False
            if not is_subset(value, live[key], path + (key,)):
                return False
        return True
    if isinstance(desired, list):
        if not isinstance(live, list) or len(desired) != len(live):
            return False
        named = _by_name(desired), _by_name(live)
        if named[0] is not None and named[1] is not None:
            # a list of named items (containers, volumes, volumeMounts, env, ports): the API
            # server's apply merges them by name and keeps the order they have (a volume added
            # later stays last), so their order is no difference an apply could remove
            return set(named[0]) == set(named[1]) and all(
                is_subset(d, named[1][n], path) for n, d in named[0].items())
        return all(is_subset(d, l, path) for d, l in zip(desired, live))
    if _scalar_equal(desired, live):
        return True
    if _quantity_path(path) and is_quantity(desired) and is_quantity(live):
        return quantity_cmp(desired, live) == 0
    return False


def _by_name(items):
    """{name: item} of a list of dicts with distinct names, else None."""
    named = {}
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) or item["name"] in named:
            return None
        named[item["name"]] = item
    return named


def object_key(obj):
    meta = obj.get("metadata") or {}
    group = (obj.get("apiVersion") or "").rpartition("/")[0]
    return "%s/%s/%s/%s" % (group, obj.get("kind"), meta.get("namespace") or "", meta.get("name"))


def _strip(obj):
    clean = plain(obj)
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
        obj = plain(obj)
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
    PVCs instead (``home_resizes``); the template keeps the size it was created with.
    """
    if not desired or not live:
        return desired
    result = plain(desired)
    live_spec = live.get("spec") or {}
    for field in _IMMUTABLE_STS_FIELDS:
        if field not in live_spec:
            continue
        value = plain(live_spec[field])
        if field == "volumeClaimTemplates":
            for template in value:
                template.pop("status", None)
                template.pop("apiVersion", None)
                template.pop("kind", None)
                meta = template.get("metadata") or {}
                meta.pop("creationTimestamp", None)
        result["spec"][field] = value
    return result


# Why a home claim is not grown (the DevServer's HomeResized condition, docs/api.md).
RESIZE_NOT_SUPPORTED = "ResizeNotSupported"
RESIZE_PENDING = "ResizePending"
# What kube-apiserver's PersistentVolumeClaimResize admission reads before spec.storageClassName.
BETA_CLASS_ANNOTATION = "volume.beta.kubernetes.io/storage-class"
_SHOWN = 253  # a name or a size in a message (API names are at most 253 characters)


def _shown(value):
    """``value`` as printable text of at most _SHOWN characters (shown, never evaluated)."""
    text = "".join(ch if ch.isprintable() else " " for ch in str(value)[:4 * _SHOWN])
    return text if len(text) <= _SHOWN else text[:_SHOWN - 3] + "..."


def _classes_by_name(storage_classes):
    """{name: StorageClass} from a list of classes, one class, or None (odd entries skipped)."""
    items = storage_classes if isinstance(storage_classes, list) else [storage_classes]
    result = {}
    for item in items:
        meta = item.get("metadata") if isinstance(item, dict) else None
        if isinstance(meta, dict) and isinstance(meta.get("name"), str):
            result[meta["name"]] = item
    return result


def home_resizes(pvcs, name, size, storage_classes, claim="home"):
    """How the ``<claim>-<name>-<i>`` claims (``pvcs``, the live ones) grow to ``size`` (a
    DevServer's spec.persistentHomeSize, which only grows): {"apply": the partial PVC manifests
    that raise the storage request of each smaller claim kube-apiserver lets grow, "refused":
    [{claim, storageClass, from, to, reason, message}] for the others}.

    kube-apiserver refuses to grow a claim that is not bound (validation) and one whose class
    (the annotation volume.beta.kubernetes.io/storage-class, else spec.storageClassName) is
    empty, missing from ``storage_classes`` (the classes read: a list, one object or None) or
    lacks ``allowVolumeExpansion: true`` (PersistentVolumeClaimResize admission, 403): applying
    those would fail every reconcile.  Reasons: ResizePending (not bound yet: it grows once
    bound), ResizeNotSupported (the class; an admin who sets allowVolumeExpansion lets the next
    reconcile grow it).  Claims with an unreadable size are left alone; never raises."""
    result = {"apply": [], "refused": []}
    if not isinstance(name, str) or not isinstance(claim, str):
        return result
    try:
        wanted = quantity(size)
    except (ValueError, TypeError):
        return result
    classes = _classes_by_name(storage_classes)
    prefix = "%s-%s-" % (claim, name)
    for pvc in pvcs if isinstance(pvcs, list) else []:
        meta = pvc.get("metadata") if isinstance(pvc, dict) else None
        if not isinstance(meta, dict) or pvc.get("kind") not in (None, "PersistentVolumeClaim"):
            continue
        pvc_name = meta.get("name")
        if not isinstance(pvc_name, str) or not pvc_name.startswith(prefix) or not pvc_name[len(prefix):].isdigit():
            continue
        spec = pvc.get("spec") if isinstance(pvc.get("spec"), dict) else {}
        resources = spec.get("resources") if isinstance(spec.get("resources"), dict) else {}
        requests = resources.get("requests") if isinstance(resources.get("requests"), dict) else {}
        current = requests.get("storage")
        try:
            if current is not None and quantity_cmp(wanted, current) <= 0:
                continue
        except (ValueError, TypeError):
            continue
        status = pvc.get("status") if isinstance(pvc.get("status"), dict) else {}
        annotations = meta.get("annotations") if isinstance(meta.get("annotations"), dict) else {}
        class_name = annotations.get(BETA_CLASS_ANNOTATION, spec.get("storageClassName"))
        sc = classes.get(class_name) if isinstance(class_name, str) else None
        grow = "from %s to %s" % (_shown(current) if current is not None else "no request", _shown(wanted))
        if status.get("phase") != "Bound":
            why = (RESIZE_PENDING, "claim %s is %s, not bound: it grows %s once bound"
                   % (_shown(pvc_name), _shown(status.get("phase") or "not bound yet"), grow))
        elif not isinstance(class_name, str) or not class_name:
            why = (RESIZE_NOT_SUPPORTED, "claim %s cannot grow %s: it has no StorageClass (only a dynamically "
                   "provisioned claim can be resized)" % (_shown(pvc_name), grow))
        elif sc is None:
            why = (RESIZE_NOT_SUPPORTED, "claim %s cannot grow %s: its StorageClass %s does not exist"
                   % (_shown(pvc_name), grow, _shown(class_name)))
        elif sc.get("allowVolumeExpansion") is not True:
            why = (RESIZE_NOT_SUPPORTED, "claim %s cannot grow %s: its StorageClass %s does not allow volume "
                   "expansion (allowVolumeExpansion is not true; once an admin sets it, the next reconcile "
                   "grows the claim)" % (_shown(pvc_name), grow, _shown(class_name)))
        else:
            result["apply"].append({
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": pvc_name, "namespace": meta.get("namespace")},
                "spec": {"resources": {"requests": {"storage": wanted}}},
            })
            continue
        result["refused"].append({"claim": _shown(pvc_name), "storageClass": _shown(class_name or ""),
                                  "from": _shown(current) if current is not None else None, "to": _shown(wanted),
                                  "reason": why[0], "message": why[1]})
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
