"""End to end: kubesim + the local runtime + the real trainingjob role.

The simulated kubelet runs no code, so each test plays the training code: it reports
progress through the torchdev_train library (as rank 0 would, field manager torchdev-train)
and ends a worker with the kubesim.io/succeed-after / fail-after annotations."""
from __future__ import annotations

import pytest

from _e2e_helpers import GROUP, VERSION

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
NODES = "cpu:4x{cpu:16,memory:64Gi}; gpu:2x{cpu:16,memory:64Gi,nvidia.com/gpu:4,taints:[nvidia.com/gpu=present:NoSchedule]}"


def tj(name, **spec):
    body = {"model": "mlp", "dataset": "synthetic", "numWorkers": 2, "gpusPerWorker": 0,
            "networking": {"backend": "gloo"}, "hyperparameters": {"epochs": 4}}
    body.update(spec)
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingJob", "metadata": {"name": name}, "spec": body}


def batch(kube):
    from kubernetes import client

    return client.BatchV1Api(kube["client"])


def get_tj(kube, ns, name):
    return kube["custom"].get_namespaced_custom_object(GROUP, VERSION, ns, "trainingjobs", name)


def wait_state(sim, kube, ns, name, state, timeout=90):
    return sim.wait_for(lambda: (lambda o: o if (o.get("status") or {}).get("state") == state else None)(
        get_tj(kube, ns, name)), timeout, interval=0.1, message=f"{ns}/{name} {state}")


def workers(kube, ns, name):
    return [p for p in kube["core"].list_namespaced_pod(ns, label_selector=f"job-name={name}").items
            if not p.metadata.deletion_timestamp]


def annotate_workers(kube, ns, name, annotations):
    """Annotate every worker (one that is gone meanwhile -- its group failed -- is skipped)."""
    from kubernetes.client import ApiException

    for p in workers(kube, ns, name):
        try:
            kube["core"].patch_namespaced_pod(p.metadata.name, ns, {"metadata": {"annotations": annotations}})
        except ApiException as exc:
            if exc.status != 404:
                raise


def rank0_writer(sim, kube, ns, name, tmp_path, monkeypatch):
    """The training library's status writer as it runs in rank 0's pod: with the token and CA
    of the job's ServiceAccount at the library's SA_DIR (on the real tier a TokenRequest, so
    the Role the operator renders is what allows the write; kubesim takes no credentials)."""
    from torchdev_train import StatusWriter, status

    pod = workers(kube, ns, name)[0]
    sa_dir = tmp_path / "serviceaccount"
    sa_dir.mkdir()
    if hasattr(sim, "service_account_files"):
        sim.service_account_files(ns, pod.spec.service_account_name, sa_dir)
    monkeypatch.setattr(status, "SA_DIR", str(sa_dir))
    return StatusWriter(name, ns, server=sim.url, min_interval=0)


def create(kube, ns, body):
    return kube["custom"].create_namespaced_custom_object(GROUP, VERSION, ns, "trainingjobs", body)


