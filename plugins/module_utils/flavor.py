# -*- coding: utf-8 -*-
# Apache-2.0
"""DevServerFlavor rules: GPUs per replica, consistency, container resources, the pod-shaping
hash, which DevServers use a flavor, and the problem a DevServer has with its flavor."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from decimal import Decimal

from ansible_collections.torchdev.operator.plugins.module_utils.conditions import condition
from ansible_collections.torchdev.operator.plugins.module_utils.constants import (
    API_VERSION, EXTENDED_RESOURCES, FLAVOR_HASH_ANNOTATION, GPU_RESOURCE, PROBLEM_REASONS)
from ansible_collections.torchdev.operator.plugins.module_utils.plan import EMPTY, checksum
from ansible_collections.torchdev.operator.plugins.module_utils.quantity import is_quantity, parse_quantity, quantity, quantity_cmp

# Flavor fields that change what a pod looks like.  description and pricePerHour are
# informational: editing them must not restart everybody's dev server.
FLAVOR_POD_FIELDS = ("resources", "gpu", "nodeSelector", "tolerations", "shmSize")


def flavor_hash(flavor_spec):
    """Hash of the flavor fields that shape a pod (see FLAVOR_POD_FIELDS)."""
    spec = flavor_spec or {}
    return checksum({k: spec.get(k) for k in FLAVOR_POD_FIELDS if spec.get(k) not in EMPTY})


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


def flavor_users(devservers, flavor_name):
    """DevServers (not being deleted) whose spec.flavor is ``flavor_name``."""
    return [
        ds for ds in devservers or []
        if (ds.get("spec") or {}).get("flavor") == flavor_name
        and not (ds.get("metadata") or {}).get("deletionTimestamp")
    ]


def flavor_notices(devservers, flavor_name, digest, annotation=FLAVOR_HASH_ANNOTATION):
    """Merge-patch bodies that set ``annotation: digest`` on the users that lack it and were
    not reconciled with this flavor spec yet: a server never told of a flavor change whose
    status.flavorSpecHash is ``digest`` (created since the flavor's last change) needs no
    reconcile, and the annotation would cost it one.  A server told of another spec before is
    always told again: the run that found that spec invalid kept the status of the server it
    left running, flavorSpecHash included, so a flavor edited back to that spec would look
    reconciled while the server still says Degraded."""
    result = []
    for ds in flavor_users(devservers, flavor_name):
        meta = ds.get("metadata") or {}
        told = (meta.get("annotations") or {}).get(annotation)
        if told == digest:
            continue
        if told is None and (ds.get("status") or {}).get("flavorSpecHash") == digest:
            continue
        result.append({
            "apiVersion": ds.get("apiVersion") or API_VERSION,
            "kind": ds.get("kind") or "DevServer",
            "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace"), "annotations": {annotation: digest}},
        })
    return result


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
                "message": "spec.flavor: DevServerFlavor %s does not exist (kubectl get devserverflavors "
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


def flavor_status(spec, problems, users, generation):
    """The DevServerFlavor status: Ready True ``Valid`` or False ``InvalidSpec`` (the problems:
    flavor_errors, and the Kueue ResourceFlavor bounds when Kueue is served), Degraded False
    ``AsExpected`` (a failed run records ReconcileError there), how many DevServers use it and
    its GPUs per replica (absent while invalid: the GPUs printer column)."""
    problems = list(problems or [])
    generation = int(generation or 0)
    if problems:
        ready = condition("Ready", "False", "InvalidSpec", "; ".join(problems), generation)
    else:
        ready = condition("Ready", "True", "Valid", "flavor is consistent", generation)
    return {
        "observedGeneration": generation,
        "devServers": len(users or []),
        "gpus": None if problems else flavor_gpu_count(spec),
        "conditions": [ready, condition("Degraded", "False", "AsExpected", "", generation)],
    }
