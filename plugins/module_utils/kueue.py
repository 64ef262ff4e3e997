# -*- coding: utf-8 -*-
# Apache-2.0
"""Pure Kueue logic of the torchdev_observe module and of the filters (plugins/filter/
torchdev.py registers the functions below as torchdev_* filters); no cluster, no Ansible
needed.  The filters take what torchdev_observe returns as ``kueue`` (``served``,
``resource_flavor``, ``local_queue``, ``workload``, ``pending``, ``priority_class``).

Kueue v0.19 (kueue.x-k8s.io, v1beta2 preferred) admits a StatefulSet labelled
``kueue.x-k8s.io/queue-name`` as one pod group: its Workload (``statefulset-<name>-<hash>``)
is owned by the StatefulSet and labelled ``kueue.x-k8s.io/job-uid: <uid>``; its pods
carry the label ``kueue.x-k8s.io/pod-group-name: <workload>`` and stay scheduling-gated
until the Workload is admitted.  The visibility on-demand API
(``visibility.kueue.x-k8s.io``, v1beta2 and v1beta1) lists the pending Workloads of a
LocalQueue with their 0-based ``positionInClusterQueue`` / ``positionInLocalQueue``."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.torchdev.operator.plugins.module_utils.constants import FLAVOR_LABEL, LOCAL_QUEUE

GROUP = "kueue.x-k8s.io"


VERSION = "v1beta2"


API_VERSION = GROUP + "/" + VERSION


VISIBILITY_API_VERSION = "visibility." + GROUP + "/" + VERSION


QUEUE_LABEL = GROUP + "/queue-name"


PRIORITY_LABEL = GROUP + "/priority-class"


JOB_UID_LABEL = GROUP + "/job-uid"


POD_GROUP_LABEL = GROUP + "/pod-group-name"


def labels_of(obj):
    return ((obj or {}).get("metadata") or {}).get("labels") or {}


def queue_name(obj):
    """The LocalQueue an object is submitted to (its queue-name label), or None."""
    return labels_of(obj).get(QUEUE_LABEL) or None


def workload_of(workloads, owner):
    """The Workload Kueue made for ``owner`` (a live StatefulSet) among ``workloads``, or None.

    Matched by an ownerReference to the owner's uid, the job-uid label, or the pod group
    name Kueue's webhook put into the owner's pod template.
    """
    meta = (owner or {}).get("metadata") or {}
    uid = meta.get("uid")
    template = ((((owner or {}).get("spec") or {}).get("template") or {}).get("metadata") or {})
    group = (template.get("labels") or {}).get(POD_GROUP_LABEL)
    for wl in workloads or []:
        wmeta = (wl or {}).get("metadata") or {}
        if uid and any(ref.get("uid") == uid for ref in wmeta.get("ownerReferences") or []):
            return wl
        if uid and (wmeta.get("labels") or {}).get(JOB_UID_LABEL) == uid:
            return wl
        if group and wmeta.get("name") == group:
            return wl
    return None


def condition(obj, ctype):
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype:
            return cond
    return None


def admitted(workload):
    """True when the Workload's Admitted condition is True."""
    return (condition(workload, "Admitted") or {}).get("status") == "True"


def pending_entry(summary, workload_name):
    """The PendingWorkload item named ``workload_name`` in a PendingWorkloadsSummary, or None."""
    for item in (summary or {}).get("items") or []:
        if ((item or {}).get("metadata") or {}).get("name") == workload_name:
            return item
    return None


def position(entry):
    """1-based position in the ClusterQueue of a PendingWorkload item (0-based in the API)."""
    if not entry or entry.get("positionInClusterQueue") is None:
        return None
    return int(entry["positionInClusterQueue"]) + 1


# --------------------------------------------------------------------------- filters
# (registered in plugins/filter/torchdev.py)
# ResourceFlavor (v1beta2) bounds: nodeLabels maxProperties, nodeTaints maxItems (no tolerations are set).
RESOURCE_FLAVOR_MAX = 8


TAINT_EFFECTS = ("NoSchedule", "NoExecute")


MESSAGE_LIMIT = 1024


