"""`python -m kubesim`: ready when the kubeconfig exists (< 2 s), clean SIGTERM, --nodes."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def spawn(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "kubesim", *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_file(path: str, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if proc.poll() is not None:
            pytest.fail(f"kubesim exited early ({proc.returncode}): {proc.stderr.read()}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"no kubeconfig after {timeout}s")
        time.sleep(0.01)


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as resp:
        assert resp.status == 200
        return json.loads(resp.read())


def stop(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        rc = proc.wait(timeout=60)  # a safety net on a busy machine, not a speed target
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail("kubesim did not stop within 60 s of SIGTERM")
    return rc


def test_start_ready_when_kubeconfig_exists_and_sigterm(tmp_path):
    kubeconfig = tmp_path / "sub" / "kubeconfig"
    proc = spawn("--port", "0", "--kubeconfig", str(kubeconfig))
    try:
        wait_for_file(str(kubeconfig), proc, timeout=60)
        cfg = yaml.safe_load(kubeconfig.read_text())
        server = cfg["clusters"][0]["cluster"]["server"]
        version = get_json(server + "/version")  # immediately: no retry, no sleep
        assert version["gitVersion"].startswith("v1.")
        assert server.startswith("http://127.0.0.1:") and not server.endswith(":0")
        assert cfg["current-context"] == "kubesim"
        # the default node pool was created
        assert len(get_json(server + "/api/v1/nodes")["items"]) >= 1
    finally:
        rc = stop(proc)
    assert rc == 0, proc.stderr.read()
    err = proc.stderr.read()
    assert "Traceback" not in err, err


def test_explicit_port_nodes_spec_and_sigint(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kubeconfig = tmp_path / "kc"
    proc = spawn("--port", str(port), "--kubeconfig", str(kubeconfig),
                 "--nodes", "gpu:2x{cpu:8,memory:32Gi,nvidia.com/gpu:4}")
    try:
        wait_for_file(str(kubeconfig), proc, timeout=60)
        server = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
        assert server == f"http://127.0.0.1:{port}"
        nodes = get_json(server + "/api/v1/nodes")["items"]
        assert len(nodes) == 2
        assert all(n["status"]["capacity"]["nvidia.com/gpu"] == "4" for n in nodes)
    finally:
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(timeout=10)
    assert rc == 0, proc.stderr.read()


def test_no_nodes(tmp_path):
    kubeconfig = tmp_path / "kc"
    proc = spawn("--kubeconfig", str(kubeconfig), "--nodes", "")
    try:
        wait_for_file(str(kubeconfig), proc, timeout=60)
        server = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
        assert get_json(server + "/api/v1/nodes")["items"] == []
    finally:
        rc = stop(proc)
    assert rc == 0


@pytest.mark.parametrize("args,message", [
    (["--nodes", "gpu:2x{cpu:"], "nodes"),
    (["--nodes", "gpu:twox{cpu:4}"], "nodes"),
    (["--nodes", "gpu:2x{cpu:4,memory:lots}"], "memory"),
    (["--disable", "no-such-controller"], "no-such-controller"),
])
def test_bad_arguments_exit_2(tmp_path, args, message):
    kubeconfig = tmp_path / "kc"
    proc = spawn("--kubeconfig", str(kubeconfig), *args)
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 2, err
    assert err.startswith("kubesim: ") or "error:" in err, err
    assert message in err, err
    assert "Traceback" not in err, err
    assert not kubeconfig.exists()


def test_missing_kubeconfig_argument_is_usage_error():
    proc = spawn("--port", "0")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "--kubeconfig" in err