def test_success_renders_indexed_job_and_reports_progress(sim, kube, runtime, ns, tmp_path, monkeypatch):
    from torchdev_train import Job

    create(kube, ns, tj("ok", checkpoint={"enabled": True}, successPolicy={"targetAccuracy": 0.99}))
    obj = wait_state(sim, kube, ns, "ok", "Running")
    assert obj["status"]["workers"]["active"] == 2 and obj["status"]["totalEpochs"] == 4
    j = batch(kube).read_namespaced_job("ok", ns)
    assert j.spec.completion_mode == "Indexed" and j.spec.parallelism == j.spec.completions == 2
    assert j.spec.backoff_limit == 0 and j.spec.pod_failure_policy.rules[0].action == "FailJob"
    pods = sorted(workers(kube, ns, "ok"), key=lambda p: p.metadata.name)
    assert {p.spec.hostname for p in pods} == {"ok-0", "ok-1"} and {p.spec.subdomain for p in pods} == {"ok"}
    env = {e.name: e for e in pods[0].spec.containers[0].env}
    assert env["MASTER_ADDR"].value == f"ok-0.ok.{ns}.svc.cluster.local" and env["WORLD_SIZE"].value == "2"
    assert env["NODE_RANK"].value_from.field_ref.field_path == \
        "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    assert env["TORCHDEV_CHECKPOINT_URI"].value == "/checkpoints/ok"
    assert kube["core"].read_namespaced_service("ok", ns).spec.cluster_ip == "None"
    assert "hyperparameters.json" in kube["core"].read_namespaced_config_map("ok-hyperparameters", ns).data
    assert "__init__.py" in kube["core"].read_namespaced_config_map("ok-train-lib", ns).data
    claim = kube["core"].read_namespaced_persistent_volume_claim("ok-checkpoints", ns)
    assert not claim.metadata.owner_references  # checkpoints are user data
    role = kube["rbac"].read_namespaced_role("ok-trainer", ns)
    assert all(r.resource_names == ["ok"] for r in role.rules)

    # the training code (rank 0) reports: progress reaches the status, the operator keeps its fields
    writer = rank0_writer(sim, kube, ns, "ok", tmp_path, monkeypatch)
    train = Job("ok", ns, epochs=4, target_accuracy=0.99, writer=writer, rank=0)
    assert train.report(1, {"loss": 1.0, "accuracy": 0.5}) is False
    st = sim.wait_for(lambda: (lambda o: o["status"] if o["status"].get("currentEpoch") == 1 else None)(
        get_tj(kube, ns, "ok")), 30, message="progress in status")
    assert st["progress"] == "25%" and st["metrics"] == {"loss": 1.0, "accuracy": 0.5} and st["state"] == "Running"
    assert st["workers"]["active"] == 2 and st["conditions"]  # the operator's fields are untouched
    assert train.report(2, {"loss": 0.5, "accuracy": 0.995}) is True  # the target accuracy
    train.finish()
    assert not writer.errors, writer.errors  # every write of rank 0 was accepted
    annotate_workers(kube, ns, "ok", {"kubesim.io/succeed-after": "0"})
    obj = wait_state(sim, kube, ns, "ok", "Completed")
    st = obj["status"]
    # the operator's writes since left the library's fields alone
    assert st["completionTime"] and st["duration"] and st["currentEpoch"] == 2 and st["progress"] == "50%"
    assert st["result"]["reason"] == "TargetAccuracyReached" and st["metrics"]["accuracy"] == 0.995
    cond = {c["type"]: c for c in st["conditions"]}
    assert cond["Succeeded"]["status"] == "True" and cond["Succeeded"]["reason"] == "TargetAccuracyReached"


def test_early_stopping_ends_the_job_completed(sim, kube, runtime, ns, tmp_path, monkeypatch):
    """successPolicy.earlyStoppingPatience: no lower loss for that many epochs ends the run as
    Completed, reason EarlyStopped, before its last epoch (the library decides, in rank 0)."""
    from torchdev_train import Job

    create(kube, ns, tj("patient", successPolicy={"earlyStoppingPatience": 2}))
    wait_state(sim, kube, ns, "patient", "Running")
    env = {e.name: e.value for e in workers(kube, ns, "patient")[0].spec.containers[0].env}
    assert env["TORCHDEV_EARLY_STOPPING_PATIENCE"] == "2"  # what the library reads (Job.from_env)
    writer = rank0_writer(sim, kube, ns, "patient", tmp_path, monkeypatch)
    train = Job("patient", ns, epochs=4, patience=int(env["TORCHDEV_EARLY_STOPPING_PATIENCE"]), writer=writer,
                rank=0)
    assert [train.report(e, {"loss": loss}) for e, loss in ((1, 0.5), (2, 0.6))] == [False, False]
    assert train.report(3, {"loss": 0.7}) is True  # two epochs without a lower loss
    train.finish()
    annotate_workers(kube, ns, "patient", {"kubesim.io/succeed-after": "0"})
    assert not writer.errors, writer.errors  # every write of rank 0 was accepted
    wait_state(sim, kube, ns, "patient", "Completed")

    # The reconcile that saw the Job complete may have started before rank 0's last write
    # reached ansible-operator's cache (the real tier, kwok ending the pods at once): the run
    # completed as JobComplete then takes the library's reason at its next look (a resync).
    def succeeded():
        st = get_tj(kube, ns, "patient")["status"]
        cond = {c["type"]: c for c in st["conditions"]}
        return st if cond.get("Succeeded", {}).get("reason") == "EarlyStopped" else None
    if not succeeded():
        runtime.enqueue("TrainingJob", ns, "patient")
    st = sim.wait_for(succeeded, 60, interval=0.2, message="Succeeded EarlyStopped")
    assert st["result"]["reason"] == "EarlyStopped" and st["currentEpoch"] == 3 and st["progress"] == "75%"
    cond = {c["type"]: c for c in st["conditions"]}
    assert cond["Succeeded"]["status"] == "True" and st["state"] == "Completed"
    assert "no lower loss than 0.5 for 2 epochs" in cond["Succeeded"]["message"]


