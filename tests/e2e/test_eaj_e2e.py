"""End to end: kubesim + the local runtime + the real ephemeralaccelerationjob role, and the
devctl infer workflow: create (volume, upload, job) -> the operator runs the inference pod ->
watch -> download.

The simulated kubelet runs no code, so the tests play the inference container: they end the
pod with kubesim.io/succeed-after or fail-after, the runner's exit code and its termination
message (what torchdev_infer writes to /dev/termination-log).  In the workflow tests that is
the real torchdev_infer runner, run with the pod's own arguments on the pod's volume
(kubesim keeps a volume's files in a directory of its own, the same that pods/exec reads
and writes), and the results downloaded are checked against a plain PyTorch forward pass.

The runtime runs only the EphemeralAccelerationJob watch of watches.yaml, with its watch
period (ephemeralaccelerationjob_watch_period) at 1 s: the tests wait for the role's own
progress, a shorter look-again keeps them quick."""
from __future__ import annotations

import datetime
import json
import time

import pytest

from _e2e_helpers import GROUP, VERSION
from _infer_models import LABELS, assert_matches, reference, tiny, write_image

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
PLURAL = "ephemeralaccelerationjobs"


# The EphemeralAccelerationJob watch alone (one controller, its informers), its watch period 1 s
# (tests/_cluster.py's `runtime`).
WATCH_KINDS = ("EphemeralAccelerationJob",)
WATCH_VARS = {"EphemeralAccelerationJob": {"ephemeralaccelerationjob_watch_period": 1}}


def job(name, **spec):
    body = {"model": "/artifacts/model.pt", "input": {"type": "directory", "path": "/artifacts/images"},
            "resources": {"gpu": 0}}
    body.update(spec)
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "EphemeralAccelerationJob", "metadata": {"name": name},
            "spec": body}


def get(kube, ns, name):
    return kube["custom"].get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)


def cond(obj, ctype):
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == ctype), {})


def wait_phase(sim, kube, ns, name, phase, timeout=90):
    return sim.wait_for(lambda: (lambda o: o if (o.get("status") or {}).get("phase") == phase else None)(
        get(kube, ns, name)), timeout, interval=0.1, message=f"{ns}/{name} {phase}")


def pod_of(kube, ns, name):
    pods = kube["core"].list_namespaced_pod(ns, field_selector=f"metadata.name=ephemeralaccelerationjob-{name}").items
    return pods[0] if pods and not pods[0].metadata.deletion_timestamp else None


def claim_of(kube, ns, name):
    claims = kube["core"].list_namespaced_persistent_volume_claim(ns, field_selector=f"metadata.name=artifacts-{name}").items
    return claims[0] if claims and not claims[0].metadata.deletion_timestamp else None


def end_pod(kube, ns, name, **annotations):
    pod = pod_of(kube, ns, name)
    assert pod is not None
    kube["core"].patch_namespaced_pod(pod.metadata.name, ns, {"metadata": {"annotations": annotations}})


def deleted_at(sim, ns, resource, name):
    """When the operator's DELETE of the object reached the API (the simulator's request log)."""
    times = [r["time"] for r in sim.requests(20000) if r["verb"] == "delete"
             and r["path"].endswith(f"/namespaces/{ns}/{resource}/{name}")]
    assert len(times) == 1, times
    return datetime.datetime.fromtimestamp(times[0], datetime.timezone.utc)


def parse(ts):
    return datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)


def now():
    return datetime.datetime.now(datetime.timezone.utc)


