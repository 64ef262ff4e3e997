"""pods/exec over WebSocket (kubesim/podexec.py), through the official client's `stream`:
the v5/v4 channel protocol, the exit status on the error channel, stdin closed by the v5
signal, and commands run against the container's volumes, whose files are the
PersistentVolume's (another pod with the same claim sees them; they go with the volume)."""
from __future__ import annotations

import http.server
import io
import json
import tarfile
import threading

import pytest
from kubernetes import client
from kubernetes.stream import stream

from .conftest import api_client, make_namespace
from kubesim.testing import wait_for


@pytest.fixture(scope="module")
def core(kubesim_module):
    return client.CoreV1Api(api_client(kubesim_module))


def make_pod(core, ns, name, claim="data", **annotations):
    core.create_namespaced_pod(ns, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": annotations},
        "spec": {"containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"],
                                 "volumeMounts": [{"name": "data", "mountPath": "/data"},
                                                  {"name": "scratch", "mountPath": "/scratch"}]}],
                 "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}},
                             {"name": "scratch", "emptyDir": {}}]}})
    return wait_for(lambda: core.read_namespaced_pod(name, ns).status.phase == "Running", 30, message="running")


@pytest.fixture
def ns(core, kubesim_module):
    name = make_namespace(kubesim_module, "exec")
    core.create_namespaced_persistent_volume_claim(name, {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
    make_pod(core, name, "p")
    return name


def execute(core, ns, pod, command, stdin=None):
    """(exit code, stdout bytes, stderr bytes, the error channel's Status)."""
    ws = stream(core.connect_get_namespaced_pod_exec, pod, ns, command=command, stdin=stdin is not None,
                stdout=True, stderr=True, tty=False, _preload_content=False, binary=True)
    assert ws.subprotocol == "v5.channel.k8s.io"
    if stdin is not None:
        for i in range(0, len(stdin), 65536):
            ws.write_stdin(stdin[i:i + 65536])
        ws.close_channel(0)
    out, err = b"", b""
    while ws.is_open():
        ws.update(timeout=5)
        out += ws.read_channel(1)
        err += ws.read_channel(2)
    status = json.loads(ws.read_channel(3) or b"{}")
    code = 0 if status.get("status") == "Success" else int(status["details"]["causes"][0]["message"])
    return code, out, err, status


def tar_of(files):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_upload_list_read_and_download_through_tar(core, ns):
    files = {"a.txt": b"hello\n", "dir/b.bin": bytes(range(256)) * 1000}
    code, out, err, status = execute(core, ns, "p", ["tar", "-x", "-f", "-", "-C", "/data"], stdin=tar_of(files))
    assert (code, status["status"], err) == (0, "Success", b"")
    assert execute(core, ns, "p", ["cat", "/data/a.txt"])[1] == b"hello\n"
    assert execute(core, ns, "p", ["ls", "/data"])[1] == b"a.txt\ndir\n"
    code, out, err, _ = execute(core, ns, "p", ["tar", "cf", "-", "-C", "/data", "."])
    assert code == 0
    with tarfile.open(fileobj=io.BytesIO(out)) as tf:
        got = {m.name: tf.extractfile(m).read() for m in tf if m.isfile()}
    assert got == {"./a.txt": files["a.txt"], "./dir/b.bin": files["dir/b.bin"]}


def test_the_files_are_the_volumes(core, ns):
    execute(core, ns, "p", ["tar", "xf", "-", "-C", "/data"], stdin=tar_of({"kept.txt": b"on the volume"}))
    execute(core, ns, "p", ["tar", "xf", "-", "-C", "/scratch"], stdin=tar_of({"mine.txt": b"pod-local"}))
    make_pod(core, ns, "q")
    assert execute(core, ns, "q", ["cat", "/data/kept.txt"])[1] == b"on the volume"
    code, _, err, _ = execute(core, ns, "q", ["cat", "/scratch/mine.txt"])  # an emptyDir is the pod's own
    assert code == 1 and b"can't open '/scratch/mine.txt'" in err
    for pod in ("p", "q"):
        core.delete_namespaced_pod(pod, ns)
    core.delete_namespaced_persistent_volume_claim("data", ns)
    wait_for(lambda: not core.list_persistent_volume(
        field_selector="").items or all(pv.spec.claim_ref.namespace != ns for pv in core.list_persistent_volume().items),
        30, message="the volume deleted")
    core.create_namespaced_persistent_volume_claim(ns, {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
    make_pod(core, ns, "r")
    assert execute(core, ns, "r", ["ls", "/data"])[1] == b""  # a new volume is empty


def test_exit_codes_and_errors(core, ns):
    code, _, err, status = execute(core, ns, "p", ["cat", "/data/missing"])
    assert code == 1 and status["reason"] == "NonZeroExitCode"
    assert status["details"]["causes"] == [{"reason": "ExitCode", "message": "1"}]
    assert err == b"cat: can't open '/data/missing': No such file or directory\n"
    code, _, err, _ = execute(core, ns, "p", ["python3", "-c", "print(1)"])
    assert code == 127 and err == b"sh: python3: not found\n"
    code, _, err, _ = execute(core, ns, "p", ["tar", "xf", "-", "-C", "/data"], stdin=b"not a tar archive" * 100)
    assert code == 1 and err.startswith(b"tar:")
    code, _, err, _ = execute(core, ns, "p", ["tar", "xf", "-", "-C", "/data"], stdin=tar_of({"../../etc/x": b"!"}))
    assert code == 1 and b"outside the destination" in err  # tarfile's data filter


def test_exec_into_a_pod_that_does_not_run(core, ns):
    from kubernetes.client import ApiException

    core.create_namespaced_pod(ns, {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "done", "annotations": {"kubesim.io/succeed-after": "0"}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}})
    wait_for(lambda: core.read_namespaced_pod("done", ns).status.phase == "Succeeded", 30, message="done")
    for pod, text in (("done", "cannot exec into a container in a completed pod; current phase is Succeeded"),
                      ("missing", '"reason":"NotFound","code":404')):
        with pytest.raises(ApiException) as err:
            execute(core, ns, pod, ["ls"])
        assert text in str(err.value.body or err.value), err.value


def test_wget_into_the_volume(core, ns):
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            if self.path != "/image.jpg":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", "5")
            self.end_headers()
            self.wfile.write(b"JPEG!")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = "http://127.0.0.1:%d" % server.server_address[1]
        assert execute(core, ns, "p", ["mkdir", "-p", "/data/in"])[0] == 0
        assert execute(core, ns, "p", ["wget", "-q", "-O", "/data/in/x.jpg", url + "/image.jpg"])[0] == 0
        assert execute(core, ns, "p", ["cat", "/data/in/x.jpg"])[1] == b"JPEG!"
        code, _, err, _ = execute(core, ns, "p", ["wget", "-q", "-O", "/data/y.jpg", url + "/nope"])
        assert code == 1 and b"404" in err
    finally:
        server.shutdown()


def test_kubectl_cp_and_exec(core, ns, kubesim_module, tmp_path):
    """kubectl itself (its WebSocket executor) copies a tree in and out and execs."""
    import os
    import subprocess
    import sys

    kubectl = os.path.join(os.path.dirname(sys.executable), "kubectl")
    env = dict(os.environ, KUBECONFIG=kubesim_module.kubeconfig)
    (tmp_path / "src" / "sub").mkdir(parents=True)
    (tmp_path / "src" / "sub" / "f.txt").write_text("hi")

    def run(*args):
        proc = subprocess.run([kubectl, *args], env=env, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    run("cp", str(tmp_path / "src"), f"{ns}/p:/data/up")
    assert run("exec", "-n", ns, "p", "--", "ls", "/data/up/sub") == "f.txt\n"
    run("cp", f"{ns}/p:/data/up", str(tmp_path / "back"))
    assert (tmp_path / "back" / "sub" / "f.txt").read_text() == "hi"
