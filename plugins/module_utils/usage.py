# -*- coding: utf-8 -*-
# Apache-2.0
"""Usage records: what one reservation of a DevServer used (the UsageRecord kind), when a
record is pruned, and the per-user / per-flavor summary of many records (devctl usage).

A record is opened by the devserver role when a reservation starts (no spec.endedAt yet: who,
which server and flavor, GPUs, price, start and expected end) and closed once when it ends
(status.reservation endReason: Expired, Cancelled, Idle, Stopped) or when the DevServer is
deleted during one (Deleted, the finalizer torchdev.io/devserver-usage).  A user may remove that
finalizer (they may patch their DevServers): a record still open whose DevServer is gone is
closed by the DevUser role of its namespace (usage_prune: endReason Deleted), so what a server
used never depends on the finalizer.  The DevUser role also deletes a closed record once its
retention has passed.  Its name is ``<server>-<startedAt as Unix seconds>``: a repeated
reconcile finds the record it would write and writes nothing (usage_write_needed).

EphemeralAccelerationJob and TrainingJob runs leave a record too (spec.kind; job_usage_record):
opened when the run starts, closed once when it ends (Succeeded or Failed), or by the DevUser
role when the job is found gone while its record is open (Deleted: jobs have no finalizer), named
``<eaj|tj>-<job>-<startedAt as Unix seconds>``.  A TrainingJob has one record per admission by
Kueue: from its first start to its end, its whole-group restarts (and their back-off) included,
unless Kueue evicts it: that record is closed at the eviction (Preempted, or Evicted for Kueue's
other reasons; no GPU-hours while it waits in the queue), and its next admission opens the next
record (its own startedAt, so its own name; trainingjob_status.decide's ``usage``).

Money and hours are decimal strings with 4 places ("12.1200"): exact sums, no floats in the
API.  Times are RFC 3339 UTC strings with second precision.  docs/api.md "UsageRecord".
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

from ansible_collections.torchdev.operator.plugins.module_utils.durations import parse_retention
from ansible_collections.torchdev.operator.plugins.module_utils.eviction import server_usage_reservation
from ansible_collections.torchdev.operator.plugins.module_utils.constants import (
    EMAIL_PATTERN, LABEL_COMPONENT, LABEL_INSTANCE, LABEL_MANAGED_BY, LABEL_NAME, LABEL_PART_OF, MANAGED_BY, OWNER_LABEL, PART_OF)
from ansible_collections.torchdev.operator.plugins.module_utils.flavor import flavor_gpu_count
from ansible_collections.torchdev.operator.plugins.module_utils.labels import owner_label
from ansible_collections.torchdev.operator.plugins.module_utils.lifecycle import (
    _seconds, _time, format_time, parse_time, reservation_active, spec_replicas)

# status.reservation.endReason (lifecycle.py, STOP_REASONS) and Deleted (the finalizer).
END_REASONS = ("Expired", "Cancelled", "Idle", "Stopped", "Deleted")
DELETED = "Deleted"
# How a job's run ended (EphemeralAccelerationJob phase, TrainingJob state Completed/Failed), or
# how a TrainingJob's admission ended: Kueue evicted its Workload, preempting it (Preempted) or for
# another reason (Evicted: PodsReadyTimeout, AdmissionCheck, ClusterQueueStopped, ...).
JOB_END_REASONS = ("Succeeded", "Failed", "Preempted", "Evicted")
# Every endReason a record may have (the CRD's enum), in the order the summary lists them.
RECORD_END_REASONS = END_REASONS + JOB_END_REASONS
# spec.kind: the kind of the object the record is about (absent: DevServer, records before it).
KINDS = ("DevServer", "TrainingJob", "EphemeralAccelerationJob")
# A job's record name starts with its kind's prefix: never the name of a DevServer's record.
JOB_RECORD_PREFIX = {"EphemeralAccelerationJob": "eaj", "TrainingJob": "tj"}
_EMAIL = re.compile(EMAIL_PATTERN)
MAX_GPUS = 16384
# The operator setting TORCHDEV_USAGE_RETENTION (roles' defaults) when it is not set.
DEFAULT_RETENTION = "90d"
PLACES = Decimal("0.0001")

def decimal(value):
    """A non-negative Decimal with 4 places, as the records store hours and money."""
    try:
        number = Decimal(str(value if value not in (None, "") else 0))
        if not number.is_finite():
            raise InvalidOperation
        return max(number, Decimal(0)).quantize(PLACES, rounding=ROUND_HALF_UP)
    except InvalidOperation:   # also 1e999999, whose 4 places exceed the context's precision
        raise ValueError("not a decimal number: %r" % (value,))


def _hours(seconds):
    return Decimal(max(0, int(seconds))) / Decimal(3600)


def record_name(server, started_at):
    """``<server>-<startedAt as Unix seconds>``: one record per reservation (a DevServer name
    is at most 52 characters, so the name fits a DNS label)."""
    return "%s-%d" % (server, _seconds(started_at))


def usage_record_name(cr):
    """The name of the record of the DevServer's current (or last) reservation, "" when it has
    none: what observe.yml reads to learn whether the record exists."""
    status = (cr or {}).get("status") or {}
    reservation = status.get("reservation") or {}
    if not reservation.get("startedAt"):
        return ""
    started = reservation["startedAt"]
    since = status.get("usageStartTime")  # a later admission's, after an eviction by Kueue
    if since and not reservation.get("endedAt"):
        try:
            if parse_time(since) > parse_time(started):
                started = since
        except ValueError:
            pass  # not a time: the reservation's record
    return record_name(((cr or {}).get("metadata") or {}).get("name"), started)


def ended_reservation(cr, reservation=None):
    """The reservation to record, with endedAt and endReason, or None: a reservation that ended
    (``reservation``, default status.reservation), or the running one of a DevServer being
    deleted (ended at its deletionTimestamp, reason Deleted)."""
    meta = (cr or {}).get("metadata") or {}
    if reservation is None:
        reservation = ((cr or {}).get("status") or {}).get("reservation")
    reservation = reservation or {}
    if not reservation.get("startedAt"):
        return None
    if reservation.get("endedAt") and reservation.get("endReason"):
        return reservation
    if meta.get("deletionTimestamp"):
        return dict(reservation, endedAt=format_time(meta["deletionTimestamp"]), endReason=DELETED)
    return None


def close_spec(spec, ended_at, reason, saved_seconds=0):
    """The ``spec`` of an open record closed at ``ended_at`` (not before its startedAt) with
    endReason ``reason``: GPU-hours (gpus x hours), cost (pricePerHour x replicas x hours) and
    the GPU-hours an idle shutdown saved (``saved_seconds``)."""
    started = _seconds(spec["startedAt"])
    ended = max(started, _seconds(ended_at))
    hours = _hours(ended - started)
    gpus, replicas, price = int(spec.get("gpus") or 0), int(spec.get("replicas") or 0), decimal(spec.get("pricePerHour"))
    return dict(spec, endedAt=_time(ended), endReason=reason, gpuHours=str(decimal(hours * gpus)),
                cost=str(decimal(hours * price * replicas)), idleSavedGPUHours=str(decimal(_hours(saved_seconds) * gpus)))


def usage_spec(cr, reservation, flavor_spec, user=None):
    """The spec of the record of a ``reservation`` of the DevServer ``cr`` with the flavor spec
    ``flavor_spec`` (None: the flavor is gone, no GPUs or price known), billed to ``user`` (the
    e-mail of the namespace's DevUser), else to spec.owner: closed (close_spec) when the
    reservation has endedAt, else open (no endedAt, endReason, gpuHours, cost, idleSavedGPUHours)."""
    meta = (cr or {}).get("metadata") or {}
    spec = (cr or {}).get("spec") or {}
    flavor_spec = flavor_spec or {}
    replicas = spec_replicas(cr)
    try:
        per_replica = flavor_gpu_count(flavor_spec)
    except ValueError:
        per_replica = 0
    gpus = replicas * per_replica
    started = _seconds(reservation["startedAt"])
    # queuedAt: when the server asked to run (lifecycle.py); a reservation from before that
    # field counts from the DevServer's creation.
    queued = reservation.get("queuedAt") or meta.get("creationTimestamp") or reservation["startedAt"]
    queued = min(_seconds(queued), started)
    price = decimal(flavor_spec.get("pricePerHour"))
    record = {"user": user or spec.get("owner") or "", "server": meta.get("name"), "flavor": spec.get("flavor") or ""}
    gpu_type = (flavor_spec.get("gpu") or {}).get("type")
    if gpu_type:
        record["gpuType"] = gpu_type
    record.update(replicas=replicas, gpus=gpus, pricePerHour=str(price), queuedAt=_time(queued),
                  startedAt=_time(started))
    if reservation.get("expiresAt"):
        record["expiresAt"] = format_time(reservation["expiresAt"])
    if not reservation.get("endedAt"):
        return record
    saved = 0
    if reservation.get("endReason") == "Idle" and reservation.get("expiresAt"):
        saved = _seconds(reservation["expiresAt"]) - max(started, _seconds(reservation["endedAt"]))
    return close_spec(record, reservation["endedAt"], reservation["endReason"], saved)


def usage_record(cr, reservation=None, flavor_spec=None, now=None, retention=DEFAULT_RETENTION, user=None,
                 evictions=None):
    """{name, spec} of the record the DevServer ``cr`` should have now, or None: the open record
    of a reservation under way (``reservation``, default status.reservation), the closed record
    of one that ended (see ended_reservation), or None when none started, or it ended longer than
    ``retention`` ago (its record is pruned, or about to be: it is not written again).
    ``user``: who is billed (usage_spec).  ``evictions`` (eviction.server_evictions): after an
    eviction by Kueue the record is the current admission's, closed at an eviction
    (eviction.server_usage_reservation)."""
    if evictions:
        if reservation is None:
            reservation = ((cr or {}).get("status") or {}).get("reservation")
        reservation = server_usage_reservation(reservation, evictions)
    ended = ended_reservation(cr, reservation)
    if ended is None:
        if reservation is None:
            reservation = ((cr or {}).get("status") or {}).get("reservation")
        if not reservation_active(reservation):
            return None
        name = record_name(((cr or {}).get("metadata") or {}).get("name"), reservation["startedAt"])
        return {"name": name, "spec": usage_spec(cr, reservation, flavor_spec, user)}
    if now is not None and _seconds(now) >= _seconds(ended["endedAt"]) + parse_retention(retention):
        return None
    name = record_name(((cr or {}).get("metadata") or {}).get("name"), ended["startedAt"])
    return {"name": name, "spec": usage_spec(cr, ended, flavor_spec, user)}


def _count(value, lowest=0):
    """A whole number from a spec the API validated (None when it is not one)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return None
    try:
        number = int(value)
    except ValueError:
        return None
    return number if lowest <= number <= MAX_GPUS else None


def _run_of(kind, job, decision):
    """(started, ended or None, endReason or None, replicas, GPUs per replica) of a job run that
    started (ended None while it runs), or None: no run started, or a field it cannot read."""
    spec = (job or {}).get("spec") if isinstance((job or {}).get("spec"), dict) else {}
    decision = decision if isinstance(decision, dict) else {}
    if kind == "EphemeralAccelerationJob":
        reason = {"Succeeded": "Succeeded", "Failed": "Failed"}.get(decision.get("phase"))
        started, ended = decision.get("startedAt"), decision.get("finishedAt")
        resources = spec.get("resources") if isinstance(spec.get("resources"), dict) else {}
        replicas, per_replica = 1, _count(resources.get("gpu", 0))
    elif kind == "TrainingJob":
        usage = decision.get("usage")
        if isinstance(usage, dict):  # trainingjob_status.decide: the current admission's record
            reason = usage.get("endReason") if usage.get("endReason") in JOB_END_REASONS else None
            started, ended = usage.get("startedAt"), usage.get("endedAt")
        else:
            reason = {"Completed": "Succeeded", "Failed": "Failed"}.get(decision.get("state"))
            started, ended = decision.get("startTime"), decision.get("completionTime")
        replicas, per_replica = _count(spec.get("numWorkers", 1), 1), _count(spec.get("gpusPerWorker", 0))
    else:
        return None
    if not started or replicas is None or per_replica is None or bool(reason) != bool(ended):
        return None
    try:
        return _seconds(started), (_seconds(ended) if ended else None), reason, replicas, per_replica
    except (ValueError, TypeError, OverflowError):
        return None


def job_usage_record_name(job, decision, kind="EphemeralAccelerationJob", now=None, retention=DEFAULT_RETENTION):
    """The name of the record job_usage_record writes for the run ``decision`` saw,
    whoever is billed, or "" (no run to record): what the roles read before writing it."""
    record = job_usage_record(job, decision, "x@x.x", kind, now, retention)
    return record["name"] if record else ""


def job_usage_record(job, decision, user, kind="EphemeralAccelerationJob", now=None, retention=DEFAULT_RETENTION):
    """{name, labels, spec} of the UsageRecord of the run of the job ``job`` (``kind``:
    EphemeralAccelerationJob or TrainingJob) as this reconcile's ``decision`` saw it, or None.
    **Open** (no endedAt) from the moment the run started, so that a job deleted while it runs
    (jobs have no finalizer) still leaves a record, which the DevUser role closes (usage_prune:
    endReason Deleted); **closed** once the run ended (endReason Succeeded or Failed) or, for a
    TrainingJob, once Kueue evicted it (Preempted or Evicted: the decision's ``usage``, one record
    per admission, started at the admission).  None for
    a run whose pods never started (no startedAt/startTime: it used nothing), or when ``user``
    (the e-mail of the namespace's DevUser) is not an e-mail (a namespace without a DevUser: no
    one to bill, docs/api.md).  GPUs: the pod's spec.resources.gpu (EphemeralAccelerationJob, 1
    replica) or numWorkers x gpusPerWorker (TrainingJob, numWorkers replicas); startedAt: when
    the pod ran (the Job started: Kueue admitted it); endedAt: its end; queuedAt: the job's
    creation.  ``labels``: the record's (its owner label selects a user's records).  A job has
    no flavor: no flavor, pricePerHour 0, so cost 0 (close_spec).  A run that ended longer than
    ``retention`` before ``now`` renders None: the DevUser role pruned its record, which a later
    reconcile of the finished job must not write again."""
    if kind not in JOB_RECORD_PREFIX or not isinstance(user, str) or len(user) > 254 or not _EMAIL.match(user):
        return None
    meta = (job or {}).get("metadata") if isinstance(job, dict) and isinstance(job.get("metadata"), dict) else {}
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        return None
    run = _run_of(kind, job, decision)
    if run is None:
        return None
    started, ended, reason, replicas, per_replica = run
    try:
        if ended is not None and now is not None and _seconds(now) >= ended + parse_retention(retention):
            return None
    except (ValueError, TypeError, OverflowError):
        return None
    try:
        queued = min(_seconds(meta.get("creationTimestamp") or started), started)
    except (ValueError, TypeError, OverflowError):
        queued = started
    record = {"kind": kind, "user": user, "server": name, "replicas": replicas, "gpus": replicas * per_replica,
              "pricePerHour": str(decimal(0)), "queuedAt": _time(queued), "startedAt": _time(started)}
    labels = {LABEL_NAME: "usagerecord", LABEL_INSTANCE: name, LABEL_PART_OF: PART_OF, LABEL_MANAGED_BY: MANAGED_BY,
              LABEL_COMPONENT: JOB_RECORD_PREFIX[kind], OWNER_LABEL: owner_label(user)}
    return {"name": "%s-%s-%d" % (JOB_RECORD_PREFIX[kind], name, started), "labels": labels,
            "spec": record if ended is None else close_spec(record, _time(ended), reason)}


def usage_write_needed(observed, desired):
    """Whether the role writes ``desired`` ({name, spec} from usage_record, or None) given the
    record ``observed`` read by the name of status.reservation (None when missing): never a closed
    record again (immutable), an open one when what it knows changed (the reservation was
    extended, it ended), a missing one (also a new reservation's, under another name)."""
    if not desired:
        return False
    if not isinstance(observed, dict) or ((observed.get("metadata") or {}).get("name")) != desired.get("name"):
        return True
    spec = observed.get("spec") or {}
    return not spec.get("endedAt") and spec != desired.get("spec")


def _ended(record):
    spec = (record or {}).get("spec") or {}
    ended = spec.get("endedAt") or ((record or {}).get("metadata") or {}).get("creationTimestamp")
    if not ended:
        raise ValueError("a usage record needs spec.endedAt or metadata.creationTimestamp")
    return ended


def usage_prune_due(oldest_ended_at, now, retention=DEFAULT_RETENTION, period=None):
    """When the DevUser role next reads its namespace's UsageRecords, from status.usageRecords.
    oldestEndedAt (the oldest record it kept the last time it read them): {list: bool, requeue:
    "<seconds>s" or ""}.  It reads them when it knows of none (``oldest_ended_at`` empty: a record
    written since is found by the next reconcile) or once the oldest's retention has passed;
    otherwise it looks again exactly then when that is sooner than the watch's reconcile
    ``period`` (seconds; a per-object requeue, no polling), else the period brings it back."""
    if not oldest_ended_at:
        return {"list": True, "requeue": ""}
    left = _seconds(oldest_ended_at) + parse_retention(retention) - _seconds(now)
    if left <= 0:
        return {"list": True, "requeue": ""}
    soon = period is None or left < parse_retention(period)
    return {"list": False, "requeue": "%ds" % left if soon else ""}


def orphaned(spec, servers):
    """Whether the open record ``spec`` lost its object: none of ``servers`` (the namespace's
    objects of the record's kind, as listed: DevServers, or EphemeralAccelerationJobs or
    TrainingJobs) has its spec.server name, or the one that has it was created after the run
    started (deleted and created again).  A server still being deleted is not gone: its
    finalizer closes the record."""
    for server in servers or []:
        meta = (server or {}).get("metadata") or {}
        if meta.get("name") != spec.get("server"):
            continue
        created = meta.get("creationTimestamp")
        return bool(created) and _seconds(created) > _seconds(spec["startedAt"])
    return True


def usage_prune(records, now, retention=DEFAULT_RETENTION, period=None, servers=None, jobs=None):
    """What the DevUser role does with the UsageRecords of its namespace (all of them, as read),
    its DevServers (``servers``, as listed; None: not read) and its jobs (``jobs``: {kind:
    [the namespace's EphemeralAccelerationJobs or TrainingJobs, as listed]}; None or a kind left
    out: not read): {delete: [names whose retention has passed since spec.endedAt], close:
    [{name, spec}: the open records whose DevServer or job is gone (orphaned: a DevServer
    deleted without its finalizer, which a user may remove; a job deleted while it ran: jobs have
    no finalizer), closed with endReason Deleted at now, or at their expiresAt when that is
    sooner; labels: the record's, which a server-side apply by the same field manager must
    repeat], oldestEndedAt: the oldest kept record's end (None when none is kept, and while a
    record is open: the role reads them at every reconcile then), requeue: "<seconds>s" until the
    oldest kept record's retention ends when that is sooner than ``period``, else ""}.  A record
    whose objects were not read is not closed.  Records being deleted are left out; an open
    record is never deleted."""
    owners = dict(jobs) if isinstance(jobs, dict) else {}
    owners["DevServer"] = servers
    keep, delete, close, still_open = [], [], [], False
    limit = _seconds(now) - parse_retention(retention)
    for record in sorted(records or [], key=lambda r: ((r or {}).get("metadata") or {}).get("name") or ""):
        meta = (record or {}).get("metadata") or {}
        spec = (record or {}).get("spec") or {}
        if meta.get("deletionTimestamp"):
            continue
        try:
            if not spec.get("endedAt"):
                # A record is checked against the objects of its kind (no spec.kind: DevServer).
                listed = owners.get(spec.get("kind", "DevServer"))
                if not isinstance(listed, list) or not orphaned(spec, listed):
                    still_open = True
                    continue
                end = min(_seconds(now), _seconds(spec.get("expiresAt") or now))
                spec = close_spec(spec, _time(end), DELETED)
                if _seconds(spec["endedAt"]) > limit:  # else deleted at once: no need to close it first
                    close.append({"name": meta.get("name"), "labels": meta.get("labels") or {}, "spec": spec})
            ended = _ended({"metadata": meta, "spec": spec})
            (delete if _seconds(ended) <= limit else keep).append((meta.get("name"), ended))
        except (ValueError, TypeError, AttributeError):
            # A time it cannot read (the CRD's date-time format keeps them out): left alone, never
            # deleted, and read again at the next reconcile.
            still_open = True
    oldest = min((_seconds(ended) for _, ended in keep), default=None)
    oldest = None if oldest is None else _time(oldest)
    due = usage_prune_due(oldest, now, retention, period) if oldest else {"requeue": ""}
    return {"delete": [name for name, _ in delete], "close": close, "oldestEndedAt": None if still_open else oldest,
            "requeue": due["requeue"]}


# --------------------------------------------------------------------------- the summary
def _empty(key):
    return {"key": key, "launched": 0, "ended": dict((reason, 0) for reason in RECORD_END_REASONS),
            "earlyCancellations": 0, "meanWaitSeconds": 0, "gpuHours": "0.0000", "cost": "0.0000",
            "idleSavedGPUHours": "0.0000"}


def _add(row, spec, waits):
    row["launched"] += 1
    reason = spec.get("endReason")
    if reason in row["ended"]:
        row["ended"][reason] += 1
    ended, expires = spec.get("endedAt"), spec.get("expiresAt")
    if reason == "Cancelled" and expires and ended and _seconds(ended) < _seconds(expires):
        row["earlyCancellations"] += 1
    if spec.get("startedAt") and spec.get("queuedAt"):
        waits.append(max(0, _seconds(spec["startedAt"]) - _seconds(spec["queuedAt"])))
    for field in ("gpuHours", "cost", "idleSavedGPUHours"):
        row[field] = str(decimal(Decimal(row[field]) + decimal(spec.get(field))))


def usage_summary(records, since=None, user=None, kind=None):
    """Aggregate UsageRecords (objects or their specs) per user, per flavor, per kind (spec.kind,
    absent: DevServer) and in total:
    reservations launched, ended by reason, early cancellations (Cancelled before expiresAt),
    the mean wait (startedAt - queuedAt, whole seconds), GPU-hours, cost and the GPU-hours
    an idle shutdown saved.  ``since``: only records that ended at or after that time;
    ``user``: only that user's records.  Open records (reservations under way: no endedAt) are
    not aggregated, only counted (``running``): what they used is known when they end.
    ``kind``: only records of that kind.
    Returns {records, running, byUser, byFlavor, byKind, total}, rows sorted by key."""
    specs, running = [], 0
    for record in records or []:
        spec = record.get("spec") if isinstance(record.get("spec"), dict) else record
        if user and spec.get("user") != user:
            continue
        if kind and (spec.get("kind") or "DevServer") != kind:
            continue
        if not spec.get("endedAt"):
            running += 1
            continue
        if since and (not spec.get("endedAt") or parse_time(spec["endedAt"]) < parse_time(since)):
            continue
        specs.append(spec)
    result = {"records": len(specs), "running": running}
    for group, field in (("byUser", "user"), ("byFlavor", "flavor"), ("byKind", "kind")):
        rows, waits = {}, {}
        for spec in specs:
            key = spec.get(field) or ("DevServer" if field == "kind" else "")
            _add(rows.setdefault(key, _empty(key)), spec, waits.setdefault(key, []))
        for key, row in rows.items():
            row["meanWaitSeconds"] = int(round(sum(waits[key]) / float(len(waits[key])))) if waits[key] else 0
        result[group] = [rows[key] for key in sorted(rows)]
    total, waits = _empty("total"), []
    for spec in specs:
        _add(total, spec, waits)
    total["meanWaitSeconds"] = int(round(sum(waits) / float(len(waits)))) if waits else 0
    result["total"] = total
    return result