# --------------------------------------------------------------------------- ResourceFlavor
def node_taints(tolerations):
    """The taints a flavor's nodes carry, as its tolerations describe them: one taint per
    toleration with a key and a NoSchedule/NoExecute effect (the value when the operator
    is Equal).  They are what Kueue checks a Workload tolerates before it picks the
    ResourceFlavor.  The ResourceFlavor does not carry the tolerations: Kueue adds a flavor's
    tolerations to the pod's for that check, so any pod would pass (the flavor's pods carry
    them themselves)."""
    result = []
    for tol in tolerations or []:
        if not tol.get("key") or tol.get("effect") not in TAINT_EFFECTS:
            continue
        taint = {"key": tol["key"], "effect": tol["effect"]}
        if tol.get("operator", "Equal") == "Equal" and tol.get("value"):
            taint["value"] = tol["value"]
        if taint not in result:
            result.append(taint)
    return result


def resource_flavor_errors(flavor_spec):
    """Why a DevServerFlavor cannot become a Kueue ResourceFlavor (its bounds are tighter)."""
    spec = flavor_spec or {}
    errors = []
    for field, count, target in (
            ("nodeSelector", len(spec.get("nodeSelector") or {}), "nodeLabels"),
            ("tolerations", len(node_taints(spec.get("tolerations"))), "nodeTaints")):
        if count > RESOURCE_FLAVOR_MAX:
            errors.append("spec.%s: a Kueue ResourceFlavor allows at most %d %s, the flavor has %d"
                          % (field, RESOURCE_FLAVOR_MAX, target, count))
    return errors


# --------------------------------------------------------------------------- DevServers
def queue_labels(kueue, live_sts=None, local_queue=LOCAL_QUEUE):
    """Labels of a DevServer's StatefulSet (only the StatefulSet: Kueue gates its pods as
    one pod group): ``kueue.x-k8s.io/queue-name`` and, when a WorkloadPriorityClass
    applies, ``kueue.x-k8s.io/priority-class``.

    Kueue's webhook makes the queue name of a StatefulSet immutable, so it is decided
    when the StatefulSet is created (Kueue served and the namespace has ``local_queue``)
    and a live StatefulSet keeps the one it has (or has not).
    """
    kueue = kueue or {}
    if live_sts:
        queue = queue_name(live_sts)
    else:
        queue = local_queue if kueue.get("served") and kueue.get("local_queue") else None
    if not queue:
        return {}
    result = {QUEUE_LABEL: str(queue)}
    priority = (kueue.get("priority_class") or {}).get("name")
    if priority:
        result[PRIORITY_LABEL] = str(priority)
    return result


def queue_problem(kueue):
    """{reason: InvalidSpec, message} when the WorkloadPriorityClass that applies to a
    StatefulSet about to be queued does not exist (Kueue would never create its Workload)."""
    priority = (kueue or {}).get("priority_class") or {}
    if priority.get("exists") is False:
        return {"reason": "InvalidSpec",
                "message": "WorkloadPriorityClass %s (from %s) does not exist (kubectl get "
                           "workloadpriorityclasses lists them)" % (priority.get("name"), priority.get("source"))}
    return None


def _owned_by_another(workload, sts):
    """Whether ``workload`` names its StatefulSet (an ownerReference, the job-uid label) and it is
    not ``sts`` (by uid)."""
    uid = ((sts or {}).get("metadata") or {}).get("uid")
    wmeta = (workload or {}).get("metadata") or {} if isinstance(workload, dict) else {}
    if not uid or not isinstance(wmeta, dict):
        return False
    owners = [ref.get("uid") for ref in wmeta.get("ownerReferences") or []
              if isinstance(ref, dict) and ref.get("kind") == "StatefulSet"]
    job_uid = (wmeta.get("labels") or {}).get(JOB_UID_LABEL) if isinstance(wmeta.get("labels"), dict) else None
    owners += [job_uid] if job_uid else []
    return bool(owners) and uid not in owners


