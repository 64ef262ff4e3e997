"""Job controller (batch/v1).

parallelism / completions (NonIndexed and Indexed), backoffLimit (failed pods, plus
container restarts for restartPolicy OnFailure; exceeded -> FailureTarget + Failed
BackoffLimitExceeded and active pods deleted), activeDeadlineSeconds (DeadlineExceeded),
suspend (active pods deleted, Suspended=True; resuming sets Suspended=False JobResumed),
SuccessCriteriaMet + Complete when enough pods succeeded (k8s >= 1.31), completionTime,
ttlSecondsAfterFinished, podFailurePolicy (controllers/podfailure.py: FailJob -> Failed
reason PodFailurePolicy at once, Ignore -> not counted, Count / FailIndex -> counted). Pods: `<job>-<rand5>` (Indexed: `<job>-<index>-<rand5>`, with
the completion-index annotation/label, hostname and JOB_COMPLETION_INDEX), labels
`job-name`, `batch.kubernetes.io/job-name`, `controller-uid`,
`batch.kubernetes.io/controller-uid`. A pod create admission refuses (a ResourceQuota:
resourcequota.py) records the real Warning Event FailedCreate on the Job ("Error creating:
pods "<pod>" is forbidden: ...") and is retried.

Simplified: succeeded/failed are counted from the pods that exist (never decreasing),
not with the job-tracking finalizer; there is no pod failure back-off delay.
"""
from __future__ import annotations

from datetime import timedelta
from typing import Any, Hashable

from kubesim.controllers._util import (delete_pod, condition_true, controller_ref, fmt_time, get_condition,
                                       namespace_terminating, now, owned_pods, parse_time,
                                       pod_active, pod_deleting, pod_from_template, pod_ready,
                                       rand_suffix, record_warning, set_condition, try_get, write_status)
from kubesim.controllers.base import Controller, register
from kubesim.controllers.podfailure import match as pod_failure_match
from kubesim.errors import ApiError

Obj = dict[str, Any]
INDEX_KEY = "batch.kubernetes.io/job-completion-index"


def parse_indexes(text: str | None) -> set[int]:
    out: set[int] = set()
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        try:
            out.update(range(int(lo), int(hi or lo) + 1))
        except ValueError:
            continue
    return out


def format_indexes(indexes: set[int]) -> str:
    parts, run = [], []
    for i in sorted(indexes):
        if run and i == run[-1] + 1:
            run.append(i)
            continue
        if run:
            parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [i]
    if run:
        parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(parts)


def _pod_index(pod: Obj) -> int | None:
    raw = (pod["metadata"].get("annotations") or {}).get(INDEX_KEY) or \
        (pod["metadata"].get("labels") or {}).get(INDEX_KEY)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


