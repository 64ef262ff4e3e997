"""A TrainingJob or an EphemeralAccelerationJob whose pods a ResourceQuota refuses shows it:
Degraded PodCreateRefused with the API server's words and ONE Warning Event, not an endless
"Initializing" / "Pending" (issue 26 item 5; the DevServer's twin is test_pod_refused_e2e.py).

The namespace's ResourceQuota `compute` allows 1 pod and a pod already holds it.  A TrainingJob's
Job cannot create its workers: the Job controller records Warning Events FailedCreate on the Job
('Error creating: pods "<job>-0-xxxxx" is forbidden: exceeded quota: ...'); the role reads them.
An EphemeralAccelerationJob's pod is the role's own create: the API server answers it 403; the
role records the refusal instead of failing into a retry storm and looks again later (a requeue
that backs off).  Either way the status holds (Initializing / Pending), Degraded True
PodCreateRefused names the refusal, one Warning Event on the job however often it is
reconciled.  Raising the quota lets the pods be created and the condition clears.

Tier-neutral: only the `sim`, `kube`, `runtime` and `ns` fixtures and kube API calls; the quota
and the pod holding it are created with the kube client.  On kubesim its quota admission refuses
every pod create (kubesim/controllers/resourcequota.py pod_quota_refusal, the real message) and
its Job controller records the Event; on the real tier (TORCHDEV_E2E_TIER=real) kube-apiserver
and kube-controller-manager do.
"""
from __future__ import annotations

import re

import pytest

from _e2e_helpers import GROUP, VERSION, condition, reconcile_again, set_quota, warning_events

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

WATCH_KINDS = ("TrainingJob", "EphemeralAccelerationJob")
WATCH_VARS = {"EphemeralAccelerationJob": {"ephemeralaccelerationjob_watch_period": 1}}
QUOTA_WORDS = "exceeded quota: compute, requested: pods=1, used: pods=1, limited: pods=1"


def _full_namespace(sim, kube, ns):
    """A quota of 1 pod, counted, and a pod holding it."""
    set_quota(sim, kube, ns, {"pods": "1"}, create=True)
    kube["core"].create_namespaced_pod(ns, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "holder"},
        "spec": {"containers": [{"name": "main", "image": "busybox:1.36", "command": ["sleep", "infinity"]}]}})


def _wait(sim, kube, ns, plural, name, check, timeout, what):
    def done():
        obj = kube["custom"].get_namespaced_custom_object(GROUP, VERSION, ns, plural, name)
        return obj if check(obj) else None
    return sim.wait_for(done, timeout, interval=0.1, message=f"{ns}/{name} {what}")


def _refused(obj):
    c = condition(obj, "Degraded")
    return c.get("status") == "True" and c.get("reason") == "PodCreateRefused"


def _cleared(obj):
    return (condition(obj, "Degraded").get("status"), condition(obj, "Degraded").get("reason")) == ("False",
                                                                                                    "AsExpected")


