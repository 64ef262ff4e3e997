"""Indexed Jobs as a TrainingJob uses them (completion index, hostname + subdomain,
JOB_COMPLETION_INDEX, podFailurePolicy) and Kueue's batch/v1 Job integration
(kubesim/controllers/kueue_job.py): a Workload per Job, created suspended, unsuspended on
admission as one gang, quota released when the Job finishes or is deleted."""
from __future__ import annotations

import itertools

import pytest

from kubesim import kueue as kq
from kubesim.controllers.kueue_job import workload_name
from kubesim.testing import KubeSim

from .test_kueue import cond, create, get, setup_queue

NODES = "gpu:2x{cpu:256,memory:1024Gi,nvidia.com/gpu:64}"
_ids = itertools.count()


@pytest.fixture(scope="module")
def sim():
    with KubeSim(nodes=NODES, kueue=True) as s:
        yield s


def indexed_job(sim, ns, name, workers=2, gpus=1, annotations=None, queue=None, **spec):
    labels = {kq.QUEUE_LABEL: queue} if queue else {}
    body = {"completionMode": "Indexed", "completions": workers, "parallelism": workers, "backoffLimit": 0,
            "template": {"metadata": {"labels": {"app": name}, "annotations": annotations or {}},
                         "spec": {"restartPolicy": "Never", "subdomain": name, "containers": [{
                             "name": "trainer", "image": "busybox",
                             "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": str(gpus)},
                                           "limits": {"nvidia.com/gpu": str(gpus)}}}]}}}
    body.update(spec)
    return create(sim, "jobs.batch", {"apiVersion": "batch/v1", "kind": "Job",
                                    "metadata": {"name": name, "namespace": ns, "labels": labels},
                                    "spec": body}, ns)


def job_pods(sim, ns, name):
    return [p for p in sim.call(sim.api.list, "pods", ns, label_selector=f"job-name={name}")["items"]
            if not p["metadata"].get("deletionTimestamp")]


def true(obj, t):
    c = cond(obj, t)
    return bool(c and c["status"] == "True")


def plain_ns(sim):
    ns = f"jobs-{next(_ids)}"
    create(sim, "namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    return ns


def test_indexed_pods_have_index_hostname_subdomain_and_env(sim):
    ns = plain_ns(sim)
    indexed_job(sim, ns, "w", workers=3, gpus=0)
    pods = sim.wait_for(lambda: (lambda ps: ps if len(ps) == 3 else None)(job_pods(sim, ns, "w")), 10,
                        message="3 pods")
    by_index = {p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]: p for p in pods}
    assert sorted(by_index) == ["0", "1", "2"]
    for i, p in by_index.items():
        assert p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] == i
        assert p["spec"]["hostname"] == f"w-{i}" and p["spec"]["subdomain"] == "w"
        env = {e["name"]: e for e in p["spec"]["containers"][0]["env"]}
        assert env["JOB_COMPLETION_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"] == \
            "metadata.annotations['batch.kubernetes.io/job-completion-index']"