def test_success_then_the_pod_and_the_volume_go_at_their_ttls(sim, kube, runtime, ns):
    kube["custom"].create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, job(
        "ok", ttlSecondsAfterFinished=1, pvcTTLSecondsAfterFinished=3))
    running = wait_phase(sim, kube, ns, "ok", "Running")
    assert running["status"]["startedAt"] and running["status"]["podName"] == "ephemeralaccelerationjob-ok"
    assert cond(running, "ArtifactsAvailable")["status"] == "True"
    owner = get(kube, ns, "ok")["metadata"]["uid"]
    pod = pod_of(kube, ns, "ok")
    spec = pod.spec
    assert spec.restart_policy == "Never" and spec.containers[0].command == ["python", "-m", "torchdev_infer"]
    assert spec.containers[0].args[:2] == ["--model", "/artifacts/model.pt"]
    assert spec.containers[0].termination_message_policy == "FallbackToLogsOnError"
    # (a real API server's DefaultTolerationSeconds admission adds the not-ready/unreachable ones)
    assert "nvidia.com/gpu" not in (spec.containers[0].resources.limits or {}) and not [
        t for t in spec.tolerations or [] if t.key not in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")]
    volumes = {v.name: v for v in spec.volumes}
    assert volumes["artifacts"].persistent_volume_claim.claim_name == "artifacts-ok"
    assert {m.mount_path for m in spec.containers[0].volume_mounts} >= {"/artifacts", "/opt/torchdev/infer"}
    runner = kube["core"].read_namespaced_config_map("ok-infer", ns)
    assert "def run(" in runner.data["runner.py"]
    claim = claim_of(kube, ns, "ok")
    assert claim.spec.access_modes == ["ReadWriteOnce"] and claim.spec.resources.requests["storage"] == "1Gi"
    for obj in (pod, runner, claim):
        assert [(r.uid, r.controller) for r in obj.metadata.owner_references] == [(owner, True)]

    end_pod(kube, ns, "ok", **{"kubesim.io/succeed-after": "0"})
    done = wait_phase(sim, kube, ns, "ok", "Succeeded")["status"]
    assert done["artifactPath"] == "/artifacts/output.json" and done["exitCode"] == 0
    finished = parse(done["finishedAt"])
    assert parse(done["artifactsExpireAt"]) == finished + datetime.timedelta(seconds=3)
    assert cond(get(kube, ns, "ok"), "Succeeded")["reason"] == "InferenceSucceeded"
    # deleted at their TTLs, through requeues at those times (the watch's resync is 10h away):
    # not before them, and the pod before the volume it uses
    sim.wait_for(lambda: pod_of(kube, ns, "ok") is None, 120, interval=0.1, message="the pod deleted at its TTL")
    sim.wait_for(lambda: claim_of(kube, ns, "ok") is None, 120, interval=0.1, message="the volume deleted at its TTL")
    pod_deleted = deleted_at(sim, ns, "pods", "ephemeralaccelerationjob-ok")
    claim_deleted = deleted_at(sim, ns, "persistentvolumeclaims", "artifacts-ok")
    assert finished + datetime.timedelta(seconds=1) <= pod_deleted
    assert finished + datetime.timedelta(seconds=3) <= claim_deleted
    assert pod_deleted < claim_deleted
    expired(sim, kube, ns, "ok")


def expired(sim, kube, ns, name):
    obj = sim.wait_for(lambda: (lambda o: o if cond(o, "ArtifactsAvailable").get("reason") == "Expired" else None)(
        get(kube, ns, name)), 30, interval=0.1, message="ArtifactsAvailable Expired")
    assert obj["status"]["phase"] == "Succeeded" and cond(obj, "ArtifactsAvailable")["status"] == "False"


@pytest.mark.kubesim_only("ansible-operator reconciles a finished job only when its generation or an object it owns "
                          "changes, and once its pod and volume went at their TTLs it owns none: nothing but the "
                          "local runtime's enqueue can make it look again without changing it")
def test_a_settled_finished_job_costs_no_request(sim, kube, runtime, ns):
    kube["custom"].create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, job(
        "ok", ttlSecondsAfterFinished=0, pvcTTLSecondsAfterFinished=0))
    wait_phase(sim, kube, ns, "ok", "Running")
    end_pod(kube, ns, "ok", **{"kubesim.io/succeed-after": "0"})
    wait_phase(sim, kube, ns, "ok", "Succeeded")
    expired(sim, kube, ns, "ok")
    # settled: a reconcile of the finished job makes no request at all, and asks for no requeue
    runtime.wait_idle(180)
    sim.reset_metrics()
    reset = time.time()
    runtime.enqueue("EphemeralAccelerationJob", ns, "ok")
    record = sim.wait_for(lambda: next((r for r in runtime.history("EphemeralAccelerationJob")
                                        if r.name == "ok" and r.started > reset and r.duration), None),
                          60, message="a reconcile of the settled job")
    assert record.ok and record.ansible.get("changed", 0) == 0, record
    # the role made none; the one GET is the operator's own re-read of the job after a run
    # (ansible-operator's reconcile does the same)
    requests = [(r["verb"], r["path"].rsplit("/", 2)[-2:]) for r in sim.requests() if ns in r["path"]]
    assert requests == [("get", [PLURAL, "ok"])], requests


def looks(runtime, name):
    return len([r for r in runtime.history("EphemeralAccelerationJob") if r.name == name])


