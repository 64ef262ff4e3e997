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

What decides the phase, the restarts and the deadline is never read back from the status: the
trainer token (the library's identity) may patch any field of the status subresource, so a
forged ``state: Completed``, ``restartCount: 0`` or ``startTime`` in the future would stop,
restart for ever or never time out the run.  The operator keeps its record of the run in the
annotation TRAINING_RUN_ANNOTATION (``ledger``: metadata, which a status patch cannot change),
writes it when it changes (``ledger_patch``, before the Job is created) and shows the same
values in the status for people and tools.  The library's ``result.reason`` is only a name for a
completion the Job itself reports (one of the documented reasons, else JobComplete).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from datetime import datetime, timedelta

import itertools
import json
import re

from ansible_collections.torchdev.operator.plugins.module_utils.constants import (
    TRAINING_LIBRARY_STATUS_FIELDS, TRAINING_PERMANENT_EXIT_CODES, TRAINING_RUN_ANNOTATION, TRAININGJOB_REASONS,
    TRAININGJOB_STATES)
from ansible_collections.torchdev.operator.plugins.module_utils.devserver_status import (
    _REFUSAL_LIMIT, _REFUSERS, _event_time, REASON_POD_CREATE_REFUSED)
from ansible_collections.torchdev.operator.plugins.module_utils.eviction import (  # noqa: F401 (tests read them here)
    _REASON, _before, _fmt, _text, _time, DEACTIVATED, MESSAGE_LIMIT, EVICTED, EVICTIONS_MAX, PREEMPTED, READMITTED, eviction_event,
    track_evictions, usage_end_reason, workload_eviction, workload_readmission)
from ansible_collections.torchdev.operator.plugins.module_utils.eviction import evicted_condition as generic_evicted_condition
from ansible_collections.torchdev.operator.plugins.module_utils.kueue import queue_problem
from ansible_collections.torchdev.operator.plugins.module_utils.lifecycle import time_or_none
from ansible_collections.torchdev.operator.plugins.module_utils.trainingjob import attempt_of, normalize

MAX_BACKOFF = 300
IMAGE_PULL_REASONS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName")
FINAL = ("Completed", "Failed")


# --------------------------------------------------------------------------- helpers
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
    restarts = min(max(int(restarts), 1), 64)  # beyond 2^63 the cap has long been reached
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


# What kube-controller-manager's Job controller says when a pod create fails (controller_utils.go
# createPods: 'Error creating: pods "<job>-<index>-<5 random>" is forbidden: <why>').
_FORBIDDEN_JOB_POD = re.compile(r'pods "([^"]{1,253})-(\d{1,3})-[a-z0-9]{5}" is forbidden: ')
# names.MaxGeneratedNameLength: a longer "<job>-<index>-" is cut before "-<index>-"
_MAX_GENERATED_PREFIX = 58


def _indexes(indexes):
    """"0-2,5" of [0, 1, 2, 5]."""
    parts = []
    for _, run in itertools.groupby(enumerate(sorted(indexes)), lambda pair: pair[1] - pair[0]):
        run = [index for _, index in run]
        parts.append(str(run[0]) if len(run) == 1 else "%d-%d" % (run[0], run[-1]))
    return ",".join(parts)


def job_pod_refusals(job, events, pods, workers):
    """"worker 0: refused by ResourceQuota: exceeded quota: compute, requested: pods=1, ..." when
    admission refuses the pods of wanted workers (``workers``: numWorkers) that have none: the Job
    controller could not create them and said why in Warning Events, reason FailedCreate, about
    ``job`` (the live Job: its name, its uid when the Event names one), no older than the Job,
    whose message holds ``pods "<job>-<index>-xxxxx" is forbidden: <why>`` (also inside "(combined
    from similar events): ...").  The newest such Event of a worker counts; a worker whose pod
    exists (owned by the Job, not being deleted) has none, so the refusal clears once its pod is
    created.  Workers refused alike share one line ("workers 0-3: ...").  What refused it is named
    when the message says (ResourceQuota, LimitRange, PodSecurity, else "admission"); each line is
    printable and bounded to 512 characters, the whole to MESSAGE_LIMIT; "" when none.  Events
    are anyone's text in the namespace: anything odd is skipped, never raises."""
    if not isinstance(job, dict) or not isinstance(job.get("metadata"), dict) or not isinstance(events, list):
        return ""
    meta = job["metadata"]
    name, uid = meta.get("name"), meta.get("uid")
    if not isinstance(name, str) or not name:
        return ""
    try:
        wanted = int(workers or 0)
    except (TypeError, ValueError, OverflowError):
        return ""
    born = time_or_none(meta.get("creationTimestamp"))
    existing = set()
    for pod in pods if isinstance(pods, list) else []:
        if isinstance(pod, dict) and isinstance(pod.get("metadata"), dict) and _owned_by(pod, job) \
                and not pod["metadata"].get("deletionTimestamp"):
            existing.add(str(_index(pod)))
    newest = {}
    for event in events:
        if not isinstance(event, dict) or event.get("reason") != "FailedCreate" or event.get("type") != "Warning":
            continue
        involved = event.get("involvedObject") if isinstance(event.get("involvedObject"), dict) else {}
        if involved.get("kind") != "Job" or involved.get("name") != name or (
                involved.get("uid") and uid and involved.get("uid") != uid):
            continue
        when = _event_time(event)
        message = event.get("message")
        found = _FORBIDDEN_JOB_POD.search(message) if isinstance(message, str) else None
        if when is None or (born is not None and when < born) or not found:
            continue
        prefix, index = found.group(1), int(found.group(2))
        marker = "-%d-" % index
        if prefix != name and not (name.startswith(prefix) and len(prefix + marker) == _MAX_GENERATED_PREFIX):
            continue
        if not 0 <= index < wanted or str(index) in existing:
            continue
        if index not in newest or when >= newest[index][0]:
            newest[index] = (when, message[found.end():])
    by_why = {}
    for index in sorted(newest):
        why = newest[index][1]
        refuser = next((who for words, who in _REFUSERS if words in why), "admission")
        why = " ".join("".join(ch if ch.isprintable() else " " for ch in why[:4 * _REFUSAL_LIMIT]).split())
        by_why.setdefault("refused by %s: %s" % (refuser, why), []).append(index)
    lines = []
    for why, indexes in sorted(by_why.items(), key=lambda item: item[1][0]):
        text = "%s %s: %s" % ("workers" if len(indexes) > 1 else "worker", _indexes(indexes), why)
        lines.append(text if len(text) <= _REFUSAL_LIMIT else text[:_REFUSAL_LIMIT - 3] + "...")
    return "; ".join(lines)[:MESSAGE_LIMIT]


# --------------------------------------------------------------------------- the operator's record
LEDGER_TIMES = ("startTime", "lastRestartTime", "completionTime", "lastEvictionTime", "usageStartTime")
LEDGER_MAX = 4096  # characters of the annotation read; longer is no record the operator wrote
RESTARTS_MAX = 1000


def ledger(tj):
    """The operator's record of the run (TRAINING_RUN_ANNOTATION): {state, restartCount,
    startTime, lastRestartTime, lastRestartReason, completionTime, reason, evictions,
    lastEvictionTime, lastEvictionReason, usageStartTime}, each value checked (a state of
    TRAININGJOB_STATES, a count 0..1000 (evictions 0..EVICTIONS_MAX), RFC 3339 times, text of at
    most MESSAGE_LIMIT) and dropped when it is not.  No annotation: a TrainingJob the operator has
    not recorded yet, read from its status once (an object of an earlier version; a new one
    has no status either, and the record is written before its Job exists).  Never raises."""
    tj = tj if isinstance(tj, dict) else {}
    meta = tj.get("metadata") if isinstance(tj.get("metadata"), dict) else {}
    annotations = meta.get("annotations") if isinstance(meta.get("annotations"), dict) else {}
    raw = annotations.get(TRAINING_RUN_ANNOTATION)
    if raw is None:
        source = tj.get("status") if isinstance(tj.get("status"), dict) else {}
        source = dict(source, reason=source.get("failureReason"))
    else:
        try:
            source = json.loads(raw) if isinstance(raw, str) and len(raw) <= LEDGER_MAX else {}
        except ValueError:
            source = {}
        source = source if isinstance(source, dict) else {}
    out = {}
    if source.get("state") in TRAININGJOB_STATES:
        out["state"] = source["state"]
    count = source.get("restartCount")
    if isinstance(count, int) and not isinstance(count, bool) and 0 <= count <= RESTARTS_MAX:
        out["restartCount"] = count
    count = source.get("evictions")
    if isinstance(count, int) and not isinstance(count, bool) and 0 < count <= EVICTIONS_MAX:
        out["evictions"] = count
    for key in LEDGER_TIMES:
        if isinstance(source.get(key), str) and _time(source[key]) is not None:
            out[key] = source[key][:32]
    for key in ("lastRestartReason", "reason", "lastEvictionReason"):
        if isinstance(source.get(key), str) and source[key]:
            out[key] = source[key][:MESSAGE_LIMIT]
    return out


def ledger_of(decision):
    """The record a decision leaves (what ``ledger`` reads back on the next reconcile).  The
    eviction fields only once Kueue evicted the run, and usageStartTime only when it differs
    from startTime: the record of a run never evicted is what it was before they existed."""
    d = decision or {}
    final = d.get("state") in FINAL
    record = {"state": d.get("state"), "restartCount": int(d.get("restartCount") or 0),
              "startTime": d.get("startTime"), "lastRestartTime": d.get("lastRestartTime"),
              "lastRestartReason": d.get("lastRestartReason"),
              "completionTime": d.get("completionTime") if final else None,
              "reason": d.get("reason") if final else None,
              "evictions": int(d.get("evictions") or 0) or None,
              "lastEvictionTime": d.get("lastEvictionTime"), "lastEvictionReason": d.get("lastEvictionReason"),
              "usageStartTime": d.get("usageStartTime") if d.get("usageStartTime") != d.get("startTime") else None}
    return {k: v for k, v in record.items() if v not in (None, "")}


def ledger_patch(tj, decision):
    """A merge patch of the TrainingJob that records ``decision`` (its annotation), or {} when
    the annotation already says that (an unchanged run writes nothing)."""
    tj = tj or {}
    meta = tj.get("metadata") or {}
    text = json.dumps(ledger_of(decision), sort_keys=True, separators=(",", ":"))
    if (meta.get("annotations") or {}).get(TRAINING_RUN_ANNOTATION) == text:
        return {}
    return {"apiVersion": tj.get("apiVersion"), "kind": tj.get("kind"),
            "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace"),
                         "annotations": {TRAINING_RUN_ANNOTATION: text}}}


