"""`make playground` (hack/playground.py), through its entry point `python -m hack.playground`.

up leaves kubesim, the operator and the exporter running (state.json: pid, command line, start
time); the printed export line is all devctl needs: every devctl line of what it says to try
runs (click's CliRunner, -o json parsed where the command has it), a DevServer reaches Ready
through the playground's operator; a second up changes nothing; down stops every recorded process
and what they started (/proc), and never a process whose pid only looks like one of them (a pid
taken since: another command line, or the same one started at another time).
"""
from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import urllib.request

import pytest
from click.testing import CliRunner

from _support import ROOT, tool
from kubesim.testing import wait_for

from hack import playground

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

EXPORT = re.compile(r"^ *export KUBECONFIG=(\S+) DEVCTL_CONFIG=(\S+) PATH=(\S+):\"\$PATH\"$", re.M)


def pg(state_dir, *args, timeout=420) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "DEVCTL_CONFIG")}
    return subprocess.run([sys.executable, "-m", "hack.playground", *args, "--dir", str(state_dir)], cwd=ROOT,
                          env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)


def ok(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc.stdout


def status(state_dir) -> dict:
    return json.loads(ok(pg(state_dir, "status", "-o", "json")))


@pytest.fixture
def foreign():
    """A process that is not the playground's, in a session of its own like the playground's."""
    proc = subprocess.Popen(["sleep", "600"], start_new_session=True)
    wait_for(lambda: playground.identity(proc.pid)["cmdline"], 10, message="sleep's command line")
    yield proc
    proc.kill()
    proc.wait()


def stale_state(state_dir, foreign: subprocess.Popen) -> list[dict]:
    """A state file whose pids are all taken or gone: the foreign process's pid recorded with
    kubesim's command line, and with its own command line but another start time; an exited
    process's pid."""
    now = playground.identity(foreign.pid)
    done = subprocess.Popen(["true"])
    done.wait()
    records = [
        {"name": "kubesim", "pid": foreign.pid, "starttime": now["starttime"], "log": "kubesim.log",
         "cmdline": [sys.executable, "-m", "kubesim", "--port", "0"]},
        {"name": "operator", "pid": foreign.pid, "starttime": now["starttime"] - 1, "log": "operator.log",
         "cmdline": now["cmdline"], "metrics": "http://127.0.0.1:1/metrics"},
        {"name": "exporter", "pid": done.pid, "starttime": 1, "log": "exporter.log",
         "cmdline": ["torchdev-exporter"], "metrics": "http://127.0.0.1:1/metrics"},
    ]
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / "state.json").write_text(json.dumps(
        {"version": 1, "cluster": "kubesim", "root": str(ROOT), "startedAt": "2026-01-01T00:00:00Z",
         "processes": records}))
    return records


def test_a_stale_state_is_cleared_without_signalling_anyone(tmp_path, foreign):
    state_dir = tmp_path / "pg"
    stale_state(state_dir, foreign)
    report = status(state_dir)
    assert report["state"] == "stopped"
    assert [(p["name"], p["running"]) for p in report["processes"]] == \
        [("kubesim", False), ("operator", False), ("exporter", False)]
    text = ok(pg(state_dir, "status"))
    assert "The playground is stopped" in text and text.count(" gone ") == 3, text

    out = ok(pg(state_dir, "down"))
    assert "kubesim (pid %d): already gone (its pid is another process now: left alone)" % foreign.pid in out, out
    assert "operator (pid %d): already gone (its pid is another process now: left alone)" % foreign.pid in out, out
    assert re.search(r"exporter \(pid \d+\): already gone", out), out
    assert foreign.poll() is None and playground.identity(foreign.pid) is not None
    assert not (state_dir / "state.json").exists()
    assert "nothing to stop" in ok(pg(state_dir, "down"))
    assert status(state_dir)["state"] == "stopped"


def test_only_kubesim_and_options_of_status_only(tmp_path):
    real = pg(tmp_path, "up", "--cluster", "real")
    assert real.returncode == 2 and "runs on kubesim only" in real.stderr and "make cluster" in real.stderr
    wrong = pg(tmp_path, "up", "-o", "json")
    assert wrong.returncode == 2 and "-o/--output is status's" in wrong.stderr
    assert not (tmp_path / "state.json").exists()


def _devctl(args: list[str]) -> str:
    from devctl.main import cli

    res = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert res.exit_code == 0, f"devctl {shlex.join(args)}: {res.output}"
    return res.stdout


