"""The lifecycle agent (roles/devserver/files/pytorch/torchdev-agent) for real on this machine:
real processes, a real SSH session through the pod's own entrypoint and sshd (Debian's
openssh-server on a loopback port), the GPU signal from a command standing in for nvidia-smi,
and a recording HTTP server standing in for the API server (the agent's only request is the
merge patch of its server's activity ConfigMap).  No GPU is needed; on a machine with one the
real nvidia-smi could be pointed at instead (not done here: no GPU machine in CI).

Every wait is on the agent's own output (a request received, a file written, a terminal
written to); the timeouts only bound a hang.
"""
from __future__ import annotations

import datetime
import http.server
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from hack import render_manifests
from security.test_ssh_session_env import _free_port, _which

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "roles" / "devserver" / "files" / "pytorch"
AGENT = SCRIPTS / "torchdev-agent"


def wait(predicate, timeout=60.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(0.05)
    raise AssertionError("timed out waiting for " + what)


class Recorder(http.server.BaseHTTPRequestHandler):
    requests: list = []

    def do_PATCH(self):  # noqa: N802 - the http.server API
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        type(self).requests.append({"path": self.path, "content_type": self.headers.get("Content-Type"),
                                    "auth": self.headers.get("Authorization"), "body": json.loads(body)})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


@pytest.fixture
def api():
    Recorder.requests = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, Recorder.requests
    server.shutdown()


def states(requests, pod="dev-0"):
    return [json.loads(r["body"]["data"][pod]) for r in requests]


def agent_env(tmp_path, api, **extra):
    token = tmp_path / "token"
    token.write_text("agent-token\n")
    smi = tmp_path / "nvidia-smi"
    (tmp_path / "gpu-util").write_text("")  # empty: no GPU
    smi.write_text("#!/bin/sh\n# stands in for nvidia-smi --query-gpu=utilization.gpu\n"
                   "test -s %s || exit 9\ncat %s\n" % (tmp_path / "gpu-util", tmp_path / "gpu-util"))
    smi.chmod(0o755)
    home, run = tmp_path / "home", tmp_path / "run"
    home.mkdir(exist_ok=True)
    run.mkdir(exist_ok=True)
    env = dict(os.environ, TORCHDEV_NAME="dev", TORCHDEV_NAMESPACE="dev-jane", POD_NAME="dev-0", HOME=str(home),
               TORCHDEV_RUN_DIR=str(run), TORCHDEV_LIFECYCLE_FILE=str(tmp_path / "deadlines.json"),
               TORCHDEV_NVIDIA_SMI=str(smi), TORCHDEV_AGENT_INTERVAL="0.3",
               TORCHDEV_API_SERVER="http://127.0.0.1:%d" % api[0].server_address[1],
               TORCHDEV_TOKEN_FILE=str(token), TORCHDEV_CA_FILE="")
    env.update(extra)
    return env


def start_agent(env):
    return subprocess.Popen([sys.executable, str(AGENT)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def stop(proc):
    proc.terminate()
    try:
        return proc.communicate(timeout=30)[1]
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()[1]


def test_busy_process_and_gpu_make_it_active_and_only_changes_are_reported(tmp_path, api):
    go = tmp_path / "go"
    # The agent's scope: this shell and what it starts (on this shared machine every other
    # process of the user is out of scope). It turns into a busy loop when `go` appears.
    worker = subprocess.Popen(["/bin/sh", "-c", "while [ ! -e %s ]; do sleep 0.2; done; exec %s -c 'while True: pass'"
                               % (go, sys.executable)])
    env = agent_env(tmp_path, api, TORCHDEV_AGENT_SCOPE_PIDS=str(worker.pid))
    proc = start_agent(env)
    try:
        wait(lambda: len(api[1]) >= 1, what="the first report")
        first = states(api[1])[0]
        assert first["state"] == "idle" and first["reasons"] == []
        request = api[1][0]
        assert request["path"] == "/api/v1/namespaces/dev-jane/configmaps/dev-activity?fieldManager=torchdev-agent"
        assert request["content_type"] == "application/merge-patch+json"
        assert request["auth"] == "Bearer agent-token"

        go.touch()
        wait(lambda: len(api[1]) >= 2, what="active (a busy process)")
        assert states(api[1])[1]["state"] == "active" and "process" in states(api[1])[1]["reasons"]
        worker.kill()
        worker.wait()
        wait(lambda: len(api[1]) >= 3, what="idle again")
        idle = states(api[1])[2]
        assert idle["state"] == "idle"
        since = datetime.datetime.strptime(idle["since"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
        assert abs((datetime.datetime.now(datetime.timezone.utc) - since).total_seconds()) < 60

        # A busy GPU (the stand-in for nvidia-smi prints its utilisation) keeps it active;
        # under the threshold (10 %) it does not.
        (tmp_path / "gpu-util").write_text("5\n3\n")
        time.sleep(1.5)  # several samples: still idle, so nothing is reported
        assert len(api[1]) == 3
        (tmp_path / "gpu-util").write_text("5\n87\n")
        wait(lambda: len(api[1]) >= 4, what="active (GPU)")
        assert states(api[1])[3] == {"state": "active", "since": states(api[1])[3]["since"], "reasons": ["gpu"],
                                     "started": states(api[1])[0]["started"]}
        (tmp_path / "gpu-util").write_text("0\n0\n")
        wait(lambda: len(api[1]) >= 5, what="idle (GPU)")
        # State changes only: every report differs from the one before.
        seq = [s["state"] for s in states(api[1])]
        assert seq == ["idle", "active", "idle", "active", "idle"]
    finally:
        worker.kill()
        stop(proc)


def test_a_restarted_agent_changes_the_record_at_once(tmp_path, api):
    """The report at start is how the operator learns that a replica restarted (the ConfigMap is
    the DevServer's dependent; pod status changes reconcile nothing): a second start in the same
    second, in the same state, still writes a different value."""
    # The agent's scope: one sleeping process (on this shared machine every other process of
    # the user is out of scope), so both starts measure the same state.
    quiet = subprocess.Popen(["sleep", "600"])
    env = agent_env(tmp_path, api, TORCHDEV_AGENT_SCOPE_PIDS=str(quiet.pid))
    try:
        for attempt in (1, 2):
            proc = start_agent(env)
            try:
                wait(lambda: len(api[1]) >= attempt, what="the report at start %d" % attempt)
            finally:
                stop(proc)
    finally:
        quiet.kill()
        quiet.wait()
    first, second = states(api[1][:2])
    assert first["state"] == second["state"] == "idle"
    assert api[1][0]["body"] != api[1][1]["body"] and first["started"] != second["started"]


def test_once_prints_the_measurement(tmp_path, api):
    (tmp_path / "x").mkdir()
    env = agent_env(tmp_path / "x", api, TORCHDEV_AGENT_SCOPE_PIDS=str(os.getpid()))
    (tmp_path / "x" / "gpu-util").write_text("42\n")
    out = subprocess.run([sys.executable, str(AGENT), "--once"], env=env, capture_output=True, text=True, timeout=60)
    data = json.loads(out.stdout)
    assert data["details"]["gpus"] == [42] and "gpu" in data["reasons"] and data["state"] == "active"
    assert api[1] == []  # --once reports nothing


COMMIT = "0f8e4f5c6d7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c"


def fake_server(home, relative):
    """An IDE's server binary at ``home/relative``: a link to sleep, so its process's command
    line is that path (as /proc shows a VS Code server's node) and it uses no CPU."""
    path = home / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(_which("sleep"))
    return path


@pytest.mark.parametrize("relative,ide", [
    # VS Code Remote-SSH: the server's node under ~/.vscode-server (older and newer layouts)
    (f".vscode-server/bin/{COMMIT}/node", True),
    (f".vscode-server/cli/servers/Stable-{COMMIT}/server/node", True),
    ("opt/openvscode-server/node", True),
    (f".cursor-server/bin/{COMMIT}/node", True),
    ("opt/code-server/lib/node", True),
    (".cache/JetBrains/RemoteDev/dist/pycharm/bin/remote-dev-server.sh", True),
    # a user's own idle service is not an IDE (nor busy): idle
    ("bin/api-gateway", False),
    ("bin/node", False),
])
def test_an_ide_server_process_counts_as_a_session(tmp_path, api, relative, ide):
    env = agent_env(tmp_path, api)
    server = subprocess.Popen([str(fake_server(Path(env["HOME"]), relative)), "600"])
    try:
        env["TORCHDEV_AGENT_SCOPE_PIDS"] = str(server.pid)
        out = subprocess.run([sys.executable, str(AGENT), "--once"], env=env, capture_output=True, text=True,
                             timeout=60)
        data = json.loads(out.stdout)
    finally:
        server.kill()
        server.wait()
    if ide:
        assert (data["state"], data["reasons"], data["details"].get("ide")) == ("active", ["ide"], 1), data
    else:
        assert (data["state"], data["reasons"]) == ("idle", []), data


def test_a_vs_code_server_keeps_the_server_active_until_it_exits(tmp_path, api):
    """Reported as the agent reports: idle, then active with reason ide while a VS Code server's
    node runs (a sleeping process: no CPU, no SSH session), idle again when it exits."""
    env = agent_env(tmp_path, api)
    node = fake_server(Path(env["HOME"]), f".vscode-server/bin/{COMMIT}/node")
    go = tmp_path / "go"
    # The agent's scope: this shell, which becomes the server's node (same pid) when `go` appears
    # (the path comes through the environment: the shell's own command line must not name it).
    launcher = subprocess.Popen(["/bin/sh", "-c", 'while [ ! -e %s ]; do sleep 0.2; done; exec "$NODE" 600' % go],
                                env=dict(os.environ, NODE=str(node)))
    env["TORCHDEV_AGENT_SCOPE_PIDS"] = str(launcher.pid)
    proc = start_agent(env)
    try:
        wait(lambda: len(api[1]) >= 1, what="the first report")
        assert states(api[1])[0]["state"] == "idle"
        go.touch()
        wait(lambda: len(api[1]) >= 2, what="active (the VS Code server)")
        assert states(api[1])[1]["state"] == "active" and states(api[1])[1]["reasons"] == ["ide"]
        launcher.kill()
        launcher.wait()
        wait(lambda: len(api[1]) >= 3, what="idle after the server exited")
        assert [s["state"] for s in states(api[1])] == ["idle", "active", "idle"]
    finally:
        launcher.kill()
        stop(proc)


def test_warnings_reach_terminals_the_home_file_and_the_banner_and_rearm(tmp_path, api):
    master, slave = os.openpty()  # a terminal of this user, as an SSH session's pts
    received = []
    reader = threading.Thread(target=lambda: received.append(os.read(master, 65536)) or
                              received.append(os.read(master, 65536)), daemon=True)
    reader.start()
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    deadlines = tmp_path / "deadlines.json"
    expires = now + datetime.timedelta(seconds=8)
    deadlines.write_text(json.dumps({"expiresAt": expires.strftime("%Y-%m-%dT%H:%M:%SZ"), "idleDeadline": None,
                                     "warnings": [6, 3], "autoShutdown": False}))
    env = agent_env(tmp_path, api, TORCHDEV_AGENT_SCOPE_PIDS=str(os.getpid()), TORCHDEV_AGENT_INTERVAL="30")
    proc = start_agent(env)
    state = tmp_path / "home" / ".torchdev" / "lifecycle.json"
    try:
        def sent():
            try:
                return json.loads(state.read_text())["warningsSent"]
            except (OSError, ValueError, KeyError):
                return None
        key = "expiry@" + expires.strftime("%Y-%m-%dT%H:%M:%SZ")
        wait(lambda: (sent() or {}).get(key) == [6], 30, "the 6 s warning")
        first = json.loads(state.read_text())
        assert first["lastWarning"]["offset"] == 6 and "devctl extend dev" in first["lastWarning"]["message"]
        assert first["deadlines"]["expiresAt"] == expires.strftime("%Y-%m-%dT%H:%M:%SZ")
        motd = (tmp_path / "run" / "motd").read_text()
        assert "reservation ends at " + expires.strftime("%Y-%m-%dT%H:%M:%SZ") in motd
        wait(lambda: received, 30, "the wall message on the terminal")
        assert b"torchdev: dev: the reservation ends at" in received[0]
        wait(lambda: (sent() or {}).get(key) == [6, 3], 30, "the 3 s warning")

        # Extended: the operator rewrites deadlines.json; the warnings re-arm for the new time.
        later = now + datetime.timedelta(seconds=120)
        deadlines.write_text(json.dumps({"expiresAt": later.strftime("%Y-%m-%dT%H:%M:%SZ"), "warnings": [6, 3]}))
        new_key = "expiry@" + later.strftime("%Y-%m-%dT%H:%M:%SZ")
        wait(lambda: sent() == {} and json.loads(state.read_text())["deadlines"]["expiresAt"] == later.strftime(
            "%Y-%m-%dT%H:%M:%SZ"), 30, "re-armed for the new expiry")
        assert new_key not in sent()
    finally:
        log = stop(proc)
        os.close(master)
        os.close(slave)
    assert "warned: dev: the reservation ends" in log


def test_an_ssh_session_through_the_pods_entrypoint_keeps_it_active(tmp_path, api):
    """The rendered entrypoint starts the agent (scripts from roles/devserver/files/pytorch)
    beside sshd; a real SSH session makes the server active, its end idle again."""
    tools = {name: _which(name) for name in ("sshd", "ssh", "ssh-keygen")}
    home, run, port = tmp_path / "home", tmp_path / "run", _free_port()
    keys = tmp_path / "client"
    for d in (home, run, keys):
        d.mkdir(exist_ok=True)
    subprocess.run([tools["ssh-keygen"], "-q", "-t", "ed25519", "-N", "", "-f", str(keys / "id")], check=True)
    (keys / "authorized_keys").write_text((keys / "id.pub").read_text())
    extra = ["-o", f"AuthorizedKeysFile={keys / 'authorized_keys'}"]
    if os.geteuid() == 0:
        extra += ["-o", "PermitRootLogin=prohibit-password"]
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    sshd = tmp_path / "sshd"
    sshd.write_text("#!/bin/sh\nexec %s %s \"$@\"\n" % (tools["sshd"], " ".join(extra)))
    sshd.chmod(0o755)
    import yaml

    flavor = yaml.safe_load((ROOT / "config" / "samples" / "torchdev_v1alpha1_devserverflavor_cpu-small.yaml").read_text())
    cr = yaml.safe_load((ROOT / "config" / "samples" / "torchdev_v1alpha1_devserver_standalone.yaml").read_text())
    cr["metadata"].update(name="dev", namespace="dev-jane", uid="00000000-0000-0000-0000-000000000002", generation=1)
    cr["spec"]["flavor"] = "cpu-small"
    hostvars = dict(render_manifests.devserver_hostvars({"cr": cr, "flavor": flavor}),
                    devserver_home=str(home), devserver_run_dir=str(run), devserver_sshd=str(sshd),
                    devserver_ssh_port=port, devserver_scripts_dir=str(SCRIPTS))
    objects = render_manifests.render_roles(tmp_path, {"devserver": {"agent": hostvars}})["devserver"]["agent"]
    script = next(o for o in objects if o["kind"] == "StatefulSet")["spec"]["template"]["spec"]["containers"][0]["args"][-1]
    assert "torchdev-agent" in script
    # The agent's env as the kubelet and the entrypoint give it; SCOPE=parent: sshd and its sessions.
    env = agent_env(tmp_path, api, TORCHDEV_AGENT_SCOPE_PIDS="parent", HOME=str(home))
    env["PATH"] = "%s:%s" % (Path(sys.executable).parent, os.environ["PATH"])  # python3 for the agent
    server = subprocess.Popen(["/bin/sh", "-c", script], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    ssh = [tools["ssh"], "-i", str(keys / "id"), "-p", str(port), "-o", "StrictHostKeyChecking=no",
           "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o", "LogLevel=ERROR",
           "%s@127.0.0.1" % ("root" if os.geteuid() == 0 else os.environ.get("USER", "dev"))]
    session = None
    try:
        wait(lambda: (run / "ssh" / "sshd.pid").exists() and len(api[1]) >= 1, 60, "sshd and the agent's first report")
        assert states(api[1])[0]["state"] == "idle"
        session = subprocess.Popen(ssh + ["sleep", "60"], stdin=subprocess.DEVNULL)
        wait(lambda: len(api[1]) >= 2, 60, "active (SSH session)")
        assert states(api[1])[1]["state"] == "active" and "ssh" in states(api[1])[1]["reasons"]
        session.terminate()
        session.wait(timeout=30)
        wait(lambda: len(api[1]) >= 3, 60, "idle after the session")
        assert states(api[1])[2]["state"] == "idle"
        # The login banner: the agent's motd, printed by the session script.
        (run / "motd").write_text("torchdev: banner test\n")
        out = subprocess.run(ssh + ["-tt"], input="exit\n", capture_output=True, text=True, timeout=60)
        assert "torchdev: banner test" in out.stdout
    finally:
        if session and session.poll() is None:
            session.kill()
        server.terminate()
        server.wait(timeout=30)  # the agent notices its parent is gone and exits
