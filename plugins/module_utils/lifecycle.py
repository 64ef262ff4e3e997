# -*- coding: utf-8 -*-
# Apache-2.0
"""DevServer lifecycle rules: the reservation (spec.lifecycle.duration, its caps, startedAt /
expiresAt, extensions), idleness from the in-pod agents' activity record, the warnings before
an expiry or an idle shutdown, when the operator stops a server and why, and the next
deadline (a per-object requeue, never a polling loop).

Times are RFC 3339 UTC strings with second precision ("2026-11-24T10:00:00Z"); durations are
written like Go's ("4h", "1h30m", "90s"). docs/api.md "Lifecycle" describes the behaviour.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import json

from ansible_collections.torchdev.operator.plugins.module_utils.conditions import condition
from ansible_collections.torchdev.operator.plugins.module_utils.constants import (
    STOPPED_AT_ANNOTATION, STOPPED_BY_ANNOTATION, STOP_REASONS)
# (durations.py parses and formats durations; devctl and the tests import them from here too)
from ansible_collections.torchdev.operator.plugins.module_utils.durations import (
    format_duration, parse_duration)

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)

# The operator's defaults (roles/devserver/defaults/main.yml passes the settings).
DEFAULT_SETTINGS = {
    "max_reservation": "24h",      # the cluster maximum of spec.lifecycle.duration ("" = none)
    "max_keepalive": "24h",        # how far a keepalive may postpone an idle shutdown
    "warnings": [1800, 900, 300],  # seconds before an expiry / idle shutdown
    "gpu_util_threshold": 10,      # percent: a GPU busier than this keeps the server active
    "cpu_busy_threshold": 10,      # percent of one core: a user process busier than this does
}


def parse_time(value):
    if isinstance(value, datetime.datetime):
        return value if value.tzinfo else value.replace(tzinfo=datetime.timezone.utc)
    text = str(value or "").strip()
    try:
        parsed = datetime.datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    except ValueError:
        raise ValueError("not an RFC 3339 time: %r" % (value,))
    if parsed.tzinfo is None:
        raise ValueError("not an RFC 3339 time (no zone): %r" % (value,))
    return parsed.astimezone(datetime.timezone.utc)


def format_time(value):
    return parse_time(value).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def _seconds(value):
    return int((parse_time(value) - _EPOCH).total_seconds())


def _time(seconds):
    return (_EPOCH + datetime.timedelta(seconds=int(seconds))).strftime("%Y-%m-%dT%H:%M:%SZ")


def settings_of(settings):
    result = dict(DEFAULT_SETTINGS)
    result.update({key: value for key, value in (settings or {}).items() if value is not None})
    warnings = result["warnings"]
    if isinstance(warnings, str):
        warnings = [part for part in warnings.replace(",", " ").split() if part]
    result["warnings"] = sorted({parse_duration(w) for w in warnings}, reverse=True)
    return result


def reservation_problem(spec, settings=None, devuser=None):
    """{reason: InvalidSpec, message} when spec.lifecycle.duration exceeds the cluster maximum
    (operator setting) or the namespace's DevUser's spec.quota.maxReservation; else None."""
    lifecycle = (spec or {}).get("lifecycle") or {}
    if not lifecycle.get("duration"):
        return None
    settings = settings_of(settings)
    try:
        duration = parse_duration(lifecycle["duration"])
    except ValueError as exc:
        return {"reason": "InvalidSpec", "message": "spec.lifecycle.duration: %s" % exc}
    caps = []
    if settings.get("max_reservation"):
        caps.append((parse_duration(settings["max_reservation"]), "the cluster maximum"))
    user_max = (((devuser or {}).get("spec") or {}).get("quota") or {}).get("maxReservation")
    if user_max:
        caps.append((parse_duration(user_max), "the maximum of DevUser %s (spec.quota.maxReservation)"
                     % ((devuser.get("metadata") or {}).get("name"))))
    for cap, what in sorted(caps):
        if duration > cap:
            return {"reason": "InvalidSpec",
                    "message": "spec.lifecycle.duration %s exceeds %s of %s; ask for at most %s"
                               % (lifecycle["duration"], what, format_duration(cap), format_duration(cap))}
    return None


def _pod_start(pod):
    status = (pod or {}).get("status") or {}
    start = status.get("startTime") or ((pod or {}).get("metadata") or {}).get("creationTimestamp")
    return _seconds(start) if start else None


def idle_since(activity, pods, replicas):
    """When every wanted replica's agent last reported idle: the latest 'since' of their
    reports, or None while any replica is active or has not reported since its pod started
    (a report older than its pod is a previous pod's and does not count)."""
    if not replicas:
        return None
    data = ((activity or {}).get("data") or {})
    latest = None
    counted = 0
    for pod in pods or []:
        meta = pod.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            continue
        try:
            report = json.loads(data.get(meta.get("name")) or "null")
        except ValueError:
            report = None
        if not isinstance(report, dict) or report.get("state") != "idle" or not report.get("since"):
            return None
        try:
            since = _seconds(report["since"])
        except ValueError:
            return None
        started = _pod_start(pod)
        if started is not None and since < started:
            return None
        latest = since if latest is None else max(latest, since)
        counted += 1
    if counted < int(replicas):
        return None
    return latest


def _warnings_due(deadline, offsets, sent, now):
    """(offsets newly due, next future warning instant or None)."""
    due, upcoming = [], None
    for offset in offsets:
        at = deadline - offset
        if at <= now:
            if offset not in sent and now < deadline:
                due.append(offset)
        elif upcoming is None or at < upcoming:
            upcoming = at
    return due, upcoming


def reservation_active(reservation):
    """A reservation is under way: started and not ended (status.reservation, or None)."""
    reservation = reservation or {}
    return bool(reservation.get("startedAt")) and not reservation.get("endedAt")


def lifecycle_status(cr, running, now, activity=None, pods=None, settings=None):
    """What the lifecycle means for this reconcile of a DevServer.

    ``running``: every wanted replica is ready now (the reservation starts at the first such
    reconcile); ``activity``: the ConfigMap <name>-activity the agents patch; ``pods``: the
    server's live pods.  Returns a dict:

    - ``reservation``: status.reservation (None removes it): queuedAt, duration, startedAt,
      expiresAt, extensions, warningsSent, and endedAt / endReason once it ended
    - ``idle``: status.idle (None removes it): since, deadline, autoShutdown, warningsSent
    - ``stop``: None, or {reason: Expired|Idle, message} -- the operator stops the server now
    - ``events``: [{reason, message}] -- warnings to announce now (one Event each)
    - ``condition``: the Expiring condition
    - ``requeue``: seconds until the next deadline or warning ("" for none)
    - ``config``: deadlines.json of the ConfigMap <name>-lifecycle, for the in-pod agent
    """
    settings = settings_of(settings)
    meta = (cr or {}).get("metadata") or {}
    spec = (cr or {}).get("spec") or {}
    lifecycle = spec.get("lifecycle") or {}
    old = ((cr or {}).get("status") or {}).get("reservation") or {}
    old_idle = ((cr or {}).get("status") or {}).get("idle") or {}
    generation = meta.get("generation")
    now_s = _seconds(now)
    annotations = meta.get("annotations") or {}
    offsets = settings["warnings"]
    result = {"reservation": old or None, "idle": None, "stop": None, "events": [], "requeue": "",
              "condition": condition("Expiring", "False", "NoDeadline", "no expiry or idle shutdown is due", generation)}
    active = reservation_active(old)
    idle_timeout = int(lifecycle.get("idleTimeout") or 0)
    auto = bool(lifecycle.get("autoShutdown", False))
    config = {"expiresAt": None, "idleDeadline": None, "idleTimeoutSeconds": idle_timeout,
              "autoShutdown": auto, "warnings": offsets,
              "gpuUtilThreshold": int(settings["gpu_util_threshold"]),
              "cpuBusyThreshold": int(settings["cpu_busy_threshold"])}
    result["config"] = config

    if spec.get("suspend"):
        if active:
            by = annotations.get(STOPPED_BY_ANNOTATION) or "user"
            ended = dict(old)
            ended["endedAt"] = annotations.get(STOPPED_AT_ANNOTATION) or _time(now_s)
            ended["endReason"] = STOP_REASONS.get(by, "Stopped")
            result["reservation"] = ended
        return result
    if not active:
        if not running:
            # Not started yet (or restarting after a stop): the last reservation stays on
            # record until the next one starts.
            return result
        # A new reservation (None removes the last one's keys in the status merge patch).
        old = {"queuedAt": queued_at(cr, now_s), "startedAt": _time(now_s), "extensions": 0, "warningsSent": [],
               "endedAt": None, "endReason": None}
    reservation = dict(old)
    deadlines = []
    if lifecycle.get("duration"):
        duration = parse_duration(lifecycle["duration"])
        expires = _seconds(reservation["startedAt"]) + duration
        previous = reservation.get("expiresAt")
        if previous and _seconds(previous) != expires:
            reservation["warningsSent"] = []
            if _seconds(previous) < expires:
                reservation["extensions"] = int(reservation.get("extensions") or 0) + 1
        reservation["duration"] = format_duration(duration)
        reservation["expiresAt"] = _time(expires)
        config["expiresAt"] = reservation["expiresAt"]
        sent = list(reservation.get("warningsSent") or [])
        due, upcoming = _warnings_due(expires, offsets, sent, now_s)
        if due:
            reservation["warningsSent"] = sorted(set(sent) | set(due), reverse=True)
            result["events"].append({
                "reason": "ReservationExpiring",
                "message": "the reservation of %s ends at %s (in %s); the server will stop and keep its home; "
                           "extend it with `devctl extend %s --hours H`"
                           % (meta.get("name"), reservation["expiresAt"], format_duration(expires - now_s),
                              meta.get("name"))})
        deadlines += [at for at in (upcoming, expires) if at is not None and at > now_s]
        if now_s >= expires:
            result["stop"] = {"reason": "Expired",
                              "message": "the reservation of %s ended at %s" % (format_duration(duration),
                                                                                  reservation["expiresAt"])}
        elif any(expires - o <= now_s for o in offsets):
            result["condition"] = condition(
                "Expiring", "True", "ReservationExpiring",
                "the reservation ends at %s; the server will stop (its home is kept)" % reservation["expiresAt"],
                generation)
    else:
        reservation.update(duration=None, expiresAt=None)
    result["reservation"] = reservation

    since = idle_since(activity, pods, spec_replicas(cr)) if idle_timeout > 0 else None
    if since is not None:
        deadline = since + idle_timeout
        keepalive = lifecycle.get("keepAliveUntil")
        if keepalive:
            cap = deadline + parse_duration(settings["max_keepalive"])
            deadline = max(deadline, min(_seconds(keepalive), cap))
        idle = {"since": _time(since), "deadline": _time(deadline), "autoShutdown": auto,
                "warningsSent": [] if old_idle.get("deadline") != _time(deadline)
                else list(old_idle.get("warningsSent") or [])}
        config["idleDeadline"] = idle["deadline"]
        due, upcoming = _warnings_due(deadline, offsets, idle["warningsSent"], now_s)
        if due:
            idle["warningsSent"] = sorted(set(idle["warningsSent"]) | set(due), reverse=True)
            result["events"].append({
                "reason": "IdleShutdownPending" if auto else "IdleTimeout",
                "message": ("%s has been idle since %s and will be stopped at %s (in %s); its home is kept; "
                            "postpone with `devctl keepalive %s --hours H`" if auto else
                            "%s has been idle since %s; its idle timeout ends at %s (in %s); "
                            "autoShutdown is off, so it keeps running (%s)")
                           % (meta.get("name"), idle["since"], idle["deadline"], format_duration(deadline - now_s),
                              meta.get("name"))})
        deadlines += [at for at in (upcoming, deadline) if at is not None and at > now_s]
        if now_s >= deadline and not auto and 0 not in idle["warningsSent"]:
            # autoShutdown false: one notice when the idle timeout has passed.
            idle["warningsSent"] = sorted(set(idle["warningsSent"]) | {0}, reverse=True)
            result["events"].append({
                "reason": "IdleTimeout",
                "message": "%s has been idle since %s, longer than spec.lifecycle.idleTimeout (%s); autoShutdown "
                           "is false, so it keeps running" % (meta.get("name"), idle["since"],
                                                              format_duration(idle_timeout))})
        if now_s >= deadline:
            # A run that comes after both the idle deadline and the expiry (a busy operator) stops
            # for what came first: an idle shutdown before the reservation's end is recorded as Idle.
            expired_later = (result["stop"] or {}).get("reason") == "Expired" and deadline < _seconds(
                reservation["expiresAt"])
            if auto and (not result["stop"] or expired_later):
                result["stop"] = {"reason": "Idle",
                                  "message": "idle since %s, longer than spec.lifecycle.idleTimeout (%s)"
                                             % (idle["since"], format_duration(idle_timeout))}
            elif not auto:
                result["condition"] = condition(
                    "Expiring", "True", "IdleTimeout",
                    "idle since %s; autoShutdown is false, so the server keeps running" % idle["since"], generation)
        elif result["condition"]["status"] != "True" and any(deadline - o <= now_s for o in offsets):
            result["condition"] = condition(
                "Expiring", "True", "IdleShutdownPending" if auto else "IdleTimeout",
                ("idle since %s; the server will stop at %s unless it is used" if auto else
                 "idle since %s; its idle timeout ends at %s (autoShutdown is false)") % (idle["since"], idle["deadline"]),
                generation)
        result["idle"] = idle
    if deadlines and not result["stop"]:
        result["requeue"] = "%ds" % max(1, min(deadlines) - now_s)
    return result


def queued_at(cr, now):
    """When the reservation starting now was asked for: since when the server has been
    Progressing (queued or provisioning: the condition's lastTransitionTime in the status the
    run started from), else, for its first reservation, its creation; else now (the wait is
    unknown).  usage.py records startedAt - queuedAt as the wait."""
    status = (cr or {}).get("status") or {}
    now_s = _seconds(now) if not isinstance(now, int) else now
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Progressing" and cond.get("status") == "True" and cond.get("lastTransitionTime"):
            return _time(min(now_s, _seconds(cond["lastTransitionTime"])))
    created = ((cr or {}).get("metadata") or {}).get("creationTimestamp")
    if created and not (status.get("reservation") or {}).get("startedAt"):
        return _time(min(now_s, _seconds(created)))
    return _time(now_s)


def spec_replicas(cr):
    """The replicas a running server wants (1 standalone; worldSize / nprocsPerNode distributed)."""
    spec = (cr or {}).get("spec") or {}
    if spec.get("mode") != "distributed":
        return 1
    dist = spec.get("distributed") or {}
    world, per_node = int(dist.get("worldSize") or 1), int(dist.get("nprocsPerNode") or 1)
    return max(1, world // max(1, per_node))


def stop_patch(reason, now):
    """The merge patch with which the operator stops a server: spec.suspend and the
    annotations that say why and when (as Kueue suspends a Job through its spec)."""
    by = {"Expired": "expired", "Idle": "idle"}.get(reason, str(reason).lower())
    return {"metadata": {"annotations": {STOPPED_BY_ANNOTATION: by, STOPPED_AT_ANNOTATION: format_time(now)}},
            "spec": {"suspend": True}}


def stopped_phase(cr):
    """(phase, Ready reason, message) of a suspended server: Expired / Stopped with why, or
    Suspended for a bare spec.suspend."""
    meta = (cr or {}).get("metadata") or {}
    annotations = meta.get("annotations") or {}
    by = annotations.get(STOPPED_BY_ANNOTATION)
    at = annotations.get(STOPPED_AT_ANNOTATION)
    when = " at %s" % at if at else ""
    if by == "expired":
        return "Expired", "Expired", "the reservation ended%s; scaled to 0, home kept; `devctl start` begins a new one" % when
    if by == "idle":
        return "Stopped", "IdleTimeout", "stopped for idleness%s; scaled to 0, home kept; `devctl start` resumes it" % when
    if by == "cancelled":
        return "Stopped", "Cancelled", "the reservation was cancelled%s; scaled to 0, home kept" % when
    if by == "user":
        return "Stopped", "UserStopped", "stopped by its user%s; scaled to 0, home kept; `devctl start` resumes it" % when
    return "Suspended", "Suspended", "spec.suspend is true; scaled to 0, volumes kept"
