# -*- coding: utf-8 -*-
# Apache-2.0
"""DevServer status rules: the phase, Ready / Progressing / Degraded and their reasons, the
replica statuses, a rejected spec, and how soon to look again."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import math
import re

from ansible_collections.torchdev.operator.plugins.module_utils.conditions import condition, problem_status
from ansible_collections.torchdev.operator.plugins.module_utils.eviction import (
    SERVER_EVICTION_FIELDS, evicted_condition, eviction_event)
from ansible_collections.torchdev.operator.plugins.module_utils.constants import (
    IMAGE_LACKS_SSH_EXIT_CODE, IMAGE_LACKS_SSH_PREFIX, POD_INDEX_LABEL)
from ansible_collections.torchdev.operator.plugins.module_utils.devserver import spec_warnings
from ansible_collections.torchdev.operator.plugins.module_utils.lifecycle import (
    lifecycle_status, parse_time, reservation_active, reservation_problem, stopped_phase, time_or_none)
from ansible_collections.torchdev.operator.plugins.module_utils.startup import startup

def _sts_counts(sts):
    status = (sts or {}).get("status") or {}
    meta = (sts or {}).get("metadata") or {}
    return {
        "ready": int(status.get("readyReplicas") or 0),
        "current": int(status.get("replicas") or 0),
        "updated": int(status.get("updatedReplicas") or 0),
        "observed": int(status.get("observedGeneration") or 0),
        "generation": int(meta.get("generation") or 0),
        "rolling": bool(status.get("updateRevision")) and status.get("updateRevision") != status.get("currentRevision"),
    }


def phase(desired_replicas, sts, suspended=False, failed=False):
    """Pending / Provisioning / Running / Suspended / Failed (a suspended server's phase is
    refined by lifecycle.stopped_phase: Stopped or Expired)."""
    if failed:
        return "Failed"
    if suspended:
        return "Suspended"
    if not sts:
        return "Pending"
    counts = _sts_counts(sts)
    settled = counts["observed"] >= counts["generation"] and counts["updated"] >= desired_replicas and not counts["rolling"]
    if desired_replicas > 0 and counts["ready"] >= desired_replicas and settled:
        return "Running"
    return "Provisioning"




# status.queue (docs/api.md): from torchdev_queue_status
QUEUE_STATUS_FIELDS = ("name", "clusterQueue", "workload", "position", "estimatedStartTime")
# status.ssh (devserver.ssh_access).
SSH_STATUS_FIELDS = ("serviceType", "host", "port", "command", "message")


# Container waiting reasons that will not resolve by waiting (a replica is failing).
FAILING_WAIT_REASONS = ("CrashLoopBackOff", "ImagePullBackOff", "CreateContainerConfigError",
                        "CreateContainerError", "InvalidImageName", "RunContainerError")


def _pod_index(pod, name):
    meta = (pod or {}).get("metadata") or {}
    index = (meta.get("labels") or {}).get(POD_INDEX_LABEL)
    if index is None:
        pod_name = str(meta.get("name") or "")
        index = pod_name[len(name) + 1:] if pod_name.startswith("%s-" % name) else None
    try:
        return int(index)
    except (TypeError, ValueError):
        return None


def _pod_ready(pod):
    for cond in ((pod or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def pod_failure(pod):
    """Why a replica's pod is failing ("CrashLoopBackOff, 3 restarts"), or None.

    Failing: the pod phase is Failed, a container waits in CrashLoopBackOff (or another
    reason waiting will not fix, see FAILING_WAIT_REASONS), or a container's current
    state is terminated with a non-zero exit code.
    """
    status = (pod or {}).get("status") or {}
    containers = (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or [])
    restarts = sum(int(c.get("restartCount") or 0) for c in containers)
    why = None
    if status.get("phase") == "Failed":
        why = "pod Failed" + (" (%s)" % status["reason"] if status.get("reason") else "")
    for cs in containers:
        if why:
            break
        state = cs.get("state") or {}
        waiting, terminated = state.get("waiting") or {}, state.get("terminated") or {}
        if waiting.get("reason") in FAILING_WAIT_REASONS:
            why = waiting["reason"]
        elif terminated and int(terminated.get("exitCode") or 0) != 0:
            why = "container %s exited with code %s%s" % (
                cs.get("name"), terminated.get("exitCode"),
                " (%s)" % terminated["reason"] if terminated.get("reason") else "")
    if why is None:
        return None
    return "%s, %d restart%s" % (why, restarts, "" if restarts == 1 else "s")


REASON_IMAGE_LACKS_SSH = "ImageLacksSSH"
# Bounds of what a container reports (its termination message and image are the image's and the
# user's text: shown, never evaluated).
_LACKS_SSH_MESSAGE_LIMIT = 512
_IMAGE_LIMIT = 256


def image_lacks_ssh(pod):
    """"image X has no /usr/sbin/sshd: install ..." when a container of ``pod`` ended as the
    DevServer entrypoint ends in an image without sshd or ssh-keygen, else None.

    Recognised only with the entrypoint's exit code (IMAGE_LACKS_SSH_EXIT_CODE) in the
    container's current terminated state, or in its last one while it is not ready (crash loop,
    restarting), and a message whose last non-empty line starts with IMAGE_LACKS_SSH_PREFIX,
    fits in 512 characters and is printable (the termination log, or the end of the container's
    log under FallbackToLogsOnError).  The image is the container status's (else the pod
    spec's), bounded.  Never raises.
    """
    if not isinstance(pod, dict):
        return None
    status = pod.get("status") if isinstance(pod.get("status"), dict) else {}
    images = {}
    for c in ((pod.get("spec") or {}).get("containers") or []) if isinstance(pod.get("spec"), dict) else []:
        if isinstance(c, dict):
            images[c.get("name")] = c.get("image")
    for cs in status.get("containerStatuses") or []:
        if not isinstance(cs, dict):
            continue
        terms = [(cs.get("state") or {}).get("terminated")]
        if not cs.get("ready"):
            terms.append((cs.get("lastState") or {}).get("terminated"))
        for term in terms:
            if not isinstance(term, dict):
                continue
            try:
                code = int(term.get("exitCode"))
            except (TypeError, ValueError):
                continue
            lines = [line.strip() for line in str(term.get("message") or "")[-4096:].splitlines() if line.strip()]
            line = lines[-1] if lines else ""
            if (code != IMAGE_LACKS_SSH_EXIT_CODE or not line.startswith(IMAGE_LACKS_SSH_PREFIX)
                    or len(line) > _LACKS_SSH_MESSAGE_LIMIT or not line.isprintable()):
                continue
            image = str(cs.get("image") or images.get(cs.get("name")) or "")
            image = "".join(ch for ch in image if ch.isprintable() and not ch.isspace())[:_IMAGE_LIMIT]
            return "image %s has no %s" % (image or "(unknown)", line[len(IMAGE_LACKS_SSH_PREFIX):])
    return None


def images_lacking_ssh(name, pods, desired_replicas):
    """"replica 0 (pod x-0): image X has no /usr/sbin/sshd: ..." for each wanted replica whose
    image cannot run sshd (image_lacks_ssh)."""
    return _replica_problems(name, pods, desired_replicas, image_lacks_ssh)


REASON_POD_CREATE_REFUSED = "PodCreateRefused"
# Bound of a refusal in the status (an Event's message is anyone's text in the namespace: shown,
# never evaluated).
_REFUSAL_LIMIT = 512
_FORBIDDEN_POD = re.compile(r'pods "([^"]{1,253})" is forbidden: ')
# What refused the pod, from the admission plugin's words (kube-apiserver's messages).
_REFUSERS = (("exceeded quota: ", "ResourceQuota"), ("must specify ", "ResourceQuota"),
             ("violates PodSecurity", "PodSecurity"), ("per Container", "LimitRange"),
             ("per Pod", "LimitRange"), ("per PersistentVolumeClaim", "LimitRange"))


def _event_time(event):
    for stamp in (((event.get("series") or {}) if isinstance(event.get("series"), dict) else {}).get("lastObservedTime"),
                  event.get("lastTimestamp"), event.get("eventTime"), event.get("firstTimestamp"),
                  (event.get("metadata") or {}).get("creationTimestamp") if isinstance(event.get("metadata"), dict) else None):
        when = time_or_none(stamp)
        if when is not None:
            return when
    return None


def pod_create_refusals(name, sts, events, pods, desired_replicas):
    """"replica 0 (pod x-0): refused by ResourceQuota: exceeded quota: compute, requested: ..." for
    each wanted replica that has no pod because admission refused it: the StatefulSet controller
    could not create the pod and said why in a Warning Event, reason FailedCreate, about the
    StatefulSet (``sts``, this one: its uid when the Event names one), no older than the
    StatefulSet, whose message holds ``pods "<name>-<i>" is forbidden: <why>``.  The newest
    such Event of a replica counts (lastTimestamp, eventTime, series); a replica whose pod
    exists (not being deleted) has none, so the refusal clears once a pod is created.  What
    refused it is named when the message says (ResourceQuota, LimitRange, PodSecurity, else
    "admission"); ``why`` is bounded to 512 printable characters.  Events are anyone's text in
    the namespace: anything odd is skipped, never raises."""
    if not isinstance(sts, dict) or not isinstance(name, str) or not isinstance(events, list):
        return []
    try:
        wanted = int(desired_replicas or 0)
    except (TypeError, ValueError, OverflowError):
        return []
    meta = sts.get("metadata") if isinstance(sts.get("metadata"), dict) else {}
    born = time_or_none(meta.get("creationTimestamp"))
    existing = set()
    for pod in pods if isinstance(pods, list) else []:
        if not isinstance(pod, dict) or not isinstance(pod.get("metadata"), dict):
            continue
        if not pod["metadata"].get("deletionTimestamp"):
            existing.add(pod["metadata"].get("name"))
    newest = {}
    for event in events:
        if not isinstance(event, dict) or event.get("reason") != "FailedCreate" or event.get("type") != "Warning":
            continue
        involved = event.get("involvedObject") if isinstance(event.get("involvedObject"), dict) else {}
        if involved.get("kind") != "StatefulSet" or involved.get("name") != meta.get("name", name):
            continue
        if involved.get("uid") and meta.get("uid") and involved.get("uid") != meta.get("uid"):
            continue
        when = _event_time(event)
        if when is None or (born is not None and when < born):
            continue
        message = event.get("message")
        found = _FORBIDDEN_POD.search(message) if isinstance(message, str) else None
        if not found:
            continue
        pod_name = found.group(1)
        index = _pod_index({"metadata": {"name": pod_name}}, name) if pod_name.startswith(name + "-") else None
        if index is None or not 0 <= index < wanted or pod_name != "%s-%d" % (name, index) or pod_name in existing:
            continue
        if index not in newest or when >= newest[index][0]:
            why = message[found.end():]
            newest[index] = (when, pod_name, why)
    result = []
    for index in sorted(newest):
        _, pod_name, why = newest[index]
        refuser = next((who for words, who in _REFUSERS if words in why), "admission")
        why = " ".join("".join(ch if ch.isprintable() else " " for ch in why[:4 * _REFUSAL_LIMIT]).split())
        text = "replica %d (pod %s): refused by %s: %s" % (index, pod_name, refuser, why)
        result.append(text if len(text) <= _REFUSAL_LIMIT else text[:_REFUSAL_LIMIT - 3] + "...")
    return result


# Degraded reasons found in the pods that are announced by ONE Warning Event when they appear.
EVENT_DEGRADED_REASONS = (REASON_IMAGE_LACKS_SSH, REASON_POD_CREATE_REFUSED)


def degraded_event(old_status, new_status):
    """{reason, message} of the Warning Event to emit when ``new_status`` turns Degraded with a
    reason of EVENT_DEGRADED_REASONS that ``old_status`` (the status as the run found it) did
    not have, else None: one Event per change, none while it holds."""
    new, old = _condition_of(new_status, "Degraded"), _condition_of(old_status, "Degraded")
    if new.get("status") != "True" or new.get("reason") not in EVENT_DEGRADED_REASONS:
        return None
    if old.get("status") == "True" and old.get("reason") == new.get("reason"):
        return None
    return {"reason": new["reason"], "message": str(new.get("message") or "")}


REASON_RESIZE_NOT_SUPPORTED = "ResizeNotSupported"
REASON_RESIZE_PENDING = "ResizePending"


def home_resized_condition(refused, generation=None):
    """The HomeResized condition from plan.home_resizes' ``refused`` entries: True AsRequested
    when none (every home claim requests spec.persistentHomeSize, or is being grown to it), else
    False ResizeNotSupported (a claim's StorageClass cannot grow it; wins over the other) or
    ResizePending (a claim not bound yet), the message naming each claim, its class and the
    sizes (bounded to 1024 characters).  Not Degraded: the server runs on, with its old size."""
    entries = [r for r in refused if isinstance(r, dict)] if isinstance(refused, list) else []
    if not entries:
        return condition("HomeResized", "True", "AsRequested", "every home claim requests spec.persistentHomeSize",
                         generation)
    reasons = {r.get("reason") for r in entries}
    reason = REASON_RESIZE_NOT_SUPPORTED if REASON_RESIZE_NOT_SUPPORTED in reasons or \
        REASON_RESIZE_PENDING not in reasons else REASON_RESIZE_PENDING
    message = "; ".join(str(r.get("message") or "") for r in entries if r.get("reason") == reason)
    return condition("HomeResized", "False", reason, message[:1024] or "a home claim cannot grow", generation)


def status_events(old_status, new_status):
    """The Warning Events the new status deserves, [{reason, message}]: degraded_event's, an
    eviction by Kueue's (eviction_event: Preempted or Evicted, one per eviction), and
    ResizeNotSupported when HomeResized turns False with it (the status the run found did not
    say so): one Event per change, none while it holds."""
    events = []
    degraded = degraded_event(old_status, new_status)
    if degraded:
        events.append(degraded)
    evicted = eviction_event(old_status, new_status)
    if evicted:
        events.append(evicted)
    new, old = _condition_of(new_status, "HomeResized"), _condition_of(old_status, "HomeResized")
    if new.get("status") == "False" and new.get("reason") == REASON_RESIZE_NOT_SUPPORTED and not (
            old.get("status") == "False" and old.get("reason") == REASON_RESIZE_NOT_SUPPORTED):
        events.append({"reason": REASON_RESIZE_NOT_SUPPORTED, "message": str(new.get("message") or "")})
    return events


def _condition_of(status, ctype):
    for cond in ((status or {}).get("conditions") or []) if isinstance(status, dict) else []:
        if isinstance(cond, dict) and cond.get("type") == ctype:
            return cond
    return {}


def replica_statuses(name, pods, desired_replicas):
    """status.replicaStatuses: one entry per wanted replica 0..desired-1, from its pod
    (index, podName, phase, ready, nodeName, restarts); a replica without a pod yet has only
    index, podName and ready false.  Pods of other ordinals (scaling down) are ignored."""
    by_index = {}
    for pod in pods or []:
        index = _pod_index(pod, name)
        if index is not None and not ((pod.get("metadata") or {}).get("deletionTimestamp")):
            by_index[index] = pod
    result = []
    for index in range(int(desired_replicas or 0)):
        pod = by_index.get(index)
        entry = {"index": index, "podName": "%s-%d" % (name, index), "ready": False}
        if pod:
            status = pod.get("status") or {}
            entry["ready"] = _pod_ready(pod)
            if status.get("phase"):
                entry["phase"] = status["phase"]
            if (pod.get("spec") or {}).get("nodeName"):
                entry["nodeName"] = pod["spec"]["nodeName"]
            entry["restarts"] = sum(int(c.get("restartCount") or 0)
                                    for c in status.get("containerStatuses") or [])
        result.append(entry)
    return result


def failing_replicas(name, pods, desired_replicas):
    """"replica 2 (pod x-2): CrashLoopBackOff, 3 restarts" for each failing wanted replica."""
    return _replica_problems(name, pods, desired_replicas, pod_failure)


def _replica_problems(name, pods, desired_replicas, problem):
    """"replica <i> (pod <name>): <problem(pod)>" for each wanted replica, in index order,
    whose pod has a problem."""
    result = []
    for pod in sorted(pods or [], key=lambda p: _pod_index(p, name) if _pod_index(p, name) is not None else -1):
        index = _pod_index(pod, name)
        if index is None or not 0 <= index < int(desired_replicas or 0):
            continue
        why = problem(pod)
        if why:
            result.append("replica %d (pod %s): %s" % (index, (pod.get("metadata") or {}).get("name"), why))
    return result


def devserver_lifecycle(cr, sts, desired_replicas, now, activity=None, pods=None, settings=None, devuser=None):
    """lifecycle.lifecycle_status for this server: it runs when the live StatefulSet has every
    wanted replica ready (the reservation starts at the first such reconcile).  A duration
    over the caps (reservation_problem: the spec is rejected) leaves the reservation as it
    was applied: its expiry still holds."""
    spec = (cr or {}).get("spec") or {}
    running = not spec.get("suspend") and phase(int(desired_replicas or 0), sts) == "Running"
    if reservation_problem(spec, settings, devuser):
        applied = (((cr or {}).get("status") or {}).get("reservation") or {}).get("duration")
        lifecycle = dict(spec.get("lifecycle") or {}, duration=applied)
        if not applied:
            lifecycle.pop("duration")
        cr = dict(cr, spec=dict(spec, lifecycle=lifecycle))
    return lifecycle_status(cr, running, now, activity=activity, pods=pods, settings=settings)


def devserver_status(cr, sts, desired_replicas, flavor_spec_hash, ssh_service=None, now=None,
                     pods=None, rendezvous_endpoint=None, queue=None, shared_claim=None, lifecycle=None,
                     events=None, home_refused=None, evictions=None, ssh=None):
    """The complete DevServer status for a successful reconcile (conditions included).

    ``pods``: the live pods of the DevServer (label-selected), for replicaStatuses and
    the Degraded/PodFailed check; ``rendezvous_endpoint``: ``host:port`` of replica 0 in
    distributed mode (None/"" removes status.rendezvousEndpoint); ``queue``: where the
    StatefulSet stands in Kueue (``torchdev_queue_status``, None when it is not queued):
    while its Workload is not admitted the server is Queued, and status.queue says where;
    ``shared_claim``: the claim mounted at /shared (None/"" when none); ``lifecycle``: the
    result of devserver_lifecycle (status.reservation, status.idle, the Expiring condition);
    ``events``: the FailedCreate Events of the StatefulSet (Degraded PodCreateRefused while
    admission refuses a replica's pod: pod_create_refusals); ``home_refused``: the home claims
    plan.home_resizes does not grow (the HomeResized condition; None leaves it out);
    ``evictions``: eviction.server_evictions (status.evictions, lastEvictionTime,
    lastEvictionReason, usageStartTime and the Evicted condition: True while Kueue has evicted
    the server, False Readmitted once admitted again; None leaves them as they are);
    ``ssh``: the direct SSH address of a NodePort / LoadBalancer Service (devserver.ssh_access:
    status.ssh, every key of SSH_STATUS_FIELDS so that the merge patch removes the ones no longer
    set); None removes status.ssh (ClusterIP: devctl ssh port-forwards).
    """
    meta = (cr or {}).get("metadata") or {}
    spec = (cr or {}).get("spec") or {}
    old = (cr or {}).get("status") or {}
    generation = meta.get("generation")
    suspended = bool(spec.get("suspend", False))
    current = phase(desired_replicas, sts, suspended=suspended)
    stopped = stopped_phase(cr) if suspended else None
    if stopped:
        current = stopped[0]
    queue = None if suspended else queue
    evicted = isinstance(evictions, dict) and isinstance(evictions.get("eviction"), dict)
    if queue and (not queue.get("admitted") or evicted):
        # Evicted: waiting for Kueue to admit it again, its pods released (eviction.server_release),
        # even while Kueue holds the quota of a Workload admitted at 0 replicas for a moment.
        current = "Queued"
    counts = _sts_counts(sts)
    ready_n = min(counts["ready"], desired_replicas) if sts else 0
    status = {
        "phase": current,
        "observedGeneration": generation,
        "replicas": desired_replicas,
        "readyReplicas": ready_n,
        "ready": "%d/%d" % (ready_n, desired_replicas),
        "flavorSpecHash": flavor_spec_hash,
        "sshEndpoint": None,
        "sshCommand": None,
        "rendezvousEndpoint": rendezvous_endpoint or None,
        "replicaStatuses": replica_statuses(meta.get("name"), pods, desired_replicas),
        # None values inside are removed by the status merge patch
        "queue": {key: queue.get(key) for key in QUEUE_STATUS_FIELDS} if queue else None,
        "warnings": spec_warnings(spec) or None,
        "sharedVolumeClaimName": shared_claim or None,
        "ssh": {key: ssh.get(key) for key in SSH_STATUS_FIELDS} if isinstance(ssh, dict) and ssh else None,
    }
    if ssh_service:
        status["sshEndpoint"] = "%s.%s.svc.cluster.local:22" % (ssh_service, meta.get("namespace"))
        status["sshCommand"] = "devctl ssh %s -n %s" % (meta.get("name"), meta.get("namespace"))
    status["startup"] = _replacing(startup(cr, pods, desired_replicas, current == "Running", queue=queue, now=now),
                                   old.get("startup"))
    if current == "Running":
        status["startTime"] = old.get("startTime") if old.get("phase") == "Running" and old.get("startTime") else now
    if current == "Running":
        ready = condition("Ready", "True", "ServerReady", "%d/%d replicas ready" % (ready_n, desired_replicas), generation)
        progressing = condition("Progressing", "False", "Reconciled", "all objects are up to date", generation)
    elif stopped:
        ready = condition("Ready", "False", stopped[1], stopped[2], generation)
        progressing = condition("Progressing", "False", "Reconciled", current.lower(), generation)
    elif current == "Queued":
        ready = condition("Ready", "False", "Queued", queue.get("message") or "queued", generation)
        progressing = condition("Progressing", "True", "Queued", queue.get("message") or "queued", generation)
    else:
        ready = condition("Ready", "False", "PodsNotReady", "%d/%d replicas ready" % (ready_n, desired_replicas), generation)
        if counts["rolling"] or (old.get("phase") == "Running" and sts):
            progressing = condition("Progressing", "True", "RollingUpdate", "rolling out a new pod template", generation)
        else:
            progressing = condition("Progressing", "True", "Provisioning", "waiting for the server pods", generation)
    lacking = [] if suspended or current == "Queued" else images_lacking_ssh(meta.get("name"), pods, desired_replicas)
    if lacking and current != "Running":
        # Permanent until spec.image or spec.enableSSH changes: Failed, not an endless Provisioning.
        status["phase"] = "Failed"
        progressing = condition("Progressing", "False", "Reconciled",
                                "the image cannot run the server (Degraded %s)" % REASON_IMAGE_LACKS_SSH, generation)
    failing = [] if suspended else failing_replicas(meta.get("name"), pods, desired_replicas)
    refused = ([] if suspended or current in ("Queued", "Running")
               else pod_create_refusals(meta.get("name"), sts, events, pods, desired_replicas))
    if lacking:
        degraded = condition("Degraded", "True", REASON_IMAGE_LACKS_SSH, "; ".join(lacking)[:1024], generation)
    elif refused:
        # Not permanent (a quota frees up, an admin raises it): Progressing stays True, the
        # StatefulSet controller keeps trying and the pod is created when admission allows it.
        degraded = condition("Degraded", "True", REASON_POD_CREATE_REFUSED, "; ".join(refused)[:1024], generation)
    elif failing:
        degraded = condition("Degraded", "True", "PodFailed", "; ".join(failing)[:1024], generation)
    else:
        degraded = condition("Degraded", "False", "AsExpected", "", generation)
    status["conditions"] = [ready, progressing, degraded]
    if lifecycle:
        status["reservation"] = lifecycle.get("reservation")
        status["idle"] = lifecycle.get("idle")
        status["activityReportProblem"] = lifecycle.get("activityProblem")
        status["conditions"].append(lifecycle["condition"])
    if home_refused is not None:
        status["conditions"].append(home_resized_condition(home_refused, generation))
    if isinstance(evictions, dict):
        status.update({key: evictions.get(key) for key in SERVER_EVICTION_FIELDS})
        evicted = evicted_condition(evictions, queue, SERVER_RESUME, generation)
        if evicted:
            status["conditions"].append(evicted)
    return status


def _replacing(new, old):
    """``new`` with None for each key of ``old`` it lacks, in nested maps too: the status merge
    patch replaces the map instead of keeping the old keys (a new start's status.startup has no
    readyAt, totalSeconds or later phases yet; merged into the last complete one it would keep
    them, differ from what the role computes at every reconcile and be written again each time)."""
    if not isinstance(new, dict) or not isinstance(old, dict):
        return new
    out = dict(new)
    for key, value in old.items():
        if key not in out:
            out[key] = None
        elif isinstance(out[key], dict) and isinstance(value, dict):
            out[key] = _replacing(out[key], value)
    return out


SERVER_RESUME = ("its pods are released while it waits (the StatefulSet at 0 replicas: the namespace's quota counts "
                 "none of them) and start again, with the same home volume, once Kueue admits it again")


# What a rejected spec leaves of the status computed from the live objects: the fields that
# describe the running pods. Everything derived from the spec (SSH endpoint, rendezvous, queue,
# /shared, flavor hash, warnings) keeps the value of the last spec that was applied.
LIVE_STATUS_FIELDS = ("phase", "replicas", "readyReplicas", "ready", "replicaStatuses", "startTime")


def rejected_spec_status(cr, problem, sts=None, pods=None, now=None):
    """The status when the spec or its flavor cannot be applied (``problem``: {reason, message}).

    Never created (no StatefulSet): phase Failed, Ready False ``ReconcileFailed``, Degraded True
    with the reason.  Already created: nothing running is touched, so the phase, Ready and
    replicaStatuses stay true to the live StatefulSet and pods (as a Deployment whose new
    template cannot roll out keeps serving); Degraded True with the reason and a message naming
    the field, Progressing False ``SpecRejected``.
    """
    meta = (cr or {}).get("metadata") or {}
    generation = meta.get("generation")
    if not sts:
        return problem_status(problem, generation)
    message = str(problem.get("message") or "").strip()
    degraded = condition("Degraded", "True", problem["reason"], message[:1024], generation)
    replicas = int(((sts or {}).get("spec") or {}).get("replicas") or 0)
    live_cr = dict(cr, spec=dict((cr or {}).get("spec") or {}, suspend=replicas == 0))
    live = devserver_status(live_cr, sts, replicas, None, now=now, pods=pods)
    status = {key: live[key] for key in LIVE_STATUS_FIELDS if key in live}
    status["observedGeneration"] = generation
    progressing = condition("Progressing", "False", "SpecRejected",
                            ("generation %s is not applied, the server keeps running its last applied spec: %s"
                             % (generation, message))[:1024], generation)
    status["conditions"] = [live["conditions"][0], progressing, degraded]
    return status


# How often a DevServer whose home the role may not grow yet (HomeResized False) is looked at again.
HOME_RESIZE_LOOK = 600


def requeue_period(status, now=None, minimum=2, maximum=60, deadline="", previous=None):
    """How soon to look again at a DevServer ("" when nothing is due).

    ``deadline``: the lifecycle's next deadline or warning ("120s", lifecycle_status's
    ``requeue``): a per-object requeue at that time, the only way an expiry, a warning or
    an idle shutdown happens (no polling).

    Pod readiness changes the StatefulSet's status only, which ansible-operator's
    dependent-resource predicate does not reliably see, and Kueue's admission changes
    a Workload that is not the DevServer's dependent, so a starting or Queued server is also
    looked at again: every `minimum` seconds at first, backing off to a quarter of the time it
    has been provisioning, at most `maximum` seconds (a server queued for capacity is not
    hammered).  A Queued server with an ETA (status.queue.estimatedStartTime: when a running
    reservation that holds its quota expires) is also looked at at that second, and after it
    backing off from the ETA instead of from when it queued: its start follows the holder's
    expiry within seconds, not a minute.  The soonest wins.  ``previous``: the status as it was (a computed
    condition has no lastTransitionTime yet; the previous one's counts while it holds).
    """
    status = status or {}
    periods = []
    if deadline:
        periods.append(int(str(deadline).rstrip("s")))
    if any(isinstance(c, dict) and c.get("type") == "HomeResized" and c.get("status") == "False"
           for c in status.get("conditions") or []):
        # A home the role may not grow yet (HomeResized False): the StorageClass is not watched,
        # so an admin's allowVolumeExpansion (or the claim binding) is seen at this look.
        periods.append(HOME_RESIZE_LOOK)
    if status.get("phase") == "Running" and not reservation_active(status.get("reservation")):
        # Running without a reservation under way: the replicas became ready between the run's
        # look at the StatefulSet (the lifecycle's input: not running yet) and its apply (whose
        # answer the phase comes from).  The next run finds them ready and starts the
        # reservation; nothing else would bring one.
        periods.append(minimum)
    if status.get("phase") in ("Pending", "Provisioning", "Queued"):
        since = None
        before = {c.get("type"): c for c in (previous or {}).get("conditions") or []}
        for cond in status.get("conditions") or []:
            if cond.get("type") != "Progressing":
                continue
            old = before.get("Progressing") or {}
            stamp = cond.get("lastTransitionTime") or (
                old.get("lastTransitionTime") if old.get("status") == cond.get("status") else None)
            if stamp:
                since = parse_time(stamp)
        current = parse_time(now) if now else datetime.datetime.now(datetime.timezone.utc)
        waited = (current - since).total_seconds() if since and current else 0
        periods.append(int(max(minimum, min(maximum, waited / 4))))
        eta = (status.get("queue") or {}).get("estimatedStartTime") if status.get("phase") == "Queued" else None
        if eta and current:
            until = (parse_time(eta) - current).total_seconds()
            periods.append(int(math.ceil(until)) if until >= minimum else int(max(minimum, min(maximum, -until / 4))))
    return "%ds" % min(periods) if periods else ""