def test_rank_failure_restarts_the_whole_group(sim, kube, runtime, ns):
    create(kube, ns, tj("flaky", failurePolicy={"backoffLimit": 1}))
    wait_state(sim, kube, ns, "flaky", "Running")
    first = {p.metadata.uid for p in workers(kube, ns, "flaky")}
    victim = sorted(workers(kube, ns, "flaky"), key=lambda p: p.metadata.name)[1]
    kube["core"].patch_namespaced_pod(victim.metadata.name, ns, {"metadata": {"annotations": {
        "kubesim.io/fail-after": "0", "kubesim.io/exit-code": "137"}}})
    obj = wait_state(sim, kube, ns, "flaky", "Restarting", timeout=60)
    assert obj["status"]["restartCount"] == 1
    assert "exited with code 137" in obj["status"]["lastRestartReason"]
    obj = wait_state(sim, kube, ns, "flaky", "Running", timeout=90)  # after the back-off
    second = {p.metadata.uid for p in workers(kube, ns, "flaky")}
    assert len(second) == 2 and not first & second  # every worker is new
    j = batch(kube).read_namespaced_job("flaky", ns)
    assert j.metadata.annotations["torchdev.io/attempt"] == "1"
    env = {e.name: e.value for e in j.spec.template.spec.containers[0].env}
    assert env["TORCHDEV_ATTEMPT"] == "1"
    # a second failure exceeds backoffLimit 1
    annotate_workers(kube, ns, "flaky", {"kubesim.io/fail-after": "0"})
    obj = wait_state(sim, kube, ns, "flaky", "Failed", timeout=60)
    assert obj["status"]["failureReason"] == "BackoffLimitExceeded" and obj["status"]["restartCount"] == 1


def test_permanent_failure_fails_at_once(sim, kube, runtime, ns):
    create(kube, ns, tj("broken", failurePolicy={"backoffLimit": 5}))
    wait_state(sim, kube, ns, "broken", "Running")
    victim = workers(kube, ns, "broken")[0]
    kube["core"].patch_namespaced_pod(victim.metadata.name, ns, {"metadata": {"annotations": {
        "kubesim.io/fail-after": "0", "kubesim.io/exit-code": "3"}}})
    obj = wait_state(sim, kube, ns, "broken", "Failed", timeout=60)
    assert obj["status"]["failureReason"] == "PermanentFailure" and not obj["status"].get("restartCount")


def test_deadline_ends_the_run(sim, kube, runtime, ns):
    create(kube, ns, tj("late", failurePolicy={"activeDeadlineSeconds": 4}))
    sim.wait_for(lambda: workers(kube, ns, "late"), 60, message="workers started")
    obj = wait_state(sim, kube, ns, "late", "Failed", timeout=60)
    st = obj["status"]
    assert st["failureReason"] == "DeadlineExceeded" and st["startTime"] and st["duration"]
    sim.wait_for(lambda: not workers(kube, ns, "late"), 30, message="workers stopped")


def test_suspend_and_resume(sim, kube, runtime, ns):
    create(kube, ns, tj("pause"))
    wait_state(sim, kube, ns, "pause", "Running")
    kube["custom"].patch_namespaced_custom_object(GROUP, VERSION, ns, "trainingjobs", "pause", {"spec": {"suspend": True}})
    wait_state(sim, kube, ns, "pause", "Suspended")
    sim.wait_for(lambda: not workers(kube, ns, "pause"), 30, message="workers stopped")
    kube["custom"].patch_namespaced_custom_object(GROUP, VERSION, ns, "trainingjobs", "pause", {"spec": {"suspend": False}})
    wait_state(sim, kube, ns, "pause", "Running")
    assert len(workers(kube, ns, "pause")) == 2