def test_a_running_job_costs_reads_only_and_a_failure_keeps_the_volume(sim, kube, runtime, ns):
    from kubesim.metrics import WRITE_VERBS

    kube["custom"].create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, job("bad"))
    wait_phase(sim, kube, ns, "bad", "Running")
    count = looks(runtime, "bad")
    sim.wait_for(lambda: looks(runtime, "bad") > count, 60, message="one more look at the running pod")
    sim.reset_metrics()
    reset = time.time()
    record = sim.wait_for(lambda: next((r for r in runtime.history("EphemeralAccelerationJob")
                                        if r.name == "bad" and r.started > reset and r.duration), None),
                          60, message="a whole look at the unchanged running job, after the reset")
    assert record.ok and record.ansible.get("changed", 0) == 0, record
    writes = [r for r in sim.requests() if r.get("verb") in WRITE_VERBS and ns in r["path"]]
    assert writes == [], writes  # not even a status write
    assert sim.metrics()["by_verb"].get("get", 0) > 0  # it did look

    end_pod(kube, ns, "bad", **{"kubesim.io/fail-after": "0", "kubesim.io/exit-code": "3",
                                "kubesim.io/termination-message": "input directory /artifacts/images does not exist"})
    obj = wait_phase(sim, kube, ns, "bad", "Failed")
    st = obj["status"]
    assert st["message"] == "input directory /artifacts/images does not exist" and st["exitCode"] == 3
    failed = cond(obj, "Failed")
    assert failed["status"] == "True" and failed["reason"] == "InputNotFound"
    assert not st.get("artifactPath") and st["artifactsExpireAt"]
    sim.wait_for(lambda: pod_of(kube, ns, "bad") is None, 60, interval=0.1, message="the pod deleted (TTL 0)")
    assert claim_of(kube, ns, "bad") is not None  # the artifacts stay until pvcTTLSecondsAfterFinished
    assert cond(get(kube, ns, "bad"), "ArtifactsAvailable")["status"] == "True"


# -- the devctl workflow, with the real runner ------------------------------------------------------
def devctl(sim, ns, *args):
    from click.testing import CliRunner

    from devctl.main import cli

    return CliRunner().invoke(cli, ["--kubeconfig", sim.kubeconfig, "-n", ns, *map(str, args)], catch_exceptions=False)


def run_the_pod(sim, kube, ns, name, log_dir):
    """What the inference container would do: the runner with the pod's arguments, the pod's
    volume as /artifacts; then the pod ends with its exit code and termination message."""
    import torchdev_infer

    pod = sim.wait_for(lambda: pod_of(kube, ns, name), 60, interval=0.1, message="the inference pod")
    assert pod.spec.containers[0].command == ["python", "-m", "torchdev_infer"]
    claim = kube["core"].read_namespaced_persistent_volume_claim(f"artifacts-{name}", ns)
    volume = sim.call(sim.cluster.server.volumes.pv_dir, claim.spec.volume_name)
    args = list(pod.spec.containers[0].args)
    args[args.index("--artifacts-dir") + 1] = volume
    code = torchdev_infer.main(args + ["--termination-log", str(log_dir / "termination-log")])
    annotations = {"kubesim.io/succeed-after": "0"} if code == 0 else {
        "kubesim.io/fail-after": "0", "kubesim.io/exit-code": str(code),
        "kubesim.io/termination-message": (log_dir / "termination-log").read_text()}
    kube["core"].patch_namespaced_pod(pod.metadata.name, ns, {"metadata": {"annotations": annotations}})
    return code


@pytest.mark.kubesim_only("devctl infer uploads through exec into a helper pod and the runner reads the "
                          "volume's directory: kwok's nodes run no containers")
def test_create_run_watch_download(sim, kube, runtime, ns, tmp_path, capsys):
    import torch

    project = tmp_path / "project"
    (project / "images").mkdir(parents=True)
    net = tiny(11)
    torch.jit.save(torch.jit.script(net), str(project / "classifier.pt"),
                   _extra_files={"labels.json": json.dumps(LABELS)})
    for i, size in enumerate(((256, 256), (300, 260), (240, 320))):
        write_image(project / "images" / f"img{i}.png", *size, seed=20 + i)

    result = devctl(sim, ns, "infer", "create", "cls", "--project-dir", project, "--input-path", "/artifacts/images",
                    "--model", "/artifacts/classifier.pt", "--output-path", "/artifacts/results/output.json",
                    "--gpus", "0", "--pvc-ttl", "600")
    assert result.exit_code == 0, result.output
    assert "uploaded" in result.stderr and "ephemeralaccelerationjob.torchdev.io/cls created" in result.stdout
    obj = get(kube, ns, "cls")
    assert obj["spec"]["input"] == {"type": "directory", "path": "/artifacts/images"}

    assert run_the_pod(sim, kube, ns, "cls", tmp_path) == 0
    result = devctl(sim, ns, "infer", "watch", "cls", "--timeout", "90")
    assert result.exit_code == 0, result.output
    assert "results: /artifacts/results/output.json in artifacts-cls" in result.stderr
    claim = kube["core"].read_namespaced_persistent_volume_claim("artifacts-cls", ns)
    owner = get(kube, ns, "cls")["metadata"]["uid"]
    assert [r.uid for r in claim.metadata.owner_references] == [owner]  # the role adopted devctl's volume

    result = devctl(sim, ns, "infer", "download", "cls", "--to", tmp_path / "back")
    assert result.exit_code == 0, result.output
    doc = json.loads((tmp_path / "back" / "results" / "output.json").read_text())
    assert doc["model"] == "/artifacts/classifier.pt" and doc["device"] == "cpu" and doc["images"] == 3
    for entry in doc["results"]:
        assert_matches(entry["top5"], reference(net, project / entry["image"][len("/artifacts/"):]), LABELS)
    got = json.loads(devctl(sim, ns, "infer", "get", "cls", "-o", "json").stdout)
    assert got["status"]["phase"] == "Succeeded" and got["status"]["artifactPath"] == "/artifacts/results/output.json"


