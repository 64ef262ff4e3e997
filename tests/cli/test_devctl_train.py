"""devctl train: submit (-f / flags), list, get, logs, suspend/resume, delete against kubesim
(no operator: the tests write the TrainingJob status and the worker pods themselves)."""
from __future__ import annotations

import pytest

from devctl_helpers import GROUP, VERSION, as_json


def tj(cluster, name):
    return cluster.custom.get_namespaced_custom_object(GROUP, VERSION, cluster.ns, "trainingjobs", name)


def set_status(cluster, name, status):
    obj = tj(cluster, name)
    obj["status"] = status
    cluster.custom.replace_namespaced_custom_object_status(GROUP, VERSION, cluster.ns, "trainingjobs", name, obj)


def worker(cluster, name, index, log):
    cluster.core.create_namespaced_pod(cluster.ns, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{name}-{index}-abcde", "labels": {"job-name": name},
                     "annotations": {"batch.kubernetes.io/job-completion-index": str(index), "kubesim.io/log": log}},
        "spec": {"containers": [{"name": "trainer", "image": "busybox"}]}})


MANIFEST = f"""apiVersion: {GROUP}/{VERSION}
kind: TrainingJob
metadata:
  name: from-file
spec:
  model: resnet50
  dataset: imagenet
  numWorkers: 4
  gpusPerWorker: 2
  hyperparameters: {{epochs: 3, optimizer: adamw}}
"""


def test_submit_from_file_and_flags(devctl, cluster, tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(MANIFEST)
    created = as_json(devctl("train", "submit", "-f", str(path), "-o", "json"))
    assert created["metadata"]["name"] == "from-file" and created["spec"]["numWorkers"] == 4
    assert created["spec"]["hyperparameters"]["optimizer"] == "adamw"

    created = as_json(devctl("train", "submit", "mnist", "--workers", "2", "--gpus-per-worker", "0", "--epochs", "5",
                             "--checkpoints", "--backoff-limit", "1", "-o", "json", "--", "python", "train.py", "--lr", "0.1"))
    spec = created["spec"]
    assert spec["numWorkers"] == 2 and spec["gpusPerWorker"] == 0 and spec["networking"]["backend"] == "gloo"
    assert spec["command"] == ["python", "train.py", "--lr", "0.1"] and spec["hyperparameters"]["epochs"] == 5
    assert spec["checkpoint"]["enabled"] is True and spec["failurePolicy"]["backoffLimit"] == 1
    assert tj(cluster, "mnist")["spec"]["model"] == "mnist"


@pytest.mark.parametrize("args,text", [
    (["train", "submit", "x"], "--workers is required"),
    (["train", "submit", "Bad_Name", "--workers", "1"], "not a valid trainingjob name"),
    (["train", "submit", "x", "--workers", "101"], "--workers"),
    (["train", "submit", "-f", "/nonexistent.yaml"], "cannot read /nonexistent.yaml"),
    (["train", "get", "missing"], "not found"),
])
def test_errors_are_one_line(devctl, args, text):
    result = devctl(*args)
    assert result.exit_code != 0
    assert text in result.output and len(result.output.strip().splitlines()) == 1, result.output


def test_submit_rejected_by_the_api_names_the_field(devctl, tmp_path):
    path = tmp_path / "gcs.yaml"
    path.write_text(MANIFEST + "  checkpoint: {storage: {type: gcs}}\n")
    result = devctl("train", "submit", "-f", str(path))
    assert result.exit_code == 1 and "spec.checkpoint.storage.type" in result.output


def test_list_get_and_status(devctl, cluster):
    devctl("train", "submit", "bert", "--workers", "2", "--gpus-per-worker", "0")
    devctl("train", "submit", "gpt", "--workers", "1", "--gpus-per-worker", "0")
    set_status(cluster, "bert", {"state": "Running", "progress": "45%", "currentEpoch": 2, "totalEpochs": 3,
                                 "metrics": {"loss": 0.45, "accuracy": 0.89}, "restartCount": 1,
                                 "lastRestartReason": "worker 1 (pod bert-1-x) exited with code 137",
                                 "latestCheckpoint": {"path": "/checkpoints/bert/epoch-00002", "epoch": 2},
                                 "checkpoints": 2, "workers": {"active": 2}})
    data = as_json(devctl("train", "list", "-o", "json"))
    assert [i["metadata"]["name"] for i in data["items"]] == ["bert", "gpt"]
    result = devctl("train", "list")
    rows = [line.split() for line in result.stdout.strip().splitlines()]
    assert rows[0] == ["NAME", "STATE", "PROGRESS", "EPOCH", "RESTARTS", "AGE"]
    assert rows[1][:5] == ["bert", "Running", "45%", "2", "1"] and rows[2][:5] == ["gpt", "Pending", "-", "-", "0"]

    assert as_json(devctl("train", "get", "bert", "-o", "json"))["status"]["metrics"]["accuracy"] == 0.89
    worker(cluster, "bert", 0, "")
    text = devctl("train", "get", "bert").stdout
    for part in ("State:       Running", "epoch 2/3", "accuracy=0.89", "loss=0.45", "/checkpoints/bert/epoch-00002",
                 "Restarts:    1", "exited with code 137", "rank 0"):
        assert part in text, text


def test_logs_by_rank(devctl, cluster):
    devctl("train", "submit", "logs", "--workers", "2", "--gpus-per-worker", "0")
    worker(cluster, "logs", 0, "epoch 1 loss 0.9\nepoch 2 loss 0.5\n")
    worker(cluster, "logs", 1, "rank one here\n")
    out = devctl("train", "logs", "logs").stdout.splitlines()
    assert out == ["[rank 0] epoch 1 loss 0.9", "[rank 0] epoch 2 loss 0.5", "[rank 1] rank one here"]
    assert devctl("train", "logs", "logs", "--rank", "1").stdout == "[rank 1] rank one here\n"
    result = devctl("train", "logs", "logs", "--rank", "5")
    assert result.exit_code == 1 and "no worker of rank 5" in result.output


def test_suspend_resume_delete(devctl, cluster):
    devctl("train", "submit", "pause", "--workers", "1", "--gpus-per-worker", "0")
    assert devctl("train", "suspend", "pause").exit_code == 0
    assert tj(cluster, "pause")["spec"]["suspend"] is True
    result = devctl("train", "resume", "pause")
    assert result.exit_code == 0 and "newest checkpoint" in result.stdout
    assert tj(cluster, "pause")["spec"]["suspend"] is False
    result = devctl("train", "delete", "pause")
    assert result.exit_code == 0 and "checkpoints are kept" in result.stdout
    assert as_json(devctl("train", "list", "-o", "json"))["items"] == []