@register
class JobController(Controller):
    name = "job"
    watches = ("jobs.batch", "pods")

    def __init__(self, cluster: Any):
        super().__init__(cluster)
        self._refusals: dict[Hashable, int] = {}  # key -> pod creates refused in a row

    async def reconcile(self, key: Hashable) -> float | None:
        ns, name = key  # type: ignore[misc]
        job = try_get(self.api, "jobs.batch", ns, name)
        if job is None or job["metadata"].get("deletionTimestamp"):
            self._refusals.pop(key, None)
            return None
        spec = job.get("spec") or {}
        status = dict(job.get("status") or {})
        t = now(self.cluster)
        when = fmt_time(t)
        pods = owned_pods(self.api, ns, job["metadata"]["uid"])
        active = [p for p in pods if pod_active(p)]
        phase = lambda p: (p.get("status") or {}).get("phase")  # noqa: E731
        succeeded_pods = [p for p in pods if phase(p) == "Succeeded"]
        failed_pods = [p for p in pods if phase(p) == "Failed"]

        if condition_true(job, "Complete") or condition_true(job, "Failed"):
            for p in active:
                delete_pod(self.api, p)
            return self._ttl(job, t)

        indexed = spec.get("completionMode") == "Indexed"
        completions = spec.get("completions")
        completed_idx: set[int] = set()
        if indexed:
            completed_idx = parse_indexes(status.get("completedIndexes"))
            completed_idx.update(i for i in map(_pod_index, succeeded_pods)
                                 if i is not None and (completions is None or i < completions))
            succeeded = len(completed_idx)
        else:
            succeeded = max(status.get("succeeded") or 0, len(succeeded_pods))
        fail_job: str | None = None
        counted = []
        for p in failed_pods:
            hit = pod_failure_match(spec.get("podFailurePolicy"), p)
            if hit and hit[0] == "Ignore":
                continue
            if hit and hit[0] == "FailJob" and fail_job is None:
                fail_job = hit[1]
            counted.append(p)
        failed = max(status.get("failed") or 0, len(counted))
        restarts = 0
        if ((spec.get("template") or {}).get("spec") or {}).get("restartPolicy") == "OnFailure":
            restarts = sum(cs.get("restartCount", 0) for p in active
                           for cs in (p.get("status") or {}).get("containerStatuses") or [])
        conds = status.get("conditions")
        requeue: float | None = None

        def finish(ok: bool, reason: str, message: str) -> None:
            nonlocal conds, failed
            for p in active:
                delete_pod(self.api, p)
            if not ok:  # pods killed because the job failed count as failed, like k8s
                failed += len(active)
            if ok:
                conds = set_condition(conds, "SuccessCriteriaMet", "True", reason, message, when,
                                      probe=True)
                conds = set_condition(conds, "Complete", "True", reason, message, when,
                                      probe=True)
                status["completionTime"] = when
            else:
                conds = set_condition(conds, "FailureTarget", "True", reason, message, when,
                                      probe=True)
                conds = set_condition(conds, "Failed", "True", reason, message, when, probe=True)

        if spec.get("suspend"):
            for p in active:
                delete_pod(self.api, p)
            active = []
            conds = set_condition(conds, "Suspended", "True", "JobSuspended", "Job suspended",
                                  when, probe=True)
            status.pop("startTime", None)
        else:
            if get_condition(job, "Suspended") and condition_true(job, "Suspended"):
                conds = set_condition(conds, "Suspended", "False", "JobResumed", "Job resumed",
                                      when, probe=True)
            status.setdefault("startTime", when)
            start = parse_time(status["startTime"]) or t
            deadline = spec.get("activeDeadlineSeconds")
            complete = (succeeded >= completions) if completions is not None else \
                (succeeded >= 1 and not active)
            if complete:
                finish(True, "CompletionsReached", "Reached expected number of succeeded pods")
                active = []
            elif fail_job is not None:
                finish(False, "PodFailurePolicy", fail_job)
                active = []
            elif failed + restarts > spec.get("backoffLimit", 6):
                finish(False, "BackoffLimitExceeded", "Job has reached the specified backoff limit")
                active = []
            elif deadline is not None and t >= start + timedelta(seconds=deadline):
                finish(False, "DeadlineExceeded", "Job was active longer than specified deadline")
                active = []
            elif not namespace_terminating(self.api, ns):
                requeue = self._scale(job, active, succeeded, completed_idx, indexed)
                if deadline is not None:
                    left = (start + timedelta(seconds=deadline) - t).total_seconds()
                    requeue = min(requeue, left + 0.01) if requeue is not None else left + 0.01
                active = [p for p in owned_pods(self.api, ns, job["metadata"]["uid"])
                          if pod_active(p)]

        status.update({
            "active": len(active),
            "ready": sum(1 for p in active if pod_ready(p)),
            "terminating": sum(1 for p in pods if pod_deleting(p)),
            "succeeded": succeeded,
            "failed": failed,
        })
        if conds:
            status["conditions"] = conds
        if indexed:
            if completed_idx:
                status["completedIndexes"] = format_indexes(completed_idx)
            else:
                status.pop("completedIndexes", None)
        for k in ("active", "succeeded", "failed", "terminating"):
            if not status[k]:
                status.pop(k)
        status.setdefault("uncountedTerminatedPods", {})
        fresh = write_status(self.api, "jobs.batch", job, status)
        if fresh is None:
            return 0.05
        if condition_true(fresh, "Complete") or condition_true(fresh, "Failed"):
            return self._ttl(fresh, t)
        return requeue

    def _scale(self, job: Obj, active: list[Obj], succeeded: int, completed_idx: set[int],
               indexed: bool) -> float | None:
        spec = job.get("spec") or {}
        completions = spec.get("completions")
        parallelism = spec.get("parallelism", 1)
        if completions is None:
            want = parallelism if succeeded == 0 else 0
        else:
            want = max(min(parallelism, completions - succeeded), 0)
        if len(active) > want:
            for p in sorted(active, key=lambda p: (pod_ready(p),
                                                   p["metadata"].get("creationTimestamp", "")))[
                    :len(active) - want]:
                delete_pod(self.api, p)
            return None
        missing = want - len(active)
        if missing <= 0:
            return None
        if indexed:
            running = {_pod_index(p) for p in active}
            todo = [i for i in range(completions or 0) if i not in completed_idx and i not in running]
            indexes: list[int | None] = list(todo[:missing])
        else:
            indexes = [None] * missing
        key = (job["metadata"]["namespace"], job["metadata"]["name"])
        for idx in indexes:
            try:
                # quota admission (resourcequota.py) may refuse it: 403
                self.api.create("pods", self._new_pod(job, idx), namespace=job["metadata"]["namespace"])
            except ApiError as exc:
                if exc.code == 409:
                    return 0.05
                if exc.code == 403 and any(c.get("reason") == "NamespaceTerminating"
                                           for c in exc.details.get("causes") or []):
                    return None
                if exc.code == 403:
                    # controller_utils.go createPods: a Warning Event on the Job, then the Job
                    # controller's rate-limited retries (1 s doubling to 60 s; here 0.5 s to 4 s:
                    # a raised quota is seen soon)
                    record_warning(self.api, self.cluster, job, "batch/v1", "job-controller", "FailedCreate",
                                   f"Error creating: {exc.message}")
                    tries = self._refusals[key] = self._refusals.get(key, 0) + 1
                    return min(0.5 * 2 ** (tries - 1), 4.0)
                return 1.0
        self._refusals.pop(key, None)
        return None

    def _new_pod(self, job: Obj, index: int | None) -> Obj:
        name = job["metadata"]["name"]
        uid = job["metadata"]["uid"]
        labels = {"batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": name,
                  "controller-uid": uid, "job-name": name}
        annotations = {}
        pod_name = f"{name}-{rand_suffix()}"
        if index is not None:
            labels[INDEX_KEY] = str(index)
            annotations[INDEX_KEY] = str(index)
            pod_name = f"{name}-{index}-{rand_suffix()}"
        pod = pod_from_template((job.get("spec") or {}).get("template"), pod_name,
                                job["metadata"]["namespace"], labels,
                                controller_ref(job, "batch/v1", "Job"), annotations)
        if index is not None:
            pod["spec"].setdefault("hostname", f"{name}-{index}")
            env = {"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
                "fieldPath": f"metadata.annotations['{INDEX_KEY}']"}}}
            for c in pod["spec"].get("containers") or []:
                if not any(e.get("name") == "JOB_COMPLETION_INDEX" for e in c.get("env") or []):
                    c["env"] = list(c.get("env") or []) + [env]
        return pod

    def _ttl(self, job: Obj, t) -> float | None:
        ttl = (job.get("spec") or {}).get("ttlSecondsAfterFinished")
        if ttl is None:
            return None
        status = job.get("status") or {}
        cond = get_condition(job, "Complete") if condition_true(job, "Complete") else \
            get_condition(job, "Failed")
        finished = parse_time(status.get("completionTime") or (cond or {}).get("lastTransitionTime"))
        if finished is None:
            return None
        left = (finished + timedelta(seconds=ttl) - t).total_seconds()
        if left > 0:
            return left + 0.01
        try:
            self.api.delete("jobs.batch", job["metadata"]["namespace"], job["metadata"]["name"],
                            propagation_policy="Background",
                            preconditions={"uid": job["metadata"]["uid"]})
        except ApiError as exc:
            if exc.code not in (404, 409):
                raise
        return None
