"""An image without sshd ends Failed and Degraded ImageLacksSSH, with ONE Warning Event (issue 27.5).

The simulated kubelet makes the server's container exit as the DevServer entrypoint exits in
such an image (tests/security/test_image_lacks_ssh.py runs the real entrypoint): exit code 78
and the entrypoint's line as its termination message (kubesim.io/exit-code,
kubesim.io/termination-message), crash looping.  The DevServer reports phase Failed, Degraded
ImageLacksSSH naming the image and what to install, Progressing False, and further reconciles
of the crash-looping pod emit no second Event.  Turning SSH off (spec.enableSSH false) rolls a
pod that runs, and the server recovers.
"""
from __future__ import annotations

import pytest

from _e2e_helpers import GROUP, VERSION, condition, devserver, get_ds, new_namespace, reconcile_again, wait_degraded, \
    wait_ready, warning_events

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

NAME = "nossh"
IMAGE = "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"
WROTE = ("torchdev: the image has no /usr/sbin/sshd: install openssh-server in it, use the torchdev devserver image, "
         "or set spec.enableSSH false")
SAID = (f"replica 0 (pod {NAME}-0): image {IMAGE} has no /usr/sbin/sshd: install openssh-server in it, "
        "use the torchdev devserver image, or set spec.enableSSH false")


def test_image_without_sshd_is_failed_with_one_event_then_recovers(sim, kube, runtime):
    ns = new_namespace(kube)
    kube["custom"].create_namespaced_custom_object(GROUP, VERSION, ns, "devservers",
                                                   devserver(NAME, image=IMAGE, persistentHomeSize="10Gi"))
    pod = f"{NAME}-0"
    sim.wait_for(lambda: any(p.metadata.name == pod for p in kube["core"].list_namespaced_pod(ns).items), 60,
                 message="the server's pod")
    kube["core"].patch_namespaced_pod(pod, ns, {"metadata": {"annotations": {
        "kubesim.io/fail-after": "0", "kubesim.io/exit-code": "78", "kubesim.io/termination-message": WROTE}}})

    def crashing():
        status = kube["core"].read_namespaced_pod(pod, ns).status.container_statuses[0]
        last = status.last_state.terminated if status.last_state else None
        return last is not None and last.exit_code == 78 and last.message == WROTE
    sim.wait_for(crashing, 30, interval=0.1, message="the container to exit 78 with the message")
    # In a cluster the lifecycle agent never starts in such a pod; the server is looked at while
    # it provisions (requeue_period), the test nudges as test_distributed_e2e does.
    runtime.enqueue("DevServer", ns, NAME)
    obj = wait_degraded(sim, kube, ns, NAME, "ImageLacksSSH")
    assert condition(obj, "Degraded")["message"] == SAID
    assert obj["status"]["phase"] == "Failed"
    assert (condition(obj, "Progressing")["status"], condition(obj, "Ready")["status"]) == ("False", "False")

    # More reconciles of the crash-looping pod: the status holds, no second Event.
    reconcile_again(sim, runtime, ns, NAME)
    assert condition(get_ds(kube, ns, NAME), "Degraded")["reason"] == "ImageLacksSSH"
    events = warning_events(kube, ns, NAME, "ImageLacksSSH")
    assert len(events) == 1 and events[0].message == SAID and (events[0].count or 1) == 1

    # The fix the message names: without SSH the new pod runs and the server recovers.
    kube["custom"].patch_namespaced_custom_object(GROUP, VERSION, ns, "devservers", NAME, {"spec": {"enableSSH": False}})
    obj = wait_ready(sim, kube, ns, NAME, timeout=120)
    assert obj["status"]["phase"] == "Running" and condition(obj, "Degraded")["reason"] == "AsExpected"
