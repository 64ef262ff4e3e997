# -*- coding: utf-8 -*-
# Apache-2.0
"""DevUser rules: the spec and its problems, Kueue quotas (ClusterQueue resource groups),
ResourceQuota and LimitRange, what to prune, replace, detach and suspend, and the
namespace the DevUser may manage."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import ipaddress
import math

from ansible_collections.torchdev.operator.plugins.module_utils.constants import (
    ADOPTED_BY_ANNOTATION as ADOPTED_BY, API_VERSION, CPU, CREATED_BY_ANNOTATION as CREATED_BY, GPU_RESOURCE as GPU,
    MANAGED_BY, MEMORY, PRIMARY_RESOURCE_ANNOTATION as PRIMARY_RESOURCE, USER_LABEL)
from ansible_collections.torchdev.operator.plugins.module_utils.flavor import flavor_gpu_count
from ansible_collections.torchdev.operator.plugins.module_utils.plan import object_key, plain
from ansible_collections.torchdev.operator.plugins.module_utils.quantity import is_quantity, parse_quantity, quantity, scale

# The resources every per-user ClusterQueue covers; any other resource a DevServerFlavor
# requests (ephemeral-storage, vpc.amazonaws.com/efa) is covered too (Kueue does not admit
# a Workload that requests a resource its ClusterQueue does not cover) with a quota that
# never binds before these do.
QUOTA_RESOURCES = (CPU, MEMORY, GPU)


# Kueue: at most 64 flavors in a resource group, 64 covered resources.
MAX_FLAVORS = 64


# --------------------------------------------------------------------------- spec
def _merge(base, over):
    out = copy.deepcopy(base)
    for key, value in (over or {}).items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def spec(raw_spec, defaults):
    """``raw_spec`` merged over ``defaults`` (recursively), without the SSH keys."""
    merged = _merge(plain(defaults or {}), plain(raw_spec or {}))
    merged.pop("sshPublicKeys", None)
    return merged


def problem(spec_):
    """{reason: InvalidSpec, message} when the spec cannot be served, else None.

    The CRD checks shapes; this checks what its CEL cannot: each CIDR is a network
    address (``10.1.2.3/8`` has host bits set: the NetworkPolicy would mean 10.0.0.0/8,
    which is surely not what was meant).
    """
    errors = []
    cidrs = ((spec_ or {}).get("network") or {}).get("sshAllowedCIDRs") or []
    for i, cidr in enumerate(cidrs):
        try:
            ipaddress.ip_network(str(cidr), strict=True)
        except ValueError as exc:
            errors.append("spec.network.sshAllowedCIDRs[%d]: %s" % (i, exc))
    quota = (spec_ or {}).get("quota") or {}
    for field in ("cpu", "memory", "storage"):
        if field in quota and not is_quantity(quota[field]):
            errors.append("spec.quota.%s: invalid quantity %r" % (field, quota[field]))
    return {"reason": "InvalidSpec", "message": "; ".join(errors)} if errors else None


# --------------------------------------------------------------------------- Kueue
def kueue_served(discovery):
    """Is Kueue usable? ``discovery``: resource names of kueue.x-k8s.io/v1beta2, or None."""
    return bool(discovery) and {"clusterqueues", "localqueues"} <= set(discovery)


def _flavor_requests(flavor_spec):
    """Per-pod requests of a flavor, {resource: quantity} (a limit stands in for a missing
    request, as the apiserver defaults it), zero requests dropped."""
    res = (flavor_spec or {}).get("resources") or {}
    requests, limits = res.get("requests") or {}, res.get("limits") or {}
    out = {}
    for key in sorted(set(requests) | set(limits)):
        value = requests[key] if key in requests else limits[key]
        if parse_quantity(value) > 0:
            out[str(key)] = value
    count = flavor_gpu_count(flavor_spec)
    if count > 0:
        out[GPU] = count
    return out


def _live(objects):
    return [o for o in objects or [] if o and not (o.get("metadata") or {}).get("deletionTimestamp")]


def resource_groups(flavors, quota):
    """The ClusterQueue's ``resourceGroups`` for the DevServerFlavors ``flavors`` (live objects).

    One group covering cpu, memory, nvidia.com/gpu and any other resource a flavor requests;
    one entry per flavor (sorted by name, at most 64: Kueue's limit) with the nominal quotas
    ``quota.flavors[name]`` or ``quota.cpu`` / ``quota.memory`` / ``quota.gpus`` (GPUs only for
    flavors that have GPUs).  Another resource's quota is what the most pods of that flavor
    the cpu/memory/GPU quotas admit would request: it never binds first.  No flavors: no group
    (a group needs at least one flavor).
    """
    quota = quota or {}
    overrides = {str(o.get("name")): o for o in quota.get("flavors") or [] if o.get("name")}
    chosen = sorted(_live(flavors), key=lambda f: f["metadata"]["name"])[:MAX_FLAVORS]
    if not chosen:
        return []
    requests = {f["metadata"]["name"]: _flavor_requests(f.get("spec")) for f in chosen}
    extra = sorted({r for req in requests.values() for r in req} - set(QUOTA_RESOURCES))
    covered = list(QUOTA_RESOURCES) + extra
    entries = []
    for fl in chosen:
        name = fl["metadata"]["name"]
        req = requests[name]
        over = overrides.get(name, {})
        nominal = {
            CPU: quantity(over.get("cpu", quota.get("cpu", "64"))),
            MEMORY: quantity(over.get("memory", quota.get("memory", "256Gi"))),
            GPU: str(int(over["gpus"]) if "gpus" in over else (int(quota.get("gpus", 0)) if GPU in req else 0)),
        }
        pods = [int(math.floor(parse_quantity(nominal[r]) / parse_quantity(req[r]))) for r in QUOTA_RESOURCES if r in req]
        most = min(pods) if pods else 0
        for r in extra:
            nominal[r] = scale(req[r], most) if r in req else "0"
        entries.append({"name": name, "resources": [{"name": r, "nominalQuota": nominal[r]} for r in covered]})
    return [{"coveredResources": covered, "flavors": entries}]


# --------------------------------------------------------------------------- namespace quota
def _total(values):
    """The sum of quantities: with their common suffix when they share one (3 x 96Gi = 288Gi),
    else in plain units."""
    values = [quantity(v) for v in values]
    suffixes = {v.lstrip("0123456789.") for v in values}
    if len(suffixes) == 1:
        suffix = suffixes.pop()
        total = sum(parse_quantity(v[:len(v) - len(suffix)] if suffix else v) for v in values)
        return (str(int(total)) if total == total.to_integral_value() else format(total.normalize(), "f")) + suffix
    total = sum(parse_quantity(v) for v in values)
    return str(int(total)) if total == total.to_integral_value() else format(total.normalize(), "f")


def namespace_compute(quota, kueue, flavors=None):
    """The cpu, memory and GPUs the DevUser's quota gives their namespace: without Kueue
    ``quota.cpu`` / ``quota.memory`` / ``quota.gpus``; with Kueue what its ClusterQueue's
    nominal quotas add up to over the flavors (``resource_groups``: each flavor's own quota,
    GPUs only for GPU flavors), or those three when there is no flavor."""
    quota = quota or {}
    base = {CPU: quantity(quota.get("cpu", "64")), MEMORY: quantity(quota.get("memory", "256Gi")),
            GPU: str(int(quota.get("gpus", 0)))}
    groups = resource_groups(flavors, quota) if kueue else []
    if not groups:
        return base
    nominal = [{r["name"]: r["nominalQuota"] for r in f["resources"]} for f in groups[0]["flavors"]]
    return {res: _total([n[res] for n in nominal]) for res in QUOTA_RESOURCES}


def quota_hard(quota, kueue, flavors=None):
    """ResourceQuota ``hard``: storage, claims and DevServers, and the namespace's cpu, memory
    and GPUs (``namespace_compute``) in both modes: with Kueue the ClusterQueue queues within
    the same quota, and no pod of the namespace (one Kueue does not queue, a helper pod) gets
    past it."""
    quota = quota or {}
    compute = namespace_compute(quota, kueue, flavors)
    return {
        "requests.storage": quantity(quota.get("storage", "2Ti")),
        "persistentvolumeclaims": str(int(quota.get("persistentVolumeClaims", 32))),
        "count/devservers.torchdev.io": str(int(quota.get("devServers", 10))),
        "requests.cpu": compute[CPU],
        "requests.memory": compute[MEMORY],
        "requests.nvidia.com/gpu": compute[GPU],
    }


def limits(quota, kueue, default_request):
    """The LimitRange item for containers: ``max`` cpu/memory = the most the user may use
    (the namespace quota, or with Kueue the largest per-flavor quota), ``defaultRequest``
    from the role (so a pod without requests still counts against a quota), capped at max.
    No GPU entry: a LimitRange max on an extended resource would become every container's
    default limit, and so its request."""
    quota = quota or {}
    result = {"type": "Container", "max": {}, "defaultRequest": {}}
    for res, default in ((CPU, "64"), (MEMORY, "256Gi")):
        values = [quota.get(res, default)]
        if kueue:
            values += [o[res] for o in quota.get("flavors") or [] if res in o]
        most = max(values, key=parse_quantity)
        result["max"][res] = quantity(most)
        want = (default_request or {}).get(res)
        if want is not None:
            result["defaultRequest"][res] = quantity(want if parse_quantity(want) <= parse_quantity(most) else most)
    if not result["defaultRequest"]:
        del result["defaultRequest"]
    return result


# --------------------------------------------------------------------------- apply helpers
def _ref(obj):
    meta = obj.get("metadata") or {}
    ref = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "metadata": {"name": meta.get("name")}}
    if meta.get("namespace"):
        ref["metadata"]["namespace"] = meta["namespace"]
    return ref


def redact(objects):
    """The objects with the data of Secrets left out (for task results that are logged)."""
    out = []
    for obj in objects or []:
        if obj and obj.get("kind") == "Secret":
            obj = {k: v for k, v in obj.items() if k not in ("data", "stringData")}
        out.append(obj)
    return out


def prune(observed, desired, name):
    """Live objects labelled ``torchdev.io/user: <name>`` (ours) that are not desired any more,
    e.g. the NetworkPolicy allow-ssh when sshAllowedCIDRs became empty, or the per-user
    ClusterQueue when spec.queue.clusterQueue names another one.  The Namespace is never pruned."""
    wanted = {object_key(o) for o in desired or []}
    out = []
    for live in observed or []:
        if not live or object_key(live) in wanted or live.get("kind") == "Namespace":
            continue
        meta = live.get("metadata") or {}
        lab = meta.get("labels") or {}
        if lab.get(USER_LABEL) == str(name) and lab.get("app.kubernetes.io/managed-by") == MANAGED_BY \
                and not meta.get("deletionTimestamp"):
            out.append(_ref(live))
    return out


def replace(observed, desired):
    """Live LocalQueues whose (immutable) spec.clusterQueue differs from the desired one:
    they are deleted, then created again by the apply."""
    live = {object_key(o): o for o in observed or [] if o}
    out = []
    for obj in desired or []:
        if obj.get("kind") != "LocalQueue":
            continue
        cur = live.get(object_key(obj))
        if cur and (cur.get("spec") or {}).get("clusterQueue") != (obj.get("spec") or {}).get("clusterQueue"):
            out.append(_ref(cur))
    return out


def detach(observed, uid):
    """Merge patches that remove ownerReferences to ``uid`` (the DevUser) from live objects.

    Objects that must outlive a DevUser (namespace, volumes, Secret) never get an
    ownerReference from the role, but a proxy may inject one on create (ansible-operator
    does for a cluster-scoped owner); the garbage collector would then delete them with
    the DevUser.  A merge patch replaces the whole list: the other references are kept."""
    out = []
    for live in observed or []:
        if not live:
            continue
        refs = (live.get("metadata") or {}).get("ownerReferences") or []
        keep = [r for r in refs if r.get("uid") != uid]
        if len(keep) != len(refs):
            patch = _ref(live)
            patch["metadata"]["ownerReferences"] = plain(keep)
            out.append(patch)
    return out


def suspend(devservers):
    """Merge patches setting spec.suspend on the DevServers not suspended yet."""
    out = []
    for ds in _live(devservers):
        if (ds.get("spec") or {}).get("suspend") is True:
            continue
        patch = _ref(ds)
        patch["apiVersion"] = ds.get("apiVersion") or API_VERSION
        patch["kind"] = ds.get("kind") or "DevServer"
        patch["spec"] = {"suspend": True}
        out.append(patch)
    return out


# --------------------------------------------------------------------------- status
def namespace_claim(namespace, name, adopt=False):
    """How the DevUser ``name`` stands with its namespace (the live Namespace, or None):

    ``{"created": bool, "managed": bool, "annotations": {...}, "problem": {reason, message} | None}``

    * none yet, or annotated ``torchdev.io/created-by: devuser/<name>``: created by this DevUser
      (rendered with that annotation; the only kind deletionPolicy Delete deletes);
    * annotated ``torchdev.io/adopted-by: devuser/<name>``, or labelled and annotated as this
      user's by a version before these annotations (it cannot say who made it): adopted;
    * anything else is someone's namespace: adopted only with ``spec.adoptNamespace``, else a
      problem (``NamespaceNotOwned``) and nothing is changed in it.
    """
    marker = "devuser/%s" % name
    meta = (namespace or {}).get("metadata") or {}
    annotations, labels = meta.get("annotations") or {}, meta.get("labels") or {}
    ns_name = meta.get("name") or ""
    created = {"created": True, "managed": True, "annotations": {CREATED_BY: marker}, "problem": None}
    adopted = {"created": False, "managed": True, "annotations": {ADOPTED_BY: marker}, "problem": None}
    if namespace is None or annotations.get(CREATED_BY) == marker:
        return created
    legacy = labels.get(USER_LABEL) == name and annotations.get(PRIMARY_RESOURCE) == "/%s" % name
    if annotations.get(ADOPTED_BY) == marker or legacy or adopt:
        return adopted
    message = ("namespace %s exists and was not created by torchdev (it has no annotation %s: %s); "
               "nothing in it was changed. To let DevUser %s manage it (labels, restricted Pod Security, "
               "quota, limits and network policies; torchdev never deletes an adopted namespace), set "
               "spec.adoptNamespace: true (devctl admin onboard %s --adopt-namespace); otherwise remove or "
               "rename the namespace." % (ns_name, CREATED_BY, marker, name, name))
    return {"created": False, "managed": False, "annotations": {},
            "problem": {"reason": "NamespaceNotOwned", "message": message}}
