# -*- coding: utf-8 -*-
# Apache-2.0
"""DevUser status rules: phase, Ready and Degraded and their reasons."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


def devuser_status(name, spec_, kueue, generation, problem_=None, names=None, usage_records=None):
    """The DevUser status: ``names`` maps namespace / sharedClaim / sshSecret / localQueue /
    clusterQueue to the names the role uses; ``usage_records`` ({oldestEndedAt}) is what the role knows of
    the namespace's UsageRecords (usage.yml), reported as given.  ``problem_`` ({reason, message}) is a permanent problem
    (InvalidSpec): phase Failed; otherwise Active with Ready True."""
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
