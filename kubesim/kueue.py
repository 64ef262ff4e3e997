"""Kueue support: install Kueue's real CRDs into an ApiServer, the quota math, and the
visibility on-demand API (`visibility.kueue.x-k8s.io`, pending workloads in order).

The CRDs (kueue v0.19.2, kueue.x-k8s.io, storage version v1beta2) are read from the
directory named by `KUEUE_CRDS_DIR`, default the copy kept in this repository
(`third_party/kueue-v0.19.2`, with Kueue's licence and a note of where it came from). The admission controller that uses them is
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
JOB_UID_LABEL = f"{GROUP}/job-uid"
ADMISSION_GATE = f"{GROUP}/admission"
# Kueue v0.19's pod webhook adds this gate too while TopologyAwareScheduling is on (a beta feature,
# on by default: pkg/controller/jobs/pod/pod_webhook.go); admission without TAS removes both.
TOPOLOGY_GATE = f"{GROUP}/topology"
# kubesim extension: 1-based position of a pending Workload in its ClusterQueue (for
# humans and kubesim's own tests; clients use the visibility API below)
POSITION_ANNOTATION = "kubesim.io/queue-position"
VISIBILITY_GROUP = f"visibility.{GROUP}"
# kueue v0.19 serves both, v1beta2 preferred (pkg/visibility/server.go)
VISIBILITY_VERSIONS = ("v1beta2", "v1beta1")
# constants.DefaultPendingWorkloadsLimit / MaxPendingWorkloadsLimit
DEFAULT_PENDING_LIMIT, MAX_PENDING_LIMIT = 1000, 4000
CRD_FILES = ("clusterqueues", "localqueues", "resourceflavors", "workloads",
             "workloadpriorityclasses", "admissionchecks", "cohorts", "topologies",
             "provisioningrequestconfigs")

_CRD_CACHE: dict[str, list[Obj]] = {}


# The repository's copy (third_party/README.md).
DEFAULT_CRDS_DIR = Path(__file__).resolve().parents[1] / "third_party" / "kueue-v0.19.2"


def crds_dir() -> Path:
    """Where the Kueue CRDs are read from: `$KUEUE_CRDS_DIR`, else the repository's copy."""
    env = os.environ.get("KUEUE_CRDS_DIR")
    return Path(env) if env else DEFAULT_CRDS_DIR


def load_crds(directory: str | os.PathLike | None = None) -> list[Obj]:
    """The CustomResourceDefinitions in the Kueue CRD directory (parsed once, cached)."""
    d = str(directory or crds_dir())
    if d not in _CRD_CACHE:
        files = sorted(glob.glob(os.path.join(d, f"{GROUP}_*.yaml")))
        if not files:
            raise FileNotFoundError(
                f"no Kueue CRDs ({GROUP}_*.yaml) in {d}: the repository keeps them in "
                f"{DEFAULT_CRDS_DIR} (restore it with git checkout, or point KUEUE_CRDS_DIR "
                "at a directory of Kueue v0.19.2's CRDs)")
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


def _tolerates(tolerations: Iterable[Obj], taint: Obj) -> bool:
    for t in tolerations:
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        if not t.get("key") and t.get("operator") == "Exists":
            return True
        if t.get("key") != taint.get("key"):
            continue
        if t.get("operator") == "Exists" or t.get("value", "") == taint.get("value", ""):
            return True
    return False