def test_an_edit_of_a_running_job_waits_for_its_next_start(sim, kube, runtime, ns):
    """A Job's pod template is immutable while it runs: an edit of the workers' fields keeps the
    job running as it was (it was marked Failed InvalidSpec, its workers still training) and
    takes effect when the Job is created again, here after suspend/resume."""
    create(kube, ns, tj("edit"))
    wait_state(sim, kube, ns, "edit", "Running")
    old = batch(kube).read_namespaced_job("edit", ns).spec.template.spec.containers[0].image
    kube["custom"].patch_namespaced_custom_object(GROUP, VERSION, ns, "trainingjobs", "edit",
                                                  {"spec": {"image": "registry.example.com/train:2"}})
    edited = sim.wait_for(lambda: (lambda o: o if o["status"].get("observedGeneration") == 2 else None)(
        get_tj(kube, ns, "edit")), 60, interval=0.1, message="the edit reconciled")
    assert edited["status"]["state"] == "Running" and edited["status"].get("failureReason") is None, edited["status"]
    assert not any(c["type"] == "Degraded" and c["status"] == "True" for c in edited["status"]["conditions"])
    assert all(r.ok for r in runtime.history("TrainingJob") if r.name == "edit")
    assert batch(kube).read_namespaced_job("edit", ns).spec.template.spec.containers[0].image == old
    assert len(workers(kube, ns, "edit")) == 2
    kube["custom"].patch_namespaced_custom_object(GROUP, VERSION, ns, "trainingjobs", "edit", {"spec": {"suspend": True}})
    wait_state(sim, kube, ns, "edit", "Suspended")
    sim.wait_for(lambda: not workers(kube, ns, "edit"), 30, message="workers stopped")
    kube["custom"].patch_namespaced_custom_object(GROUP, VERSION, ns, "trainingjobs", "edit", {"spec": {"suspend": False}})
    wait_state(sim, kube, ns, "edit", "Running")
    assert batch(kube).read_namespaced_job("edit", ns).spec.template.spec.containers[0].image == \
        "registry.example.com/train:2"


def test_reconcile_of_an_unchanged_running_job_writes_nothing(sim, kube, runtime, ns):
    create(kube, ns, tj("idem"))
    wait_state(sim, kube, ns, "idem", "Running")
    sim.wait_for(lambda: get_tj(kube, ns, "idem")["status"]["workers"]["active"] == 2, 30, message="settled")
    before = len([r for r in runtime.history("TrainingJob") if r.name == "idem"])
    sim.wait_for(lambda: len([r for r in runtime.history("TrainingJob") if r.name == "idem"]) > before, 60,
                 message="one more reconcile (the watch period): the status is written")
    sim.reset_metrics()
    count = len([r for r in runtime.history("TrainingJob") if r.name == "idem"])
    runtime.enqueue("TrainingJob", ns, "idem")
    sim.wait_for(lambda: len([r for r in runtime.history("TrainingJob") if r.name == "idem"]) > count, 60,
                 message="a reconcile of the unchanged job")
    record = [r for r in runtime.history("TrainingJob") if r.name == "idem"][-1]
    assert record.ok and record.ansible.get("changed", 0) == 0, record
    from kubesim.metrics import WRITE_VERBS

    writes = [r for r in sim.requests() if r.get("verb") in WRITE_VERBS and ns in str(r)]
    assert writes == [], writes  # not even a status write
    assert sim.metrics()["by_verb"].get("get", 0) > 0  # it did look