def queue_status(kueue, sts, local_queue=LOCAL_QUEUE, eta=None):
    """Where a DevServer's StatefulSet stands in Kueue, or None when it is not queued:
    {name, clusterQueue, workload, position, estimatedStartTime, admitted, admittedAt, message}.
    ``position`` is 1-based in the ClusterQueue (visibility API), None when admitted or
    unknown; ``eta``: queue_eta's result while pending (estimatedStartTime None = unknown)."""
    queue = queue_name(sts)
    if not queue:
        return None
    kueue = kueue or {}
    lq = kueue.get("local_queue") if queue == local_queue else None
    workload, pending = kueue.get("workload"), kueue.get("pending")
    if _owned_by_another(workload, sts):
        # another StatefulSet's: the one this run re-created (kueue_reshape); not queued yet
        workload, pending = None, None
    cluster_queue = ((lq or {}).get("spec") or {}).get("clusterQueue")
    is_admitted = admitted(workload)
    place = None if is_admitted else position(pending)
    reserved = condition(workload, "QuotaReserved") or {}
    why = reserved.get("message") if reserved.get("status") != "True" else ""
    where = "ClusterQueue %s" % cluster_queue if cluster_queue else "LocalQueue %s" % queue
    eta = None if is_admitted else eta
    message = "waiting for quota in %s%s%s%s" % (
        where, " at position %d" % place if place else "",
        "; ETA %s (%s)" % (eta.get("estimatedStartTime") or "unknown", eta.get("reason")) if eta else "",
        ": %s" % why if why else "")
    return {
        "name": queue,
        "clusterQueue": cluster_queue,
        "workload": ((workload or {}).get("metadata") or {}).get("name"),
        "position": place,
        "estimatedStartTime": (eta or {}).get("estimatedStartTime"),
        "admitted": is_admitted,
        "admittedAt": (condition(workload, "Admitted") or {}).get("lastTransitionTime") if is_admitted else None,
        "message": message[:MESSAGE_LIMIT],
    }


def _nominal(cluster_queue, flavor, resource):
    """The nominal quota of ``resource`` in ResourceFlavor ``flavor`` of a ClusterQueue."""
    from ansible_collections.torchdev.operator.plugins.module_utils.quantity import parse_quantity

    total = 0.0
    for group in ((cluster_queue or {}).get("spec") or {}).get("resourceGroups") or []:
        for fl in group.get("flavors") or []:
            if fl.get("name") != flavor:
                continue
            for res in fl.get("resources") or []:
                if res.get("name") == resource:
                    total += float(parse_quantity(res.get("nominalQuota") or 0))
    return total


