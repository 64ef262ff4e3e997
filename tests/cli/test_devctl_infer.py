"""devctl infer against kubesim, no operator (the tests write the job's status themselves):
create (the volume, the upload through a helper pod and the exec WebSocket, the job),
copy-file (wget in the cluster), download, debug, watch, get, list, logs, cleanup, delete.
The upload and download of 200 MB of small files is measured here; the workflow with the
operator and the real runner is tests/e2e/test_eaj_e2e.py."""
from __future__ import annotations

import hashlib
import http.server
import json
import os
import threading
import time
from datetime import datetime, timedelta, timezone

import pytest

from devctl_helpers import GROUP, VERSION, as_json

PLURAL = "ephemeralaccelerationjobs"


def job(cluster, name):
    return cluster.custom.get_namespaced_custom_object(GROUP, VERSION, cluster.ns, PLURAL, name)


def set_status(cluster, name, status):
    obj = job(cluster, name)
    obj["status"] = status
    cluster.custom.replace_namespaced_custom_object_status(GROUP, VERSION, cluster.ns, PLURAL, name, obj)


def pods(cluster):
    return [p.metadata.name for p in cluster.core.list_namespaced_pod(cluster.ns).items if not p.metadata.deletion_timestamp]


def ts(delta=0):
    return (datetime.now(timezone.utc) + timedelta(seconds=delta)).strftime("%Y-%m-%dT%H:%M:%SZ")


def digest_tree(root):
    out = {}
    for base, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(base, name)
            with open(path, "rb") as fh:
                out[os.path.relpath(path, root)] = hashlib.sha1(fh.read()).hexdigest()
    return out


@pytest.fixture
def project(tmp_path):
    root = tmp_path / "project"
    (root / "images").mkdir(parents=True)
    (root / "images" / "a.jpg").write_bytes(b"\xff\xd8 fake a")
    (root / "images" / "b.png").write_bytes(b"\x89PNG fake b")
    (root / "model.pt").write_bytes(os.urandom(3000))
    (root / "README").write_text("my project\n")
    return root


def test_create_uploads_the_project_then_creates_the_job(devctl, cluster, project, tmp_path):
    result = devctl("infer", "create", "cat", "--project-dir", str(project), "--input-path", "/artifacts/images",
                    "--model", "/artifacts/model.pt", "--gpus", "0", "--pod-ttl", "60", "--pvc-ttl", "7200",
                    "--pvc-size", "2Gi", "-o", "json")
    assert result.exit_code == 0, result.output
    created = as_json(result)
    assert created["spec"] == {"model": "/artifacts/model.pt", "input": {"type": "directory", "path": "/artifacts/images"},
                               "output": {"path": "/artifacts/output.json"}, "resources": {"gpu": 0},
                               "ttlSecondsAfterFinished": 60, "pvcTTLSecondsAfterFinished": 7200, "pvcSize": "2Gi",
                               "image": "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"}
    assert "uploaded 0.0 MB in 4 files" in result.stderr and "persistentvolumeclaim/artifacts-cat created" in result.stderr
    claim = cluster.core.read_namespaced_persistent_volume_claim("artifacts-cat", cluster.ns)
    assert claim.spec.resources.requests["storage"] == "2Gi" and claim.spec.access_modes == ["ReadWriteOnce"]
    assert claim.metadata.labels["torchdev.io/ephemeralaccelerationjob"] == "cat"
    assert claim.metadata.annotations["torchdev.io/artifacts-ttl"] == "7200"
    assert pods(cluster) == []  # the upload pod is gone
    # what was uploaded is on the volume: download it back
    result = devctl("infer", "download", "cat", "--to", str(tmp_path / "back"))
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == str(tmp_path / "back")
    assert digest_tree(tmp_path / "back") == digest_tree(project)
    assert "downloaded" in result.stderr and pods(cluster) == []


def test_create_refuses_what_cannot_work(devctl, cluster, project):
    for args, text in [
        (["infer", "create", "Bad_Name", "--input-path", "/artifacts/x.jpg"], "not a valid job name"),
        (["infer", "create", "x", "--input-path", "/tmp/x.jpg"], "--input-path must be a path in /artifacts"),
        (["infer", "create", "x", "--input-path", "/artifacts/x.jpg", "--model", "vgg16"], "spec.model"),
        (["infer", "create", "x", "--input-path", "/artifacts/x.jpg", "--pod-ttl", "60", "--pvc-ttl", "10"],
         "--pvc-ttl must not be shorter than --pod-ttl"),
        (["infer", "download", "nothing"], "job nothing has no volume artifacts-nothing"),
    ]:
        result = devctl(*args)
        assert result.exit_code != 0 and text in result.output, (args, result.output)
        assert len(result.output.strip().splitlines()) == 1, result.output
    assert devctl("infer", "create", "twice", "--input-path", "/artifacts/x.jpg").exit_code == 0
    result = devctl("infer", "create", "twice", "--input-path", "/artifacts/x.jpg")
    assert result.exit_code == 1 and 'job "twice" already exists' in result.output


