"""Kueue admission controller (a small, quota-only model of kueue v0.19).

Inert unless the Kueue CRDs are installed (`Cluster(kueue=True)`, `--kueue`).

A StatefulSet labelled `kueue.x-k8s.io/queue-name: <localqueue>` is one gang Workload
(`statefulset-<name>-<hash5>`, owned by the StatefulSet and labelled
`kueue.x-k8s.io/job-uid: <its uid>`, one pod set `main` with count = replicas). A mutator (kueue's pod webhook) gives each new pod of such a set the
scheduling gate `kueue.x-k8s.io/admission` while its Workload is not admitted. The
controller reserves quota in the LocalQueue's ClusterQueue for the whole gang (all or
nothing), highest `spec.priority` first then oldest (queueingStrategy StrictFIFO stops at
the first workload that does not fit, BestEffortFIFO tries the next ones), sets the
QuotaReserved/Admitted conditions and `status.admission`, and removes the gate from the
pods. Pending workloads get QuotaReserved False (reason Pending, or Inadmissible when the
queue does not exist) and the annotation `kubesim.io/queue-position`; the visibility
on-demand API (`visibility.kueue.x-k8s.io` v1beta2 and v1beta1, kubesim/kueue.py
VisibilityApi) serves the same order as PendingWorkloadsSummary. Deleting the
StatefulSet or scaling it to 0 releases the quota; any other change of the pod template recreates
the Workload (queued again). Kueue's StatefulSet webhook (`statefulset_update_errors`) refuses,
as v0.19.2 does, a change of a queued StatefulSet's replicas (N to M) or of its pods' shape
(requests, ports, nodeSelector, affinity, tolerations, ...), and a queue-name change while a
replica is ready. A flavor is only assigned to a pod
set whose nodeSelector agrees with its nodeLabels and whose tolerations cover its nodeTaints
(kueue's flavor assigner; required node affinity is not looked at). Not modelled: cohorts, borrowing
(hence no reclaimWithinCohort / borrowWithinCohort preemption), admission checks, fair sharing,
the Events and metrics of admission and eviction, and nodeSelector injection from the flavor's
nodeLabels (a pod's nodeSelector is immutable here). batch/v1 Jobs: controllers/kueue_job.py
(Finished Workloads hold no quota).

Preemption within a ClusterQueue (Kueue v0.19.2's classical preemption, pkg/scheduler/preemption):
when the head pending workload of a ClusterQueue whose `spec.preemption.withinClusterQueue` is
LowerPriority or LowerOrNewerEqualPriority (Never, the default, preempts nothing) does not fit the
unused nominal quota, and evicting admitted workloads of that ClusterQueue makes it fit, those are
evicted: candidates allowed by the policy (lower priority; or, for LowerOrNewerEqualPriority,
equal priority and created later), lowest priority first, then the most recently admitted, only
as many as needed (kubesim/kueue.py preemption_targets). A victim gets Preempted True reason
InClusterQueue and Evicted True reason Preempted, both with "Preempted to accommodate a workload
(UID: <preemptor>, JobUID: <its job>) due to prioritization in the ClusterQueue; preemptor path:
/<cq>; preemptee path: /<cq>" (preemption.go preemptionMessage). Its job is then stopped (a Job:
controllers/kueue_job.py; a StatefulSet or plain pod: each running pod gets TerminationTarget True
reason WorkloadEvictedDueToPreempted and is deleted, the StatefulSet's re-created pods are gated
again) and once nothing runs its quota is released: Requeued True reason Preempted, QuotaReserved
False reason Pending (both with the eviction message), Admitted False reason NoReservation "The
workload has no reservation", status.admission cleared (jobframework's "handle eviction"). The
preemptor waits meanwhile (QuotaReserved False Pending "... Pending the preemption of N
workload(s)"; the workloads behind it keep their conditions, as Kueue's heap keeps it the head) and
is admitted once the quota is free. A victim re-admitted later has Evicted and Preempted False
reason QuotaReserved "Previously: <message>" (SetQuotaReservation's resetActiveCondition).

Plain pods (kueue's pod integration, ``integrations.frameworks: [pod]``): a pod labelled
`kueue.x-k8s.io/queue-name` itself and not controlled by a StatefulSet or a Job is gated at
creation and is one Workload (`pod-<name>-<hash5>`, owned by the pod, one pod set of 1); its
admission removes the gate; once the pod has ended (Succeeded, Failed) or is being deleted its
Workload is deleted and its quota released (kueue marks it Finished; the quota is the same).
"""
from __future__ import annotations

import itertools
import json
from decimal import Decimal
from typing import Any, Hashable