def test_pod_failure_policy_fail_job_and_ignore(sim):
    ns = plain_ns(sim)
    policy = {"rules": [{"action": "Ignore", "onExitCodes": {"operator": "In", "values": [137]}},
                        {"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [0]}}]}
    # exit 137 is ignored: the index gets a new pod and the Job is not failed
    indexed_job(sim, ns, "ign", workers=1, gpus=0, backoffLimit=0, podFailurePolicy=policy,
                annotations={"kubesim.io/fail-after": "0.05", "kubesim.io/exit-code": "137"})
    sim.wait_for(lambda: len(sim.call(sim.api.list, "pods", ns, label_selector="job-name=ign")["items"]) >= 2, 10,
                 message="a replacement pod")
    assert not true(get(sim, "jobs.batch", ns, "ign"), "Failed")
    # any other failure fails the whole Job at once, whatever the backoffLimit
    indexed_job(sim, ns, "fj", workers=2, gpus=0, backoffLimit=5, podFailurePolicy=policy,
                annotations={"kubesim.io/fail-after": "0.05", "kubesim.io/exit-code": "3"})
    job = sim.wait_for(lambda: (lambda j: j if true(j, "Failed") else None)(get(sim, "jobs.batch", ns, "fj")), 10,
                       message="Failed")
    failed = cond(job, "Failed")
    assert failed["reason"] == "PodFailurePolicy" and "exit code 3" in failed["message"]
    sim.wait_for(lambda: not [p for p in job_pods(sim, ns, "fj") if p["status"].get("phase") == "Running"], 10,
                 message="the other worker stopped")


def test_kueue_job_gang_admission_and_quota_release(sim):
    ns, cq, lq = setup_queue(sim, gpus=4)
    first = indexed_job(sim, ns, "a", workers=2, gpus=2, queue=lq,
                        annotations={"kubesim.io/succeed-after": "0.6"})
    assert first["spec"]["suspend"] is True  # the webhook
    wl = sim.wait_for(lambda: (lambda w: w if true(w, "Admitted") else None)(
        get(sim, kq.WORKLOADS, ns, workload_name(first))), 10, message="a admitted")
    assert wl["spec"]["podSets"][0]["count"] == 2
    assert wl["metadata"]["ownerReferences"][0]["kind"] == "Job"
    sim.wait_for(lambda: get(sim, "jobs.batch", ns, "a")["spec"].get("suspend") is False, 10, message="a unsuspended")
    sim.wait_for(lambda: len(job_pods(sim, ns, "a")) == 2, 10, message="a's 2 workers")

    # the quota is taken: b waits whole (no partial start), suspended, without pods
    second = indexed_job(sim, ns, "b", workers=2, gpus=2, queue=lq, annotations={"kubesim.io/succeed-after": "30"})
    wl_b = sim.wait_for(lambda: (lambda w: w if cond(w, "QuotaReserved") else None)(
        get(sim, kq.WORKLOADS, ns, workload_name(second))), 10, message="b pending")
    assert not true(wl_b, "Admitted") and cond(wl_b, "QuotaReserved")["reason"] == "Pending"
    assert get(sim, "jobs.batch", ns, "b")["spec"]["suspend"] is True and not job_pods(sim, ns, "b")

    # a completes -> its Workload is Finished -> b is admitted
    sim.wait_for(lambda: true(get(sim, "jobs.batch", ns, "a"), "Complete"), 15, message="a Complete")
    wl = sim.wait_for(lambda: (lambda w: w if true(w, "Finished") else None)(
        get(sim, kq.WORKLOADS, ns, workload_name(first))), 10, message="a's workload Finished")
    assert cond(wl, "Finished")["reason"] == "Succeeded"
    sim.wait_for(lambda: true(get(sim, kq.WORKLOADS, ns, workload_name(second)), "Admitted"), 10,
                 message="b admitted after a finished")
    sim.wait_for(lambda: len(job_pods(sim, ns, "b")) == 2, 10, message="b's workers")

    # deleting a running Job releases its quota too
    third = indexed_job(sim, ns, "c", workers=2, gpus=2, queue=lq)
    sim.wait_for(lambda: cond(get(sim, kq.WORKLOADS, ns, workload_name(third)), "QuotaReserved"), 10,
                 message="c pending")
    sim.call(sim.api.delete, "jobs.batch", ns, "b", propagation_policy="Background")
    sim.wait_for(lambda: true(get(sim, kq.WORKLOADS, ns, workload_name(third)), "Admitted"), 10,
                 message="c admitted after b was deleted")
    usage = get(sim, kq.CLUSTER_QUEUES, None, cq)["status"]["flavorsReservation"]
    gpus = [r["total"] for f in usage for r in f["resources"] if r["name"] == "nvidia.com/gpu"]
    assert gpus == ["4"]


def test_job_without_queue_is_not_suspended(sim):
    ns, _cq, _lq = setup_queue(sim, gpus=4)
    job = indexed_job(sim, ns, "free", workers=1, gpus=0)
    assert not job["spec"].get("suspend")
    sim.wait_for(lambda: len(job_pods(sim, ns, "free")) == 1, 10, message="runs without Kueue")
    assert not sim.call(sim.api.list, kq.WORKLOADS, ns)["items"]
