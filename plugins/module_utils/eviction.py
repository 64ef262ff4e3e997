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

A DevServer's StatefulSet (Kueue's pod group) is re-created by its controller after Kueue stops
its pods: the new pods wait scheduling-gated, and the namespace's ResourceQuota counts them as
any pod, so the pods of the workload that preempted it (created after them) could be refused.
server_release decides that the evicted server releases them (the StatefulSet at 0 replicas,
its home claims kept) until its ClusterQueue has room for it again, and how it is queued again
within what Kueue v0.19.2's StatefulSet webhook allows (from 0 only when the Workload is gone
or on hold).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
from datetime import datetime
from decimal import Decimal

from ansible_collections.torchdev.operator.plugins.module_utils.constants import (
    KUEUE_HOLD_ANNOTATION, RELEASED_EVICTION_ANNOTATION)

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


def _dict(value):
    return value if isinstance(value, dict) else {}


def _list(value):
    return value if isinstance(value, list) else []


# evicted_condition's message, read back: "evicted by Kueue (<reason>): <what Kueue said>; <next step>".
_NEXT_STEPS = ("; re-queued in ", "; the Workload is inactive")


def _said(message, reason):
    """What Kueue said, as evicted_condition wrote it into the Evicted condition's message, or ""."""
    text, head = _text(message), "evicted by Kueue (%s): " % reason
    if not text.startswith(head):
        return ""
    rest = text[len(head):]
    ends = [rest.rfind(step) for step in _NEXT_STEPS if rest.rfind(step) >= 0]
    return rest[:max(ends)][:MESSAGE_LIMIT // 2] if ends else ""


def _remembered(status):
    """The eviction the status the run found still reports (its Evicted condition True, with
    lastEvictionTime): {reason, message, time, preemption}, or None."""
    status = _dict(status)
    cond = next((c for c in _list(status.get("conditions")) if isinstance(c, dict) and c.get("type") == "Evicted"),
                None)
    when = _stamp(status.get("lastEvictionTime"))
    if not cond or cond.get("status") != "True" or when is None:
        return None
    reason = next((r for r in (cond.get("reason"), status.get("lastEvictionReason"))
                   if isinstance(r, str) and _REASON.match(r)), EVICTED)
    return {"reason": reason, "message": _said(cond.get("message"), reason), "time": when, "preemption": None}


QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def _queued(sts):
    """Whether a StatefulSet carries Kueue's queue-name label."""
    label = _dict(_dict(_dict(sts).get("metadata")).get("labels")).get(QUEUE_LABEL)
    return isinstance(label, str) and bool(label)


def _live_replicas(sts):
    """spec.replicas of a live StatefulSet (1 when unset or unreadable), None without one."""
    if not isinstance(sts, dict) or not sts:
        return None
    value = _dict(sts.get("spec")).get("replicas", 1)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 1


def _admitted_at(workload):
    """(admitted, time): whether Kueue has admitted ``workload`` (Admitted True) and not evicted
    it, and the Admitted condition's lastTransitionTime (None when unreadable)."""
    admitted = _workload_condition(workload, "Admitted")
    if admitted.get("status") != "True" or workload_eviction(workload) is not None:
        return False, None
    return True, _stamp(admitted.get("lastTransitionTime"))


def _later(*stamps):
    known = [t for t in stamps if t]
    return max(known, key=_time) if known else None


def server_evictions(cr, kueue=None, reservation=None, live_sts=None):
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
    one this run decided (lifecycle.yml; None: status.reservation).

    ``live_sts``: the live StatefulSet.  With it, an eviction the status reports (Evicted True)
    stays in effect while Kueue is served, the server is not stopped and its Workload is not
    admitted with its pods allowed to run (a StatefulSet scaled to 0 by server_release runs
    none): the Workload may be gone (the StatefulSet at 0), on hold, or a new one waiting, none
    of which says Evicted.  Once that Workload is admitted and the StatefulSet has replicas, the
    server was readmitted at the later of the eviction and the admission (the next usage record
    starts there).  Never raises."""
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
    workload = workload if isinstance(workload, dict) else None
    eviction = workload_eviction(workload) if workload is not None else None
    readmission = workload_readmission(workload) if workload is not None else None
    remembered = None
    if (eviction is None and _dict(kueue).get("served") is True and not _dict(cr.get("spec")).get("suspend")
            and (live_sts is None or (isinstance(live_sts, dict) and _queued(live_sts)))):
        remembered = _remembered(status)
    readmitted = None
    if remembered is not None:
        admitted, at = _admitted_at(workload)
        if admitted and _live_replicas(live_sts):
            readmitted = _later(remembered["time"], at, (readmission or {}).get("time"))
        else:
            eviction, readmission = remembered, None
    if readmitted is not None:
        if out["usageStartTime"] and not _before(readmitted, out["usageStartTime"]):
            out["usageStartTime"] = readmitted
    elif workload is not None or eviction is not None:
        track_evictions(out, eviction, readmission)
    if workload is not None or eviction is not None or readmitted is not None:
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


# --------------------------------------------------------------------------- releasing the pods
def _requests(flavor_spec, replicas):
    """{resource: Decimal} a gang of ``replicas`` pods of the flavor requests, None when unreadable."""
    from ansible_collections.torchdev.operator.plugins.module_utils.flavor import resources
    from ansible_collections.torchdev.operator.plugins.module_utils.quantity import parse_quantity

    try:
        requests = _dict(resources(flavor_spec).get("requests"))
        return dict((str(name), parse_quantity(value) * replicas) for name, value in requests.items())
    except (ValueError, ArithmeticError, TypeError, AttributeError):
        return None


def _amounts(entries, key):
    """{resource: Decimal} of a ClusterQueue's resources list (nominalQuota or total)."""
    from ansible_collections.torchdev.operator.plugins.module_utils.quantity import parse_quantity

    out = {}
    for res in _list(entries):
        res = _dict(res)
        if isinstance(res.get("name"), str) and res.get(key) is not None:
            out[res["name"]] = out.get(res["name"], Decimal(0)) + parse_quantity(res[key])
    return out


def cluster_queue_room(cluster_queue, flavor, flavor_spec, replicas=1):
    """Whether ``cluster_queue`` has the nominal quota of ResourceFlavor ``flavor`` that no
    workload reserves (spec.resourceGroups' nominalQuota less status.flavorsReservation, else
    flavorsUsage) for ``replicas`` pods of ``flavor_spec`` (each resource it covers): True or
    False, None when it cannot tell (no ClusterQueue, the flavor not in it, an unreadable
    quantity).  Borrowing from a cohort is not counted: the namespace's ResourceQuota (the
    DevUser's, the ClusterQueue's nominal quota summed over the flavors) would not let the pods
    of borrowed quota be created anyway.  Never raises."""
    cq = _dict(cluster_queue)
    replicas = replicas if isinstance(replicas, int) and not isinstance(replicas, bool) and replicas > 0 else 1
    if not cq or not isinstance(flavor, str) or not flavor:
        return None
    need = _requests(flavor_spec, replicas)
    try:
        nominal = {}
        for group in _list(_dict(cq.get("spec")).get("resourceGroups")):
            for entry in _list(_dict(group).get("flavors")):
                if _dict(entry).get("name") == flavor:
                    for name, amount in _amounts(_dict(entry).get("resources"), "nominalQuota").items():
                        nominal[name] = nominal.get(name, Decimal(0)) + amount
        status = _dict(cq.get("status"))
        usage = status.get("flavorsReservation") if "flavorsReservation" in status else status.get("flavorsUsage")
        reserved = {}
        for entry in _list(usage):
            if _dict(entry).get("name") == flavor:
                for name, amount in _amounts(_dict(entry).get("resources"), "total").items():
                    reserved[name] = reserved.get(name, Decimal(0)) + amount
    except (ValueError, ArithmeticError, TypeError):
        return None
    if need is None or not nominal:
        return None
    return all(nominal[name] - reserved.get(name, Decimal(0)) >= amount
               for name, amount in need.items() if name in nominal)


def _hold_state(workload):
    """Where a StatefulSet's Workload stands for a scale up from 0 (Kueue v0.19.2's webhook
    allows it when the Workload is gone or on hold): none, onhold (QuotaReserved False reason
    OnHold: Kueue released it when the StatefulSet went to 0 while it held quota), reserved
    (QuotaReserved True: Kueue admitted it at 0 replicas; its StatefulSet controller puts it on
    hold at the StatefulSet's next change) or pending (anything else: it waits in the queue, or
    it is being deleted)."""
    if not isinstance(workload, dict):
        return "none"
    if _dict(workload.get("metadata")).get("deletionTimestamp"):
        return "pending"
    reserved = _workload_condition(workload, "QuotaReserved")
    if reserved.get("status") == "False" and reserved.get("reason") == "OnHold":
        return "onhold"
    return "reserved" if reserved.get("status") == "True" else "pending"


def server_release(cr, kueue=None, live_sts=None, replicas=1, flavor_spec=None):
    """The replicas of a DevServer's StatefulSet and the annotations the role renders on it while
    Kueue has evicted the server: {replicas, annotations, released}.

    The StatefulSet controller re-creates the pods Kueue stopped, gated, and the namespace's
    ResourceQuota counts them: the workload that preempted the server, created after them, could
    not create its own.  So, while an eviction is in effect (server_evictions with ``live_sts``:
    Kueue's Workload evicted, or the status's Evicted condition until the readmission), the
    server's pods are released: the StatefulSet goes to 0 replicas (its home claims kept: its
    claim retention policy applies when it is deleted, not scaled) with the annotation
    RELEASED_EVICTION_ANNOTATION = that eviction's time, which says the release was done (an
    eviction whose time the live StatefulSet does not carry is released; one it carries with
    replicas again was queued again and is not released twice).  Released, it goes back to
    ``replicas`` (a Workload queued again) once

    * its pods are gone (status.replicas 0) and its Workload is gone (kubesim) or on hold (Kueue
      v0.19.2 keeps it so when the StatefulSet goes to 0 while it holds quota): the webhook
      allows nothing else, and
    * its ClusterQueue (``kueue``'s cluster_queue) has the unreserved nominal quota of its
      flavor for it (cluster_queue_room; unknown counts as room): Kueue admits it at once and no
      workload admitted before it still has pods to create, so its own pods do not take the
      namespace quota another's need.

    A Workload Kueue admits while the StatefulSet is at 0 (it was released after Kueue had given
    the quota up, so it stayed queued) is not on hold: KUEUE_HOLD_ANNOTATION (its QuotaReserved
    time) changes the StatefulSet, and Kueue's StatefulSet controller puts it on hold.
    ``released``: True while the StatefulSet is held at 0 for an eviction.  A stopped server
    (spec.suspend) has 0 replicas and keeps the annotation it has.  Without an eviction:
    ``replicas`` and no annotation.  Never raises."""
    cr = _dict(cr)
    wanted = replicas if isinstance(replicas, int) and not isinstance(replicas, bool) and replicas >= 0 else 1
    live = _dict(live_sts)
    done = _dict(_dict(live.get("metadata")).get("annotations")).get(RELEASED_EVICTION_ANNOTATION)
    done = done if isinstance(done, str) and _stamp(done) == done else None
    out = {"replicas": wanted, "annotations": {}, "released": False}
    if _dict(cr.get("spec")).get("suspend"):
        out.update(replicas=0, annotations={RELEASED_EVICTION_ANNOTATION: done} if done else {})
        return out
    eviction = server_evictions(cr, kueue, None, live_sts if live else None).get("eviction")
    if not isinstance(eviction, dict) or not eviction.get("time"):
        return out
    out["annotations"] = {RELEASED_EVICTION_ANNOTATION: eviction["time"]}
    if done != eviction["time"]:
        out.update(replicas=0, released=True)
        return out
    if _live_replicas(live):
        return out  # released once already and queued again: it waits with its pods
    out.update(replicas=0, released=True)
    pods = _dict(live.get("status")).get("replicas")
    if isinstance(pods, int) and not isinstance(pods, bool) and pods > 0:
        return out  # its pods are still going
    kueue = _dict(kueue)
    workload = kueue.get("workload")
    state = _hold_state(workload)
    if state == "reserved":
        since = _stamp(_workload_condition(workload, "QuotaReserved").get("lastTransitionTime"))
        out["annotations"][KUEUE_HOLD_ANNOTATION] = since or eviction["time"]
    elif state in ("none", "onhold") and cluster_queue_room(
            kueue.get("cluster_queue"), _dict(cr.get("spec")).get("flavor"), flavor_spec, wanted) is not False:
        out.update(replicas=wanted, released=False)
    return out
