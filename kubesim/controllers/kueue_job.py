"""Kueue's batch/v1 Job integration (kueue v0.19 jobframework, quota-only like
kubesim/controllers/kueue.py, whose admission loop does the queueing).

* Webhook: a Job created with the label `kueue.x-k8s.io/queue-name` (Kueue installed) is
  created suspended (`spec.suspend: true`).
* One Workload per such Job, `job-<name>-<hash5>` (owned by the Job, labelled
  `kueue.x-k8s.io/job-uid`), one pod set `main` with count = parallelism and the Job's pod
  template; the Job's `kueue.x-k8s.io/priority-class` label sets the priority.
* Admission (the Workload's Admitted condition) unsuspends the Job.
* A finished Job (Complete or Failed) marks its Workload `Finished` (reason Succeeded or
  Failed): kubesim's Kueue admission no longer counts it, the quota is released. Deleting
  the Job deletes the Workload (ownerReference) and releases the quota too.

* Eviction (preemption: controllers/kueue.py): the Job is suspended (batch/v1 Job's Stop; the
  Job controller deletes its active pods and sets Suspended True reason JobSuspended); once its
  `status.active` is 0 the Workload's quota is released (Requeued True, QuotaReserved False
  Pending, Admitted False NoReservation, `status.admission` cleared: kubesim/kueue.py
  requeue_status). Re-admission unsuspends it again. Kueue's RestorePodSetsInfo has nothing to
  undo here, as nothing is injected into the template at admission.

Not modelled: partial admission, nodeSelector injection from the ResourceFlavor, re-queueing
of a Job suspended after admission by its owner (Kueue's `spec.active: false` is how a Workload
is deactivated), the `kueue.x-k8s.io/job-min-parallelism` annotation, the Job's transient
`kueue.x-k8s.io/stopping` annotation and its "Stopped" Event.
"""
from __future__ import annotations

from typing import Any, Hashable

from kubesim import kueue as kq
from kubesim.controllers._util import (condition_true, controller_ref, fmt_time, ignore_not_found,
                                       list_readonly, now, safe_encode, set_condition, try_get,
                                       write_status)
from kubesim.controllers.base import Controller, register
from kubesim.errors import ApiError

Obj = dict[str, Any]
JOBS = "jobs.batch"


def workload_name(job: Obj) -> str:
    suffix = safe_encode(job["metadata"]["uid"].encode(), 5)
    return f"job-{job['metadata']['name']}-{suffix}"[:253]


def queue_name(job: Obj) -> str | None:
    return (job["metadata"].get("labels") or {}).get(kq.QUEUE_LABEL) or None


def finished(job: Obj) -> str | None:
    """Succeeded / Failed for a finished Job, else None."""
    if condition_true(job, "Complete"):
        return "Succeeded"
    if condition_true(job, "Failed"):
        return "Failed"
    return None


def workload_finished(wl: Obj) -> bool:
    return any(c.get("type") == "Finished" and c.get("status") == "True"
               for c in (wl.get("status") or {}).get("conditions") or [])


def _admitted(wl: Obj | None) -> bool:
    return bool(wl) and any(c.get("type") == "Admitted" and c.get("status") == "True"
                            for c in (wl.get("status") or {}).get("conditions") or [])


