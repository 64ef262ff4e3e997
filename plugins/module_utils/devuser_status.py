# -*- coding: utf-8 -*-
# Apache-2.0
"""DevUser status rules: phase, Ready and Degraded and their reasons."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.torchdev.operator.plugins.module_utils.quantity import parse_quantity


def quota_pending(observed, desired):
    """Why the namespace cannot take objects yet, or None: kube-apiserver refuses every create the
    ResourceQuota counts ("status unknown for quota") until kube-controller-manager's quota
    controller has written the quota's status.hard as its spec.hard.  ``observed``: the quota as
    read at the start of the run (None: not there yet); ``desired``: the rendered one."""
    def field(obj, *path):
        for key in path:
            obj = obj.get(key) if isinstance(obj, dict) else None
        return obj

    hard = field(desired, "spec", "hard")
    if not isinstance(hard, dict) or not hard:
        return None
    name = field(desired, "metadata", "name") or "the ResourceQuota"
    status = field(observed, "status", "hard")
    status = status if isinstance(status, dict) else {}
    def same(a, b):  # the API server writes quantities back normalised ("1.5" -> "1500m")
        try:
            return parse_quantity(a) == parse_quantity(b)
        except (ValueError, TypeError):
            return str(a) == str(b)

    behind = sorted(str(k) for k, v in hard.items() if not same(status.get(k), v))
    if not behind:
        return None
    return ("waiting for the quota controller to count ResourceQuota %s (%s): the namespace refuses "
            "what it counts until then" % (name, ", ".join(str(k) for k in behind[:3]) + (", ..." if len(behind) > 3 else "")))


def devuser_status(name, spec_, kueue, generation, problem_=None, names=None, usage_records=None, pending=None):
    """The DevUser status: ``names`` maps namespace / sharedClaim / sshSecret / localQueue /
    clusterQueue to the names the role uses; ``usage_records`` ({oldestEndedAt}) is what the role knows of
    the namespace's UsageRecords (usage.yml), reported as given.  ``problem_`` ({reason, message}) is a permanent problem
    (InvalidSpec): phase Failed; ``pending`` (`quota_pending`'s message): phase Pending with Ready
    False QuotaPending; otherwise Active with Ready True."""
    names = names or {}
    spec_ = spec_ or {}
    cluster_queue = (spec_.get("queue") or {}).get("clusterQueue") or names.get("clusterQueue")
    generation = int(generation or 0)
    result = {
        "namespace": names.get("namespace"),
        "sharedVolumeClaimName": names.get("sharedClaim"),
        "sshKeySecretName": names.get("sshSecret"),
        "kueue": bool(kueue),
        "queueName": names.get("localQueue") if kueue else None,
        "clusterQueue": cluster_queue if kueue else None,
        "observedGeneration": generation,
    }
    if usage_records is not None:
        result["usageRecords"] = usage_records
    if problem_:
        result["phase"] = "Failed"
        conditions = [
            {"type": "Ready", "status": "False", "reason": "ReconcileFailed", "message": problem_["message"]},
            {"type": "Degraded", "status": "True", "reason": problem_["reason"], "message": problem_["message"]},
        ]
    elif pending:
        result["phase"] = "Pending"
        conditions = [
            {"type": "Ready", "status": "False", "reason": "QuotaPending", "message": str(pending)},
            {"type": "Degraded", "status": "False", "reason": "AsExpected", "message": ""},
        ]
    else:
        result["phase"] = "Active"
        message = "namespace %s is ready" % names.get("namespace")
        if kueue:
            message += "; LocalQueue %s -> ClusterQueue %s" % (names.get("localQueue"), cluster_queue)
        else:
            message += "; Kueue not found: the ResourceQuota caps GPUs, CPU and memory"
        conditions = [
            {"type": "Ready", "status": "True", "reason": "UserReady", "message": message},
            {"type": "Degraded", "status": "False", "reason": "AsExpected", "message": ""},
        ]
    for cond in conditions:
        cond["observedGeneration"] = generation
    result["conditions"] = conditions
    return result