def _usage(out):
    """{startedAt, endedAt, endReason} of the UsageRecord this reconcile renders (no endedAt:
    open), or None before the run started: the current admission's (closed at the run's end,
    Succeeded or Failed, or at an eviction, Preempted or Evicted) or the record of an admission
    closed late (closeUsage)."""
    if out.get("closeUsage"):
        return out["closeUsage"]
    started = out.get("usageStartTime") or out.get("startTime")
    if not started:
        return None
    if out.get("state") in FINAL:
        ended = out.get("completionTime")
        return {"startedAt": started, "endedAt": ended,
                "endReason": "Succeeded" if out["state"] == "Completed" else "Failed"} if ended else None
    eviction = out.get("eviction")
    if eviction:
        ended = eviction["time"] if not _before(eviction["time"], started) else started
        return {"startedAt": started, "endedAt": ended, "endReason": usage_end_reason(eviction["reason"])}
    return {"startedAt": started}


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
    workload = kueue.get("workload") if isinstance(kueue, dict) else None
    out = _next_step(tj, job, pods, now, backoff_base, watch_period, workload)
    out["usage"] = _usage(out)
    out["problem"] = queue_problem(kueue) if out["run"] else None
    return out


def _next_step(tj, job, pods, now, backoff_base, watch_period, workload=None):
    """decide() but the problem.

    ``job``: the live Job named like the TrainingJob (or None), ``pods``: its pods, ``now``:
    RFC 3339.  ``watch_period``: while workers start or run, look again after this many
    seconds (2 while they start): a Job's progress is in its status, and status-only updates
    of a dependent do not reconcile the owner (ansible-operator's DependentPredicate).  ``run`` true: render the Job (the plan creates it when missing, keeps it
    when live); false: do not render it (the plan deletes a live one).  ``workload``: the
    Job's Kueue Workload (or None): while Kueue has evicted it (workload_eviction) the run is
    Queued with ``eviction`` set, counted once (evictions, lastEvictionTime,
    lastEvictionReason), its usage record closed at the eviction; admitted again, a new usage
    record starts (usageStartTime; _track_evictions).
    """
    tj = tj or {}
    spec = normalize(tj.get("spec"))
    st = dict(tj.get("status") or {})  # the library's fields only (result); never what decides
    rec = ledger(tj)
    now_s = now or _fmt(datetime.utcnow())
    t = _time(now_s)
    policy = spec["failurePolicy"]
    job_attempt = attempt_of(job)
    # a Job of an attempt after the record's (an earlier version recorded nothing) counts
    restarts = max(rec.get("restartCount", 0), job_attempt or 0)
    out = {
        "run": False, "state": rec.get("state") or "Pending", "reason": "", "message": "",
        "restartCount": restarts, "lastRestartTime": rec.get("lastRestartTime"),
        "lastRestartReason": rec.get("lastRestartReason"), "startTime": rec.get("startTime"),
        "completionTime": rec.get("completionTime"),
        "failureReason": rec.get("reason") if rec.get("state") == "Failed" else None,
        "requeue": None, "attempt": restarts,
        "evictions": rec.get("evictions", 0), "lastEvictionTime": rec.get("lastEvictionTime"),
        "lastEvictionReason": rec.get("lastEvictionReason"), "eviction": None,
    }
    current = job if job and (job_attempt is None or job_attempt == restarts) else None
    job_st = (current or {}).get("status") or {}
    if not out["startTime"] and job_st.get("startTime"):
        out["startTime"] = job_st["startTime"]
    out["usageStartTime"] = rec.get("usageStartTime") or out["startTime"]

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
        reason = rec.get("reason") or ("JobComplete" if out["state"] == "Completed" else "Failed")
        message = ended.get("message") if ended.get("reason") == reason else ""
        # The library's result may land after the reconcile that saw the Job complete started
        # (rank 0's last write and the Job's completion a moment apart): a run completed as
        # JobComplete takes the documented reason the library names later, once.
        result = st.get("result") if isinstance(st.get("result"), dict) else {}
        if out["state"] == "Completed" and reason == "JobComplete" \
                and result.get("reason") in TRAININGJOB_REASONS["Succeeded"] and result.get("reason") != "JobComplete":
            reason = result["reason"]
            if isinstance(result.get("message"), str) and result.get("message"):
                message = result["message"][:MESSAGE_LIMIT]
        out.update(run=current is not None, reason=reason, message=message)
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
        track_evictions(out, workload_eviction(workload), workload_readmission(workload))

    if current is not None:
        if _condition(current, "Complete"):
            # the Job says the run completed; the library may only name how (a documented reason)
            result = st.get("result") if isinstance(st.get("result"), dict) else {}
            reason = result.get("reason") if result.get("reason") in TRAININGJOB_REASONS["Succeeded"] else "JobComplete"
            message = result.get("message") if isinstance(result.get("message"), str) and result.get("message") \
                else "all %d workers succeeded" % spec["numWorkers"]
            return final("Completed", reason, message, True)
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
    if out["eviction"]:
        # Kueue evicted the Workload: it suspends the Job (its pods go) and queues it again; its
        # admission unsuspends it (a spec change of the Job: a reconcile), so no look is needed.
        out.update(state="Queued", reason="Queued", message="evicted by Kueue (%s): waiting to be admitted again" %
                   out["eviction"]["reason"])
        return out
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
        # Looked at again soon at first, then backing off to a quarter of the time the Job has
        # been starting (at most 30 s): workers whose pods stay refused (a quota) or pending are
        # not polled every 2 s for ever; a change of the Job (pods created, ready) comes through
        # the dependent watch anyway.
        started, now_t = _time(job_st.get("startTime")), _time(now_s)
        waited = (now_t - started).total_seconds() if started and now_t else 0.0
        out["requeue"] = _sooner(out["requeue"], max(min(2.0, float(watch_period)), min(30.0, waited / 4)))
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


