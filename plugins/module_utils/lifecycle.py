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
# The instants a status may hold: _time clamps to them (a huge duration or report cannot
# overflow the date arithmetic of a reconcile).
_MIN_SECONDS = int((datetime.datetime(1, 1, 1, tzinfo=datetime.timezone.utc) - _EPOCH).total_seconds())
_MAX_SECONDS = int((datetime.datetime(9999, 12, 31, 23, 59, 59, tzinfo=datetime.timezone.utc) - _EPOCH).total_seconds())

# The agents' reports (ConfigMap <name>-activity, one key per pod) are written with a token a
# shell in the user's pod can read: each is checked before it counts (activity_report).
REPORT_CLOCK_SKEW = 300     # seconds a report's "since" may be ahead of the operator's clock
REPORT_MAX_CHARS = 4096     # characters of one pod's report (the agent writes about 150)
ACTIVITY_PROBLEM_MAX_CHARS = 1024   # status.activityReportProblem (the CRD's maxLength)

# The operator's defaults (roles/devserver/defaults/main.yml passes the settings).
DEFAULT_SETTINGS = {
    "max_reservation": "24h",      # the cluster maximum of spec.lifecycle.duration ("" = none)
    "max_keepalive": "24h",        # how far a keepalive may postpone an idle shutdown
    "warnings": [1800, 900, 300],  # seconds before an expiry / idle shutdown
    "gpu_util_threshold": 10,      # percent: a GPU busier than this keeps the server active
    "cpu_busy_threshold": 10,      # percent of one core: a user process busier than this does
}


def parse_time(value):
    """The aware UTC datetime of an RFC 3339 time; ValueError (never another error) for
    anything else, a time whose UTC falls outside years 1-9999 included."""
    if isinstance(value, datetime.datetime):
        return value if value.tzinfo else value.replace(tzinfo=datetime.timezone.utc)
    text = value.strip() if isinstance(value, str) else ""
    try:
        parsed = datetime.datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
        if parsed.tzinfo is None:
            raise ValueError("not an RFC 3339 time (no zone): %r" % (value,))
        return parsed.astimezone(datetime.timezone.utc)
    except (ValueError, OverflowError) as exc:   # OverflowError: 0001-01-01T00:00:00+01:00
        raise ValueError(str(exc) if "no zone" in str(exc) else "not an RFC 3339 time: %r" % (_short(value),))


def time_or_none(value):
    """parse_time's datetime, or None for anything that is not an RFC 3339 time (None, "", text,
    any other type): for a time read from what anyone may write (an Event, a status devctl
    shows), where a bad one is skipped.  Never raises."""
    try:
        return parse_time(value)
    except ValueError:
        return None


def format_time(value):
    return parse_time(value).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def _seconds(value):
    return int((parse_time(value) - _EPOCH).total_seconds())