def queue_eta(kueue, cr, flavor_spec, replicas, now):
    """When a queued DevServer should start: ``{estimatedStartTime, reason}``.

    From the ETA inputs of k8s_observe (every ClusterQueue and DevServer): the quota of the
    server's flavor in its ClusterQueue and the ClusterQueues of its cohort (GPUs, or CPU for
    a flavor without GPUs), the DevServers of the same flavor that hold it (admitted, not
    stopped) and those queued ahead of it in its ClusterQueue (they start first).  Holders are
    freed in the order their reservations expire; the server starts once enough is free for
    everyone ahead and itself (its gang: replicas x per-replica amount).  ``estimatedStartTime``
    is None ("unknown") when a holder that must end first has no expiry, or nothing fits even
    then; ``reason`` says why.  None when there are no inputs (not queued).
    """
    from ansible_collections.torchdev.operator.plugins.module_utils.flavor import flavor_gpu_count
    from ansible_collections.torchdev.operator.plugins.module_utils.lifecycle import _seconds, _time
    from ansible_collections.torchdev.operator.plugins.module_utils.quantity import parse_quantity

    eta = (kueue or {}).get("eta")
    status = (cr or {}).get("status") or {}
    mine = (status.get("queue") or {})
    lq = (kueue or {}).get("local_queue") or {}
    cq_name = ((lq.get("spec") or {}).get("clusterQueue")) or mine.get("clusterQueue")
    if not eta or not cq_name:
        return None
    spec = (cr or {}).get("spec") or {}
    flavor = spec.get("flavor")
    gpus = flavor_gpu_count(flavor_spec or {})
    if gpus:
        resource, per_replica = "nvidia.com/gpu", float(gpus)
    else:
        requests = ((flavor_spec or {}).get("resources") or {}).get("requests") or {}
        resource, per_replica = "cpu", float(parse_quantity(requests.get("cpu") or 0))
    queues = {q["metadata"]["name"]: q for q in eta.get("cluster_queues") or []}
    cohort = ((queues.get(cq_name) or {}).get("spec") or {}).get("cohortName")
    members = {name for name, q in queues.items()
               if name == cq_name or (cohort and (q.get("spec") or {}).get("cohortName") == cohort)}
    capacity = sum(_nominal(queues[name], flavor, resource) for name in members if name in queues)
    me = (cr.get("metadata") or {})
    my_position = (((kueue or {}).get("pending") or {}).get("positionInClusterQueue"))
    need = per_replica * int(replicas or 1)
    used, holders = 0.0, []
    for ds in eta.get("devservers") or []:
        meta, dspec, dstatus = ds.get("metadata") or {}, ds.get("spec") or {}, ds.get("status") or {}
        if (meta.get("namespace"), meta.get("name")) == (me.get("namespace"), me.get("name")):
            continue
        if dspec.get("flavor") != flavor or ((dstatus.get("queue") or {}).get("clusterQueue")) not in members:
            continue
        amount = per_replica * int(dstatus.get("replicas") or 0)
        phase = dstatus.get("phase")
        if phase in ("Running", "Provisioning") and amount:
            used += amount
            res = dstatus.get("reservation") or {}
            expires = res.get("expiresAt") if not res.get("endedAt") else None
            holders.append((_seconds(expires) if expires else None, amount))
        elif phase == "Queued" and (dstatus.get("queue") or {}).get("clusterQueue") == cq_name:
            position = (dstatus.get("queue") or {}).get("position")
            if position is not None and my_position is not None and position <= my_position:
                need += per_replica * int(dstatus.get("replicas") or 1)
    now_s = _seconds(now)
    free = capacity - used
    if free >= need:
        return {"estimatedStartTime": _time(now_s), "reason": "quota is free now"}
    for expires, amount in sorted(holders, key=lambda h: (h[0] is None, h[0] or 0)):
        if expires is None:
            return {"estimatedStartTime": None,
                    "reason": "unknown: a server holding the quota has no reservation end"}
        free += amount
        if free >= need:
            return {"estimatedStartTime": _time(max(now_s, expires)),
                    "reason": "when the reservations holding %s in ClusterQueue %s%s end"
                              % (resource, cq_name, " and its cohort %s" % cohort if cohort else "")}
    return {"estimatedStartTime": None, "reason": "unknown: the quota of %s is too small even when every holder ends"
            % resource}


# --------------------------------------------------------------------------- a new pod shape
# What of a pod template a Kueue Workload depends on (kueue v0.19.2 utilpod.SpecShape): the
# StatefulSet webhook (vstatefulset.kb.io, ValidateUpdate) refuses any change of it, and of the
# replicas from N to M, for a StatefulSet with a queue name, admitted or not ("field is immutable").
_SHAPE = ("initContainers", "containers", "nodeSelector", "affinity", "tolerations", "runtimeClassName",
          "priority", "topologySpreadConstraints", "overhead", "resourceClaims")
ADMISSION_GATE = GROUP + "/admission"
REQUEUED = "Requeued"
RESHAPE_REFUSED = "InvalidSpec"  # a change of the spec that cannot be applied
_SHOWN = 253


def _dict(value):
    return value if isinstance(value, dict) else {}


def _list(value):
    return value if isinstance(value, list) else []


def _norm(value, quantities=False):
    """apiequality.Semantic's notion: empty and absent alike, quantities by value."""
    from ansible_collections.torchdev.operator.plugins.module_utils.quantity import parse_quantity

    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            item = _norm(item, quantities or key in ("requests", "overhead"))
            if item is not None:
                out[str(key)] = item
        return out or None
    if isinstance(value, list):
        return [_norm(item, quantities) for item in value] or None
    if quantities and not isinstance(value, (bool, dict, list)) and value is not None:
        try:
            return "q:%s" % parse_quantity(value).normalize()
        except (ValueError, ArithmeticError, TypeError):
            return value
    return value


