"""A DevServer whose pod a ResourceQuota refuses shows it: Degraded PodCreateRefused with the
API server's words and ONE Warning Event, not an endless "Provisioning" (issue 26 item 5).

The namespace's ResourceQuota `compute` allows requests.cpu 3; a pod already there requests 2, so
the server's pod (flavor cpu-small: cpu 2) passes the operator's own check (QuotaExceeded: the
server alone fits the hard limit) but not quota admission: the StatefulSet controller cannot
create it and records a Warning Event FailedCreate on the StatefulSet.  The role reads those
Events: the server stays Provisioning with Ready False and Progressing True (the controller keeps
trying), Degraded True PodCreateRefused naming the replica and the refusal, one Warning Event on
the DevServer however often it is reconciled.  Raising the quota lets the controller's next try
create the pod: the server becomes Ready and the condition clears.

Tier-neutral: only the `sim`, `kube`, `runtime` and `ns` fixtures and kube API calls; the quota
and the pod holding it are created with the kube client.  On kubesim its StatefulSet controller
enforces the quota at its pod creates (kubesim/controllers/resourcequota.py pod_quota_refusal,
the real message); the lead runs this module on the real tier too (TORCHDEV_E2E_TIER=real), where
kube-apiserver's quota admission refuses the pod and kube-controller-manager writes the Event.
"""
from __future__ import annotations

import pytest

from _e2e_helpers import (GROUP, VERSION, condition, devserver, get_ds, reconcile_again, set_quota, wait_degraded,
                          wait_ready, warning_events)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

NAME = "refused"
REFUSAL = ("replica 0 (pod refused-0): refused by ResourceQuota: exceeded quota: compute, requested: requests.cpu=2, "
           "used: requests.cpu=2, limited: requests.cpu=3")


def test_a_pod_the_quota_refuses_is_degraded_with_one_event_then_recovers(sim, kube, runtime, ns):
    set_quota(sim, kube, ns, {"requests.cpu": "3"}, create=True)
    kube["core"].create_namespaced_pod(ns, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "holder"},
        "spec": {"containers": [{"name": "main", "image": "busybox:1.36", "command": ["sleep", "infinity"],
                                 "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "2"}}}]}})
    kube["custom"].create_namespaced_custom_object(GROUP, VERSION, ns, "devservers",
                                                   devserver(NAME, persistentHomeSize="10Gi"))

    obj = wait_degraded(sim, kube, ns, NAME, "PodCreateRefused", timeout=90)
    assert condition(obj, "Degraded")["message"] == REFUSAL
    assert obj["status"]["phase"] == "Provisioning"
    assert (condition(obj, "Ready")["status"], condition(obj, "Progressing")["status"]) == ("False", "True")
    assert not [p for p in kube["core"].list_namespaced_pod(ns).items if p.metadata.name == f"{NAME}-0"]

    # More reconciles while it is refused: the status holds, no second Event.
    reconcile_again(sim, runtime, ns, NAME)
    assert condition(get_ds(kube, ns, NAME), "Degraded")["reason"] == "PodCreateRefused"
    events = warning_events(kube, ns, NAME, "PodCreateRefused")
    assert len(events) == 1 and events[0].message == REFUSAL and (events[0].count or 1) == 1
    assert events[0].involved_object.kind == "DevServer"

    # An admin raises the quota: the controller's next try creates the pod, the server runs.
    set_quota(sim, kube, ns, {"requests.cpu": "4"})
    obj = wait_ready(sim, kube, ns, NAME, timeout=180)
    assert obj["status"]["phase"] == "Running"
    assert (condition(obj, "Degraded")["status"], condition(obj, "Degraded")["reason"]) == ("False", "AsExpected")
    assert len(warning_events(kube, ns, NAME, "PodCreateRefused")) == 1