def test_copy_file_downloads_in_the_cluster_then_create_uses_the_volume(devctl, cluster, tmp_path):
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            body = b"a cat picture"
            if self.path != "/cat.jpg":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = "http://127.0.0.1:%d" % server.server_address[1]
    try:
        result = devctl("infer", "copy-file", "pic", url + "/cat.jpg", "--target-path", "/artifacts/in/cat.jpg")
        assert result.exit_code == 0, result.output
        assert result.stdout.strip() == url + "/cat.jpg -> artifacts-pic:/artifacts/in/cat.jpg"
        result = devctl("infer", "copy-file", "pic", url + "/dog.jpg", "--target-path", "/artifacts/dog.jpg")
        assert result.exit_code == 1 and "cannot download" in result.output and "404" in result.output
    finally:
        server.shutdown()
    result = devctl("infer", "create", "pic", "--input-path", "/artifacts/in/cat.jpg")
    assert result.exit_code == 0 and "persistentvolumeclaim/artifacts-pic exists: using it" in result.stderr
    assert devctl("infer", "download", "pic", "--to", str(tmp_path / "d")).exit_code == 0
    assert (tmp_path / "d" / "in" / "cat.jpg").read_bytes() == b"a cat picture"
    assert pods(cluster) == []


def test_debug_runs_a_command_beside_the_volume_or_keeps_the_pod(devctl, cluster, project, capfd):
    assert devctl("infer", "create", "dbg", "--project-dir", str(project), "--input-path", "/artifacts/README").exit_code == 0
    result = devctl("infer", "debug", "dbg", "--", "ls", "/artifacts")
    assert result.exit_code == 0, result.output
    assert capfd.readouterr().out.split() == ["README", "images", "model.pt"]  # kubectl exec's own output
    assert pods(cluster) == []
    result = devctl("infer", "debug", "dbg", "--keep")
    assert result.exit_code == 0 and "kubectl exec -it debug-dbg-" in result.stdout
    (kept,) = pods(cluster)
    assert kept.startswith("debug-dbg-")
    spec = cluster.core.read_namespaced_pod(kept, cluster.ns).spec
    assert spec.volumes[0].persistent_volume_claim.claim_name == "artifacts-dbg"
    assert spec.active_deadline_seconds == 3600 and spec.security_context.run_as_non_root


def test_get_list_watch_and_logs(devctl, cluster):
    assert devctl("infer", "create", "ok", "--input-path", "/artifacts/x.jpg").exit_code == 0
    assert devctl("infer", "create", "ko", "--input-path", "/artifacts/x.jpg", "--gpus", "2").exit_code == 0
    set_status(cluster, "ok", {"phase": "Succeeded", "message": "inference finished", "artifactPath": "/artifacts/output.json",
                               "artifactsExpireAt": "2030-01-01T00:00:00Z", "podName": "ephemeralaccelerationjob-ok",
                               "conditions": [{"type": "Succeeded", "status": "True", "reason": "InferenceSucceeded",
                                               "message": "done", "lastTransitionTime": ts()}]})
    set_status(cluster, "ko", {"phase": "Failed", "message": "input image /artifacts/x.jpg does not exist", "exitCode": 3,
                               "conditions": [{"type": "Failed", "status": "True", "reason": "InputNotFound",
                                               "message": "x", "lastTransitionTime": ts()}]})
    listed = as_json(devctl("infer", "list", "-o", "json"))
    assert [o["metadata"]["name"] for o in listed["items"]] == ["ko", "ok"]
    table = devctl("infer", "list").stdout.splitlines()
    assert table[0].split()[:4] == ["NAME", "PHASE", "MODEL", "GPUS"]
    assert table[1].split()[:4] == ["ko", "Failed", "resnet50", "2"] and "/artifacts/output.json" in table[2]
    text = devctl("infer", "get", "ko").stdout
    assert "Phase:       Failed" in text and "Exit code:   3" in text and "InputNotFound" in text
    assert as_json(devctl("infer", "get", "ok", "-o", "json"))["status"]["phase"] == "Succeeded"
    result = devctl("infer", "watch", "ok")
    assert result.exit_code == 0 and "Succeeded: inference finished" in result.stderr
    result = devctl("infer", "watch", "ko")
    assert result.exit_code == 1
    assert result.output.strip().splitlines()[-1] == \
        "error: job ko failed (InputNotFound): input image /artifacts/x.jpg does not exist"
    # a watch that sees the job change
    set_status(cluster, "ok", {"phase": "Running", "message": "the inference pod is running"})
    timer = threading.Timer(0.3, set_status, (cluster, "ok", {"phase": "Succeeded", "artifactPath": "/artifacts/o.json"}))
    timer.start()
    result = devctl("infer", "watch", "ok")
    timer.join()
    assert result.exit_code == 0 and "Running: the inference pod is running" in result.stderr
    # logs: the pod's, or a clear error once it is gone
    cluster.core.create_namespaced_pod(cluster.ns, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "ephemeralaccelerationjob-ok", "annotations": {"kubesim.io/log": "batch 1/1\nwrote it\n"}},
        "spec": {"containers": [{"name": "inference", "image": "busybox"}]}})
    assert devctl("infer", "logs", "ok").stdout == "batch 1/1\nwrote it\n"
    result = devctl("infer", "logs", "ko")
    assert result.exit_code == 1 and "the pod ephemeralaccelerationjob-ko of job ko is gone" in result.output