def status(tj, decision, job=None, queue=None, events=None, pods=None):
    """The operator's status fields of a TrainingJob (never the library's).  ``events``: the
    Job's FailedCreate Events, ``pods``: its pods: while the Job runs and admission refuses a
    worker's pod (job_pod_refusals), Degraded True PodCreateRefused with the refusal; the state
    stays (the Job controller keeps trying, the run is looked at again while it starts)."""
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
    refused = job_pod_refusals(job, events, pods, spec["numWorkers"]) \
        if d.get("run") and state in ("Pending", "Initializing", "Running") else ""
    if refused:
        result["conditions"][3] = {"type": "Degraded", "status": "True", "reason": REASON_POD_CREATE_REFUSED,
                                   "message": refused, "observedGeneration": generation}
    evictions = d.get("evictions") if isinstance(d.get("evictions"), int) and not isinstance(d.get("evictions"), bool) \
        else 0
    result.update(evictions=evictions or None, lastEvictionTime=d.get("lastEvictionTime") if evictions else None,
                  lastEvictionReason=d.get("lastEvictionReason") if evictions else None)
    evicted = evicted_condition(d, queued, (tj.get("status") or {}).get("latestCheckpoint"), generation)
    if evicted:
        result["conditions"].append(evicted)
    for key in TRAINING_LIBRARY_STATUS_FIELDS:  # the library's (field manager torchdev-train)
        result.pop(key, None)
    return result


def evicted_condition(decision, queue=None, checkpoint=None, generation=0):
    """The Evicted condition of a TrainingJob (eviction.evicted_condition), or None while Kueue
    never evicted its run; once admitted again it resumes from the newest checkpoint
    (``checkpoint``: the library's status.latestCheckpoint, its path when known)."""
    path = _text((checkpoint or {}).get("path") if isinstance(checkpoint, dict) else None, 256)
    resume = "it resumes from its newest checkpoint%s when admitted again" % (" (%s)" % path if path else "")
    return generic_evicted_condition(decision, queue, resume, generation)


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
