# -*- coding: utf-8 -*-
# Apache-2.0
"""torch.distributed rendezvous environment of a DevServer (the filters in
plugins/filter/devserver.py adapt these functions).

``rendezvous_env(devserver, flavor, name=None, namespace=None, cluster_domain='cluster.local')``
    The container ``env`` list (Kubernetes EnvVar dicts, sorted by name) that every
    pod of the DevServer gets.  ``devserver`` is the raw DevServer object
    (``{"metadata": ..., "spec": ...}``) or its spec (then ``name``/``namespace`` are
    given as keyword arguments, or as a ``metadata`` key of the spec); ``flavor`` is
    the raw DevServerFlavor spec (or the whole object).
``rendezvous_endpoint(devserver, ...)``
    ``<name>-0.<name>.<namespace>.svc.<cluster_domain>:29500`` for a distributed
    DevServer, ``""`` for a standalone one (status.rendezvousEndpoint is distributed only).
``rendezvous_errors(devserver, flavor)``
    The problems as ``"<Reason>: <message>"`` strings (empty list when fine).
``replicas(devserver)``
    Pods of the DevServer when not suspended: 1 standalone, worldSize / nprocsPerNode.

Environment (distributed)
-------------------------
MASTER_ADDR             pod 0's stable DNS name ``<name>-0.<name>.<ns>.svc.cluster.local``
MASTER_PORT             29500
WORLD_SIZE              total processes (spec.distributed.worldSize)
NNODES                  replicas = worldSize / nprocsPerNode
NPROC_PER_NODE          nprocsPerNode
NODE_RANK               downward API: metadata.labels['apps.kubernetes.io/pod-index']
TORCHDEV_BACKEND        nccl | gloo
TORCHDEV_RDZV_ENDPOINT  MASTER_ADDR:MASTER_PORT
NCCL_* / FI_*           defaults below, spec.distributed.ncclSettings merged over them
                        (nccl backend only; gloo gets none -- except user settings,
                        which are always honoured)

NCCL defaults.  Not EFA: NCCL_SOCKET_IFNAME=eth0 (the pod network; NCCL must not pick a
loopback/docker bridge), NCCL_DEBUG=WARN, NCCL_IB_DISABLE=1 (no InfiniBand on these
nodes; skips the IB probe).  P2P/SHM are left to NCCL's topology detection: forcing
NCCL_P2P_DISABLE would throw away NVLink bandwidth on multi-GPU nodes.
EFA (flavor gpu.efa): NCCL_SOCKET_IFNAME=eth0 (bootstrap), NCCL_DEBUG=WARN,
FI_PROVIDER=efa (fail loudly instead of silently falling back to TCP),
FI_EFA_USE_DEVICE_RDMA=1 only for GPUDirect-RDMA capable GPU types (A100/H100/H200/
B200/GB200 families: p4d/p4de/p5/p5e/p5en/p6) -- required by aws-ofi-nccl 1.6.x,
harmless later, but an error on EFA instances without RDMA.  NCCL_PROTO is NOT forced:
the aws-ofi-nccl cheatsheet (doc/efa-env-var.md) only asks for NCCL_PROTO=simple with
aws-ofi-nccl <= 1.5; newer plugins set it themselves where the platform needs it, and
forcing it disables LL128 on p5.  Users can still set it through ncclSettings.
No NCCL_IB_DISABLE on EFA.

Standalone
----------
A single-process, single-node env so ``devrun train.py`` works and scripts that test
``WORLD_SIZE > 1`` do not try to go distributed: MASTER_ADDR=127.0.0.1, MASTER_PORT=29500,
WORLD_SIZE=1, NNODES=1, NPROC_PER_NODE=1, NODE_RANK=0 (a plain value), TORCHDEV_BACKEND
(nccl when the flavor has GPUs, else gloo), TORCHDEV_RDZV_ENDPOINT=127.0.0.1:29500; no
NCCL defaults.  ``devrun --nproc-per-node gpu train.py`` uses every local GPU."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.torchdev.operator.plugins.module_utils import flavor as flavors
from ansible_collections.torchdev.operator.plugins.module_utils.constants import (
    POD_INDEX_LABEL, RDZV_PORT, REASON_INVALID_SPEC)

MASTER_PORT = RDZV_PORT




POD_INDEX_FIELD_PATH = "metadata.labels['%s']" % POD_INDEX_LABEL


DEFAULT_CLUSTER_DOMAIN = "cluster.local"


BACKENDS = ("nccl", "gloo")


MAX_WORLD_SIZE = 1024


MAX_NPROCS_PER_NODE = 16


USER_SETTING_PREFIXES = ("NCCL_", "FI_")


NCCL_DEFAULTS = {
    "NCCL_DEBUG": "WARN",
    "NCCL_IB_DISABLE": "1",
    "NCCL_SOCKET_IFNAME": "eth0",
}


EFA_DEFAULTS = {
    "FI_PROVIDER": "efa",
    "NCCL_DEBUG": "WARN",
    "NCCL_SOCKET_IFNAME": "eth0",
}


# GPU families of EC2 instances with EFA *and* GPUDirect RDMA (p4d/p4de A100, p5 H100,
# p5e/p5en H200, p6 B200/GB200).  Matched against the flavor's gpu.type (e.g. nvidia-h100).
EFA_RDMA_GPU_FAMILIES = ("a100", "h100", "h200", "b200", "gb200", "b300", "gb300")


EFA_RDMA_DEFAULTS = {"FI_EFA_USE_DEVICE_RDMA": "1"}


REASON_INSUFFICIENT_GPUS = "InsufficientGPUs"




class RendezvousError(ValueError):
    """Invalid input for the rendezvous env; ``reason`` is the Degraded condition reason."""

    def __init__(self, reason, message):
        super(RendezvousError, self).__init__(message)
        self.reason = reason
        self.message = message

    def __str__(self):
        return self.message


# --------------------------------------------------------------------------- input
def _split(devserver, name=None, namespace=None):
    """(spec, name, namespace) from a raw object, or a spec (+ metadata key / kwargs)."""
    if not isinstance(devserver, dict):
        raise RendezvousError(REASON_INVALID_SPEC, "DevServer must be a mapping, got %s" % type(devserver).__name__)
    if isinstance(devserver.get("spec"), dict):
        spec = devserver["spec"]
    else:
        spec = devserver
    meta = devserver.get("metadata") or {}
    return spec, name or meta.get("name"), namespace or meta.get("namespace")


def _flavor_spec(flavor):
    if flavor is None:
        return {}
    if not isinstance(flavor, dict):
        raise RendezvousError(REASON_INVALID_SPEC, "DevServerFlavor spec must be a mapping, got %s" % type(flavor).__name__)
    if isinstance(flavor.get("spec"), dict) and ("kind" in flavor or "metadata" in flavor):
        return flavor["spec"]
    return flavor


def _int(value, field, low, high):
    if isinstance(value, bool):
        raise RendezvousError(REASON_INVALID_SPEC, "%s must be an integer, got %r" % (field, value))
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise RendezvousError(REASON_INVALID_SPEC, "%s must be an integer, got %r" % (field, value))
    if isinstance(value, float) and value != number:
        raise RendezvousError(REASON_INVALID_SPEC, "%s must be an integer, got %r" % (field, value))
    if not low <= number <= high:
        raise RendezvousError(REASON_INVALID_SPEC, "%s must be between %d and %d, got %d" % (field, low, high, number))
    return number


def flavor_gpu_count(flavor):
    """GPUs per pod of a flavor (module_utils/flavor.py ``flavor_gpu_count``), at most 16."""
    try:
        count = flavors.flavor_gpu_count(_flavor_spec(flavor))
    except ValueError as exc:
        raise RendezvousError(REASON_INVALID_SPEC, "DevServerFlavor: %s" % exc)
    return _int(count, "the GPU count of the DevServerFlavor", 0, 16)


def _mode(spec):
    mode = spec.get("mode") or "standalone"
    if mode not in ("standalone", "distributed"):
        raise RendezvousError(REASON_INVALID_SPEC, "spec.mode must be standalone or distributed, got %r" % (mode,))
    return mode


def _distributed(spec):
    """Validated (world, nprocs, nnodes, backend, user_settings) of a distributed spec."""
    dist = spec.get("distributed")
    if not isinstance(dist, dict) or not dist:
        raise RendezvousError(REASON_INVALID_SPEC, "spec.distributed is required when mode is distributed")
    if dist.get("worldSize") is None:
        raise RendezvousError(REASON_INVALID_SPEC, "spec.distributed.worldSize is required")
    world = _int(dist["worldSize"], "spec.distributed.worldSize", 1, MAX_WORLD_SIZE)
    nprocs = dist.get("nprocsPerNode")
    nprocs = 1 if nprocs is None else _int(nprocs, "spec.distributed.nprocsPerNode", 1, MAX_NPROCS_PER_NODE)
    if world % nprocs:
        raise RendezvousError(
            REASON_INVALID_SPEC,
            "spec.distributed.worldSize (%d) must be a multiple of nprocsPerNode (%d)" % (world, nprocs),
        )
    backend = dist.get("backend") or "nccl"
    if backend not in BACKENDS:
        raise RendezvousError(REASON_INVALID_SPEC, "spec.distributed.backend must be nccl or gloo, got %r" % (backend,))
    settings = dist.get("ncclSettings") or {}
    if not isinstance(settings, dict):
        raise RendezvousError(REASON_INVALID_SPEC, "spec.distributed.ncclSettings must be a map")
    user = {}
    for key, value in settings.items():
        key = str(key)
        if not key.startswith(USER_SETTING_PREFIXES) or not key.replace("_", "").isalnum():
            raise RendezvousError(
                REASON_INVALID_SPEC,
                "spec.distributed.ncclSettings: %r is not an NCCL_ or FI_ variable name" % key,
            )
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise RendezvousError(
                REASON_INVALID_SPEC, "spec.distributed.ncclSettings[%s] must be a string, got %r" % (key, value)
            )
        user[key] = str(value)
    return world, nprocs, world // nprocs, backend, user


def _check_gpus(spec, nprocs, backend, flavor):
    if backend != "nccl":
        return
    gpus = flavor_gpu_count(flavor)
    if nprocs > gpus:
        raise RendezvousError(
            REASON_INSUFFICIENT_GPUS,
            "spec.distributed.nprocsPerNode (%d) exceeds the %d GPU(s) per pod of flavor %s; "
            "the nccl backend needs one GPU per process (use fewer processes per node, "
            "a flavor with at least %d GPUs, or backend gloo)"
            % (nprocs, gpus, spec.get("flavor") or "<unknown>", nprocs),
        )


def _is_rdma_gpu(flavor):
    gpu_type = str((_flavor_spec(flavor).get("gpu") or {}).get("type") or "").lower()
    parts = gpu_type.replace("_", "-").split("-")
    return any(part.startswith(family) for part in parts for family in EFA_RDMA_GPU_FAMILIES)


def nccl_defaults(flavor):
    """The safe NCCL_/FI_ defaults for a flavor (a fresh dict)."""
    spec = _flavor_spec(flavor)
    if (spec.get("gpu") or {}).get("efa"):
        out = dict(EFA_DEFAULTS)
        if _is_rdma_gpu(spec):
            out.update(EFA_RDMA_DEFAULTS)
        return out
    return dict(NCCL_DEFAULTS)


def _host(name, namespace, cluster_domain):
    if not name:
        raise RendezvousError(REASON_INVALID_SPEC, "the DevServer name is required (metadata.name or name=)")
    if not namespace:
        raise RendezvousError(REASON_INVALID_SPEC, "the DevServer namespace is required (metadata.namespace or namespace=)")
    return "%s-0.%s.%s.svc.%s" % (name, name, namespace, (cluster_domain or DEFAULT_CLUSTER_DOMAIN).strip("."))


# --------------------------------------------------------------------------- API
def replicas(devserver):
    """Pods of the DevServer when not suspended: 1 standalone, worldSize / nprocsPerNode distributed."""
    spec, _, _ = _split(devserver)
    if _mode(spec) == "standalone":
        return 1
    return _distributed(spec)[2]


def rendezvous_endpoint(devserver, name=None, namespace=None, cluster_domain=DEFAULT_CLUSTER_DOMAIN):
    """``host:port`` of the rendezvous (pod 0) of a distributed DevServer; ``""`` when standalone."""
    spec, name, namespace = _split(devserver, name, namespace)
    if _mode(spec) == "standalone":
        return ""
    _distributed(spec)
    return "%s:%d" % (_host(name, namespace, cluster_domain), MASTER_PORT)


def _var(name, value):
    return {"name": name, "value": str(value)}


def rendezvous_env(devserver, flavor, name=None, namespace=None, cluster_domain=DEFAULT_CLUSTER_DOMAIN):
    """Container env (list of EnvVar dicts sorted by name) for torch.distributed; see the module doc.

    Raises ``RendezvousError`` (a ``ValueError`` with ``reason``: ``InsufficientGPUs`` or
    ``InvalidSpec``).
    """
    spec, name, namespace = _split(devserver, name, namespace)
    if _mode(spec) == "standalone":
        backend = "nccl" if flavor_gpu_count(flavor) > 0 else "gloo"
        values = {
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": MASTER_PORT,
            "WORLD_SIZE": 1,
            "NNODES": 1,
            "NPROC_PER_NODE": 1,
            "NODE_RANK": 0,
            "TORCHDEV_BACKEND": backend,
            "TORCHDEV_RDZV_ENDPOINT": "127.0.0.1:%d" % MASTER_PORT,
        }
        return [_var(k, values[k]) for k in sorted(values)]

    world, nprocs, nnodes, backend, user = _distributed(spec)
    _check_gpus(spec, nprocs, backend, flavor)
    host = _host(name, namespace, cluster_domain)
    values = nccl_defaults(flavor) if backend == "nccl" else {}
    values.update(user)
    values.update({
        "MASTER_ADDR": host,
        "MASTER_PORT": MASTER_PORT,
        "WORLD_SIZE": world,
        "NNODES": nnodes,
        "NPROC_PER_NODE": nprocs,
        "TORCHDEV_BACKEND": backend,
        "TORCHDEV_RDZV_ENDPOINT": "%s:%d" % (host, MASTER_PORT),
    })
    env = [_var(k, v) for k, v in values.items()]
    env.append({"name": "NODE_RANK", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": POD_INDEX_FIELD_PATH}}})
    return sorted(env, key=lambda item: item["name"])


def rendezvous_errors(devserver, flavor, name=None, namespace=None, cluster_domain=DEFAULT_CLUSTER_DOMAIN):
    """``["<Reason>: <message>"]`` when ``rendezvous_env`` would fail, else ``[]``."""
    try:
        rendezvous_env(devserver, flavor, name=name, namespace=namespace, cluster_domain=cluster_domain)
    except RendezvousError as exc:
        return ["%s: %s" % (exc.reason, exc.message)]
    return []
