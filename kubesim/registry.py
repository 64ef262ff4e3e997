"""Resource types: the built-in table and types published by CRDs."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable


@dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    singular: str = ""
    short_names: tuple[str, ...] = ()
    subresources: frozenset[str] = frozenset()
    categories: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ("create", "delete", "deletecollection", "get", "list", "patch",
                              "update", "watch")
    crd: str | None = None  # name of the CRD that published it
    storage: bool = True    # the storage version among a CRD's versions
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    def api_resource(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "name": self.plural,
            "singularName": self.singular or self.kind.lower(),
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": list(self.verbs),
        }
        if self.short_names:
            d["shortNames"] = list(self.short_names)
        if self.categories:
            d["categories"] = list(self.categories)
        return d


def _rt(api_version: str, kind: str, plural: str, namespaced: bool, short=(), sub=(),
        categories=(), verbs=None) -> ResourceType:
    group, _, version = api_version.rpartition("/")
    kw = {}
    if verbs:
        kw["verbs"] = tuple(verbs)
    return ResourceType(group=group, version=version, kind=kind, plural=plural,
                        namespaced=namespaced, singular=kind.lower(), short_names=tuple(short),
                        subresources=frozenset(sub), categories=tuple(categories), **kw)


BUILTINS: tuple[ResourceType, ...] = (
    _rt("v1", "Namespace", "namespaces", False, ["ns"], ["status"],
        verbs=["create", "delete", "get", "list", "patch", "update", "watch"]),
    _rt("v1", "Node", "nodes", False, ["no"], ["status"]),
    _rt("v1", "Pod", "pods", True, ["po"], ["status"], ["all"]),
    _rt("v1", "Service", "services", True, ["svc"], ["status"], ["all"]),
    _rt("v1", "Endpoints", "endpoints", True, ["ep"]),
    _rt("v1", "ConfigMap", "configmaps", True, ["cm"]),
    _rt("v1", "Secret", "secrets", True),
    _rt("v1", "ServiceAccount", "serviceaccounts", True, ["sa"]),
    _rt("v1", "PersistentVolumeClaim", "persistentvolumeclaims", True, ["pvc"], ["status"]),
    _rt("v1", "PersistentVolume", "persistentvolumes", False, ["pv"], ["status"]),
    _rt("v1", "Event", "events", True, ["ev"]),
    _rt("v1", "ResourceQuota", "resourcequotas", True, ["quota"], ["status"]),
    _rt("v1", "LimitRange", "limitranges", True, ["limits"]),
    _rt("apps/v1", "Deployment", "deployments", True, ["deploy"], ["status", "scale"], ["all"]),
    _rt("apps/v1", "StatefulSet", "statefulsets", True, ["sts"], ["status", "scale"], ["all"]),
    _rt("apps/v1", "ReplicaSet", "replicasets", True, ["rs"], ["status", "scale"], ["all"]),
    _rt("apps/v1", "DaemonSet", "daemonsets", True, ["ds"], ["status"], ["all"]),
    _rt("apps/v1", "ControllerRevision", "controllerrevisions", True),
    _rt("batch/v1", "Job", "jobs", True, [], ["status"], ["all"]),
    _rt("batch/v1", "CronJob", "cronjobs", True, ["cj"], ["status"], ["all"]),
    _rt("rbac.authorization.k8s.io/v1", "Role", "roles", True),
    _rt("rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings", True),
    _rt("rbac.authorization.k8s.io/v1", "ClusterRole", "clusterroles", False),
    _rt("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "clusterrolebindings", False),
    _rt("networking.k8s.io/v1", "NetworkPolicy", "networkpolicies", True, ["netpol"]),
    _rt("networking.k8s.io/v1", "Ingress", "ingresses", True, ["ing"], ["status"]),
    _rt("storage.k8s.io/v1", "StorageClass", "storageclasses", False, ["sc"]),
    _rt("apiextensions.k8s.io/v1", "CustomResourceDefinition", "customresourcedefinitions",
        False, ["crd", "crds"], ["status"]),
    _rt("coordination.k8s.io/v1", "Lease", "leases", True),
    _rt("events.k8s.io/v1", "Event", "events", True, ["ev"]),
    _rt("scheduling.k8s.io/v1", "PriorityClass", "priorityclasses", False, ["pc"]),
    _rt("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets", True, ["pdb"], ["status"]),
    _rt("discovery.k8s.io/v1", "EndpointSlice", "endpointslices", True),
)


class Registry:
    """All served resource types, indexed every way the API needs."""

    def __init__(self, builtins: Iterable[ResourceType] = BUILTINS):
        self._types: dict[tuple[str, str, str], ResourceType] = {}  # (group, version, plural)
        self._crd_types: dict[str, list[ResourceType]] = {}
        for rt in builtins:
            self._add(rt)

    def _add(self, rt: ResourceType) -> None:
        self._types[(rt.group, rt.version, rt.plural)] = rt

    # -- lookups -------------------------------------------------------------
    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._types.get((group, version, plural))

    def get(self, name: str) -> ResourceType:
        """kubectl-style name: 'pods', 'statefulsets.apps', 'devservers.torchdev.io',
        optionally 'plural.version.group'. The preferred (storage) version wins."""
        rt = self.find(name)
        if rt is None:
            raise KeyError(name)
        return rt

    def find(self, name: str) -> ResourceType | None:
        plural, _, group = name.partition(".")
        candidates = [rt for rt in self._types.values() if rt.plural == plural and rt.group == group]
        if not candidates and "." in group:
            version, _, grp = group.partition(".")
            candidates = [rt for rt in self._types.values()
                          if rt.plural == plural and rt.group == grp and rt.version == version]
        if not candidates:
            return None
        candidates.sort(key=lambda rt: (not rt.storage, rt.version))
        return candidates[0]

    def by_kind(self, api_version: str, kind: str) -> ResourceType | None:
        group, _, version = api_version.rpartition("/")
        for rt in self._types.values():
            if rt.group == group and rt.version == version and rt.kind == kind:
                return rt
        return None

    def all(self) -> list[ResourceType]:
        return list(self._types.values())

    def storage_types(self) -> list[ResourceType]:
        """One type per (group, plural): the one objects are stored under."""
        seen: dict[tuple[str, str], ResourceType] = {}
        for rt in self._types.values():
            k = (rt.group, rt.plural)
            if k not in seen or (rt.storage and not seen[k].storage):
                seen[k] = rt
        return list(seen.values())

    def groups(self) -> dict[str, list[str]]:
        """group -> served versions (preferred first)."""
        out: dict[str, list[str]] = {}
        for rt in self._types.values():
            versions = out.setdefault(rt.group, [])
            if rt.version not in versions:
                versions.append(rt.version)
        for group, versions in out.items():
            versions.sort(key=lambda v: (not any(rt.storage for rt in self._types.values()
                                                 if rt.group == group and rt.version == v), v))
        return out

    def resources_in(self, group: str, version: str) -> list[ResourceType]:
        return [rt for rt in self._types.values() if rt.group == group and rt.version == version]

    # -- CRDs ------------------------------------------------------------------
    def add_crd(self, crd: dict[str, Any]) -> list[ResourceType]:
        self.remove_crd(crd["metadata"]["name"])
        spec = crd["spec"]
        names = spec["names"]
        types = []
        for v in spec.get("versions", []):
            if not v.get("served", True):
                continue
            sub = set()
            if "status" in (v.get("subresources") or {}):
                sub.add("status")
            if "scale" in (v.get("subresources") or {}):
                sub.add("scale")
            rt = ResourceType(
                group=spec["group"], version=v["name"], kind=names["kind"], plural=names["plural"],
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                singular=names.get("singular", names["kind"].lower()),
                short_names=tuple(names.get("shortNames") or ()),
                subresources=frozenset(sub), categories=tuple(names.get("categories") or ()),
                crd=crd["metadata"]["name"], storage=bool(v.get("storage")),
                extra={"printerColumns": v.get("additionalPrinterColumns") or []},
            )
            self._add(rt)
            types.append(rt)
        self._crd_types[crd["metadata"]["name"]] = types
        return types

    def remove_crd(self, crd_name: str) -> list[ResourceType]:
        types = self._crd_types.pop(crd_name, [])
        for rt in types:
            self._types.pop((rt.group, rt.version, rt.plural), None)
        return types