def test_checkpoints_stay_in_the_namespace(sim, kube, runtime, ns):
    """Issue 25.4: a prefix naming another user's checkpoints lands under this namespace (the
    env the workers get), and a resumeFrom outside it fails the job as InvalidSpec naming the
    field, before any worker starts."""
    from kubernetes.client import ApiException

    s3 = {"type": "s3", "s3Bucket": "shared"}
    create(kube, ns, tj("foreign", checkpoint={"enabled": True, "storage": dict(s3, s3Prefix="dev-bob/victim")}))
    wait_state(sim, kube, ns, "foreign", "Running")
    env = {e.name: e.value for e in batch(kube).read_namespaced_job("foreign", ns).spec.template.spec.containers[0].env}
    assert env["TORCHDEV_CHECKPOINT_URI"] == f"s3://shared/{ns}/dev-bob/victim"
    create(kube, ns, tj("stolen", checkpoint={"enabled": True, "storage": s3,
                                              "resumeFrom": "s3://shared/dev-bob/victim/epoch-00003"}))
    obj = wait_state(sim, kube, ns, "stolen", "Failed")
    failed = next(c for c in obj["status"]["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "InvalidSpec" and failed["message"].startswith("spec.checkpoint.resumeFrom: "), failed
    with pytest.raises(ApiException) as err:
        batch(kube).read_namespaced_job("stolen", ns)
    assert err.value.status == 404


def test_a_finished_run_leaves_one_usage_record(sim, kube, runtime, ns):
    """Issue 25.3: a TrainingJob that ran leaves one UsageRecord (kind TrainingJob, workers x GPUs
    per worker, from its start to its completion), billed to the namespace's DevUser: open when it
    started, closed once."""
    import datetime

    from _e2e_helpers import bill_to, usage_records

    bill_to(kube, ns, "jane@example.com")
    create(kube, ns, tj("billed", gpusPerWorker=1))
    wait_state(sim, kube, ns, "billed", "Running")
    # open from the start (a job deleted while it runs still leaves it: test_usage_e2e.py)
    [opened] = sim.wait_for(lambda: usage_records(kube, ns), 30, interval=0.1, message="the open usage record")
    assert "endedAt" not in opened["spec"] and opened["spec"]["gpus"] == 2
    annotate_workers(kube, ns, "billed", {"kubesim.io/succeed-after": "5"})
    st = wait_state(sim, kube, ns, "billed", "Completed")["status"]
    records = sim.wait_for(lambda: [r for r in usage_records(kube, ns) if r["spec"].get("endedAt")], 30, interval=0.1,
                           message="the closed usage record")
    parse = lambda ts: datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ")  # noqa: E731
    started, ended = parse(st["startTime"]), parse(st["completionTime"])
    assert [r["metadata"]["name"] for r in records] == [
        "tj-billed-%d" % started.replace(tzinfo=datetime.timezone.utc).timestamp()]
    spec = records[0]["spec"]
    assert not records[0]["metadata"].get("ownerReferences")  # it outlives the job
    assert ended - started >= datetime.timedelta(seconds=5)
    assert {k: spec[k] for k in ("kind", "user", "server", "replicas", "gpus", "startedAt", "endedAt", "endReason",
                                 "cost", "pricePerHour")} == {
        "kind": "TrainingJob", "user": "jane@example.com", "server": "billed", "replicas": 2, "gpus": 2,
        "startedAt": st["startTime"], "endedAt": st["completionTime"], "endReason": "Succeeded", "cost": "0.0000",
        "pricePerHour": "0.0000"}
    assert spec["gpuHours"] == "%.4f" % (2 * (ended - started).total_seconds() / 3600) and float(spec["gpuHours"]) > 0
    # a reconcile of the finished job (an edit of its labels) writes the record no more
    before = len([r for r in runtime.history("TrainingJob") if r.name == "billed"])
    kube["custom"].patch_namespaced_custom_object(GROUP, VERSION, ns, "trainingjobs", "billed",
                                                  {"metadata": {"labels": {"touched": "yes"}}})
    sim.wait_for(lambda: len([r for r in runtime.history("TrainingJob") if r.name == "billed"]) > before, 60,
                 interval=0.1, message="a reconcile of the finished job")
    writes = [r for r in sim.requests(20000) if r["verb"] in ("create", "patch", "update")
              and "/usagerecords" in r["path"] and f"/namespaces/{ns}/" in r["path"]]
    assert [r["code"] for r in writes] == [201, 200], writes  # opened (created), closed: nothing more
