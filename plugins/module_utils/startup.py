# -*- coding: utf-8 -*-
# Apache-2.0
"""Time to Ready, broken down (status.startup): how long a DevServer's start spent in each
phase, from the timestamps Kubernetes and Kueue already keep.

A start begins at the DevServer's creation (its first start), or, for a later start (after a
stop, a rolling update, a replaced pod), at the creation of its oldest pod created since the last
Ready, or when the operator first saw the server leave Running when no such pod exists yet; then, each milestone the last of the
replicas to reach it:

- ``queued``: until Kueue admitted the Workload (the Admitted condition); 0 without Kueue
- ``scheduled``: until the pods were bound to nodes (PodScheduled; the scheduler binds a
  WaitForFirstConsumer claim before this)
- ``volumes``: until the pods' volumes were attached and mounted and the sandbox was up
  (PodReadyToStartContainers; Initialized on a node that does not report that condition: a
  kubelet before 1.29, a virtual kubelet such as Fargate's or kwok)
- ``containers``: until the containers ran (their ``state.running.startedAt``: the image pulled
  and started)
- ``ready``: until the pods were Ready (the readiness probe)

A phase not reached yet is absent; ``complete`` once every replica is Ready, and a complete
breakdown is kept as it is while the server is stopped or runs on the pods of that start (a pod
created after its Ready is a new start, also one that completed between two reconciles).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.torchdev.operator.plugins.module_utils.lifecycle import format_time, parse_time

PHASES = ("queued", "scheduled", "volumes", "containers", "ready")


def _condition_time(obj, ctype):
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype and cond.get("status") == "True" and cond.get("lastTransitionTime"):
            return parse_time(cond["lastTransitionTime"])
    return None


def _volumes_ready(pod):
    """PodReadyToStartContainers, or Initialized where the node never reports the former."""
    conditions = ((pod or {}).get("status") or {}).get("conditions") or []
    if any((c or {}).get("type") == "PodReadyToStartContainers" for c in conditions):
        return _condition_time(pod, "PodReadyToStartContainers")
    return _condition_time(pod, "Initialized")


def _containers_started(pod):
    times = []
    statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or []
    for cs in statuses:
        started = (((cs or {}).get("state") or {}).get("running") or {}).get("startedAt")
        if not started:
            return None
        times.append(parse_time(started))
    return max(times) if times else None


def _last(pods, milestone, replicas):
    """The time the last of ``replicas`` pods reached ``milestone`` (None until all did)."""
    times = [milestone(pod) for pod in pods or []]
    times = [t for t in times if t is not None]
    if replicas < 1 or len(times) < replicas:
        return None
    return max(sorted(times)[:replicas])


def startup(cr, pods, desired_replicas, running, queue=None, now=None):
    """status.startup for this reconcile (None removes it).

    ``pods``: the DevServer's live pods; ``running``: every wanted replica is Ready (phase
    Running); ``queue``: where it stands in Kueue (kueue.queue_status: ``admitted``,
    ``admittedAt``; None when it is not queued); ``now``: the reconcile's time, the beginning of a start whose pods do not exist
    yet.
    """
    meta = (cr or {}).get("metadata") or {}
    spec = (cr or {}).get("spec") or {}
    old = ((cr or {}).get("status") or {}).get("startup") or None
    if spec.get("suspend"):
        return old
    pods = [p for p in pods or [] if not ((p or {}).get("metadata") or {}).get("deletionTimestamp")]
    if old and old.get("complete") and running and not _newer_pods(pods, old):
        return old  # the last start, as it was, while its pods run
    if old and not old.get("complete") and old.get("startedAt"):
        begin = parse_time(old["startedAt"])
    elif not old:
        if not (meta.get("creationTimestamp") or now):
            return None
        begin = parse_time(meta.get("creationTimestamp") or now)
    else:  # a new start after a complete one: its oldest new pod; now while it waits in Kueue's queue
        last_ready = parse_time(old.get("readyAt") or old.get("startedAt"))
        created = [parse_time(p["metadata"]["creationTimestamp"]) for p in pods
                   if (p.get("metadata") or {}).get("creationTimestamp")]
        created = [c for c in created if c >= last_ready]
        if created:
            begin = min(created)
        elif queue and not queue.get("admitted") and now:
            begin = parse_time(now)
        else:
            # No new pod yet (a rolling update whose old pod is still there, a start a moment
            # ago): the last start stays until one exists.  Beginning at `now` instead would
            # lose a pod created between this run's read and `now`, for good.
            return old
    pods = [p for p in pods if not (p.get("metadata") or {}).get("creationTimestamp")
            or parse_time(p["metadata"]["creationTimestamp"]) >= begin]  # this start's pods
    replicas = int(desired_replicas or 0)
    milestones = [
        _admitted(queue, begin),
        _last(pods, lambda p: _condition_time(p, "PodScheduled"), replicas),
        _last(pods, _volumes_ready, replicas),
        _last(pods, _containers_started, replicas),
        _last(pods, lambda p: _condition_time(p, "Ready"), replicas) if running else None,
    ]
    phases = {}
    previous = begin
    for name, when in zip(PHASES, milestones):
        if when is None:
            break
        when = max(when, previous)  # second-granular stamps of different clocks
        phases[name] = int((when - previous).total_seconds())
        previous = when
    result = {"startedAt": format_time(begin), "phases": phases, "complete": len(phases) == len(PHASES)}
    if result["complete"]:
        result["readyAt"] = format_time(previous)
        result["totalSeconds"] = int((previous - begin).total_seconds())
    return result


def _newer_pods(pods, old):
    """Whether a pod was created after the last start was Ready: a start (a rolling update, a
    replaced pod) that may have completed between two reconciles, so that the server is
    running again before the operator saw it start."""
    last_ready = parse_time(old.get("readyAt") or old.get("startedAt"))
    return any(parse_time(p["metadata"]["creationTimestamp"]) > last_ready for p in pods
               if (p.get("metadata") or {}).get("creationTimestamp"))


def _admitted(queue, begin):
    """When Kueue admitted the start: ``begin`` when it is not queued, None until admitted."""
    if not queue:
        return begin
    if not queue.get("admitted"):
        return None
    return parse_time(queue["admittedAt"]) if queue.get("admittedAt") else begin


def describe(value):
    """One line for people: ``42s (queued 10s, scheduled 2s, ...)``; '' when there is none."""
    value = value or {}
    phases = value.get("phases") or {}
    parts = ", ".join("%s %ds" % (name, phases[name]) for name in PHASES if name in phases)
    if value.get("complete"):
        return "%ds (%s)" % (value.get("totalSeconds", 0), parts)
    return "starting" + (" (%s so far)" % parts if parts else "")
