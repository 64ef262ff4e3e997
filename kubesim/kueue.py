"""Kueue support: install Kueue's real CRDs into an ApiServer, and the quota math.

The CRDs (kueue v0.19.2, kueue.x-k8s.io, storage version v1beta2) are read from the
directory named by `KUEUE_CRDS_DIR`, default `<repo>/../shared/schemas/kueue-v0.19.2`;
they are never copied into this repository. The admission controller that uses them is
kubesim/controllers/kueue.py; it stays inert while these CRDs are not installed.
"""
from __future__ import annotations

import glob
import os
from decimal import Decimal
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml

from kubesim.errors import ApiError
from kubesim.quantity import format_quantity, parse_quantity

Obj = dict[str, Any]

GROUP = "kueue.x-k8s.io"
API_VERSION = f"{GROUP}/v1beta2"
WORKLOADS = f"workloads.{GROUP}"
CLUSTER_QUEUES = f"clusterqueues.{GROUP}"
LOCAL_QUEUES = f"localqueues.{GROUP}"
RESOURCE_FLAVORS = f"resourceflavors.{GROUP}"
PRIORITY_CLASSES = f"workloadpriorityclasses.{GROUP}"
QUEUE_LABEL = f"{GROUP}/queue-name"
PRIORITY_LABEL = f"{GROUP}/priority-class"
ADMISSION_GATE = f"{GROUP}/admission"
# kubesim extension: 1-based position of a pending Workload in its ClusterQueue
POSITION_ANNOTATION = "kubesim.io/queue-position"
CRD_FILES = ("clusterqueues", "localqueues", "resourceflavors", "workloads",
             "workloadpriorityclasses", "admissionchecks", "cohorts", "topologies",
             "provisioningrequestconfigs")

_CRD_CACHE: dict[str, list[Obj]] = {}


def crds_dir() -> Path:
    env = os.environ.get("KUEUE_CRDS_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "shared" / "schemas" / "kueue-v0.19.2"


def load_crds(directory: str | os.PathLike | None = None) -> list[Obj]:
    """The CustomResourceDefinitions in the Kueue CRD directory (parsed once, cached)."""
    d = str(directory or crds_dir())
    if d not in _CRD_CACHE:
        files = sorted(glob.glob(os.path.join(d, f"{GROUP}_*.yaml")))
        if not files:
            raise FileNotFoundError(f"no Kueue CRDs ({GROUP}_*.yaml) in {d}; "
                                    "set KUEUE_CRDS_DIR")
        out = []
        for f in files:
            with open(f) as fh:
                out += [c for c in yaml.safe_load_all(fh)
                        if c and c.get("kind") == "CustomResourceDefinition"]
        _CRD_CACHE[d] = out
    return _CRD_CACHE[d]


def install_crds(api: Any, directory: str | os.PathLike | None = None) -> list[str]:
    """Create the Kueue CRDs in `api` (existing ones are left alone); their names."""
    import copy

    names = []
    for crd in load_crds(directory):
        try:
            api.create("customresourcedefinitions.apiextensions.k8s.io", copy.deepcopy(crd))
        except ApiError as exc:
            if exc.code != 409:
                raise
        names.append(crd["metadata"]["name"])
    return names


def installed(api: Any) -> bool:
    return api.registry.find(WORKLOADS) is not None


# -- quota math ------------------------------------------------------------------------
Resources = dict[str, Decimal]


def template_requests(template: Mapping[str, Any] | None) -> Resources:
    """Effective requests of one pod made from a pod template."""
    from kubesim.controllers.scheduler import pod_requests

    return pod_requests({"spec": (template or {}).get("spec") or {}})


def scale(res: Mapping[str, Decimal], n: int) -> Resources:
    return {k: v * n for k, v in res.items()}


def add(a: Mapping[str, Decimal], b: Mapping[str, Decimal]) -> Resources:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, Decimal(0)) + v
    return out


def workload_requests(wl: Obj) -> Resources:
    """Total requests of a Workload: every pod set's per-pod requests times its count."""
    total: Resources = {}
    for ps in (wl.get("spec") or {}).get("podSets") or []:
        total = add(total, scale(template_requests(ps.get("template")), ps.get("count", 1)))
    return total


def nominal_quotas(cq: Obj) -> dict[str, Resources]:
    """{flavor: {resource: nominalQuota}} of a ClusterQueue."""
    out: dict[str, Resources] = {}
    for rg in (cq.get("spec") or {}).get("resourceGroups") or []:
        for fl in rg.get("flavors") or []:
            q = out.setdefault(fl["name"], {})
            for r in fl.get("resources") or []:
                q[r["name"]] = parse_quantity(r.get("nominalQuota", 0))
    return out


def assign_flavors(cq: Obj, need: Mapping[str, Decimal],
                   used: Mapping[str, Mapping[str, Decimal]],
                   flavors_exist: Iterable[str] | None = None
                   ) -> tuple[dict[str, str] | None, str]:
    """Pick a flavor per requested resource so the whole request fits the unused quota.

    For each resource group (in order) covering requested resources, the first flavor
    (in order) with enough unused nominal quota for all of the group's requested
    resources wins. Returns ({resource: flavor}, "") or (None, why not). No borrowing,
    no preemption.
    """
    exist = set(flavors_exist) if flavors_exist is not None else None
    need = {k: v for k, v in need.items() if v}
    groups = (cq.get("spec") or {}).get("resourceGroups") or []
    covered = {r for rg in groups for r in rg.get("coveredResources") or []}
    missing = sorted(set(need) - covered)
    if missing:
        return None, f"resource {missing[0]} unavailable in ClusterQueue"
    out: dict[str, str] = {}
    for rg in groups:
        wanted = [r for r in rg.get("coveredResources") or [] if r in need]
        if not wanted:
            continue
        reasons = []
        for fl in rg.get("flavors") or []:
            fname = fl["name"]
            if exist is not None and fname not in exist:
                reasons.append(f"flavor {fname} not found")
                continue
            quota = {r["name"]: parse_quantity(r.get("nominalQuota", 0))
                     for r in fl.get("resources") or []}
            short = []
            for r in wanted:
                free = quota.get(r, Decimal(0)) - (used.get(fname) or {}).get(r, Decimal(0))
                if need[r] > free:
                    short.append(f"insufficient unused quota for {r} in flavor {fname}, "
                                 f"{format_quantity(need[r] - free, r)} more needed")
            if not short:
                out.update({r: fname for r in wanted})
                break
            reasons.append("; ".join(short))
        else:
            return None, "; ".join(reasons) or "no flavors"
    return out, ""


def flavor_usage(cq: Obj, used: Mapping[str, Mapping[str, Decimal]],
                 borrowed: bool = True) -> list[Obj]:
    """ClusterQueue/LocalQueue status `flavorsReservation`/`flavorsUsage` entries."""
    out = []
    for rg in (cq.get("spec") or {}).get("resourceGroups") or []:
        for fl in rg.get("flavors") or []:
            res = []
            for r in fl.get("resources") or []:
                e: Obj = {"name": r["name"],
                          "total": format_quantity((used.get(fl["name"]) or {}).get(
                              r["name"], Decimal(0)), r["name"])}
                if borrowed:
                    e["borrowed"] = "0"
                res.append(e)
            out.append({"name": fl["name"], "resources": res})
    return out