from kubesim import kueue as kq
from kubesim.controllers._util import (controller_ref, delete_pod, fmt_time,
                                       ignore_not_found, list_readonly, now, safe_encode,
                                       set_condition, template_hash, write_status)
from kubesim.controllers.base import Controller, register
from kubesim.errors import ApiError

Obj = dict[str, Any]
ALL = "all"
STS = "statefulsets.apps"
HASH_ANNOTATION = "kubesim.io/workload-template-hash"


def workload_name(sts: Obj) -> str:
    suffix = safe_encode(sts["metadata"]["uid"].encode(), 5)
    return f"statefulset-{sts['metadata']['name']}-{suffix}"[:253]


def queue_name(sts: Obj) -> str | None:
    return (sts["metadata"].get("labels") or {}).get(kq.QUEUE_LABEL) or None


# Kueue v0.19.2's StatefulSet webhook (pkg/controller/jobs/statefulset/statefulset_webhook.go,
# ValidateUpdate; its name in config/components/webhook/manifests.yaml). kube-apiserver answers
# its denial 403 Forbidden, 'admission webhook "vstatefulset.kb.io" denied the request: <errors>'
# (controller-runtime's Denied of the field.ErrorList's aggregate: one error alone, several
# as "[a, b]"). Not modelled: the priority-class label rule, the AdmissionGatedBy annotation,
# a StatefulSet owned by another framework (LeaderWorkerSet, AppWrapper), Workloads on hold.
STS_WEBHOOK = "vstatefulset.kb.io"
_IMMUTABLE = "field is immutable"
_POD_SHAPE = ("initContainers", "containers", "nodeSelector", "affinity", "tolerations",
              "runtimeClassName", "priority", "topologySpreadConstraints", "overhead",
              "resourceClaims")


def _pod_shape(pod_spec: Obj) -> Obj:
    """kueue's utilpod.SpecShape: what of a pod template Kueue's Workload depends on."""
    shape = {k: pod_spec.get(k) for k in _POD_SHAPE}
    for k in ("initContainers", "containers"):
        shape[k] = [{"resources": {"requests": (c.get("resources") or {}).get("requests")},
                     "ports": c.get("ports")} for c in pod_spec.get(k) or []] or None
    if pod_spec.get("resources") is not None:
        shape["resources"] = (pod_spec.get("resources") or {}).get("requests")
    return shape


def _semantic(value: Any, quantities: bool = False) -> Any:
    """apiequality.Semantic: empty and absent are equal, quantities (of requests, overhead)
    by value."""
    if isinstance(value, dict):
        out = {k: _semantic(v, quantities or k in ("requests", "overhead", "resources"))
               for k, v in value.items()}
        return {k: v for k, v in out.items() if v is not None} or None
    if isinstance(value, list):
        return [_semantic(v) for v in value] or None
    if quantities and isinstance(value, (str, int, float)) and not isinstance(value, bool):
        try:
            return ("quantity", kq.parse_quantity(value))
        except (ValueError, ArithmeticError):
            return value
    return value


