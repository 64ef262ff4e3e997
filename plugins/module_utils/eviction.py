# -*- coding: utf-8 -*-
# Apache-2.0
"""Kueue's evictions of a workload, as TrainingJobs and DevServers report and bill them.

Kueue evicts an admitted Workload (preemption by a higher-priority or a reclaiming one,
PodsReadyTimeout, an admission check, a stopped queue, node failures, deactivation): its
condition Evicted turns True (reason Kueue's), the job's pods are stopped and the Workload waits
in its queue; once Kueue admits it again the condition turns False with "Previously: ...".
workload_eviction / workload_readmission read that from a Workload (never raising on whatever is
there), track_evictions counts each eviction once and moves the start of the usage record to
the readmission, usage_end_reason names the record's endReason (Preempted, else Evicted).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
from datetime import datetime

MESSAGE_LIMIT = 1024
EVICTIONS_MAX = 100000


def _time(value):
    if not value:
        return None
    try:
        return datetime.strptime(str(value)[:19], "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        return None


def _fmt(t):
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


# A reason as the TrainingJob CRD's condition reason pattern accepts it (Kueue's are CamelCase:
# Preempted, PodsReadyTimeout, AdmissionCheck, ClusterQueueStopped, LocalQueueStopped,
# NodeFailures, Deactivated, DeactivatedDueTo<cause>, ...); anything else reads as Evicted.
_REASON = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]{0,126}[A-Za-z0-9_])?$")
EVICTED = "Evicted"
PREEMPTED = "Preempted"  # kueue WorkloadEvictedByPreemption
READMITTED = "Readmitted"
DEACTIVATED = "Deactivated"  # kueue WorkloadDeactivated (spec.active false): not re-queued


def _text(value, limit=MESSAGE_LIMIT):
    """Printable, whitespace collapsed, at most ``limit`` characters ("" when not text)."""
    if not isinstance(value, str):
        return ""
    return " ".join("".join(ch if ch.isprintable() else " " for ch in value[:4 * limit]).split())[:limit]


def _workload_condition(workload, ctype):
    conds = ((workload.get("status") if isinstance(workload, dict) else None) or {})
    conds = conds.get("conditions") if isinstance(conds, dict) else None
    for cond in conds if isinstance(conds, list) else []:
        if isinstance(cond, dict) and cond.get("type") == ctype:
            return cond
    return {}


def _stamp(value):
    """An RFC 3339 time as the ledger keeps it (second precision, Z), or None."""
    t = _time(value) if isinstance(value, str) else None
    return _fmt(t) if t is not None else None


def workload_eviction(workload):
    """{reason, message, time, preemption} while Kueue has evicted ``workload`` (the Job's
    Workload: its condition Evicted True, which Kueue sets when it evicts and turns False when it
    admits the Workload again), else None.  ``reason``: Kueue's (Preempted, PodsReadyTimeout,
    ...; one the condition reason pattern refuses reads Evicted); ``message``: the Preempted
    condition's when it is True (who preempted it and why), else the Evicted condition's;
    ``time``: the Evicted condition's lastTransitionTime, what tells one eviction from the next
    (None when it has none: no eviction is reported).  Never raises."""
    evicted = _workload_condition(workload, "Evicted")
    if evicted.get("status") != "True":
        return None
    when = _stamp(evicted.get("lastTransitionTime"))
    if when is None:
        return None
    reason = evicted.get("reason") if isinstance(evicted.get("reason"), str) and _REASON.match(evicted["reason"]) \
        else EVICTED
    preempted = _workload_condition(workload, "Preempted")
    preempted = preempted if preempted.get("status") == "True" else {}
    preemption = preempted.get("reason") if isinstance(preempted.get("reason"), str) \
        and _REASON.match(preempted["reason"]) else None
    message = _text(preempted.get("message")) or _text(evicted.get("message"))
    return {"reason": reason, "message": message, "time": when, "preemption": preemption}


def workload_readmission(workload):
    """{time, reason} when Kueue admitted ``workload`` again after an eviction (its Evicted
    condition False with Kueue's "Previously: ..." message; ``time``: its lastTransitionTime,
    ``reason``: Preempted when the Preempted condition turned False with it, else Evicted), else
    None.  Never raises."""
    evicted = _workload_condition(workload, "Evicted")
    if evicted.get("status") != "False" or not _text(evicted.get("message")).startswith("Previously"):
        return None
    when = _stamp(evicted.get("lastTransitionTime"))
    if when is None:
        return None
    preempted = _workload_condition(workload, "Preempted")
    was_preempted = preempted.get("status") == "False" and _stamp(preempted.get("lastTransitionTime")) == when \
        and _text(preempted.get("message")).startswith("Previously")
    return {"time": when, "reason": PREEMPTED if was_preempted else EVICTED}


def usage_end_reason(reason):
    """The UsageRecord endReason of a run Kueue evicted with ``reason``: Preempted for Kueue's
    Preempted, Evicted for any other."""
    return PREEMPTED if reason == PREEMPTED else EVICTED


def _before(a, b):
    ta, tb = _time(a), _time(b)
    return ta is not None and tb is not None and ta < tb


def track_evictions(out, eviction, readmission):
    """Count an eviction the run has not counted yet, and start the usage of a new admission.

    ``out``: the decision so far (evictions, lastEvictionTime, usageStartTime: the start of
    the current usage record); ``eviction``: workload_eviction; ``readmission``:
    workload_readmission.  An eviction counts once (keyed on its time).  Admitted again after
    an eviction the run counted, the next record starts at the readmission.  An eviction and
    readmission between two reconciles (the operator was down) are found by a readmission after
    the current record started: that record is closed at the readmission (``closeUsage``; its
    end is known no better) and counted, and the next one starts there."""
    last, since = out.get("lastEvictionTime"), out.get("usageStartTime")
    if eviction is not None:
        if eviction["time"] != last:
            out.update(evictions=min(int(out.get("evictions") or 0) + 1, EVICTIONS_MAX),
                       lastEvictionTime=eviction["time"], lastEvictionReason=eviction["reason"])
        out["eviction"] = eviction
        return
    if readmission is None or not since:
        return
    again = readmission["time"]
    if last and _before(last, again) and not _before(last, since):
        out["usageStartTime"] = again
    elif _before(since, again) and (not last or _before(last, since)):
        out["closeUsage"] = {"startedAt": since, "endedAt": again, "endReason": readmission["reason"]}
        out.update(evictions=min(int(out.get("evictions") or 0) + 1, EVICTIONS_MAX),
                   lastEvictionTime=again, lastEvictionReason=readmission["reason"], usageStartTime=again)


def evicted_condition(decision, queue=None, resume="", generation=0):
    """The Evicted condition of a TrainingJob or a DevServer, or None while Kueue never evicted it.

    True while Kueue has evicted its Workload (``decision``'s eviction), reason Kueue's
    (Preempted, PodsReadyTimeout, AdmissionCheck, ClusterQueueStopped, LocalQueueStopped,
    NodeFailures, Deactivated..., else Evicted), message what Kueue said and what happens next:
    re-queued in the ClusterQueue (``queue``: queue_status) at its position, then ``resume``
    (what happens once admitted again: "it resumes from its newest checkpoint ..."); a
    Deactivated Workload is not re-queued until it is active again.  False, reason Readmitted,
    once it is not evicted (any more): admitted again, or the run went on otherwise (suspended,
    restarted, ended); the message counts the evictions."""
    d = decision if isinstance(decision, dict) else {}
    eviction = d.get("eviction") if isinstance(d.get("eviction"), dict) else None
    count = d.get("evictions") if isinstance(d.get("evictions"), int) and not isinstance(d.get("evictions"), bool) else 0
    if eviction is None and count <= 0:
        return None
    if eviction is None:
        message = "admitted again after %d eviction%s; the last at %s (%s)" % (
            count, "" if count == 1 else "s", _text(d.get("lastEvictionTime"), 32) or "an unknown time",
            _text(d.get("lastEvictionReason"), 128) or EVICTED)
        return {"type": "Evicted", "status": "False", "reason": READMITTED, "message": message[:MESSAGE_LIMIT],
                "observedGeneration": generation}
    reason = eviction.get("reason") if isinstance(eviction.get("reason"), str) and _REASON.match(eviction["reason"]) \
        else EVICTED
    queue = queue if isinstance(queue, dict) else {}
    resume = _text(resume, 256) or "it runs again when admitted again"
    if reason.startswith(DEACTIVATED):
        next_step = "the Workload is inactive (spec.active false): it is not queued until it is active again; " + resume
    else:
        where = "ClusterQueue %s" % _text(queue.get("clusterQueue"), 253) if _text(queue.get("clusterQueue"), 253) \
            else "LocalQueue %s" % _text(queue.get("name"), 253) if _text(queue.get("name"), 253) else "its queue"
        place = queue.get("position")
        place = " at position %d" % place if isinstance(place, int) and not isinstance(place, bool) and place > 0 else ""
        next_step = "re-queued in %s%s; %s" % (where, place, resume)
    said = _text(eviction.get("message"), MESSAGE_LIMIT // 2)
    message = "evicted by Kueue (%s)%s; %s" % (reason, ": " + said if said else "", next_step)
    return {"type": "Evicted", "status": "True", "reason": reason, "message": message[:MESSAGE_LIMIT],
            "observedGeneration": generation}


def eviction_event(old_status, new_status):
    """{reason, message} of the ONE Warning Event of an eviction: ``new_status`` (the status
    this run writes) has its Evicted condition True with a lastEvictionTime that
    ``old_status`` (the status as the run found it) did not have, else None.  Reason Preempted
    when Kueue preempted the run, else Evicted; the message is the condition's."""
    new = new_status if isinstance(new_status, dict) else {}
    old = old_status if isinstance(old_status, dict) else {}
    conds = new.get("conditions") if isinstance(new.get("conditions"), list) else []
    cond = next((c for c in conds if isinstance(c, dict) and c.get("type") == "Evicted"), None)
    if not cond or cond.get("status") != "True" or not new.get("lastEvictionTime"):
        return None
    if old.get("lastEvictionTime") == new.get("lastEvictionTime"):
        return None
    return {"reason": usage_end_reason(cond.get("reason")), "message": _text(cond.get("message"))}


# --------------------------------------------------------------------------- DevServers
# The fields of a DevServer's status that record its evictions (written by devserver_status).
SERVER_EVICTION_FIELDS = ("evictions", "lastEvictionTime", "lastEvictionReason", "usageStartTime")


def _count(value):
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= EVICTIONS_MAX else None


def server_evictions(cr, kueue=None, reservation=None):
    """What Kueue's evictions of a DevServer's StatefulSet mean for this reconcile.

    {evictions, lastEvictionTime, lastEvictionReason, usageStartTime, eviction, closeUsage}
    from the status the run found (each value checked: the status is the operator's, but a
    decision never raises on what it reads) and the Workload of ``kueue`` (k8s_observe's Kueue
    result; None or no Workload: nothing changes).  ``usageStartTime``: where the current usage
    record starts once Kueue admitted the server again after an eviction (that readmission);
    None while the record starts at the reservation's startedAt, or no reservation runs.  ``eviction``
    (workload_eviction) while the Workload is evicted: the record is closed at it and the
    server waits in the queue.  ``closeUsage``: the record of an admission whose eviction and
    readmission both happened between two reconciles (track_evictions).  ``reservation``: the
    one this run decided (lifecycle.yml; None: status.reservation).  Never raises."""
    cr = cr if isinstance(cr, dict) else {}
    status = cr.get("status") if isinstance(cr.get("status"), dict) else {}
    if not isinstance(reservation, dict):
        reservation = status.get("reservation") if isinstance(status.get("reservation"), dict) else {}
    out = {"evictions": _count(status.get("evictions")),
           "lastEvictionTime": _stamp(status.get("lastEvictionTime")),
           "lastEvictionReason": status.get("lastEvictionReason") if isinstance(status.get("lastEvictionReason"), str)
           and _REASON.match(status["lastEvictionReason"]) else None,
           "usageStartTime": None}
    started = _stamp(reservation.get("startedAt"))
    if started and not reservation.get("endedAt"):
        since = _stamp(status.get("usageStartTime"))
        out["usageStartTime"] = since if since and not _before(since, started) else started
    workload = kueue.get("workload") if isinstance(kueue, dict) else None
    if isinstance(workload, dict):
        track_evictions(out, workload_eviction(workload), workload_readmission(workload))
        if not started or reservation.get("endedAt"):
            out.pop("closeUsage", None)
            out["usageStartTime"] = None
    if out["usageStartTime"] == started:
        out["usageStartTime"] = None  # the reservation's own start: nothing to say
    return out


def server_usage_reservation(reservation, evictions):
    """The reservation a DevServer's usage record is rendered from, given ``evictions``
    (server_evictions): ``reservation`` itself without evictions; else the current admission's
    part of it (startedAt: usageStartTime, queuedAt: the eviction before it), closed at the
    eviction while Kueue has evicted the server (endedAt the eviction's time, endReason
    Preempted or Evicted), or the admission closed late (closeUsage).  None stays None."""
    if not isinstance(reservation, dict) or not reservation.get("startedAt"):
        return reservation
    ev = evictions if isinstance(evictions, dict) else {}
    close = ev.get("closeUsage")
    if isinstance(close, dict) and close.get("startedAt") and close.get("endedAt"):
        return dict(reservation, startedAt=close["startedAt"], endedAt=close["endedAt"],
                    endReason=usage_end_reason(close.get("endReason")))
    since = ev.get("usageStartTime")
    out = dict(reservation)
    if since and _before(reservation["startedAt"], since):
        out.update(startedAt=since, queuedAt=ev.get("lastEvictionTime") or since)
    eviction = ev.get("eviction")
    if isinstance(eviction, dict) and eviction.get("time"):
        ended = eviction["time"] if not _before(eviction["time"], out["startedAt"]) else out["startedAt"]
        if not out.get("endedAt") or _before(ended, out["endedAt"]):
            out.update(endedAt=ended, endReason=usage_end_reason(eviction.get("reason")))
    return out