def _time(seconds):
    """RFC 3339 of seconds since the epoch, clamped to years 1-9999 (never an OverflowError)."""
    seconds = min(_MAX_SECONDS, max(_MIN_SECONDS, int(seconds)))
    return (_EPOCH + datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _seconds_or_none(value):
    try:
        return _seconds(value)
    except ValueError:
        return None


def _short(value, limit=64):
    """repr of a value for a message, at most about limit characters."""
    text = repr(value) if not isinstance(value, str) or len(value) <= limit else repr(value[:limit]) + "..."
    return text if len(text) <= limit + 8 else text[:limit] + "..."


def _duration_or_none(value):
    if not value:
        return None
    try:
        return parse_duration(value)
    except ValueError:
        return None


def _whole(value, default=0, low=0, high=10 * 366 * 86400):
    """An int in [low, high] of a spec number (default for anything that is not a number)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        return default
    if value in (float("inf"), float("-inf")):
        return high if value > 0 else low
    return min(high, max(low, int(value)))


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
    return _seconds_or_none(start) if start else None


def activity_report(text, now):
    """(report, problem) of one pod's entry in <name>-activity: the report as a dict
    {state, since (seconds since the epoch, or None)}, or None with problem the reason it is
    ignored.  The entry is written with a token a shell in the user's pod can read, so anything
    is checked: JSON of at most REPORT_MAX_CHARS characters, an object whose state is "idle" or
    "active" and whose since is an RFC 3339 time from 1970 to REPORT_CLOCK_SKEW seconds past
    ``now`` (the operator's clock: seconds since the epoch or RFC 3339).  A missing entry is
    (None, None): not reported yet."""
    now = now if isinstance(now, int) else _seconds(now)
    if text is None or text == "":
        return None, None
    if not isinstance(text, str):
        return None, "the report is a %s, not a JSON string" % type(text).__name__
    if len(text) > REPORT_MAX_CHARS:
        return None, "the report has %d characters, more than %d" % (len(text), REPORT_MAX_CHARS)
    try:
        report = json.loads(text)
    except (ValueError, RecursionError):
        return None, "the report is not JSON: %s" % _short(text)
    if not isinstance(report, dict):
        return None, "the report is not a JSON object: %s" % _short(text)
    state = report.get("state")
    if state not in ("idle", "active"):
        return None, "state %s is neither idle nor active" % _short(state)
    since = report.get("since")
    if since is None and state == "active":
        return {"state": state, "since": None}, None
    if not isinstance(since, str):
        return None, "since %s is not an RFC 3339 time" % _short(since)
    seconds = _seconds_or_none(since)
    if seconds is None:
        return None, "since %s is not an RFC 3339 time" % _short(since)
    if seconds < 0:
        return None, "since %s is before 1970" % _short(since)
    if seconds > now + REPORT_CLOCK_SKEW:
        return None, "since %s is in the future (more than %ds ahead of the operator's clock)" % (
            _short(since), REPORT_CLOCK_SKEW)
    return {"state": state, "since": seconds}, None


def activity_reports(activity, pods, replicas, now):
    """(idle since, problems): idle since is when every wanted replica's agent last reported
    idle, the latest 'since' of their reports, or None while any replica is active, has not
    reported since its pod started (a report older than its pod is a previous pod's and does
    not count) or sent an invalid report; problems: "pod <name>: <reason>" of each invalid one."""
    now = now if isinstance(now, int) else _seconds(now)
    data = (activity or {}).get("data") if isinstance(activity, dict) else None
    data = data if isinstance(data, dict) else {}
    latest, counted, idle, problems = None, 0, True, []
    for pod in pods if isinstance(pods, list) else []:
        meta = (pod.get("metadata") if isinstance(pod, dict) else None) or {}
        if not isinstance(meta, dict) or meta.get("deletionTimestamp"):
            continue
        name = meta.get("name")
        report, problem = activity_report(data.get(name) if isinstance(name, str) else None, now)
        if problem:
            problems.append("pod %s: %s" % (name, problem))
        if not report or report["state"] != "idle":
            idle = False
            continue
        started = _pod_start(pod)
        if started is not None and report["since"] < started:
            idle = False
            continue
        latest = report["since"] if latest is None else max(latest, report["since"])
        counted += 1
    if not idle or not replicas or counted < _whole(replicas):
        latest = None
    return latest, problems


def idle_since(activity, pods, replicas, now=None):
    """When every wanted replica's agent last reported idle (activity_reports), or None.
    ``now``: the operator's clock (an RFC 3339 time; None: the current time)."""
    now_s = _seconds_or_none(now) if now is not None else None
    if now_s is None:
        now_s = _seconds(datetime.datetime.now(datetime.timezone.utc))
    return activity_reports(activity, pods, replicas, now_s)[0]


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
    - ``activityProblem``: status.activityReportProblem (None removes it): why the agents'
      reports were ignored (activity_reports); a Warning Event InvalidActivityReport is among
      ``events`` when it differs from the status's (once per bad report, not per reconcile)

    The expiry is decided first, from the spec and status.reservation only: nothing an agent
    reports (ignored when invalid) can delay or prevent it.
    """
    settings = settings_of(settings)
    meta = (cr or {}).get("metadata") or {}
    spec = (cr or {}).get("spec") or {}
    lifecycle = spec.get("lifecycle") or {}
    old = ((cr or {}).get("status") or {}).get("reservation") or {}
    old_idle = ((cr or {}).get("status") or {}).get("idle") or {}
    generation = meta.get("generation")
    now_s = _seconds(now)
    old_problem = ((cr or {}).get("status") or {}).get("activityReportProblem")
    annotations = meta.get("annotations") or {}
    offsets = settings["warnings"]
    result = {"reservation": old or None, "idle": None, "stop": None, "events": [], "requeue": "", "activityProblem": None,
              "condition": condition("Expiring", "False", "NoDeadline", "no expiry or idle shutdown is due", generation)}
    active = reservation_active(old)
    idle_timeout = _whole(lifecycle.get("idleTimeout"))
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
    duration = _duration_or_none(lifecycle.get("duration"))
    if lifecycle.get("duration") and duration is None:
        # Unreadable (the API's pattern admits none): the reservation as it was applied holds.
        duration = _duration_or_none(reservation.get("duration"))
    if duration is not None:
        started = _seconds_or_none(reservation.get("startedAt"))
        if started is None:
            started = now_s
            reservation["startedAt"] = _time(now_s)
        expires = min(_MAX_SECONDS, started + duration)   # clamped: a huge duration never overflows
        previous = _seconds_or_none(reservation.get("expiresAt"))
        if previous is not None and previous != expires:
            reservation["warningsSent"] = []
            if previous < expires:
                reservation["extensions"] = _whole(reservation.get("extensions")) + 1
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

    since, problems = activity_reports(activity, pods, spec_replicas(cr), now_s) if idle_timeout > 0 else (None, [])
    if problems:
        problem = "; ".join(problems)
        if len(problem) > ACTIVITY_PROBLEM_MAX_CHARS:
            problem = problem[:ACTIVITY_PROBLEM_MAX_CHARS - 3] + "..."
        result["activityProblem"] = problem
        if problem != old_problem:
            result["events"].append({
                "reason": "InvalidActivityReport",
                "message": "ignored the lifecycle agent's report in %s-activity (the server counts as active; the "
                           "reservation's expiry does not depend on it): %s" % (meta.get("name"), problem)})
    if since is not None:
        deadline = since + idle_timeout
        keepalive = _seconds_or_none(lifecycle.get("keepAliveUntil"))
        if keepalive is not None:
            cap = deadline + parse_duration(settings["max_keepalive"])
            deadline = max(deadline, min(keepalive, cap))
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
        since = _seconds_or_none(cond.get("lastTransitionTime"))
        if cond.get("type") == "Progressing" and cond.get("status") == "True" and since is not None:
            return _time(min(now_s, since))
    created = _seconds_or_none(((cr or {}).get("metadata") or {}).get("creationTimestamp"))
    if created is not None and not (status.get("reservation") or {}).get("startedAt"):
        return _time(min(now_s, created))
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