def _go_value(value: Any) -> str:
    """field.Error's rendering of a bad value: numbers and bools as they are, a string quoted,
    anything else as JSON (Go's encoding/json: object keys sorted for maps)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _shape_errors(new: Obj, old: Obj, path: str) -> list[str]:
    errs: list[str] = []
    for key in sorted(set(new) | set(old)):
        n, o, child = new.get(key), old.get(key), f"{path}.{key}"
        if key in ("initContainers", "containers") and len(n or []) == len(o or []):
            for i, (nc, oc) in enumerate(zip(n or [], o or [])):
                errs += _shape_errors(nc, oc, f"{child}[{i}]")
        elif key == "resources" and isinstance(n, dict) and isinstance(o, dict) and "requests" in n:
            errs += _shape_errors(n, o, child)
        elif _semantic(n, key in ("requests", "overhead", "resources")) != \
                _semantic(o, key in ("requests", "overhead", "resources")):
            errs.append(f"{child}: Invalid value: {_go_value(n)}: {_IMMUTABLE}")
    return errs


def statefulset_update_errors(old: Obj, new: Obj, workload_exists: bool) -> list[str]:
    """The field errors Kueue v0.19.2's StatefulSet webhook answers an update with (none: allowed).

    The queue-name label may change only while no replica is ready and may not be removed; a
    StatefulSet with a queue name (not being deleted) may not change its pods' shape
    (`_pod_shape`) nor its replicas from N to M (both non-zero); scaling up from 0 waits until
    its pods are gone (`status.replicas` 0) and its old Workload is deleted."""
    errs: list[str] = []
    old_q = (old["metadata"].get("labels") or {}).get(kq.QUEUE_LABEL) or ""
    new_q = (new["metadata"].get("labels") or {}).get(kq.QUEUE_LABEL) or ""
    suspended = not ((old.get("status") or {}).get("readyReplicas") or 0)
    if (not suspended or not new_q) and new_q != old_q:
        errs.append(f"metadata.labels[{kq.QUEUE_LABEL}]: Invalid value: {_go_value(new_q)}: {_IMMUTABLE}")
    if not new_q or new["metadata"].get("deletionTimestamp"):
        return errs
    ospec, nspec = old.get("spec") or {}, new.get("spec") or {}
    errs += _shape_errors(_pod_shape((nspec.get("template") or {}).get("spec") or {}),
                          _pod_shape((ospec.get("template") or {}).get("spec") or {}),
                          "spec.template.spec")
    o_rep, n_rep = ospec.get("replicas", 1), nspec.get("replicas", 1)
    if o_rep and n_rep and o_rep != n_rep:
        errs.append(f"spec.replicas: Invalid value: {_go_value(n_rep)}: {_IMMUTABLE}")
    if not o_rep and n_rep:
        if (new.get("status") or {}).get("replicas"):
            errs.append("spec.replicas: Forbidden: scaling down is still in progress")
        elif workload_exists:
            errs.append("spec.replicas: Forbidden: workload from previous scale-down is still being deleted")
    return errs


FRAMEWORK_KINDS = ("StatefulSet", "Job")  # their pods are queued through their owner


def plain_pod(pod: Obj) -> bool:
    """A pod kueue's pod integration queues on its own: its own queue label, no StatefulSet or
    Job controlling it."""
    meta = pod.get("metadata") or {}
    return bool(queue_name(pod)) and not any(
        r.get("controller") and r.get("kind") in FRAMEWORK_KINDS for r in meta.get("ownerReferences") or [])


def _pod_queued(pod: Obj) -> bool:
    """A plain pod that still needs quota: not ended, not being deleted."""
    return (plain_pod(pod) and not pod["metadata"].get("deletionTimestamp")
            and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"))


def pod_workload_name(pod: Obj) -> str:
    suffix = safe_encode(pod["metadata"]["uid"].encode(), 5)
    return f"pod-{pod['metadata']['name']}-{suffix}"[:253]


def _pod_spec(wl: Obj) -> Obj | None:
    pod_sets = (wl.get("spec") or {}).get("podSets") or []
    return ((pod_sets[0].get("template") or {}).get("spec")) if pod_sets else None


def _finished(wl: Obj) -> bool:
    """A Finished Workload (its Job ended: controllers/kueue_job.py) holds no quota."""
    return any(c.get("type") == "Finished" and c.get("status") == "True"
               for c in (wl.get("status") or {}).get("conditions") or [])


def _admitted(wl: Obj | None) -> bool:
    if not wl:
        return False
    return any(c.get("type") == "Admitted" and c.get("status") == "True"
               for c in (wl.get("status") or {}).get("conditions") or [])


@register
class KueueController(Controller):
    name = "kueue"
    watches = (STS, "pods", kq.WORKLOADS, kq.CLUSTER_QUEUES, kq.LOCAL_QUEUES,
               kq.RESOURCE_FLAVORS, kq.PRIORITY_CLASSES)

    def __init__(self, cluster: Any):
        super().__init__(cluster)
        self._seq: dict[str, int] = {}
        self._counter = itertools.count()
        self.api.add_mutator(self._gate_pod)
        self.api.add_update_validator(self._validate_statefulset_update)
        server = getattr(cluster, "server", None)
        if server is not None:
            server.add_aggregated(kq.VisibilityApi(self.api, self.pending_workloads))

    # -- pod "webhook" --------------------------------------------------------------
    def _gate_pod(self, rt: Any, pod: Obj) -> None:
        if rt.key != "pods" or not kq.installed(self.api):
            return
        meta = pod.get("metadata") or {}
        if plain_pod(pod):  # a new pod: no Workload yet, so never admitted
            self._add_gate(pod)
            return
        ref = next((r for r in meta.get("ownerReferences") or []
                    if r.get("kind") == "StatefulSet" and r.get("controller")), None)
        if ref is None:
            return
        try:
            sts = self.api.get(STS, meta.get("namespace"), ref["name"], copy_=False)
        except ApiError:
            return
        if sts["metadata"].get("uid") != ref.get("uid") or not queue_name(sts):
            return
        try:
            wl = self.api.get(kq.WORKLOADS, meta.get("namespace"), workload_name(sts),
                              copy_=False)
        except ApiError:
            wl = None
        if _admitted(wl) and not kq.evicted(wl):
            return
        self._add_gate(pod)

    # -- the StatefulSet "webhook" (vstatefulset.kb.io) -------------------------------------
    def _validate_statefulset_update(self, rt: Any, old: Obj, new: Obj) -> None:
        if rt.key != STS or not kq.installed(self.api):
            return
        errs = statefulset_update_errors(old, new, self._workload_exists(old))
        if errs:
            raise ApiError(403, f'admission webhook "{STS_WEBHOOK}" denied the request: '
                           + (errs[0] if len(errs) == 1 else "[" + ", ".join(errs) + "]"),
                           "Forbidden")

    def _workload_exists(self, sts: Obj) -> bool:
        try:
            self.api.get(kq.WORKLOADS, sts["metadata"].get("namespace"), workload_name(sts),
                         copy_=False)
        except ApiError:
            return False
        return True

    @staticmethod
    def _add_gate(pod: Obj) -> None:
        spec = pod.setdefault("spec", {})
        gates = list(spec.get("schedulingGates") or [])
        names = {g.get("name") for g in gates}
        spec["schedulingGates"] = gates + [{"name": n} for n in (kq.ADMISSION_GATE, kq.TOPOLOGY_GATE) if n not in names]

    # -- events -----------------------------------------------------------------------
    def initial_keys(self):
        return [ALL] if kq.installed(self.api) else []

    def on_event(self, event_type: str, resource: str, obj: Obj, old: Obj | None) -> None:
        if resource not in self.watches or not kq.installed(self.api):
            return
        if resource == "pods":
            gates = (obj.get("spec") or {}).get("schedulingGates") or []
            if not plain_pod(obj) and (event_type == "DELETED" or not any(
                    g.get("name") == kq.ADMISSION_GATE for g in gates)):
                return
        elif resource == STS:
            if not (queue_name(obj) or (old and queue_name(old))):
                return
        self.enqueue(ALL)

    # -- reconcile --------------------------------------------------------------------
    async def reconcile(self, key: Hashable) -> float | None:
        if not kq.installed(self.api):
            return None
        t = fmt_time(now(self.cluster))
        retry = self._sync_workloads()
        self._stop_evicted(t)
        flavors = {f["metadata"]["name"]: f for f in list_readonly(self.api, kq.RESOURCE_FLAVORS)}
        cqs = {c["metadata"]["name"]: c for c in list_readonly(self.api, kq.CLUSTER_QUEUES)}
        lqs = {(q["metadata"]["namespace"], q["metadata"]["name"]): q
               for q in list_readonly(self.api, kq.LOCAL_QUEUES)}
        wls = [w for w in list_readonly(self.api, kq.WORKLOADS) if not _finished(w)]

        used: dict[str, dict[str, dict[str, Decimal]]] = {}       # cq -> flavor -> res -> qty
        lq_used: dict[tuple, dict[str, dict[str, Decimal]]] = {}
        admitted_in: dict[str, list[Obj]] = {}
        for wl in wls:
            self._seq.setdefault(wl["metadata"]["uid"], next(self._counter))
            ns = wl["metadata"]["namespace"]
            adm = (wl.get("status") or {}).get("admission")
            if adm and _admitted(wl):
                cq = adm.get("clusterQueue", "")
                admitted_in.setdefault(cq, []).append(wl)
                for psa in adm.get("podSetAssignments") or []:
                    for res, fl in (psa.get("flavors") or {}).items():
                        q = kq.parse_quantity((psa.get("resourceUsage") or {}).get(res, 0))
                        for acc in (used.setdefault(cq, {}),
                                    lq_used.setdefault((ns, wl["spec"].get("queueName")), {})):
                            acc.setdefault(fl, {})
                            acc[fl][res] = acc[fl].get(res, Decimal(0)) + q
        pending = self._pending_by_cq(wls, lqs, cqs)

        live = {w["metadata"]["uid"] for w in wls}
        self._seq = {u: s for u, s in self._seq.items() if u in live}

        # workloads without a (Local/Cluster)Queue
        for wl in pending.pop(None, []):
            lq_name = (wl.get("spec") or {}).get("queueName")
            lq = lqs.get((wl["metadata"]["namespace"], lq_name))
            msg = (f"LocalQueue {lq_name} doesn't exist" if lq is None else
                   f"ClusterQueue {lq['spec'].get('clusterQueue')} doesn't exist")
            self._set_pending(wl, "Inadmissible", msg, None, t)

        pending_count: dict[str, int] = {}
        for cq_name, cq in cqs.items():
            queue = sorted(pending.get(cq_name, []), key=self._order)
            strict = (cq.get("spec") or {}).get("queueingStrategy") == "StrictFIFO"
            stopped = (cq.get("spec") or {}).get("stopPolicy", "None") != "None"
            cq_used = used.setdefault(cq_name, {})
            blocked = stopped
            preempting = False
            position = 0
            for wl in queue:
                need = kq.workload_requests(wl)
                assignment, why = (None, "ClusterQueue is stopped") if stopped else \
                    (None, "blocked by an earlier workload (StrictFIFO)") if blocked else \
                    kq.assign_flavors(cq, need, cq_used, flavors, _pod_spec(wl))
                if preempting:  # kueue: the preemptor stays the head; the rest wait unseen
                    position += 1
                    self._set_pending(wl, None, "", position, t)
                    continue
                if assignment is None:
                    message = f"couldn't assign flavors to pod set main: {why}"
                    targets = [] if (stopped or blocked) else kq.preemption_targets(
                        cq, wl, need, cq_used, admitted_in.get(cq_name, []), flavors,
                        _pod_spec(wl))
                    if targets:
                        preempting = True
                        for victim in targets:
                            if not kq.evicted(victim):
                                self._evict(victim, wl, cq_name, t)
                        message += f". Pending the preemption of {len(targets)} workload(s)"
                    elif strict:
                        blocked = True
                    position += 1
                    self._set_pending(wl, "Pending", message, position, t)
                    continue
                for res, fl in assignment.items():
                    cq_used.setdefault(fl, {})
                    cq_used[fl][res] = cq_used[fl].get(res, Decimal(0)) + need[res]
                    acc = lq_used.setdefault((wl["metadata"]["namespace"],
                                              wl["spec"].get("queueName")), {})
                    acc.setdefault(fl, {})
                    acc[fl][res] = acc[fl].get(res, Decimal(0)) + need[res]
                if self._admit(wl, cq_name, assignment, need, t) is None:
                    retry = 0.05
                else:
                    admitted_in.setdefault(cq_name, []).append(wl)
            pending_count[cq_name] = position
            missing = sorted({f["name"] for rg in (cq.get("spec") or {}).get("resourceGroups")
                              or [] for f in rg.get("flavors") or []} - set(flavors))
            self._cq_status(cq, cq_used, position, len(admitted_in.get(cq_name, [])),
                            missing, t)

        for (ns, name), lq in lqs.items():
            cq_name = (lq.get("spec") or {}).get("clusterQueue")
            mine = [w for w in wls if w["metadata"]["namespace"] == ns
                    and (w.get("spec") or {}).get("queueName") == name]
            n_adm = sum(1 for w in mine if _admitted(self._fresh(w)))
            self._lq_status(lq, cqs.get(cq_name), lq_used.get((ns, name), {}),
                            len(mine) - n_adm, n_adm, t)

        self._ungate_admitted()
        return retry

    @staticmethod
    def _pending_by_cq(wls: list[Obj], lqs: dict[tuple, Obj], cqs: dict[str, Obj]
                       ) -> dict[str | None, list[Obj]]:
        """Active, not admitted workloads by ClusterQueue (None: no such Local/ClusterQueue)."""
        pending: dict[str | None, list[Obj]] = {}
        for wl in wls:
            if (((wl.get("status") or {}).get("admission") and _admitted(wl))
                    or (wl.get("spec") or {}).get("active") is False):
                continue
            lq = lqs.get((wl["metadata"]["namespace"], (wl.get("spec") or {}).get("queueName")))
            cq_name = ((lq or {}).get("spec") or {}).get("clusterQueue")
            pending.setdefault(cq_name if cq_name in cqs else None, []).append(wl)
        return pending

    def pending_workloads(self, cq_name: str) -> list[Obj]:
        """The pending workloads of a ClusterQueue in admission order (the visibility API)."""
        if not kq.installed(self.api):
            return []
        cqs = {c["metadata"]["name"]: c for c in list_readonly(self.api, kq.CLUSTER_QUEUES)}
        lqs = {(q["metadata"]["namespace"], q["metadata"]["name"]): q
               for q in list_readonly(self.api, kq.LOCAL_QUEUES)}
        wls = [w for w in list_readonly(self.api, kq.WORKLOADS) if not _finished(w)]
        queue = self._pending_by_cq(wls, lqs, cqs).get(cq_name, [])
        for wl in queue:
            self._seq.setdefault(wl["metadata"]["uid"], next(self._counter))
        return sorted(queue, key=self._order)

    def _order(self, wl: Obj) -> tuple:
        return (-((wl.get("spec") or {}).get("priority") or 0),
                wl["metadata"].get("creationTimestamp", ""),
                self._seq.get(wl["metadata"]["uid"], 0))

    def _fresh(self, wl: Obj) -> Obj | None:
        try:
            return self.api.get(kq.WORKLOADS, wl["metadata"]["namespace"],
                                wl["metadata"]["name"], copy_=False)
        except ApiError:
            return None

    # -- eviction of pod groups and plain pods (kueue's pod integration) ---------------------
    def _stop_evicted(self, t: str) -> None:
        """Stop the pods of an evicted Workload that still holds quota, as Kueue's pod integration
        does (pkg/controller/jobs/pod Stop): each pod neither gated nor ended nor being deleted
        gets the status condition TerminationTarget True (reason WorkloadEvictedDueTo<Evicted's
        reason>, the Evicted message) and is deleted. Once none of its pods is Running the quota
        is released (kq.requeue_status). A StatefulSet re-creates its pods, which the pod webhook
        gates again until the Workload is re-admitted; a plain pod's Workload goes with its pod."""
        for wl in list_readonly(self.api, kq.WORKLOADS):
            if not kq.evicted(wl) or not kq.condition_true(wl, "QuotaReserved") or _finished(wl):
                continue
            owner = next((r for r in wl["metadata"].get("ownerReferences") or []
                          if r.get("controller") and r.get("kind") in ("StatefulSet", "Pod")), None)
            if owner is None:
                continue  # a Job: controllers/kueue_job.py stops it
            ns = wl["metadata"]["namespace"]
            ev = kq.condition(wl, "Evicted") or {}
            def owned(p: Obj, uid: Any = owner.get("uid")) -> bool:
                return p["metadata"].get("uid") == uid or any(
                    r.get("controller") and r.get("uid") == uid
                    for r in p["metadata"].get("ownerReferences") or [])
            for pod in [p for p in list_readonly(self.api, "pods", ns) if owned(p)]:
                gated = any(g.get("name") == kq.ADMISSION_GATE
                            for g in (pod.get("spec") or {}).get("schedulingGates") or [])
                if (pod["metadata"].get("deletionTimestamp") or gated
                        or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")):
                    continue
                status = dict(pod.get("status") or {})
                status["conditions"] = set_condition(
                    status.get("conditions"), "TerminationTarget", "True",
                    f"WorkloadEvictedDueTo{ev.get('reason', '')}", ev.get("message", ""), t)
                if write_status(self.api, "pods", pod, status) is not None:
                    delete_pod(self.api, pod)
            running = any((p.get("status") or {}).get("phase") == "Running"
                          for p in list_readonly(self.api, "pods", ns) if owned(p))
            if not running:
                fresh = self._fresh(wl)
                if fresh is not None and kq.condition_true(fresh, "QuotaReserved"):
                    if write_status(self.api, kq.WORKLOADS, fresh,
                                    kq.requeue_status(dict(fresh.get("status") or {}), t)) is None:
                        self.enqueue_after(ALL, 0.05)
            else:
                self.enqueue_after(ALL, 0.1)

    # -- workloads for StatefulSets -------------------------------------------------------
    def _sync_workloads(self) -> float | None:
        retry = None
        stses = {s["metadata"]["uid"]: s for s in list_readonly(self.api, STS)}
        wanted: dict[str, Obj] = {}
        for uid, sts in stses.items():
            if (queue_name(sts) and not sts["metadata"].get("deletionTimestamp")
                    and (sts.get("spec") or {}).get("replicas", 1) > 0):
                wanted[uid] = self._desired_workload(sts)
        for pod in list_readonly(self.api, "pods"):
            if _pod_queued(pod):
                wanted[pod["metadata"]["uid"]] = self._desired_pod_workload(pod)
        seen: set[str] = set()
        for wl in list_readonly(self.api, kq.WORKLOADS):
            owner = next((r.get("uid") for r in wl["metadata"].get("ownerReferences") or []
                          if r.get("kind") in ("StatefulSet", "Pod") and r.get("controller")), None)
            if owner is None:
                continue  # created by someone else: just queued
            want = wanted.get(owner)
            if (want is None or want["metadata"]["name"] != wl["metadata"]["name"]
                    or (wl["metadata"].get("annotations") or {}).get(HASH_ANNOTATION)
                    != want["metadata"]["annotations"][HASH_ANNOTATION]):
                ignore_not_found(self.api.delete, kq.WORKLOADS, wl["metadata"]["namespace"],
                                 wl["metadata"]["name"])
                continue
            seen.add(owner)
        for uid, want in wanted.items():
            if uid in seen:
                continue
            try:
                self.api.create(kq.WORKLOADS, want, namespace=want["metadata"]["namespace"])
            except ApiError as exc:
                if exc.code != 409:
                    raise
                retry = 0.05  # the old one (same name) is still being removed
        return retry

    def _desired_workload(self, sts: Obj) -> Obj:
        spec = sts.get("spec") or {}
        template = spec.get("template") or {}
        labels = sts["metadata"].get("labels") or {}
        wspec: Obj = {"queueName": queue_name(sts), "priority": 0, "active": True,
                      "podSets": [{"name": "main", "count": spec.get("replicas", 1),
                                   "template": {"metadata": {k: v for k, v in (
                                       template.get("metadata") or {}).items()
                                       if k in ("labels", "annotations")}},
                                   }]}
        wspec["podSets"][0]["template"]["spec"] = template.get("spec") or {"containers": []}
        pc = labels.get(kq.PRIORITY_LABEL)
        if pc:
            try:
                wpc = self.api.get(kq.PRIORITY_CLASSES, None, pc, copy_=False)
                wspec["priority"] = wpc.get("value", 0)
                wspec["priorityClassRef"] = {"group": kq.GROUP, "kind": "WorkloadPriorityClass",
                                             "name": pc}
            except ApiError:
                pass
        h = template_hash([wspec, pc or ""])
        return {"apiVersion": kq.API_VERSION, "kind": "Workload",
                "metadata": {"name": workload_name(sts),
                             "namespace": sts["metadata"]["namespace"],
                             "labels": {kq.QUEUE_LABEL: queue_name(sts),
                                        kq.JOB_UID_LABEL: sts["metadata"]["uid"]},
                             "annotations": {HASH_ANNOTATION: h},
                             "ownerReferences": [controller_ref(sts, "apps/v1", "StatefulSet")]},
                "spec": wspec}

    def _desired_pod_workload(self, pod: Obj) -> Obj:
        """A plain pod's Workload: one pod set of one, the pod's spec (without its gates)."""
        meta = pod["metadata"]
        spec = {k: v for k, v in (pod.get("spec") or {}).items() if k != "schedulingGates"}
        wspec: Obj = {"queueName": queue_name(pod), "priority": 0, "active": True,
                      "podSets": [{"name": "main", "count": 1, "template": {
                          "metadata": {"labels": dict(meta.get("labels") or {})}, "spec": spec}}]}
        return {"apiVersion": kq.API_VERSION, "kind": "Workload",
                "metadata": {"name": pod_workload_name(pod), "namespace": meta["namespace"],
                             "labels": {kq.QUEUE_LABEL: queue_name(pod), kq.JOB_UID_LABEL: meta["uid"]},
                             "annotations": {HASH_ANNOTATION: template_hash([wspec, ""])},
                             "ownerReferences": [controller_ref(pod, "v1", "Pod")]},
                "spec": wspec}

    # -- status writes --------------------------------------------------------------------
    def _set_pending(self, wl: Obj, reason: str | None, message: str, position: int | None,
                     t: str) -> None:
        """Set the queue position annotation and, unless `reason` is None, QuotaReserved False."""
        ann = wl["metadata"].get("annotations") or {}
        want = str(position) if position is not None else None
        if ann.get(kq.POSITION_ANNOTATION) != want:
            new = dict(wl)
            new["metadata"] = dict(wl["metadata"])
            ann = dict(ann)
            if want is None:
                ann.pop(kq.POSITION_ANNOTATION, None)
            else:
                ann[kq.POSITION_ANNOTATION] = want
            new["metadata"]["annotations"] = ann
            try:
                wl = self.api.update(kq.WORKLOADS, new, namespace=wl["metadata"]["namespace"])
            except ApiError as exc:
                if exc.code in (404, 409):
                    self.enqueue_after(ALL, 0.05)
                    return
                raise
        if reason is None:
            return
        status = dict(wl.get("status") or {})
        status["conditions"] = set_condition(status.get("conditions"), "QuotaReserved",
                                             "False", reason, message, t)
        if write_status(self.api, kq.WORKLOADS, wl, status) is None:
            self.enqueue_after(ALL, 0.05)

    def _admit(self, wl: Obj, cq_name: str, assignment: dict[str, str],
               need: dict[str, Decimal], t: str) -> Obj | None:
        ann = dict(wl["metadata"].get("annotations") or {})
        if kq.POSITION_ANNOTATION in ann:
            ann.pop(kq.POSITION_ANNOTATION)
            new = dict(wl)
            new["metadata"] = dict(wl["metadata"], annotations=ann)
            try:
                wl = self.api.update(kq.WORKLOADS, new, namespace=wl["metadata"]["namespace"])
            except ApiError as exc:
                if exc.code in (404, 409):
                    return None
                raise
        status = dict(wl.get("status") or {})
        ps = (wl["spec"].get("podSets") or [{}])[0]
        status["admission"] = {"clusterQueue": cq_name, "podSetAssignments": [{
            "name": ps.get("name", "main"), "count": ps.get("count", 1),
            "flavors": dict(assignment),
            "resourceUsage": {r: kq.format_quantity(need[r], r) for r in assignment}}]}
        conds = set_condition(status.get("conditions"), "QuotaReserved", "True",
                              "QuotaReserved", f"Quota reserved in ClusterQueue {cq_name}", t)
        conds = kq.readmit_conditions(conds, t)
        status["conditions"] = set_condition(conds, "Admitted", "True", "Admitted",
                                             "The workload is admitted", t)
        return write_status(self.api, kq.WORKLOADS, wl, status)

    def _evict(self, victim: Obj, preemptor: Obj, cq_name: str, t: str) -> None:
        """IssuePreemptions: mark `victim` Preempted and Evicted; its job is stopped by its
        integration (controllers/kueue_job.py for a Job, _stop_evicted for pods)."""
        fresh = self._fresh(victim)
        if fresh is None or kq.evicted(fresh):
            return
        status = kq.evict_status(dict(fresh.get("status") or {}),
                                 kq.preemption_message(preemptor, cq_name), t)
        if write_status(self.api, kq.WORKLOADS, fresh, status) is None:
            self.enqueue_after(ALL, 0.05)

    def _cq_status(self, cq: Obj, used: dict, pending: int, admitted: int,
                   missing_flavors: list[str], t: str) -> None:
        status = dict(cq.get("status") or {})
        usage = kq.flavor_usage(cq, used)
        status.update({"flavorsReservation": usage, "flavorsUsage": usage,
                       "pendingWorkloads": pending, "reservingWorkloads": admitted,
                       "admittedWorkloads": admitted})
        if missing_flavors:
            cond = ("False", "FlavorNotFound",
                    f"Can't admit new workloads: references missing ResourceFlavor(s): "
                    f"{', '.join(missing_flavors)}.")
        else:
            cond = ("True", "Ready", "Can admit new workloads")
        status["conditions"] = set_condition(status.get("conditions"), "Active", *cond, when=t)
        write_status(self.api, kq.CLUSTER_QUEUES, cq, status)

    def _lq_status(self, lq: Obj, cq: Obj | None, used: dict, pending: int, admitted: int,
                   t: str) -> None:
        status = dict(lq.get("status") or {})
        usage = kq.flavor_usage(cq, used, borrowed=False) if cq else []
        status.update({"flavorsReservation": usage, "flavorsUsage": usage,
                       "pendingWorkloads": pending, "reservingWorkloads": admitted,
                       "admittedWorkloads": admitted})
        cond = (("True", "Ready", "Can submit new workloads to localQueue") if cq else
                ("False", "ClusterQueueDoesNotExist", "Can't submit new workloads to "
                 "clusterQueue"))
        status["conditions"] = set_condition(status.get("conditions"), "Active", *cond, when=t)
        write_status(self.api, kq.LOCAL_QUEUES, lq, status)

    # -- pods -------------------------------------------------------------------------------
    def _ungate_admitted(self) -> None:
        gated = [p for p in list_readonly(self.api, "pods")
                 if any(g.get("name") == kq.ADMISSION_GATE
                        for g in (p.get("spec") or {}).get("schedulingGates") or [])]
        if not gated:
            return
        release = {r.get("uid") for wl in list_readonly(self.api, kq.WORKLOADS)
                   if _admitted(wl) and not kq.evicted(wl)
                   for r in wl["metadata"].get("ownerReferences") or [] if r.get("controller")}
        # a StatefulSet that left its queue releases its pods too
        release |= {s["metadata"]["uid"] for s in list_readonly(self.api, STS)
                    if not queue_name(s)}
        for pod in gated:
            owner = pod["metadata"]["uid"] if plain_pod(pod) else next(
                (r.get("uid") for r in pod["metadata"].get("ownerReferences") or [] if r.get("controller")), None)
            if owner not in release:
                continue
            new = dict(pod)
            new["spec"] = dict(pod["spec"])
            rest = [g for g in pod["spec"]["schedulingGates"]
                    if g.get("name") not in (kq.ADMISSION_GATE, kq.TOPOLOGY_GATE)]
            if rest:
                new["spec"]["schedulingGates"] = rest
            else:
                new["spec"].pop("schedulingGates")
            try:
                self.api.update("pods", new, namespace=pod["metadata"]["namespace"])
            except ApiError as exc:
                if exc.code not in (404, 409):
                    raise
                self.enqueue_after(ALL, 0.05)
