"""Table-driven tests of the distributed-mode logic of plugins/filter/torchdev.py:
replicaStatuses, Degraded/PodFailed, InsufficientGPUs as a problem, the env rules."""

import importlib.util
from pathlib import Path

import pytest

import torchdev as f

ROOT = Path(__file__).resolve().parents[2]


def _rendezvous():
    spec = importlib.util.spec_from_file_location("torchdev_rendezvous_filter_t", ROOT / "plugins" / "filter" / "rendezvous.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


rdzv = _rendezvous()

CPU_FLAVOR = {"metadata": {"name": "cpu"}, "spec": {"resources": {"requests": {"cpu": "2"}}, "gpu": {"count": 0}}}
GPU_FLAVOR = {"metadata": {"name": "gpu"}, "spec": {"resources": {"limits": {"nvidia.com/gpu": 1}},
                                                    "gpu": {"type": "nvidia-a10g", "count": 1}}}


def _running(restarts=0):
    return {"state": {"running": {"startedAt": "T"}}, "ready": True, "restartCount": restarts, "name": "dev"}


def _pod(index, phase="Running", ready=True, node="cpu-0", containers=None, name="x", deleting=False, label=True):
    meta = {"name": "%s-%d" % (name, index), "labels": {"apps.kubernetes.io/pod-index": str(index)} if label else {}}
    if deleting:
        meta["deletionTimestamp"] = "T"
    pod = {"metadata": meta, "spec": {"nodeName": node} if node else {},
           "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                      "containerStatuses": containers if containers is not None else [_running()]}}
    return pod


CRASH = {"name": "dev", "ready": False, "restartCount": 3,
         "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}},
         "lastState": {"terminated": {"exitCode": 1}}}
EXIT_2 = {"name": "dev", "ready": False, "restartCount": 1, "state": {"terminated": {"exitCode": 2, "reason": "Error"}}}
EXIT_0 = {"name": "dev", "ready": False, "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}
CREATING = {"name": "dev", "ready": False, "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}}}


@pytest.mark.parametrize("pod,expected", [
    (_pod(0), None),
    (_pod(0, containers=[CREATING], ready=False), None),
    (_pod(0, phase="Pending", ready=False, node=None, containers=[]), None),
    (_pod(0, containers=[CRASH], ready=False), "CrashLoopBackOff, 3 restarts"),
    (_pod(0, containers=[EXIT_2], ready=False), "container dev exited with code 2 (Error), 1 restart"),
    (_pod(0, containers=[EXIT_0], ready=False), None),
    (_pod(0, phase="Failed", ready=False, containers=[EXIT_2]), "pod Failed, 1 restart"),
    (dict(_pod(0, containers=[dict(CREATING, state={"waiting": {"reason": "ImagePullBackOff"}})], ready=False)),
     "ImagePullBackOff, 0 restarts"),
    ({}, None),
])
def test_pod_failure(pod, expected):
    assert f.pod_failure(pod) == expected


@pytest.mark.parametrize("name,pods,replicas,expected", [
    ("no pods yet", [], 2, [{"index": 0, "podName": "x-0", "ready": False},
                            {"index": 1, "podName": "x-1", "ready": False}]),
    ("all running", [_pod(1, node="n1"), _pod(0, node="n0")], 2,
     [{"index": 0, "podName": "x-0", "ready": True, "phase": "Running", "nodeName": "n0", "restarts": 0},
      {"index": 1, "podName": "x-1", "ready": True, "phase": "Running", "nodeName": "n1", "restarts": 0}]),
    ("pending unscheduled", [_pod(0, phase="Pending", ready=False, node=None)], 1,
     [{"index": 0, "podName": "x-0", "ready": False, "phase": "Pending", "restarts": 0}]),
    ("index from the name", [_pod(0, label=False)], 1,
     [{"index": 0, "podName": "x-0", "ready": True, "phase": "Running", "nodeName": "cpu-0", "restarts": 0}]),
    ("restarts summed over containers", [_pod(0, containers=[CRASH, EXIT_2], ready=False)], 1,
     [{"index": 0, "podName": "x-0", "ready": False, "phase": "Running", "nodeName": "cpu-0", "restarts": 4}]),
    ("scaling down: extra ordinal ignored", [_pod(0), _pod(1)], 1,
     [{"index": 0, "podName": "x-0", "ready": True, "phase": "Running", "nodeName": "cpu-0", "restarts": 0}]),
    ("suspended", [_pod(0)], 0, []),
    ("deleting pod is not the replica", [_pod(0, deleting=True)], 1, [{"index": 0, "podName": "x-0", "ready": False}]),
])
def test_replica_statuses(name, pods, replicas, expected):
    assert f.replica_statuses("x", pods, replicas) == expected, name


def _cr(status=None, **spec):
    return {"metadata": {"name": "x", "namespace": "ns", "generation": 2}, "spec": spec, "status": status or {}}


def _sts(ready, replicas):
    return {"metadata": {"generation": 1}, "status": {"readyReplicas": ready, "replicas": replicas, "observedGeneration": 1,
                                                      "updatedReplicas": replicas, "currentRevision": "r",
                                                      "updateRevision": "r"}}


ENDPOINT = "x-0.x.ns.svc.cluster.local:29500"


@pytest.mark.parametrize("name,cr,sts,replicas,pods,endpoint,phase,degraded,message", [
    ("ready distributed", _cr(mode="distributed"), _sts(4, 4), 4, [_pod(i) for i in range(4)], ENDPOINT,
     "Running", "AsExpected", ""),
    ("starting", _cr(mode="distributed"), _sts(1, 4), 4, [_pod(0)], ENDPOINT, "Provisioning", "AsExpected", ""),
    ("crash looping replica", _cr(mode="distributed"), _sts(3, 4), 4,
     [_pod(0), _pod(1), _pod(2, containers=[CRASH], ready=False), _pod(3)], ENDPOINT,
     "Provisioning", "PodFailed", "replica 2 (pod x-2): CrashLoopBackOff, 3 restarts"),
    ("two failing replicas", _cr(mode="distributed"), _sts(2, 4), 4,
     [_pod(0), _pod(1), _pod(3, phase="Failed", ready=False, containers=[EXIT_2]),
      _pod(2, containers=[EXIT_2], ready=False)], ENDPOINT, "Provisioning", "PodFailed",
     "replica 2 (pod x-2): container dev exited with code 2 (Error), 1 restart; "
     "replica 3 (pod x-3): pod Failed, 1 restart"),
    ("standalone crash", _cr(), _sts(0, 1), 1, [_pod(0, containers=[CRASH], ready=False)], "",
     "Provisioning", "PodFailed", "replica 0 (pod x-0): CrashLoopBackOff, 3 restarts"),
    ("failing pod of a removed ordinal is ignored", _cr(mode="distributed"), _sts(2, 2), 2,
     [_pod(0), _pod(1), _pod(2, containers=[CRASH], ready=False)], ENDPOINT, "Running", "AsExpected", ""),
    ("suspended", _cr(suspend=True), _sts(0, 0), 0, [_pod(0, containers=[CRASH], ready=False)], "",
     "Suspended", "AsExpected", ""),
])
def test_devserver_status_replicas_and_pod_failed(name, cr, sts, replicas, pods, endpoint, phase, degraded, message):
    status = f.devserver_status(cr, sts, replicas, "h", None, "T", pods, endpoint)
    conds = {c["type"]: c for c in status["conditions"]}
    assert status["phase"] == phase, name
    assert conds["Degraded"]["reason"] == degraded and conds["Degraded"]["message"] == message, name
    assert conds["Degraded"]["status"] == ("True" if degraded == "PodFailed" else "False"), name
    assert [r["index"] for r in status["replicaStatuses"]] == list(range(replicas)), name
    assert status["rendezvousEndpoint"] == (endpoint or None), name


def test_unchanged_status_needs_no_write():
    """What the apiserver stores reads back equal: an unchanged Ready server writes nothing."""
    pods = [_pod(i) for i in range(4)]
    desired = f.devserver_status(_cr(mode="distributed"), _sts(4, 4), 4, "h", None, "T", pods, ENDPOINT)
    live = dict(desired, conditions=[dict(c, lastTransitionTime="T0") for c in desired["conditions"]])
    live = {k: v for k, v in live.items() if v is not None}
    assert f.status_changes(live, desired, desired["conditions"], 2) is None
    standalone = f.devserver_status(_cr(), _sts(1, 1), 1, "h", "x-ssh", "T", [_pod(0)], "")
    live = {k: v for k, v in standalone.items() if v is not None}
    live["conditions"] = [dict(c, lastTransitionTime="T0") for c in standalone["conditions"]]
    assert f.status_changes(live, standalone, standalone["conditions"], 2) is None


# ----------------------------------------------------------------------- problems
def _spec(nprocs=1, backend="nccl", flavor="gpu", **extra):
    spec = {"owner": "a@b.c", "flavor": flavor, "mode": "distributed",
            "distributed": {"worldSize": 4 * nprocs, "nprocsPerNode": nprocs, "backend": backend}}
    spec.update(extra)
    return spec


@pytest.mark.parametrize("name,flavor,spec,reason,fragment", [
    ("fits", GPU_FLAVOR, _spec(1), None, None),
    ("too many processes", GPU_FLAVOR, _spec(2), "InsufficientGPUs", "nprocsPerNode (2) exceeds the 1 GPU(s)"),
    ("nccl on a cpu flavor", CPU_FLAVOR, _spec(1, flavor="cpu"), "InsufficientGPUs", "flavor cpu"),
    ("gloo on a cpu flavor", CPU_FLAVOR, _spec(4, "gloo", flavor="cpu"), None, None),
    ("standalone on a cpu flavor", CPU_FLAVOR, {"owner": "a@b.c", "flavor": "cpu"}, None, None),
    ("missing flavor wins", None, _spec(2), "FlavorNotFound", "does not exist"),
])
def test_flavor_problem_with_rendezvous(name, flavor, spec, reason, fragment):
    errors = rdzv.torchdev_rendezvous_errors(spec, flavor, name="x", namespace="ns")
    problem = f.flavor_problem(flavor, spec["flavor"], errors)
    if reason is None:
        assert problem is None, name
    else:
        assert problem["reason"] == reason and fragment in problem["message"], (name, problem)
        assert not problem["message"].startswith(reason)


def test_flavor_problem_unknown_reason_is_invalid_spec():
    assert f.flavor_problem(GPU_FLAVOR, "gpu", ["oops"]) == {"reason": "InvalidSpec", "message": "oops"}
    assert f.flavor_problem(GPU_FLAVOR, "gpu", ["Weird: x"])["reason"] == "InvalidSpec"


@pytest.mark.parametrize("result,explicit,reason", [
    ({"msg": "InsufficientGPUs: nprocsPerNode (2) exceeds"}, None, "InsufficientGPUs"),
    ({}, "InsufficientGPUs", "InsufficientGPUs"),
])
def test_insufficient_gpus_is_permanent(result, explicit, reason):
    assert f.failure_reason(result, explicit) == {"reason": reason, "transient": False}


@pytest.mark.parametrize("env,fragment", [
    ([{"name": "MASTER_ADDR", "value": "x"}], "MASTER_ADDR is set by the operator in distributed mode"),
    ([{"name": "NODE_RANK", "value": "0"}], "NODE_RANK is set by the operator"),
    ([{"name": "NCCL_DEBUG", "value": "INFO"}], "NCCL_DEBUG is set by the operator in distributed mode (use spec.distributed.ncclSettings)"),
    ([{"name": "FI_PROVIDER", "value": "tcp"}], "FI_PROVIDER"),
    ([{"name": "TORCHDEV_BACKEND", "value": "x"}], "TORCHDEV_BACKEND is reserved"),
])
def test_distributed_reserved_env_is_invalid_spec(env, fragment):
    problem = f.spec_problem(_spec(env=env))
    assert problem["reason"] == "InvalidSpec" and fragment in problem["message"]
    # the same names are the user's in a standalone server (except TORCHDEV_*)
    standalone = f.spec_problem({"owner": "a@b.c", "flavor": "gpu", "env": env})
    assert (standalone is None) == (not env[0]["name"].startswith("TORCHDEV_"))


def test_env_reserved_and_default_entries():
    rendezvous = rdzv.torchdev_rendezvous_env(_spec(1), GPU_FLAVOR, name="x", namespace="ns")
    out = f.env([{"name": "A", "value": "$(NODE_RANK)"}], {"HOME": "/h"}, rendezvous,
                [{"name": "PATH", "value": "/opt/torchdev/bin:/bin"}], True)
    names = [e["name"] for e in out]
    assert names[-1] == "A" and names[:-1] == sorted(names[:-1])
    assert {"NODE_RANK", "MASTER_ADDR", "PATH", "HOME", "NCCL_DEBUG"} <= set(names)
    with pytest.raises(ValueError, match="WORLD_SIZE is reserved"):
        f.env([{"name": "WORLD_SIZE", "value": "9"}], {}, rendezvous)
    # standalone: the single-process values and PATH are defaults a user variable replaces
    single = rdzv.torchdev_rendezvous_env({"owner": "a@b.c", "flavor": "gpu"}, GPU_FLAVOR, name="x", namespace="ns")
    out = f.env([{"name": "WORLD_SIZE", "value": "2"}, {"name": "PATH", "value": "/mine"}], {"HOME": "/h"}, [],
                single + [{"name": "PATH", "value": "/opt/torchdev/bin:/bin"}])
    assert [e for e in out if e["name"] in ("WORLD_SIZE", "PATH")] == [
        {"name": "WORLD_SIZE", "value": "2"}, {"name": "PATH", "value": "/mine"}]


def _running_sts(replicas, ready):
    return dict(_sts(ready, replicas), spec={"replicas": replicas})


PROBLEM = {"reason": "InvalidSpec", "message": "spec.env: TORCHDEV_NAME is reserved for the operator"}


@pytest.mark.parametrize("sts,pods,phase,ready,ready_reason", [
    # never created: Failed, nothing runs
    (None, [], "Failed", "False", "ReconcileFailed"),
    # running: the rejected change does not take the running server down
    (_running_sts(2, 2), [_pod(0), _pod(1)], "Running", "True", "ServerReady"),
    # still starting when the change came: as the pods say
    (_running_sts(2, 1), [_pod(0), _pod(1, ready=False)], "Provisioning", "False", "PodsNotReady"),
    # suspended (scaled to 0): stays Suspended
    (_running_sts(0, 0), [], "Suspended", "False", "Suspended"),
])
def test_rejected_spec_status(sts, pods, phase, ready, ready_reason):
    cr = _cr({"phase": "Running", "sshEndpoint": "x-ssh.ns.svc.cluster.local:22"}, mode="distributed",
             distributed={"worldSize": 2})
    status = f.rejected_spec_status(cr, PROBLEM, sts, pods, now="2026-01-01T00:00:00Z")
    conds = {c["type"]: c for c in status["conditions"]}
    assert status["phase"] == phase and status["observedGeneration"] == 2
    assert (conds["Ready"]["status"], conds["Ready"]["reason"]) == (ready, ready_reason)
    assert (conds["Degraded"]["status"], conds["Degraded"]["reason"]) == ("True", "InvalidSpec")
    assert "TORCHDEV_NAME" in conds["Degraded"]["message"]
    if sts:
        assert conds["Progressing"]["reason"] == "SpecRejected" and conds["Progressing"]["status"] == "False"
        assert len(status["replicaStatuses"]) == sts["spec"]["replicas"]
    # what came from the last applied spec is left as it is (not in the patch)
    assert set(status) <= {"phase", "observedGeneration", "conditions", "replicas", "readyReplicas", "ready",
                           "replicaStatuses", "startTime"}