def test_cleanup_deletes_volumes_past_their_ttl_and_delete_detaches_or_deletes(devctl, cluster):
    for name in ("old", "fresh", "running", "gone", "purge"):
        assert devctl("infer", "create", name, "--input-path", "/artifacts/x.jpg").exit_code == 0
    set_status(cluster, "old", {"phase": "Succeeded", "artifactsExpireAt": ts(-5)})
    set_status(cluster, "fresh", {"phase": "Failed", "artifactsExpireAt": ts(3600)})
    set_status(cluster, "running", {"phase": "Running"})
    set_status(cluster, "gone", {"phase": "Succeeded", "artifactsExpireAt": ts(-60)})
    # delete keeps the volume, detached, until the job's expiry; --delete-pvc deletes it
    result = devctl("infer", "delete", "gone")
    assert result.exit_code == 0 and "persistentvolumeclaim/artifacts-gone kept until" in result.stdout
    claim = cluster.core.read_namespaced_persistent_volume_claim("artifacts-gone", cluster.ns)
    assert not claim.metadata.owner_references and claim.metadata.annotations["torchdev.io/artifacts-expire-at"]
    result = devctl("infer", "delete", "purge", "--delete-pvc")
    assert result.exit_code == 0 and "persistentvolumeclaim/artifacts-purge deleted" in result.stdout
    dry = as_json(devctl("infer", "cleanup", "--dry-run", "-o", "json"))
    assert sorted(r["name"] for r in dry["items"]) == ["artifacts-gone", "artifacts-old"]
    assert not any(r["deleted"] for r in dry["items"])
    result = devctl("infer", "cleanup")
    assert result.exit_code == 0 and result.stdout.split("\n")[0].split() == ["VOLUME", "JOB", "EXPIRED", "DELETED"]
    left = sorted(c.metadata.name for c in cluster.core.list_namespaced_persistent_volume_claim(cluster.ns).items
                  if not c.metadata.deletion_timestamp)
    assert left == ["artifacts-fresh", "artifacts-running"]
    assert devctl("infer", "cleanup").stderr.strip() == "No volume past its TTL."


# -- 200 MB of small files ------------------------------------------------------------------------------
FILES, SIZE = 2000, 100_000  # 200 MB


def test_upload_and_download_200_mb_of_small_files(devctl, cluster, tmp_path, record_property):
    src = tmp_path / "big"
    block = os.urandom(SIZE + 4096)
    for d in range(20):
        (src / f"d{d:02d}").mkdir(parents=True)
        for f in range(FILES // 20):
            i = d * (FILES // 20) + f
            (src / f"d{d:02d}" / f"f{f:03d}.bin").write_bytes(i.to_bytes(4, "big") + block[i:i + SIZE - 4])
    start = time.monotonic()
    result = devctl("infer", "create", "big", "--project-dir", str(src), "--input-path", "/artifacts/d00",
                    "--pvc-size", "1Gi")
    up = time.monotonic() - start
    assert result.exit_code == 0, result.output
    progress = [line for line in result.stderr.splitlines() if line.startswith("uploaded")]
    assert len(progress) >= 10 and "(100%)" in progress[-2] and "2000 files" in progress[-1], progress
    start = time.monotonic()
    result = devctl("infer", "download", "big", "--to", str(tmp_path / "back"))
    down = time.monotonic() - start
    assert result.exit_code == 0, result.output
    assert [line for line in result.stderr.splitlines() if line.startswith("downloaded")][-1].startswith(
        "downloaded 20")  # 200+ MB of tar
    assert digest_tree(tmp_path / "back") == digest_tree(src)
    mb = FILES * SIZE / 1e6
    figures = {"upload_s": round(up, 2), "upload_MBps": round(mb / up, 1),
               "download_s": round(down, 2), "download_MBps": round(mb / down, 1)}
    record_property("transfer_200mb", json.dumps(figures))
    print("\n200 MB in %d files: %s" % (FILES, figures))
    assert up < 120 and down < 120  # a ceiling for a busy machine; the figures are the point