@register
class KueueJobController(Controller):
    name = "kueue-job"
    watches = (JOBS, kq.WORKLOADS)

    def __init__(self, cluster: Any):
        super().__init__(cluster)
        self.api.add_mutator(self._suspend_new_job)

    # -- the Job "webhook" ------------------------------------------------------------
    def _suspend_new_job(self, rt: Any, job: Obj) -> None:
        if rt.key != JOBS or not kq.installed(self.api) or not queue_name(job):
            return
        job.setdefault("spec", {})["suspend"] = True

    def initial_keys(self):
        return super().initial_keys() if kq.installed(self.api) else []

    def keys_for(self, resource: str, obj: Obj):
        if resource == kq.WORKLOADS:
            ref = next((r for r in obj["metadata"].get("ownerReferences") or []
                        if r.get("kind") == "Job" and r.get("controller")), None)
            return [(obj["metadata"].get("namespace", ""), ref["name"])] if ref else []
        return super().keys_for(resource, obj)

    # -- reconcile ------------------------------------------------------------------------
    async def reconcile(self, key: Hashable) -> float | None:
        if not kq.installed(self.api):
            return None
        ns, name = key  # type: ignore[misc]
        job = try_get(self.api, JOBS, ns, name)
        if job is None or job["metadata"].get("deletionTimestamp") or not queue_name(job):
            return None
        wl = try_get(self.api, kq.WORKLOADS, ns, workload_name(job))
        if wl is None:
            if finished(job):
                return None
            try:
                self.api.create(kq.WORKLOADS, self._desired_workload(job), namespace=ns)
            except ApiError as exc:
                if exc.code != 409:
                    raise
                return 0.05
            return None
        done = finished(job)
        if done:
            if not workload_finished(wl):
                status = dict(wl.get("status") or {})
                status["conditions"] = set_condition(
                    status.get("conditions"), "Finished", "True", done,
                    "Job finished successfully" if done == "Succeeded" else "Job failed",
                    fmt_time(now(self.cluster)))
                if write_status(self.api, kq.WORKLOADS, wl, status) is None:
                    return 0.05
            return None
        if kq.evicted(wl):
            return self._stop(job, wl)
        if _admitted(wl) and (job.get("spec") or {}).get("suspend"):
            try:
                self.api.patch(JOBS, ns, name, {"spec": {"suspend": False}})
            except ApiError as exc:
                if exc.code != 404:
                    raise
        return None

    def _stop(self, job: Obj, wl: Obj) -> float | None:
        """jobframework's "handle eviction": suspend the Job (batch/v1 Job's Stop); once it has
        no active pods (`status.active` 0, after the Job controller deleted them) release the
        quota (kq.requeue_status)."""
        ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
        if not (job.get("spec") or {}).get("suspend"):
            try:
                job = self.api.patch(JOBS, ns, name, {"spec": {"suspend": True}})
            except ApiError as exc:
                if exc.code != 404:
                    raise
                return None
        if kq.condition_true(wl, "QuotaReserved") and not (job.get("status") or {}).get("active"):
            status = kq.requeue_status(dict(wl.get("status") or {}), fmt_time(now(self.cluster)))
            if write_status(self.api, kq.WORKLOADS, wl, status) is None:
                return 0.05
        return None

    def _desired_workload(self, job: Obj) -> Obj:
        spec = job.get("spec") or {}
        template = spec.get("template") or {}
        labels = job["metadata"].get("labels") or {}
        wspec: Obj = {"queueName": queue_name(job), "priority": 0, "active": True,
                      "podSets": [{"name": "main", "count": spec.get("parallelism", 1),
                                   "template": {"metadata": {k: v for k, v in (
                                       template.get("metadata") or {}).items()
                                       if k in ("labels", "annotations")},
                                       "spec": template.get("spec") or {"containers": []}}}]}
        pc = labels.get(kq.PRIORITY_LABEL)
        if pc:
            wpc = ignore_not_found(self.api.get, kq.PRIORITY_CLASSES, None, pc)
            if wpc is not None:
                wspec["priority"] = wpc.get("value", 0)
                wspec["priorityClassRef"] = {"group": kq.GROUP, "kind": "WorkloadPriorityClass",
                                             "name": pc}
        return {"apiVersion": kq.API_VERSION, "kind": "Workload",
                "metadata": {"name": workload_name(job), "namespace": job["metadata"]["namespace"],
                             "labels": {kq.QUEUE_LABEL: queue_name(job),
                                        kq.JOB_UID_LABEL: job["metadata"]["uid"]},
                             "ownerReferences": [controller_ref(job, "batch/v1", "Job")]},
                "spec": wspec}


def active_workloads(api: Any) -> list[Obj]:
    """Workloads that still hold or wait for quota (not Finished)."""
    return [w for w in list_readonly(api, kq.WORKLOADS) if not workload_finished(w)]