def _json_check(cmd: list[str], data) -> None:
    """What each devctl line of TRY shows (its -o json)."""
    if cmd[0] == "whoami":
        assert (data["devUser"], data["namespace"], data["owner"]) == \
            (playground.USER, playground.NAMESPACE, playground.EMAIL), data
    elif cmd[0] == "flavors":
        assert playground.FLAVOR in {f["metadata"]["name"] for f in data["items"]}
    elif cmd[0] == "create":  # --wait: it returns the server Ready
        conditions = {c["type"]: c["status"] for c in data["status"]["conditions"]}
        assert data["status"]["phase"] == "Running" and conditions["Ready"] == "True", data["status"]
    elif cmd[0] == "list":
        assert [i["metadata"]["name"] for i in data["items"]] == ["my-dev"]
    elif cmd[0] == "get":
        assert data["metadata"]["namespace"] == playground.NAMESPACE
        assert data["spec"]["owner"] == playground.EMAIL
    elif cmd[0] == "quota":
        assert (data["user"], data["namespace"]) == (playground.USER, playground.NAMESPACE), data
    elif cmd[0] == "ssh":
        assert data["target"] == "svc/my-dev-ssh" and data["ssh"][0] == "ssh", data


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, start time) of ``pid`` from /proc, read here (not with the module's own code)."""
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[0], int(fields[1]), int(fields[19])


def _tree(pid: int) -> set[tuple[int, int]]:
    """``pid`` and its descendants as (pid, start time)."""
    table = {int(p): st for p in os.listdir("/proc") if p.isdigit() and (st := _stat(int(p)))}
    out, todo = set(), [pid]
    while todo:
        parent = todo.pop()
        if parent in table:
            out.add((parent, table[parent][2]))
        todo += [child for child, st in table.items() if st[1] == parent]
    return out


def _naming(state_dir) -> list[int]:
    """The processes (not zombies) whose command line names ``state_dir`` (kubesim's, the
    operator's and the exporter's name its kubeconfig)."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = open(f"/proc/{pid}/cmdline", "rb").read()
        except OSError:
            continue
        if str(state_dir).encode() in cmdline and (st := _stat(int(pid))) and st[0] not in "ZX":
            out.append(int(pid))
    return out


def _alive(tree: set[tuple[int, int]]) -> list[int]:
    """Those that still run: the same pid and start time, not a zombie (which this machine's
    pid 1 may leave unreaped)."""
    return [pid for pid, start in tree if (st := _stat(pid)) and st[2] == start and st[0] not in "ZX"]


def test_up_use_and_down(tmp_path, monkeypatch, foreign):
    state_dir = tmp_path / "pg"
    stale_state(state_dir, foreign)  # what a machine that rebooted leaves: up clears it, signals no one
    records: list[dict] = []
    try:
        out = ok(pg(state_dir, "up"))
        assert "names processes that are gone" in out and foreign.poll() is None
        assert "The playground is up" in out
        export = EXPORT.findall(out)
        assert len(export) == 1, out
        kubeconfig, devctl_config, bin_dir = export[0]
        assert (kubeconfig, devctl_config) == (str(state_dir / "kubeconfig"), str(state_dir / "devctl.yaml"))
        assert os.path.exists(os.path.join(bin_dir, "devctl"))
        state = json.loads((state_dir / "state.json").read_text())
        records[:] = state["processes"]
        assert [r["name"] for r in records] == ["kubesim", "operator", "exporter"]
        assert all(playground.ours(r) for r in records) and foreign.pid not in {r["pid"] for r in records}
        assert "cannot work here" in out and "devctl ssh" in out and "devctl run" in out

        # the kubeconfig answers: the sample node pools
        nodes = json.loads(subprocess.run([tool("kubectl"), "--kubeconfig", kubeconfig, "get", "nodes", "-o", "json"],
                                          capture_output=True, text=True, check=True, timeout=60).stdout)
        assert len(nodes["items"]) == 7

        # what up says to try, in its order, with the export line's environment only
        monkeypatch.setenv("KUBECONFIG", kubeconfig)
        monkeypatch.setenv("DEVCTL_CONFIG", devctl_config)
        monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.ssh keys, no ~/.kube/config of this machine
        monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
        tried = []
        for line, _what in playground.TRY:
            assert f"  {line} " in out, line
            cmd = shlex.split(line)
            if cmd[0] == "devctl":
                json_out = "--print" in cmd or cmd[1] in ("whoami", "flavors", "create", "list", "get", "quota")
                text = _devctl(cmd[1:] + (["-o", "json"] if json_out else []))
                if json_out:
                    _json_check(cmd[1:], json.loads(text))
            else:
                assert cmd[0] == "kubectl", line
                subprocess.run([os.path.join(bin_dir, "kubectl"), *cmd[1:]], check=True, capture_output=True,
                               timeout=60, env=dict(os.environ))
            tried.append(cmd[1])
        assert tried[:3] == ["whoami", "flavors", "create"] and tried[-1] == "delete"
        # the server got Ready through the playground's operator: its DevServer controller reconciled it
        operator, exporter = records[1], records[2]
        reconciles = urllib.request.urlopen(operator["metrics"], timeout=10).read().decode()
        assert re.search(r'^controller_runtime_reconcile_total\{controller="devserver-controller",result="success"\} '
                         r'[1-9]', reconciles, re.M), reconciles[-2000:]
        assert re.search(r"DevServer dev-demo/my-dev: reconcile", (state_dir / "operator.log").read_text())
        curl = re.search(r"^  curl -s (\S+) \| grep \^torchdev_ ", out, re.M)
        assert curl and curl.group(1) == exporter["metrics"], out
        assert "torchdev_devservers{" in urllib.request.urlopen(curl.group(1), timeout=10).read().decode()

        report = status(state_dir)
        assert report["state"] == "running" and report["kubeconfig"] == kubeconfig
        assert report["env"] == {"KUBECONFIG": kubeconfig, "DEVCTL_CONFIG": devctl_config}
        assert [(p["name"], p["pid"], p["running"]) for p in report["processes"]] == \
            [(r["name"], r["pid"], True) for r in records]
        assert f"kubeconfig: {kubeconfig}" in ok(pg(state_dir, "status"))

        again = ok(pg(state_dir, "up"))
        assert "already running" in again and "Starting" not in again
        assert EXPORT.findall(again) == export
        assert json.loads((state_dir / "state.json").read_text()) == state

        trees = {r["name"]: _tree(r["pid"]) for r in records}
        assert len(trees["operator"]) > 1, trees  # its fork servers (sessions of their own)
        down = ok(pg(state_dir, "down"))
        for r in records:
            assert f"{r['name']} (pid {r['pid']}): stopped" in down, down
        assert {name: _alive(tree) for name, tree in trees.items()} == {r["name"]: [] for r in records}
        assert _naming(state_dir) == []
        assert not (state_dir / "state.json").exists() and not (state_dir / "kubeconfig").exists()
        assert foreign.poll() is None
        assert "nothing to stop" in ok(pg(state_dir, "down"))
        assert status(state_dir)["state"] == "stopped"
    finally:  # nothing left running, whatever failed
        pg(state_dir, "down")
        for r in records:
            if playground.ours(r):
                os.killpg(r["pid"], signal.SIGKILL)


def test_sigterm_while_starting_stops_what_started(tmp_path):
    """up interrupted once kubesim runs (and the operator is being started): what it started stops,
    no state is left, and the next up starts afresh."""
    state_dir = tmp_path / "pg"
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "DEVCTL_CONFIG")}
    proc = subprocess.Popen([sys.executable, "-m", "hack.playground", "up", "--dir", str(state_dir)], cwd=ROOT,
                            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    trees: set[tuple[int, int]] = set()
    try:
        seen = []
        for line in proc.stdout:
            seen.append(line)
            if line.startswith("Starting the operator"):
                break
        else:
            pytest.fail("up ended before starting the operator:\n" + "".join(seen))
        records = json.loads((state_dir / "state.json").read_text())["processes"]
        assert [r["name"] for r in records] == ["kubesim"] and playground.ours(records[0])
        trees = _tree(proc.pid) - {(proc.pid, _stat(proc.pid)[2])}
        proc.send_signal(signal.SIGTERM)
        out = "".join(seen) + proc.communicate(timeout=120)[0]
    finally:
        proc.kill()
        proc.wait()
        for pid in _alive(trees) + _naming(state_dir):
            os.kill(pid, signal.SIGKILL)
    assert proc.returncode == 128 + signal.SIGTERM, out
    assert "The playground did not start: stopping what it started." in out
    assert records[0]["pid"] in {pid for pid, _ in trees}
    assert _alive(trees) == [] and _naming(state_dir) == [] and not (state_dir / "state.json").exists()
    assert status(state_dir)["state"] == "stopped"


def test_readme_and_make_help_say_what_the_code_does():
    readme = (ROOT / "README.md").read_text()
    quick_start = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    for text in ("make playground", "make playground-status", "make playground-down", "export KUBECONFIG=",
                 "python -m hack.playground status -o json", "cannot"):
        assert text in quick_start, text
    for line, _what in playground.TRY:
        assert line in quick_start, line
    assert "ssh" in quick_start and "exec" in quick_start
    helped = subprocess.run(["make", "--no-print-directory", "help"], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout
    for target in ("playground", "playground-down", "playground-status"):
        assert re.search(rf"^  {target} ", helped, re.M), helped
    makefile = (ROOT / "Makefile").read_text()
    for target, command in (("playground", "up"), ("playground-down", "down"), ("playground-status", "status")):
        recipe = re.search(rf"^{target}:.*\n\t(.*)\n", makefile, re.M)
        assert recipe and f"-m hack.playground {command}" in recipe.group(1), target
    assert "playground" in (ROOT / "docs" / "architecture.md").read_text().split("hack/cluster/", 1)[0]
