"""The simulated cluster's nodes: the `--nodes` spec grammar and Node objects.

A spec is a list of pools separated by `;` or whitespace::

    POOL:[COUNTx]{key:value,...}

    cpu:2x{cpu:16,memory:64Gi}
    gpu:2x{cpu:48,memory:192Gi,nvidia.com/gpu:4,
           labels:{node.kubernetes.io/instance-type:g5.12xlarge},
           taints:[nvidia.com/gpu=present:NoSchedule]}

Inside the braces: resource quantities (`cpu`, `memory`, `pods`, `ephemeral-storage`,
`hugepages-*` and any extended resource with a `/`, e.g. `nvidia.com/gpu`,
`vpc.amazonaws.com/efa`), `labels:{k:v,...}`, `annotations:{k:v,...}`,
`taints:[key=value:Effect, key:Effect, ...]` and `unschedulable:true`. Values may be
quoted ("..." or '...'); spaces are allowed around the punctuation. `COUNTx` defaults
to 1 and may be 0 (a pool with no nodes); an empty spec means no nodes at all.

Nodes are named `<pool>-<i>` and get the labels a real kubelet sets
(`kubernetes.io/hostname`, `kubernetes.io/os`, `kubernetes.io/arch`), `kubesim.io/pool`,
`nvidia.com/gpu.present: "true"` when they have GPUs, and the given labels.
"""
from __future__ import annotations

import re
import uuid
from datetime import datetime, timezone
from typing import Any

from kubesim.quantity import parse_quantity

__all__ = ["DEFAULT_NODES_SPEC", "parse_nodes", "parse_pools", "make_node", "NodePool",
           "KUBELET_VERSION"]

DEFAULT_NODES_SPEC = (
    "cpu:2x{cpu:16,memory:64Gi,labels:{node.kubernetes.io/instance-type:m5.4xlarge}};"
    "gpu:2x{cpu:48,memory:192Gi,nvidia.com/gpu:4,"
    "labels:{node.kubernetes.io/instance-type:g5.12xlarge,torchdev.io/gpu-type:nvidia-a10g},"
    "taints:[nvidia.com/gpu=present:NoSchedule]}"
)

KUBELET_VERSION = "v1.33.1"
GPU_RESOURCE = "nvidia.com/gpu"
RESOURCE_DEFAULTS = {"cpu": "4", "memory": "16Gi", "pods": "110", "ephemeral-storage": "100Gi"}
KNOWN_RESOURCES = ("cpu", "memory", "pods", "ephemeral-storage", "nvidia.com/gpu",
                   "vpc.amazonaws.com/efa")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
MAX_NODES = 10_000