def flavor_mismatch(flavor: Obj | None, pod_spec: Obj | None) -> str | None:
    """Why a pod template cannot use a ResourceFlavor (kueue's flavor assigner), or None.

    The pod's nodeSelector must agree with the flavor's nodeLabels on every key both name,
    and the pod, with the flavor's own spec.tolerations added (as Kueue adds them), must
    tolerate the flavor's NoSchedule/NoExecute nodeTaints. (Required node affinity is not
    looked at.)
    """
    if not flavor or pod_spec is None:
        return None
    fspec = flavor.get("spec") or {}
    selector = pod_spec.get("nodeSelector") or {}
    for key, value in (fspec.get("nodeLabels") or {}).items():
        if key in selector and selector[key] != value:
            return f"flavor {flavor['metadata']['name']} doesn't match node affinity"
    for taint in fspec.get("nodeTaints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and \
                not _tolerates((pod_spec.get("tolerations") or []) + (fspec.get("tolerations") or []), taint):
            return (f"untolerated taint {{{taint.get('key')}: {taint.get('value', '')}}} "
                    f"in flavor {flavor['metadata']['name']}")
    return None


def assign_flavors(cq: Obj, need: Mapping[str, Decimal],
                   used: Mapping[str, Mapping[str, Decimal]],
                   flavors_exist: Iterable[str] | Mapping[str, Obj] | None = None,
                   pod_spec: Obj | None = None,
                   ) -> tuple[dict[str, str] | None, str]:
    """Pick a flavor per requested resource so the whole request fits the unused quota.

    For each resource group (in order) covering requested resources, the first flavor
    (in order) that the pod template may use (flavor_mismatch, when the ResourceFlavor
    objects are given as a mapping) and with enough unused nominal quota for all of the
    group's requested resources wins. Returns ({resource: flavor}, "") or (None, why not).
    No borrowing, no preemption.
    """
    exist = set(flavors_exist) if flavors_exist is not None else None
    objects = flavors_exist if isinstance(flavors_exist, Mapping) else {}
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
            mismatch = flavor_mismatch(objects.get(fname), pod_spec)
            if mismatch:
                reasons.append(mismatch)
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


# -- visibility on-demand API ------------------------------------------------------------
def pending_workload(wl: Obj, position_in_cq: int, position_in_lq: int) -> Obj:
    """A visibility PendingWorkload (pkg/visibility/storage/utils.go newPendingWorkload)."""
    meta = wl["metadata"]
    return {"metadata": {"name": meta["name"], "namespace": meta["namespace"],
                         "creationTimestamp": meta.get("creationTimestamp"),
                         "ownerReferences": [{k: r[k] for k in ("apiVersion", "kind", "name", "uid")
                                              if k in r}
                                             for r in meta.get("ownerReferences") or []]},
            "priority": (wl.get("spec") or {}).get("priority") or 0,
            "localQueueName": (wl.get("spec") or {}).get("queueName", ""),
            "positionInClusterQueue": position_in_cq,
            "positionInLocalQueue": position_in_lq}


def _bounded(query: Mapping[str, str]) -> tuple[int, int]:
    def number(key: str, default: int) -> int:
        raw = query.get(key)
        if raw in (None, ""):
            return default
        try:
            return int(raw)
        except ValueError:
            raise ApiError(400, f"{key}: invalid value {raw!r}: must be an integer",
                           "BadRequest") from None
    limit = min(max(number("limit", DEFAULT_PENDING_LIMIT), 0), MAX_PENDING_LIMIT)
    return limit, max(number("offset", 0), 0)


def pending_summary(version: str, queue: list[Obj], namespace: str | None = None,
                    local_queue: str | None = None, query: Mapping[str, str] | None = None
                    ) -> Obj:
    """PendingWorkloadsSummary of a ClusterQueue's ordered pending `queue`, or of the
    part of it submitted to `namespace`/`local_queue` (positions are 0-based; offset and
    limit count within the answer, as kueue's storage does)."""
    limit, offset = _bounded(query or {})
    items: list[Obj] = []
    per_lq: dict[tuple[str, str], int] = {}
    skipped = 0
    for index, wl in enumerate(queue):
        if len(items) >= limit:
            break
        key = (wl["metadata"]["namespace"], (wl.get("spec") or {}).get("queueName", ""))
        if local_queue is not None and key != (namespace, local_queue):
            continue
        in_lq = per_lq.get(key, 0)
        per_lq[key] = in_lq + 1
        if skipped < offset:
            skipped += 1
            continue
        items.append(pending_workload(wl, index, in_lq))
    return {"kind": "PendingWorkloadsSummary", "apiVersion": f"{VISIBILITY_GROUP}/{version}",
            "metadata": {"creationTimestamp": None}, "items": items}


class VisibilityApi:
    """`visibility.kueue.x-k8s.io` for KubeSimServer.add_aggregated: GET
    clusterqueues/<cq>/pendingworkloads and namespaces/<ns>/localqueues/<lq>/pendingworkloads,
    served from `pending(cq)` (the admission controller's order) while the Kueue CRDs are
    installed."""

    group = VISIBILITY_GROUP
    versions = VISIBILITY_VERSIONS

    def __init__(self, api: Any, pending: Any):
        self.api, self.pending = api, pending

    def enabled(self) -> bool:
        return installed(self.api)

    def resources(self, version: str) -> list[Obj]:
        out = []
        for plural, kind, namespaced in (("clusterqueues", "ClusterQueue", False),
                                         ("localqueues", "LocalQueue", True)):
            out.append({"name": plural, "singularName": plural[:-1], "namespaced": namespaced,
                        "kind": kind, "verbs": []})
            out.append({"name": f"{plural}/pendingworkloads", "singularName": "",
                        "namespaced": namespaced, "kind": "PendingWorkloadsSummary",
                        "verbs": ["get"]})
        return out

    def get(self, version: str, namespace: str | None, segs: list[str],
            query: Mapping[str, str]) -> Obj:
        plural = segs[0] if segs else ""
        if (len(segs) != 3 or segs[2] != "pendingworkloads"
                or plural not in ("clusterqueues", "localqueues")
                or (plural == "localqueues") != (namespace is not None)):
            if len(segs) in (1, 2) and plural in ("clusterqueues", "localqueues"):
                raise ApiError(405, "the server does not allow this method on the requested "
                               "resource", "MethodNotAllowed")
            raise ApiError(404, "the server could not find the requested resource", "NotFound")
        name = segs[1]
        resource = CLUSTER_QUEUES if plural == "clusterqueues" else LOCAL_QUEUES
        try:
            queue = self.api.get(resource, namespace, name, copy_=False)
        except ApiError as exc:
            if exc.code != 404:
                raise
            raise ApiError(404, f'{plural[:-1]}.{VISIBILITY_GROUP} "{name}" not found',
                           "NotFound") from None
        if plural == "clusterqueues":
            return pending_summary(version, self.pending(name), query=query)
        cq = (queue.get("spec") or {}).get("clusterQueue", "")
        return pending_summary(version, self.pending(cq), namespace, name, query)


# -- preemption within a ClusterQueue (kueue v0.19.2 pkg/scheduler/preemption) ----------------
IN_CLUSTER_QUEUE = "InClusterQueue"       # kueue.InClusterQueueReason (the Preempted condition)
EVICTED_BY_PREEMPTION = "Preempted"       # kueue.WorkloadEvictedByPreemption (the Evicted condition)
POLICIES = ("Never", "LowerPriority", "LowerOrNewerEqualPriority", "Any")


def condition(wl: Obj | None, type_: str) -> Obj | None:
    from kubesim.controllers._util import get_condition  # the controllers import this module

    return get_condition(wl or {}, type_)


def condition_true(wl: Obj | None, type_: str) -> bool:
    c = condition(wl, type_)
    return bool(c and c.get("status") == "True")


def evicted(wl: Obj | None) -> bool:
    """workloadevict.IsEvicted: the Evicted condition is True."""
    return condition_true(wl, "Evicted")


def priority(wl: Obj) -> int:
    """priority.Priority: spec.priority (0 when absent or not a number)."""
    p = (wl.get("spec") or {}).get("priority")
    return p if isinstance(p, int) and not isinstance(p, bool) else 0


def preemption_message(preemptor: Obj, cq_name: str) -> str:
    """preemption.go preemptionMessage for reason InClusterQueue. Without cohorts both paths are
    buildCQPath's "/<clusterqueue>" (the preemptor and its victim share the ClusterQueue)."""
    meta = preemptor.get("metadata") or {}
    uid = meta.get("uid") or "UNKNOWN"
    job_uid = (meta.get("labels") or {}).get(JOB_UID_LABEL) or "UNKNOWN"
    path = f"/{cq_name}" if cq_name else "UNKNOWN"
    return (f"Preempted to accommodate a workload (UID: {uid}, JobUID: {job_uid}) due to "
            f"prioritization in the ClusterQueue; preemptor path: {path}; preemptee path: {path}")


def satisfies_policy(policy: str | None, preemptor: Obj, candidate: Obj) -> bool:
    """common.SatisfiesPreemptionPolicy (SchedulerTimestampPreemptionBuffer off, its default):
    LowerPriority: the candidate's priority is lower; LowerOrNewerEqualPriority: lower, or equal
    and the candidate's queue-order timestamp (its creationTimestamp) is strictly later; Any:
    always; Never (or anything else): never."""
    lower = priority(preemptor) > priority(candidate)
    if policy == "LowerPriority":
        return lower
    if policy == "LowerOrNewerEqualPriority":
        a = _timestamp((preemptor.get("metadata") or {}).get("creationTimestamp"))
        b = _timestamp((candidate.get("metadata") or {}).get("creationTimestamp"))
        return lower or (priority(preemptor) == priority(candidate) and a is not None
                         and b is not None and a < b)
    return policy == "Any"


def _timestamp(text: Any) -> Any:
    from kubesim.controllers._util import parse_time

    return parse_time(text) if isinstance(text, str) else None


def candidates_in_order(candidates: Iterable[Obj]) -> list[Obj]:
    """common.CandidatesOrdering within one ClusterQueue: evicted ones first, then the lowest
    priority, then the most recent quota reservation (the QuotaReserved condition's
    lastTransitionTime), then the UID."""
    def reserved(wl: Obj) -> Any:
        c = condition(wl, "QuotaReserved")
        t = _timestamp(c.get("lastTransitionTime")) if c and c.get("status") == "True" else None
        return t.timestamp() if t is not None else float("inf")  # unset: "now", the newest
    return sorted(candidates, key=lambda w: (not evicted(w), priority(w), -reserved(w),
                                             str((w.get("metadata") or {}).get("uid", ""))))


def admission_usage(wl: Obj) -> dict[str, Resources]:
    """{flavor: {resource: quantity}} a Workload's status.admission reserves."""
    out: dict[str, Resources] = {}
    for psa in ((wl.get("status") or {}).get("admission") or {}).get("podSetAssignments") or []:
        for res, fl in (psa.get("flavors") or {}).items():
            q = parse_quantity((psa.get("resourceUsage") or {}).get(res, 0))
            out.setdefault(fl, {})
            out[fl][res] = out[fl].get(res, Decimal(0)) + q
    return out


def _shift(used: dict[str, Resources], usage: Mapping[str, Mapping[str, Decimal]], sign: int) -> None:
    for fl, res in usage.items():
        acc = used.setdefault(fl, {})
        for r, q in res.items():
            acc[r] = acc.get(r, Decimal(0)) + sign * q


def preemption_targets(cq: Obj, preemptor: Obj, need: Mapping[str, Decimal],
                       used: Mapping[str, Mapping[str, Decimal]], admitted: Iterable[Obj],
                       flavors_exist: Iterable[str] | Mapping[str, Obj] | None = None,
                       pod_spec: Obj | None = None) -> list[Obj]:
    """The workloads of the ClusterQueue `cq` to evict so that `preemptor` (needing `need`) fits
    its nominal quota, as kueue's classicalPreemptions picks them for withinClusterQueue; [] when
    the policy is Never or no such set exists.

    Candidates: the `admitted` workloads (those holding quota in `cq`, already evicted ones
    included) that use a resource the preemptor requests and satisfy the ClusterQueue's
    `spec.preemption.withinClusterQueue` policy (satisfies_policy), in candidates_in_order.
    They are removed one by one from `used` until the preemptor fits (assign_flavors); then,
    from the last but one back to the first, each is given back if the preemptor still fits
    without removing it (fillBackWorkloads)."""
    policy = ((cq.get("spec") or {}).get("preemption") or {}).get("withinClusterQueue") or "Never"
    if policy not in POLICIES or policy == "Never":
        return []
    wanted = {r for r, v in need.items() if v}
    cands = [w for w in admitted
             if w.get("metadata", {}).get("uid") != preemptor.get("metadata", {}).get("uid")
             and any(wanted & set(res) for res in admission_usage(w).values())
             and satisfies_policy(policy, preemptor, w)]
    usage = {fl: dict(res) for fl, res in used.items()}

    def fits() -> bool:
        return assign_flavors(cq, need, usage, flavors_exist, pod_spec)[0] is not None

    targets: list[Obj] = []
    for cand in candidates_in_order(cands):
        _shift(usage, admission_usage(cand), -1)
        targets.append(cand)
        if fits():
            for i in range(len(targets) - 2, -1, -1):
                _shift(usage, admission_usage(targets[i]), 1)
                if fits():
                    del targets[i]
                else:
                    _shift(usage, admission_usage(targets[i]), -1)
            return targets
    return []


def evict_status(status: Obj, message: str, when: str) -> Obj:
    """The victim's status as IssuePreemptions writes it (workloadevict.Evict with
    SetPreemptedCondition as its CustomPrepare): Preempted True reason InClusterQueue, then
    Evicted True reason Preempted, both with `message` (preemption_message)."""
    from kubesim.controllers._util import set_condition

    out = dict(status)
    conds = set_condition(out.get("conditions"), "Preempted", "True", IN_CLUSTER_QUEUE, message, when)
    out["conditions"] = set_condition(conds, "Evicted", "True", EVICTED_BY_PREEMPTION, message, when)
    return out


def requeue_status(status: Obj, when: str) -> Obj:
    """The status jobframework's reconciler writes once an evicted Workload's job has stopped
    (reconciler.go, "handle eviction"): Requeued (True for an eviction by preemption) with the
    Evicted condition's reason and message, then UnsetQuotaReservationWithCondition: QuotaReserved
    False reason Pending (UnadmittedWorkloadsObservability off, its default) with the same
    message, status.admission cleared, and SyncAdmittedCondition's Admitted False reason
    NoReservation "The workload has no reservation"."""
    from kubesim.controllers._util import set_condition

    ev = next((c for c in status.get("conditions") or [] if c.get("type") == "Evicted"), None) or {}
    reason, message = ev.get("reason", ""), ev.get("message", "")
    out = dict(status)
    conds = set_condition(out.get("conditions"), "Requeued",
                          "True" if reason in (EVICTED_BY_PREEMPTION, "NodeFailures") else "False",
                          reason, message, when)
    conds = set_condition(conds, "QuotaReserved", "False", "Pending", message, when)
    out.pop("admission", None)
    if any(c.get("type") == "Admitted" and c.get("status") == "True" for c in conds):
        conds = set_condition(conds, "Admitted", "False", "NoReservation",
                              "The workload has no reservation", when)
    out["conditions"] = conds
    return out


def readmit_conditions(conditions: list[Obj] | None, when: str) -> list[Obj]:
    """SetQuotaReservation's resetActiveCondition: a True Evicted / Preempted condition turns False
    with reason QuotaReserved and message "Previously: <its message>"."""
    from kubesim.controllers._util import set_condition

    conds = list(conditions or [])
    for type_ in ("Evicted", "Preempted"):
        prev = next((c for c in conds if c.get("type") == type_), None)
        if prev and prev.get("status") == "True":
            conds = set_condition(conds, type_, "False", "QuotaReserved",
                                  "Previously: " + prev.get("message", ""), when)
    return conds