@pytest.mark.kubesim_only("the runner reads the volume's directory (kubesim's): kwok's nodes have no volumes")
def test_the_runners_failure_reaches_the_status(sim, kube, runtime, ns, tmp_path):
    result = devctl(sim, ns, "infer", "create", "nofile", "--input-path", "/artifacts/missing.jpg",
                    "--model", "/artifacts/classifier.pt", "--gpus", "0")
    assert result.exit_code == 0, result.output
    assert run_the_pod(sim, kube, ns, "nofile", tmp_path) == 3  # the runner's InputNotFound
    result = devctl(sim, ns, "infer", "watch", "nofile", "--timeout", "90")
    assert result.exit_code == 1
    assert result.output.strip().splitlines()[-1] == \
        "error: job nofile failed (InputNotFound): input image /artifacts/missing.jpg does not exist"
    assert wait_phase(sim, kube, ns, "nofile", "Failed")["status"]["exitCode"] == 3


def test_a_finished_run_leaves_one_usage_record(sim, kube, runtime, ns):
    """Issue 25.3: a GPU job that ran leaves one UsageRecord (kind EphemeralAccelerationJob, billed
    to the namespace's DevUser): open when its pod ran, closed once when it ended; later
    reconciles write nothing."""
    from _e2e_helpers import bill_to, usage_records

    bill_to(kube, ns, "jane@example.com")
    kube["custom"].create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, job(
        "billed", resources={"gpu": 1}, ttlSecondsAfterFinished=2, pvcTTLSecondsAfterFinished=3))
    wait_phase(sim, kube, ns, "billed", "Running")
    # open from the start (a job deleted while it runs still leaves it: test_usage_e2e.py)
    [opened] = sim.wait_for(lambda: usage_records(kube, ns), 30, interval=0.1, message="the open usage record")
    assert "endedAt" not in opened["spec"] and opened["spec"]["gpus"] == 1
    end_pod(kube, ns, "billed", **{"kubesim.io/succeed-after": "9"})  # the container runs 9 s
    done = wait_phase(sim, kube, ns, "billed", "Succeeded")["status"]
    records = sim.wait_for(lambda: [r for r in usage_records(kube, ns) if r["spec"].get("endedAt")], 30, interval=0.1,
                           message="the closed usage record")
    started, finished = parse(done["startedAt"]), parse(done["finishedAt"])
    assert [r["metadata"]["name"] for r in records] == ["eaj-billed-%d" % started.timestamp()]
    record = records[0]
    assert not record["metadata"].get("ownerReferences")  # it outlives the job
    hours = (finished - started).total_seconds() / 3600
    assert record["spec"] == {
        "kind": "EphemeralAccelerationJob", "user": "jane@example.com", "server": "billed", "replicas": 1, "gpus": 1,
        "pricePerHour": "0.0000", "queuedAt": record["spec"]["queuedAt"], "startedAt": done["startedAt"],
        "endedAt": done["finishedAt"], "endReason": "Succeeded", "gpuHours": "%.4f" % hours, "cost": "0.0000",
        "idleSavedGPUHours": "0.0000"}
    # 1 GPU x the seconds it ran: 9 on kubesim's kubelet; at least 9 on kwok's, whose stage delays add up
    assert finished - started >= datetime.timedelta(seconds=9) and float(record["spec"]["gpuHours"]) >= 0.0025
    # the later reconciles (the pod's and the volume's TTLs) write the record no more
    sim.wait_for(lambda: claim_of(kube, ns, "billed") is None, 60, interval=0.1, message="the volume's TTL")
    writes = [r for r in sim.requests(20000) if r["verb"] in ("create", "patch", "update")
              and "/usagerecords" in r["path"] and f"/namespaces/{ns}/" in r["path"]]
    assert [r["code"] for r in writes] == [201, 200], writes  # opened (created), closed: nothing more