_POOL_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_LABEL_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
_DNS_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_LABEL_KEY_RE = re.compile(rf"^({_DNS_SUBDOMAIN}/)?{_LABEL_NAME}$")
_LABEL_VALUE_RE = re.compile(rf"^({_LABEL_NAME})?$")
_RESOURCE_RE = re.compile(rf"^({_DNS_SUBDOMAIN}/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_SPECIALS = set("{}[],;:")


class _Parser:
    """Recursive descent over the spec text; errors say where they happened."""

    def __init__(self, text: str):
        self.text = text
        self.pos = 0

    # -- lexing helpers --------------------------------------------------------
    def error(self, message: str) -> ValueError:
        snippet = self.text[max(0, self.pos - 20):self.pos + 20]
        return ValueError(f"invalid --nodes spec at offset {self.pos} (near {snippet!r}): {message}")

    def skip_ws(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def peek(self) -> str:
        self.skip_ws()
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def expect(self, ch: str) -> None:
        if self.peek() != ch:
            found = repr(self.text[self.pos]) if self.pos < len(self.text) else "end of spec"
            raise self.error(f"expected {ch!r}, found {found}")
        self.pos += 1

    def quoted(self) -> str:
        q = self.text[self.pos]
        end = self.text.find(q, self.pos + 1)
        if end < 0:
            raise self.error("unterminated quoted string")
        s = self.text[self.pos + 1:end]
        self.pos = end + 1
        return s

    def bare(self, stop: str) -> str:
        start = self.pos
        while self.pos < len(self.text):
            ch = self.text[self.pos]
            if ch in stop or ch.isspace():
                break
            self.pos += 1
        return self.text[start:self.pos]

    # -- grammar -----------------------------------------------------------------
    def key(self) -> str:
        if self.peek() in ("'", '"'):
            return self.quoted()
        k = self.bare("{}[],;:")
        if not k:
            raise self.error("expected a key")
        return k

    def scalar(self) -> str:
        if self.peek() in ("'", '"'):
            return self.quoted()
        v = self.bare("{}[],;")
        if not v:
            raise self.error("expected a value")
        return v

    def value(self) -> Any:
        ch = self.peek()
        if ch == "{":
            return self.mapping()
        if ch == "[":
            return self.sequence()
        return self.scalar()

    def mapping(self) -> dict[str, Any]:
        self.expect("{")
        out: dict[str, Any] = {}
        while self.peek() != "}":
            if not self.peek():
                raise self.error("unterminated '{'")
            k = self.key()
            self.expect(":")
            if k in out:
                raise self.error(f"duplicate key {k!r}")
            out[k] = self.value()
            if self.peek() == ",":
                self.pos += 1
            elif not self.peek():
                raise self.error("unterminated '{'")
            elif self.peek() != "}":
                raise self.error("expected ',' or '}'")
        self.pos += 1
        return out

    def sequence(self) -> list[Any]:
        self.expect("[")
        out: list[Any] = []
        while self.peek() != "]":
            if not self.peek():
                raise self.error("unterminated '['")
            out.append(self.value())
            if self.peek() == ",":
                self.pos += 1
            elif not self.peek():
                raise self.error("unterminated '['")
            elif self.peek() != "]":
                raise self.error("expected ',' or ']'")
        self.pos += 1
        return out

    def pool(self) -> tuple[str, int, dict[str, Any]]:
        name = self.bare("{}[],;:")
        if not name:
            raise self.error("expected a pool name")
        if not _POOL_RE.fullmatch(name) or len(name) > 50:
            raise self.error(f"invalid pool name {name!r}: lowercase letters, digits and '-' "
                             "(a DNS label of at most 50 characters)")
        self.expect(":")
        self.skip_ws()
        count = 1
        m = re.compile(r"(\d+)\s*x").match(self.text, self.pos)
        if m:
            count = int(m.group(1))
            self.pos = m.end()
        elif self.peek() != "{":
            raise self.error("expected COUNTx and/or {...} after the pool name")
        body: dict[str, Any] = {}
        if self.peek() == "{":
            body = self.mapping()
        return name, count, body

    def spec(self) -> list[tuple[str, int, dict[str, Any]]]:
        pools = []
        while True:
            while self.peek() == ";":
                self.pos += 1
            if not self.peek():
                return pools
            pools.append(self.pool())
            nxt = self.text[self.pos] if self.pos < len(self.text) else ""
            if nxt and not nxt.isspace() and nxt != ";":
                raise self.error("expected ';' or whitespace between pools")


class NodePool:
    """One parsed pool: name, count and the per-node template."""

    def __init__(self, name: str, count: int, capacity: dict[str, str], labels: dict[str, str],
                 annotations: dict[str, str], taints: list[dict[str, str]],
                 unschedulable: bool = False):
        self.name = name
        self.count = count
        self.capacity = capacity
        self.labels = labels
        self.annotations = annotations
        self.taints = taints
        self.unschedulable = unschedulable

    def __repr__(self) -> str:  # pragma: no cover
        return f"NodePool({self.name!r}, {self.count}, {self.capacity})"


def _parse_taint(pool: str, item: Any) -> dict[str, str]:
    if isinstance(item, dict):
        unknown = set(item) - {"key", "value", "effect"}
        if unknown:
            raise ValueError(f"pool {pool!r}: unknown taint fields {sorted(unknown)}")
        key, value, effect = str(item.get("key", "")), item.get("value"), str(item.get("effect", ""))
    elif isinstance(item, str):
        head, sep, effect = item.rpartition(":")
        if not sep:
            raise ValueError(f"pool {pool!r}: taint {item!r} needs an effect: key=value:Effect "
                             f"or key:Effect with Effect one of {', '.join(TAINT_EFFECTS)}")
        key, eq, value = head.partition("=")
        value = value if eq else None
    else:
        raise ValueError(f"pool {pool!r}: invalid taint {item!r}")
    if effect not in TAINT_EFFECTS:
        raise ValueError(f"pool {pool!r}: invalid taint effect {effect!r} in {item!r}; "
                         f"expected one of {', '.join(TAINT_EFFECTS)}")
    if not key or not _LABEL_KEY_RE.match(key):
        raise ValueError(f"pool {pool!r}: invalid taint key {key!r} in {item!r}")
    if value is not None and not _LABEL_VALUE_RE.match(str(value)):
        raise ValueError(f"pool {pool!r}: invalid taint value {value!r} in {item!r}")
    taint = {"key": key, "effect": effect}
    if value:
        taint["value"] = str(value)
    return taint


def _string_map(pool: str, what: str, value: Any, check_keys: bool = True) -> dict[str, str]:
    if not isinstance(value, dict):
        raise ValueError(f"pool {pool!r}: {what} must be a map like {what}:{{key:value}}")
    out = {}
    for k, v in value.items():
        if not isinstance(v, str):
            raise ValueError(f"pool {pool!r}: {what}.{k} must be a string, not {v!r}")
        if check_keys:
            if not _LABEL_KEY_RE.match(k) or len(k.rpartition("/")[2]) > 63:
                raise ValueError(f"pool {pool!r}: invalid label key {k!r}")
            if len(v) > 63 or not _LABEL_VALUE_RE.match(v):
                raise ValueError(f"pool {pool!r}: invalid label value {v!r} for {k!r}")
        out[k] = v
    return out


def _is_resource_name(key: str) -> bool:
    return key in KNOWN_RESOURCES or key.startswith("hugepages-") or (
        "/" in key and bool(_RESOURCE_RE.match(key)))


def parse_pools(spec: str) -> list[NodePool]:
    """Parse a `--nodes` spec into pools (ValueError with a clear message when invalid)."""
    if not isinstance(spec, str):
        raise ValueError(f"--nodes spec must be a string, not {type(spec).__name__}")
    raw = _Parser(spec).spec()
    pools: list[NodePool] = []
    seen: set[str] = set()
    total = 0
    for name, count, body in raw:
        if name in seen:
            raise ValueError(f"duplicate node pool {name!r}")
        seen.add(name)
        total += count
        if total > MAX_NODES:
            raise ValueError(f"too many nodes (at most {MAX_NODES})")
        capacity = dict(RESOURCE_DEFAULTS)
        labels: dict[str, str] = {}
        annotations: dict[str, str] = {}
        taints: list[dict[str, str]] = []
        unschedulable = False
        for key, value in body.items():
            if key == "labels":
                labels = _string_map(name, "labels", value)
            elif key == "annotations":
                annotations = _string_map(name, "annotations", value, check_keys=False)
            elif key == "taints":
                items = value if isinstance(value, list) else [value]
                taints = [_parse_taint(name, t) for t in items]
            elif key == "unschedulable":
                if str(value).lower() not in ("true", "false"):
                    raise ValueError(f"pool {name!r}: unschedulable must be true or false")
                unschedulable = str(value).lower() == "true"
            elif _is_resource_name(key):
                if not isinstance(value, str):
                    raise ValueError(f"pool {name!r}: {key} must be a quantity, not {value!r}")
                try:
                    q = parse_quantity(value)
                except ValueError:
                    raise ValueError(f"pool {name!r}: invalid quantity {value!r} for {key}") from None
                if key not in ("cpu", "memory", "ephemeral-storage") and not key.startswith(
                        "hugepages-") and q != q.to_integral_value():
                    raise ValueError(f"pool {name!r}: {key} must be a whole number, not {value!r}")
                capacity[key] = value
            else:
                raise ValueError(
                    f"pool {name!r}: unknown key {key!r}; expected a resource ("
                    f"{', '.join(KNOWN_RESOURCES)}, hugepages-*, or an extended resource "
                    "like example.com/foo), labels, annotations, taints or unschedulable")
        pools.append(NodePool(name, count, capacity, labels, annotations, taints, unschedulable))
    return pools


def _ip(prefix: str, n: int) -> str:
    return f"{prefix}.{n // 254}.{n % 254 + 1}"


def make_node(pool: NodePool, index: int, ordinal: int, now: datetime | None = None) -> dict[str, Any]:
    """The Node object for node `index` of `pool`; `ordinal` numbers nodes cluster-wide."""
    name = f"{pool.name}-{index}"
    ts = (now or datetime.now(timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": "amd64",
        "kubesim.io/pool": pool.name,
    }
    gpus = parse_quantity(pool.capacity.get(GPU_RESOURCE, "0"))
    if gpus > 0:
        labels["nvidia.com/gpu.present"] = "true"
    labels.update(pool.labels)
    ident = uuid.uuid5(uuid.NAMESPACE_DNS, f"{name}.node.kubesim.io")
    ip = _ip("10.0", ordinal)
    node: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels,
                     "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                                     "volumes.kubernetes.io/controller-managed-attach-detach":
                                         "true", **pool.annotations}},
        "spec": {"providerID": f"kubesim:///{pool.name}/{name}"},
        "status": {
            "capacity": dict(pool.capacity),
            "allocatable": dict(pool.capacity),
            "conditions": [
                _cond("MemoryPressure", "False", "KubeletHasSufficientMemory",
                      "kubelet has sufficient memory available", ts),
                _cond("DiskPressure", "False", "KubeletHasNoDiskPressure",
                      "kubelet has no disk pressure", ts),
                _cond("PIDPressure", "False", "KubeletHasSufficientPID",
                      "kubelet has sufficient PID available", ts),
                _cond("Ready", "True", "KubeletReady", "kubelet is posting ready status", ts),
            ],
            "addresses": [{"type": "InternalIP", "address": ip},
                          {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "architecture": "amd64",
                "bootID": str(uuid.uuid5(ident, "boot")),
                "containerRuntimeVersion": "containerd://1.7.22",
                "kernelVersion": "6.1.0-kubesim",
                "kubeProxyVersion": KUBELET_VERSION,
                "kubeletVersion": KUBELET_VERSION,
                "machineID": ident.hex,
                "operatingSystem": "linux",
                "osImage": "Ubuntu 22.04.5 LTS",
                "systemUUID": str(ident),
            },
        },
    }
    if pool.taints:
        node["spec"]["taints"] = [dict(t) for t in pool.taints]
    if pool.unschedulable:
        node["spec"]["unschedulable"] = True
        node["spec"].setdefault("taints", []).append(
            {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
    return node


def _cond(type_: str, status: str, reason: str, message: str, ts: str) -> dict[str, str]:
    return {"type": type_, "status": status, "reason": reason, "message": message,
            "lastHeartbeatTime": ts, "lastTransitionTime": ts}


def parse_nodes(spec: str, now: datetime | None = None) -> list[dict[str, Any]]:
    """Node objects (dicts ready for `api.create("nodes", ...)`) for a `--nodes` spec."""
    nodes = []
    ordinal = 0
    for pool in parse_pools(spec):
        for i in range(pool.count):
            nodes.append(make_node(pool, i, ordinal, now))
            ordinal += 1
    return nodes
