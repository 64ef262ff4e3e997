# -*- coding: utf-8 -*-
# Apache-2.0
"""DevServer spec rules: what the CRD cannot check (spec errors, ignored fields), the
container env, the replicas."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.torchdev.operator.plugins.module_utils.plan import plain
from ansible_collections.torchdev.operator.plugins.module_utils.quantity import parse_quantity

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
    ops += [plain(item) for item in reserved_env or []]
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
    ops += [plain(item) for item in default_env or [] if item["name"] not in seen and item["name"] not in reserved]
    return sorted(ops, key=lambda item: item["name"]) + user


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


def spec_problem(spec):
    """{reason: InvalidSpec, message} for a DevServer spec the role cannot serve, else None."""
    errors = spec_errors(spec)
    return {"reason": "InvalidSpec", "message": "; ".join(errors)} if errors else None