def test_a_trainingjob_whose_workers_the_quota_refuses_is_degraded_with_one_event_then_starts(sim, kube, runtime,
                                                                                               ns):
    _full_namespace(sim, kube, ns)
    kube["custom"].create_namespaced_custom_object(GROUP, VERSION, ns, "trainingjobs", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingJob", "metadata": {"name": "tj"},
        "spec": {"model": "mlp", "dataset": "synthetic", "numWorkers": 2, "gpusPerWorker": 0,
                 "networking": {"backend": "gloo"}, "hyperparameters": {"epochs": 4}}})

    obj = _wait(sim, kube, ns, "trainingjobs", "tj", _refused, 120, "Degraded/PodCreateRefused")
    refusal = f"worker 0: refused by ResourceQuota: {QUOTA_WORDS}"
    assert condition(obj, "Degraded")["message"] == refusal
    assert obj["status"]["state"] in ("Pending", "Initializing")
    assert not kube["core"].list_namespaced_pod(ns, label_selector="job-name=tj").items
    # the Job controller's own words, on the Job
    failed = [e for e in kube["core"].list_namespaced_event(ns, field_selector="involvedObject.kind=Job").items
              if e.reason == "FailedCreate"]
    assert failed and all(re.search(r'pods "tj-0-[a-z0-9]{5}" is forbidden: ' + re.escape(QUOTA_WORDS), e.message)
                          for e in failed)

    # More reconciles while it is refused: the status holds, no second Event.
    reconcile_again(sim, runtime, ns, "tj", kind="TrainingJob")
    assert _refused(kube["custom"].get_namespaced_custom_object(GROUP, VERSION, ns, "trainingjobs", "tj"))
    events = [e for e in warning_events(kube, ns, "tj", "PodCreateRefused") if e.involved_object.kind == "TrainingJob"]
    assert len(events) == 1 and events[0].message == refusal and (events[0].count or 1) == 1

    # An admin raises the quota: the Job controller's next try creates the workers, the condition clears.
    set_quota(sim, kube, ns, {"pods": "3"})
    obj = _wait(sim, kube, ns, "trainingjobs", "tj", lambda o: _cleared(o) and o["status"].get("state") in (
        "Initializing", "Running"), 240, "Degraded/AsExpected")
    assert len(kube["core"].list_namespaced_pod(ns, label_selector="job-name=tj").items) == 2
    assert len(warning_events(kube, ns, "tj", "PodCreateRefused")) == 1


def test_an_eaj_whose_pod_the_quota_refuses_is_degraded_with_one_event_then_runs(sim, kube, runtime, ns):
    _full_namespace(sim, kube, ns)
    kube["custom"].create_namespaced_custom_object(GROUP, VERSION, ns, "ephemeralaccelerationjobs", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "EphemeralAccelerationJob", "metadata": {"name": "inf"},
        "spec": {"model": "/artifacts/model.pt", "input": {"type": "directory", "path": "/artifacts/images"},
                 "resources": {"gpu": 0}}})

    obj = _wait(sim, kube, ns, "ephemeralaccelerationjobs", "inf", _refused, 120, "Degraded/PodCreateRefused")
    refusal = f"pod ephemeralaccelerationjob-inf refused by ResourceQuota: {QUOTA_WORDS}"
    assert condition(obj, "Degraded")["message"] == refusal
    assert obj["status"]["phase"] == "Pending" and obj["status"]["message"] == f"the inference {refusal}"
    assert not [p for p in kube["core"].list_namespaced_pod(ns).items if p.metadata.name != "holder"]

    # More reconciles while it is refused: the status holds, no second Event.
    reconcile_again(sim, runtime, ns, "inf", kind="EphemeralAccelerationJob")
    assert _refused(kube["custom"].get_namespaced_custom_object(GROUP, VERSION, ns, "ephemeralaccelerationjobs",
                                                                "inf"))
    events = warning_events(kube, ns, "inf", "PodCreateRefused")
    assert len(events) == 1 and events[0].message == refusal and events[0].involved_object.kind == \
        "EphemeralAccelerationJob"
    # no retry storm: the role looks again after a back-off (5 s, then as long as it has been
    # refused, at most 60 s), not at the runtime's failure back-off
    assert not warning_events(kube, ns, "inf", "ReconcileError")

    # An admin raises the quota: the next look creates the pod, the condition clears.
    set_quota(sim, kube, ns, {"pods": "3"})
    obj = _wait(sim, kube, ns, "ephemeralaccelerationjobs", "inf", lambda o: _cleared(o) and o["status"].get(
        "phase") in ("Pending", "Running", "Succeeded", "Failed"), 240, "Degraded/AsExpected")
    assert [p for p in kube["core"].list_namespaced_pod(ns).items if p.metadata.name == "ephemeralaccelerationjob-inf"]
    assert len(warning_events(kube, ns, "inf", "PodCreateRefused")) == 1
