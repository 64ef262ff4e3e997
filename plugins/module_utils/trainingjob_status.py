# -*- coding: utf-8 -*-
# Apache-2.0
"""TrainingJob: what the run does next and the status (plugins/filter/trainingjob.py).

``decide(tj, job, pods, now, backoff_base)`` runs before rendering: it says whether the
Job of the current attempt should exist (``run``) and carries the operator's status
fields.  The lifecycle:

* ``spec.suspend`` -> Suspended: the Job is removed (pods, Kueue quota); resuming creates a
  new one that resumes from the newest checkpoint.
* no Job yet -> Pending (created now); a Job Kueue has not admitted (suspended) -> Queued;
  workers starting -> Initializing; all workers ready -> Running.
* the Job Complete -> Completed, reason the library's ``status.result.reason``
  (AllEpochsCompleted, TargetAccuracyReached, EarlyStopped) else JobComplete.
* the Job Failed (its podFailurePolicy fails it at the first failed worker):
  a worker exit code in TRAINING_PERMANENT_EXIT_CODES -> Failed PermanentFailure at once;
  the Job's own DeadlineExceeded -> Failed DeadlineExceeded; restartPolicy Never ->
  Failed WorkerFailed; restarts left (restartCount < backoffLimit) -> Restarting: the Job
  is removed, restartCount + 1, and after ``backoff_base * 2^(restarts-1)`` seconds (at most
  300) a new Job (attempt = restartCount) starts, resuming from the newest checkpoint;
  else Failed BackoffLimitExceeded.
* a worker that cannot pull its image (ErrImagePull, ImagePullBackOff, InvalidImageName)
  -> Failed ImagePullFailed at once (the Job is removed).
* ``failurePolicy.activeDeadlineSeconds`` past ``status.startTime`` (the first time a Job
  ran; Kueue queueing does not count, suspension does) -> Failed DeadlineExceeded, the Job
  removed.  The deadline is a per-object requeue (``requeue``), never polling.
* Pending, Initializing and Running look again after ``watch_period`` (2 s while starting):
  the Job's progress is in its status, which does not reconcile its owner (status-only
  updates of dependents are filtered, as in ansible-operator); Queued needs no look (Kueue's
  admission unsuspends the Job: a spec change, a reconcile).
* Completed and Failed are final: the finished Job is kept (its pods' logs) until
  ``ttlSecondsAfterFinished`` (the Job's own), never re-created.

``status(tj, decision, job, queue)`` is the status the operator writes: only its own fields
(never the library's: TRAINING_LIBRARY_STATUS_FIELDS, field manager torchdev-train).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from datetime import datetime, timedelta

from ansible_collections.torchdev.operator.plugins.module_utils.constants import (
    TRAINING_LIBRARY_STATUS_FIELDS, TRAINING_PERMANENT_EXIT_CODES)
from ansible_collections.torchdev.operator.plugins.module_utils.kueue import queue_problem
from ansible_collections.torchdev.operator.plugins.module_utils.trainingjob import attempt_of, normalize

MAX_BACKOFF = 300
IMAGE_PULL_REASONS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName")
FINAL = ("Completed", "Failed")
MESSAGE_LIMIT = 1024


# --------------------------------------------------------------------------- helpers
def _time(value):
    if not value:
        return None
    try:
        return datetime.strptime(str(value)[:19], "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        return None


def _fmt(t):
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _condition(obj, ctype):
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype and cond.get("status") == "True":
            return cond
    return None


def duration(start, end):
    """``1h2m3s`` between two RFC 3339 times ("" when either is missing)."""
    a, b = _time(start), _time(end)
    if a is None or b is None:
        return ""
    seconds = max(int((b - a).total_seconds()), 0)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    out = ("%dh" % hours if hours else "") + ("%dm" % minutes if hours or minutes else "") + "%ds" % secs
    return out


def backoff(restarts, base=10):
    """Seconds before the ``restarts``-th group restart: base, 2*base, 4*base, ... at most 300."""
    restarts = max(int(restarts), 1)
    return min(float(base) * 2 ** (restarts - 1), MAX_BACKOFF)


def _terminated(pod):
    st = (pod or {}).get("status") or {}
    for cs in st.get("containerStatuses") or []:
        term = (cs.get("state") or {}).get("terminated")
        if term and int(term.get("exitCode", 0)) != 0:
            return cs.get("name"), int(term["exitCode"]), term.get("reason") or ""
    return None


def _index(pod):
    meta = (pod or {}).get("metadata") or {}
    return (meta.get("annotations") or {}).get("batch.kubernetes.io/job-completion-index") or \
        (meta.get("labels") or {}).get("batch.kubernetes.io/job-completion-index") or "?"


def _owned_by(pod, job):
    uid = ((job or {}).get("metadata") or {}).get("uid")
    return bool(uid) and any(ref.get("uid") == uid for ref in ((pod or {}).get("metadata") or {}).get("ownerReferences") or [])


def worker_failure(job, pods):
    """(permanent, message) of the first failed worker of ``job`` among ``pods``, or None."""
    for pod in sorted(pods or [], key=_index):
        if not _owned_by(pod, job) or ((pod.get("status") or {}).get("phase")) != "Failed":
            continue
        hit = _terminated(pod)
        if hit:
            name, code, reason = hit
            return code in TRAINING_PERMANENT_EXIT_CODES, "worker %s (pod %s) exited with code %d%s" % (
                _index(pod), pod["metadata"]["name"], code, " (%s)" % reason if reason else "")
        return False, "worker %s (pod %s) failed" % (_index(pod), pod["metadata"]["name"])
    return None


def image_pull_failure(job, pods):
    """A message when a worker of ``job`` cannot pull its image, else None."""
    for pod in pods or []:
        if not _owned_by(pod, job):
            continue
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            waiting = (cs.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in IMAGE_PULL_REASONS:
                return "worker %s cannot pull image %s: %s%s" % (
                    _index(pod), cs.get("image", ""), waiting["reason"],
                    " (%s)" % waiting["message"] if waiting.get("message") else "")
    return None


# --------------------------------------------------------------------------- decide
def _sooner(current, seconds):
    return seconds if current is None else min(current, seconds)


def decide(tj, job=None, pods=None, now=None, backoff_base=10, watch_period=10, kueue=None):
    """What this reconcile does: {run, state, reason, message, restartCount, lastRestartTime,
    lastRestartReason, startTime, completionTime, failureReason, requeue, attempt, problem}.

    ``problem``: {reason: InvalidSpec, message} when the Job is to run but the
    WorkloadPriorityClass that applies does not exist (``kueue``: k8s_observe's Kueue
    result; Kueue would never admit the Job), else None: the role records it as a problem of
    the spec (common problem.yml, trainingjob_rejected_status) instead of converging.
    """
    out = _next_step(tj, job, pods, now, backoff_base, watch_period)
    out["problem"] = queue_problem(kueue) if out["run"] else None
    return out


def _next_step(tj, job, pods, now, backoff_base, watch_period):
    """decide() but the problem.

    ``job``: the live Job named like the TrainingJob (or None), ``pods``: its pods, ``now``:
    RFC 3339.  ``watch_period``: while workers start or run, look again after this many
    seconds (2 while they start): a Job's progress is in its status, and status-only updates
    of a dependent do not reconcile the owner (ansible-operator's DependentPredicate).  ``run`` true: render the Job (the plan creates it when missing, keeps it
    when live); false: do not render it (the plan deletes a live one).
    """
    tj = tj or {}
    spec = normalize(tj.get("spec"))
    st = dict(tj.get("status") or {})
    now_s = now or _fmt(datetime.utcnow())
    t = _time(now_s)
    policy = spec["failurePolicy"]
    restarts = int(st.get("restartCount") or 0)
    out = {
        "run": False, "state": st.get("state") or "Pending", "reason": "", "message": "",
        "restartCount": restarts, "lastRestartTime": st.get("lastRestartTime"),
        "lastRestartReason": st.get("lastRestartReason"), "startTime": st.get("startTime"),
        "completionTime": st.get("completionTime"), "failureReason": st.get("failureReason"),
        "requeue": None, "attempt": restarts,
    }
    job_attempt = attempt_of(job)
    current = job if job and (job_attempt is None or job_attempt == restarts) else None
    job_st = (current or {}).get("status") or {}
    if not out["startTime"] and job_st.get("startTime"):
        out["startTime"] = job_st["startTime"]

    def final(state, reason, message, keep_job):
        out.update(state=state, reason=reason, message=message[:MESSAGE_LIMIT], run=bool(keep_job),
                   completionTime=out["completionTime"] or now_s, requeue=None)
        if state == "Failed":
            out["failureReason"] = reason
        return out

    # Completed and Failed are final: keep a finished Job (logs), never create one, and keep
    # the reason and message the job finished with (a later look -- a resync, an operator
    # restart -- must not rewrite them).
    if out["state"] in FINAL:
        ended = _condition(tj, "Succeeded" if out["state"] == "Completed" else "Failed") or {}
        out.update(run=current is not None, reason=ended.get("reason") or st.get("failureReason") or "",
                   message=ended.get("message") or "")
        return out

    deadline = policy.get("activeDeadlineSeconds")
    start = _time(out["startTime"])
    if deadline and start is not None:
        left = (start + timedelta(seconds=int(deadline)) - t).total_seconds()
        if left <= 0:
            return final("Failed", "DeadlineExceeded",
                         "the run exceeded failurePolicy.activeDeadlineSeconds (%ss)" % deadline, False)
        out["requeue"] = left

    if spec.get("suspend"):
        out.update(state="Suspended", reason="Suspended", message="spec.suspend is true: the workers are stopped")
        out["requeue"] = None  # the deadline keeps counting; it is checked on resume
        return out

    if current is not None:
        if _condition(current, "Complete"):
            result = (st.get("result") or {})
            return final("Completed", result.get("reason") or "JobComplete",
                         result.get("message") or "all %d workers succeeded" % spec["numWorkers"], True)
        failed = _condition(current, "Failed")
        if failed:
            if failed.get("reason") == "DeadlineExceeded":
                return final("Failed", "DeadlineExceeded", failed.get("message") or "the Job's deadline passed", True)
            hit = worker_failure(current, pods)
            permanent, why = hit if hit else (False, failed.get("message") or failed.get("reason") or "the Job failed")
            if permanent:
                return final("Failed", "PermanentFailure", why + ": a restart cannot fix this", True)
            if policy.get("restartPolicy") == "Never":
                return final("Failed", "WorkerFailed", why + " (failurePolicy.restartPolicy Never)", True)
            limit = int(policy.get("backoffLimit", 3))
            if restarts >= limit:
                return final("Failed", "BackoffLimitExceeded",
                             "%s; %d of %d restarts used" % (why, restarts, limit), True)
            restarts += 1
            wait = backoff(restarts, backoff_base)
            out.update(state="Restarting", reason="Restarting", restartCount=restarts, attempt=restarts,
                       lastRestartTime=now_s, lastRestartReason=why[:MESSAGE_LIMIT],
                       message="restarting every worker (restart %d of %d) in %gs: %s" % (restarts, limit, wait, why),
                       run=False)
            out["requeue"] = min(wait, out["requeue"]) if out["requeue"] is not None else wait
            return out
        pull = image_pull_failure(current, pods)
        if pull:
            return final("Failed", "ImagePullFailed", pull, False)

    # Restarting: wait out the back-off, then start the next attempt.
    if out["state"] == "Restarting" and current is None:
        since = _time(out["lastRestartTime"])
        wait = backoff(restarts, backoff_base)
        if since is not None:
            left = (since + timedelta(seconds=wait) - t).total_seconds()
            if left > 0:
                out.update(reason="Restarting", message="restart %d: the next attempt starts in %ds: %s" % (
                    restarts, int(left + 0.999), out["lastRestartReason"] or ""))
                out["requeue"] = min(left, out["requeue"]) if out["requeue"] is not None else left
                return out

    if job and current is None:
        # the Job of an earlier attempt is still there (its deletion has not landed): remove it
        # first, a Job's pod template cannot change
        out.update(reason=out["state"], message="removing the Job of attempt %s" % job_attempt, run=False)
        out["requeue"] = min(1.0, out["requeue"]) if out["requeue"] is not None else 1.0
        return out
    out["run"] = True
    if current is None:
        out.update(state="Pending", reason="Initializing", message="creating the workers' Job")
        out["requeue"] = _sooner(out["requeue"], min(2.0, float(watch_period)))
        return out
    spec_job = current.get("spec") or {}
    if spec_job.get("suspend"):
        out.update(state="Queued", reason="Queued", message="waiting for Kueue to admit the Job")
        return out
    workers = int(spec["numWorkers"])
    ready = int(job_st.get("ready") or 0)
    if ready >= workers:
        out.update(state="Running", reason="Running", message="%d/%d workers ready" % (ready, workers))
        out["requeue"] = _sooner(out["requeue"], float(watch_period))
    else:
        out.update(state="Initializing", reason="Initializing", message="%d/%d workers ready" % (ready, workers))
        out["requeue"] = _sooner(out["requeue"], min(2.0, float(watch_period)))
    return out


# --------------------------------------------------------------------------- status
def _conditions(state, reason, message, generation):
    def c(ctype, status, why, msg=""):
        return {"type": ctype, "status": status, "reason": why, "message": msg[:MESSAGE_LIMIT],
                "observedGeneration": generation}
    running = c("Running", "True" if state == "Running" else "False", reason or state, message)
    succeeded = c("Succeeded", "True", reason, message) if state == "Completed" else \
        c("Succeeded", "False", "Running" if state not in FINAL else state, "")
    failed = c("Failed", "True", reason, message) if state == "Failed" else \
        c("Failed", "False", "Running" if state not in FINAL else state, "")
    degraded = c("Degraded", "False", "AsExpected", "")
    return [running, succeeded, failed, degraded]


def status(tj, decision, job=None, queue=None):
    """The operator's status fields of a TrainingJob (never the library's)."""
    tj = tj or {}
    spec = normalize(tj.get("spec"))
    generation = int(((tj.get("metadata") or {}).get("generation")) or 0)
    d = decision or {}
    state = d.get("state") or "Pending"
    job_st = (job or {}).get("status") or {} if d.get("run") else {}
    active = int(job_st.get("active") or 0)
    queued = queue if queue and state == "Queued" else None
    result = {
        "observedGeneration": generation,
        "state": state,
        "totalEpochs": int(spec["hyperparameters"]["epochs"]),
        "workers": {"active": active, "succeeded": int(job_st.get("succeeded") or 0),
                    "failed": int(job_st.get("failed") or 0)},
        "allocatedGPUs": active * int(spec["gpusPerWorker"]),
        "jobName": ((job or {}).get("metadata") or {}).get("name") if d.get("run") and job else None,
        "queue": queued,
        "startTime": d.get("startTime"),
        "completionTime": d.get("completionTime") if state in FINAL else None,
        "duration": duration(d.get("startTime"), d.get("completionTime")) or None if state in FINAL else None,
        "failureReason": d.get("failureReason") if state == "Failed" else None,
        "restartCount": int(d.get("restartCount") or 0),
        "lastRestartTime": d.get("lastRestartTime"),
        "lastRestartReason": d.get("lastRestartReason"),
    }
    if queued and result["queue"].get("message"):
        d = dict(d, message=result["queue"]["message"])
    result["conditions"] = _conditions(state, d.get("reason") or state, d.get("message") or "", generation)
    for key in TRAINING_LIBRARY_STATUS_FIELDS:  # the library's (field manager torchdev-train)
        result.pop(key, None)
    return result


def rejected_status(tj, failure):
    """The status of a TrainingJob whose spec cannot run (common problem.yml): Failed with the
    reason (InvalidSpec, InsufficientGPUs), Degraded True."""
    tj = tj or {}
    generation = int(((tj.get("metadata") or {}).get("generation")) or 0)
    failure = failure or {}
    reason, message = failure.get("reason") or "InvalidSpec", failure.get("message") or ""
    conds = _conditions("Failed", reason, message, generation)
    conds[3] = {"type": "Degraded", "status": "True", "reason": reason, "message": message[:MESSAGE_LIMIT],
                "observedGeneration": generation}
    return {"observedGeneration": generation, "state": "Failed", "failureReason": reason,
            "totalEpochs": int(normalize(tj.get("spec"))["hyperparameters"]["epochs"]), "conditions": conds}


def requeue(decision):
    """The requeue period of ``decision`` for requeue_after (``"<n>s"``), or ""."""
    seconds = (decision or {}).get("requeue")
    if seconds is None:
        return ""
    return "%ds" % max(int(seconds + 0.999), 1)
