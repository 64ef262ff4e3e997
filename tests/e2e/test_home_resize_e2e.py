"""A grown home on a StorageClass that does not allow volume expansion is reported, not retried
for ever (issue 26 item 5).

kube-apiserver refuses to grow a claim whose class lacks `allowVolumeExpansion: true`
(PersistentVolumeClaimResize admission, 403): patching it anyway failed every reconcile of the
server. The role reads the class first: the claim keeps its size, the server stays Ready (not
Degraded), the condition HomeResized says False ResizeNotSupported naming the claim, the class
and the sizes, ONE Warning Event goes to the DevServer however often it is reconciled, and a
reconcile that finds it so writes nothing. An admin who then sets allowVolumeExpansion lets the
next reconcile grow the claim, and the condition clears.

Tier-neutral: only the `sim`, `kube`, `runtime` and `ns` fixtures and kube API calls; the class
is created with the kube client, with kubesim's gp3 provisioner (ebs.csi.aws.com), which both
tiers provision (kubesim's PV controller; on the real tier hack/cluster/stack.py's Provisioner
binds it to a hostPath volume). The lead runs this module on the real tier too
(TORCHDEV_E2E_TIER=real), where kube-apiserver itself refuses the patch.
"""
from __future__ import annotations

import pytest
from kubernetes import client

from _e2e_helpers import GROUP, VERSION, condition, devserver, get_ds, reconcile_again, wait_ready, warning_events

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

NAME = "grow"
CLAIM = f"home-{NAME}-0"


def _claim(kube, ns) -> client.V1PersistentVolumeClaim:
    return kube["core"].read_namespaced_persistent_volume_claim(CLAIM, ns)


def _home_resized(sim, kube, ns, status, reason, timeout=90) -> dict:
    def seen():
        obj = get_ds(kube, ns, NAME)
        c = condition(obj, "HomeResized")
        ok = (c.get("status"), c.get("reason")) == (status, reason) and \
            obj["status"].get("observedGeneration") == obj["metadata"]["generation"]
        return obj if ok else None
    return sim.wait_for(seen, timeout, interval=0.1, message=f"{ns}/{NAME} HomeResized {status}/{reason}")


def test_a_home_the_class_cannot_grow_is_reported_once_then_grown_when_allowed(sim, kube, runtime, ns):
    storage = client.StorageV1Api(kube["client"])
    sc = f"fixed-{ns}"
    storage.create_storage_class({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                                  "metadata": {"name": sc}, "provisioner": "ebs.csi.aws.com",
                                  "reclaimPolicy": "Delete", "volumeBindingMode": "Immediate"})
    try:
        kube["custom"].create_namespaced_custom_object(GROUP, VERSION, ns, "devservers", devserver(
            NAME, persistentHomeSize="10Gi", homeStorageClassName=sc))
        obj = wait_ready(sim, kube, ns, NAME, timeout=180)
        assert (condition(obj, "HomeResized")["status"], condition(obj, "HomeResized")["reason"]) == (
            "True", "AsRequested")
        sim.wait_for(lambda: _claim(kube, ns).status.phase == "Bound", 60, message="the home claim bound")
        assert _claim(kube, ns).spec.storage_class_name == sc

        # The user grows the home: the class cannot, so the claim keeps its size and the status says why.
        kube["custom"].patch_namespaced_custom_object(GROUP, VERSION, ns, "devservers", NAME,
                                                      {"spec": {"persistentHomeSize": "20Gi"}})
        obj = _home_resized(sim, kube, ns, "False", "ResizeNotSupported")
        message = condition(obj, "HomeResized")["message"]
        assert message == (f"claim {CLAIM} cannot grow from 10Gi to 20Gi: its StorageClass {sc} does not allow "
                           "volume expansion (allowVolumeExpansion is not true; once an admin sets it, the next "
                           "reconcile grows the claim)")
        assert _claim(kube, ns).spec.resources.requests["storage"] == "10Gi"
        # The server keeps running: Ready, not Degraded.
        assert obj["status"]["phase"] == "Running"
        assert condition(obj, "Ready")["status"] == "True"
        assert (condition(obj, "Degraded")["status"], condition(obj, "Degraded")["reason"]) == ("False", "AsExpected")

        # More reconciles while it holds: they succeed and send no second Event; one that finds it
        # so writes nothing at all (no retry of the refused patch, no status write).
        reconcile_again(sim, runtime, ns, NAME)  # leaves the runtime idle
        sim.reset_metrics()
        reconcile_again(sim, runtime, ns, NAME, times=1)
        assert sim.writes() == 0, [r for r in sim.requests() if r["verb"] not in ("get", "list", "watch")]
        assert _claim(kube, ns).spec.resources.requests["storage"] == "10Gi"
        events = warning_events(kube, ns, NAME, "ResizeNotSupported")
        assert len(events) == 1 and events[0].message == message and (events[0].count or 1) == 1
        assert events[0].involved_object.kind == "DevServer"

        # An admin lets the class expand: the next reconcile grows the claim, the condition clears.
        storage.patch_storage_class(sc, {"allowVolumeExpansion": True})
        runtime.enqueue("DevServer", ns, NAME)
        obj = _home_resized(sim, kube, ns, "True", "AsRequested")
        sim.wait_for(lambda: _claim(kube, ns).spec.resources.requests["storage"] == "20Gi", 60,
                     message="the home claim's request grown")
        assert condition(obj, "Ready")["status"] == "True"
        assert len(warning_events(kube, ns, NAME, "ResizeNotSupported")) == 1
    finally:
        storage.delete_storage_class(sc)