def _shape(sts):
    pod = _dict(_dict(_dict(_dict(sts).get("spec")).get("template")).get("spec"))
    shape = dict((key, pod.get(key)) for key in _SHAPE)
    for key in ("initContainers", "containers"):
        shape[key] = [{"requests": _dict(_dict(c).get("resources")).get("requests"), "ports": _dict(c).get("ports")}
                      for c in _list(pod.get(key))]
    if _dict(pod).get("resources") is not None:
        shape["resources"] = {"requests": _dict(pod.get("resources")).get("requests")}
    return _norm(shape)


def _replicas(sts):
    value = _dict(_dict(sts).get("spec")).get("replicas", 1)
    return value if isinstance(value, int) and not isinstance(value, bool) else 1


def _text(value):
    return str(value)[:_SHOWN]


def reshape(desired, live, pvcs=None, pods=None):
    """What to do when Kueue's StatefulSet webhook would refuse applying ``desired`` over ``live``.

    None when it would not: no live StatefulSet, or one without a queue name, or one being
    deleted, or the same pods' shape and replicas (or a scale to or from 0).  Else
    ``{action, reason, message, type}``:

    * ``recreate`` (reason Requeued, a Normal Event): delete the live StatefulSet and create
      ``desired``, which Kueue queues as a new Workload.  Only when no home claim goes with it:
      the live policy ``persistentVolumeClaimRetentionPolicy.whenDeleted`` is not Delete and no
      claim in ``pvcs`` has an ownerReference to it.  A queued server loses nothing; an admitted
      one restarts its pods, as a flavor change without Kueue does.
    * ``refuse`` (reason InvalidSpec, a Warning): re-creating would delete a home claim; the
      StatefulSet is left as it is and the message says what to do.

    The message names the change: the StatefulSets' ``torchdev.io/flavor`` labels (spec.flavor),
    else their replicas (spec.worldSize).  ``pods``: the server's pods (an ungated one means Kueue has admitted it)."""
    live, desired = _dict(live), _dict(desired)
    meta = _dict(live.get("metadata"))
    if not live or not desired or meta.get("deletionTimestamp") or not queue_name(live):
        return None
    old_n, new_n = _replicas(live), _replicas(desired)
    if _shape(live) == _shape(desired) and (old_n == new_n or not old_n or not new_n):
        return None
    old_f = _text(_dict(meta.get("labels")).get(FLAVOR_LABEL) or "")
    new_f = _text(_dict(_dict(desired.get("metadata")).get("labels")).get(FLAVOR_LABEL) or "")
    if old_f != new_f:
        change = "spec.flavor changed from %s to %s" % (old_f or "(none)", new_f or "(none)")
    elif old_n != new_n:
        change = "spec.worldSize changed from %d to %d" % (old_n, new_n)
    else:
        change = "the pods' shape changed"
    uid = meta.get("uid")
    policy = _dict(_dict(live.get("spec")).get("persistentVolumeClaimRetentionPolicy")).get("whenDeleted")
    owned = sorted(_text(_dict(_dict(c).get("metadata")).get("name")) for c in _list(pvcs)
                   if uid and any(_dict(r).get("uid") == uid for r in _list(_dict(_dict(c).get("metadata")).get(
                       "ownerReferences"))))
    if policy == "Delete" or owned:
        return {"action": "refuse", "reason": RESHAPE_REFUSED, "type": "Warning",
                "message": "%s, but Kueue does not let a queued StatefulSet change its pods' shape or size, and "
                           "re-creating it would delete the home volume (spec.homeRetentionPolicy Delete%s): "
                           "undo the change, or delete the DevServer and create it again"
                           % (change, (": " + ", ".join(owned[:8])) if owned else "")}
    running = any(_dict(p).get("metadata") and ADMISSION_GATE not in [
        _dict(g).get("name") for g in _list(_dict(_dict(p).get("spec")).get("schedulingGates"))] for p in _list(pods))
    state, then = (("stopped", "") if not old_n else ("running", " (its pods restarted) and queued again") if running
                   else ("queued", " and queued again"))
    return {"action": "recreate", "reason": REQUEUED, "type": "Normal",
            "message": "%s while %s: Kueue does not let a queued StatefulSet change its pods' shape or size, so it "
                       "was re-created%s (the home volume is kept)" % (change, state, then)}
