"""The pod's environment reaches SSH sessions exactly, and never reaches the home volume.

The DevServer's entrypoint, rendered by the devserver role (hack/render_manifests.py), runs
for real with Debian's OpenSSH server on a loopback port: its variables are set to values
that broke the old ``SetEnv`` configuration (quotes, backslashes, ``$``, spaces, newlines,
UTF-8, empty), with names no shell can export (``-`` and ``.``, which Kubernetes allows),
``sshd -t`` checks the configuration it writes, a real ``ssh`` session prints its environment
NUL-separated (the session's own process and the commands its shell runs) and every name and
value must arrive byte for byte; ``sftp`` still
works (the session wrapper is sshd's ForceCommand); and no file on the home volume holds a
value that came from a Secret.

Needs ``sshd``, ``ssh``, ``ssh-keygen`` and ``sftp`` (Debian: ``apt-get install
openssh-server``; ``make deps``, which ``make test`` runs, installs it). Run as root (CI), the session logs in as root
through an extra ``-o PermitRootLogin=prohibit-password``; as another user, as that user.
"""
from __future__ import annotations

import contextlib
import os
import pwd
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from _support import ROOT, free_port as _free_port, system_tool as _which
from hack import render_manifests

SSH_TOOLS = ("sshd", "ssh", "ssh-keygen", "sftp")
SECRET = "s3cr3t 'token' \"with\" $HOME and \\ backslash\nsecond line ✓"
# name -> value (None: from a Secret, the value is SECRET)
VALUES = {
    "QUOTES": "say \"hi\" and 'bye'",
    "BALANCED": "\"quoted\"",
    "BACKSLASHES": "C:\\temp\\new \\\\ end\\",
    "DOLLARS": "$HOME ${USER} $(id) `id` $$",
    "SPACES": "  leading and trailing  ",
    "NEWLINES": "line one\nSetEnv INJECTED=1\nline three\n",
    "UTF8": "héllo wörld ✓ 日本語",
    "EMPTY": "",
    # names that Kubernetes allows and no shell can export ('-' and '.', a leading '-')
    "DASHED-NAME": "with 'dash'",
    "dotted.name": "a.b\nc",
    "-leading-dash": "-x",
    ".leading.dot": "$dot",
    "SECRET_TOKEN": None,
}
ENV = ([{"name": k, "value": v} for k, v in VALUES.items() if v is not None]
       + [{"name": "SECRET_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}])


@pytest.fixture(scope="module")
def tools():
    return {name: _which(name) for name in SSH_TOOLS}


@pytest.fixture(scope="module")
def pod(tmp_path_factory, tools):
    """The rendered entrypoint and container env, with the home volume, the memory run
    directory, the port and the sshd path pointed at this test's own."""
    base = tmp_path_factory.mktemp("sshpod")
    home, run, port = base / "home", base / "run", _free_port()
    home.mkdir()
    run.mkdir()
    keys = base / "client"
    keys.mkdir()
    subprocess.run([tools["ssh-keygen"], "-q", "-t", "ed25519", "-N", "", "-f", str(keys / "id")], check=True)
    (keys / "authorized_keys").write_text((keys / "id.pub").read_text())
    extra = ["-o", f"AuthorizedKeysFile={keys / 'authorized_keys'}"]
    if os.geteuid() == 0:
        extra += ["-o", "PermitRootLogin=prohibit-password"]
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation directory
    sshd = base / "sshd"
    sshd.write_text("#!/bin/sh\nexec %s %s \"$@\"\n" % (tools["sshd"], " ".join(extra)))
    sshd.chmod(0o755)

    flavor = yaml.safe_load((ROOT / "config" / "samples" / "torchdev_v1alpha1_devserverflavor_cpu-small.yaml").read_text())
    cr = yaml.safe_load((ROOT / "config" / "samples" / "torchdev_v1alpha1_devserver_standalone.yaml").read_text())
    cr["metadata"].update(namespace="dev-jane", uid="00000000-0000-0000-0000-000000000001", generation=1)
    cr["spec"].update(flavor="cpu-small", env=ENV)
    hostvars = dict(render_manifests.devserver_hostvars({"cr": cr, "flavor": flavor}),
                    devserver_home=str(home), devserver_run_dir=str(run), devserver_sshd=str(sshd),
                    devserver_ssh_port=port)
    objects = render_manifests.render_roles(base, {"devserver": {"env": hostvars}})["devserver"]["env"]
    sts = next(o for o in objects if o["kind"] == "StatefulSet")
    container = sts["spec"]["template"]["spec"]["containers"][0]
    # What the kubelet would put into the container's environment.
    env = {"PATH": os.environ["PATH"]}
    for item in container["env"]:
        if "value" in item:
            env[item["name"]] = item["value"]
        elif item["name"] == "SECRET_TOKEN":
            env[item["name"]] = SECRET
        else:  # NODE_RANK and the like come from the downward API
            env[item["name"]] = "0"
    env["PATH"] = env["PATH"] + ":" + os.environ["PATH"]  # ssh-keygen and sh from this machine
    return {"script": container["args"][-1], "env": env, "home": home, "run": run, "port": port,
            "key": keys / "id", "probe": container["readinessProbe"]["exec"]["command"]}


@contextlib.contextmanager
def entrypoint(pod):
    """The rendered entrypoint (``pod``: script, env, run), running once sshd wrote its pid file;
    stopped on exit (tests/security/test_ssh_user_keys.py uses it too)."""
    proc = subprocess.Popen(["/bin/sh", "-c", pod["script"]], env=pod["env"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    pidfile = pod["run"] / "ssh" / "sshd.pid"
    try:
        deadline_ok = _wait(lambda: proc.poll() is not None or (pidfile.exists() and pidfile.read_text().strip()))
        assert proc.poll() is None and deadline_ok, proc.communicate(timeout=10)[0]
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture(scope="module")
def server(pod, tools):
    with entrypoint(pod) as proc:
        # the pod's readiness probe passes
        assert subprocess.run(pod["probe"], env=pod["env"]).returncode == 0
        yield proc


def _wait(predicate, timeout: float = 60.0):
    """Poll a condition on sshd's own progress (its pid file); the timeout only bounds a hang."""
    import time

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    return predicate()


def _ssh(pod, tools, *command: str, tool: str = "ssh", stdin: bytes | None = None) -> subprocess.CompletedProcess:
    user = pwd.getpwuid(os.geteuid()).pw_name
    options = ["-F", "/dev/null", "-i", str(pod["key"]), "-o", "StrictHostKeyChecking=no",
               "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o", "LogLevel=ERROR"]
    if tool == "ssh":
        argv = [tools["ssh"], *options, "-p", str(pod["port"]), f"{user}@127.0.0.1", *command]
    else:
        argv = [tools["sftp"], *options, "-P", str(pod["port"]), "-b", "-", f"{user}@127.0.0.1"]
    return subprocess.run(argv, input=stdin, capture_output=True, timeout=60)


def test_sshd_accepts_the_generated_configuration(pod, server, tools):
    config = pod["run"] / "ssh" / "sshd_config"
    proc = subprocess.run([tools["sshd"], "-t", "-f", str(config)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    text = config.read_text()
    assert "SetEnv" not in text and "INJECTED" not in text and "s3cr3t" not in text


def _session_env(pod, tools, command):
    proc = _ssh(pod, tools, command)
    assert proc.returncode == 0, proc.stderr
    return dict(item.split(b"=", 1) for item in proc.stdout.split(b"\0") if b"=" in item)


def _assert_exact(session):
    for name, value in VALUES.items():
        expected = (SECRET if value is None else value).encode()
        assert session.get(name.encode()) == expected, name
    assert b"INJECTED" not in session


@pytest.mark.parametrize("command", ["cat /proc/$$/environ", "env -0"], ids=["session-process", "its-commands"])
def test_every_name_arrives_exactly(pod, server, tools, command):
    """The session's own process (the login shell env(1) started) has every variable; the
    commands it runs too (bash passes names it cannot hold as variables on; dash would not)."""
    _assert_exact(_session_env(pod, tools, command))


def test_values_arrive_byte_for_byte(pod, server, tools):
    session = _session_env(pod, tools, "env -0")
    _assert_exact(session)
    # the operator's variables too, and the pod's PATH with the torchdev scripts (the login
    # user's own shell startup files may rearrange PATH)
    assert session[b"TORCHDEV_NAME"] == pod["env"]["TORCHDEV_NAME"].encode()
    assert b"/opt/torchdev/bin" in session[b"PATH"].split(b":")


def test_commands_and_sftp_still_work(pod, server, tools):
    proc = _ssh(pod, tools, "printf '%s|' 'a b' c")
    assert proc.returncode == 0 and proc.stdout == b"a b|c|", proc.stderr
    assert _ssh(pod, tools, "exit 3").returncode == 3
    proc = _ssh(pod, tools, tool="sftp", stdin=f"ls {pod['home']}\n".encode())
    assert proc.returncode == 0, proc.stderr


def test_no_secret_on_the_home_volume(pod, server, tools):
    assert _ssh(pod, tools, "true").returncode == 0
    secret = SECRET.encode()
    for path in pod["home"].rglob("*"):
        if path.is_file():
            assert secret not in path.read_bytes() and b"s3cr3t" not in path.read_bytes(), path
    env_file = pod["run"] / "ssh" / "environment"
    assert b"s3cr3t" in env_file.read_bytes()  # it is in memory, for this user only
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    assert stat.S_IMODE((pod["run"] / "ssh").stat().st_mode) == 0o700


def test_an_old_configuration_on_the_home_volume_is_removed(pod):
    """Before this change sshd_config (with the environment) was written to ~/.ssh/torchdev."""
    old = pod["home"] / ".ssh" / "torchdev" / "sshd_config"
    old.parent.mkdir(parents=True, exist_ok=True)
    old.write_text('SetEnv SECRET_TOKEN="s3cr3t"\n')
    proc = subprocess.run(["/bin/sh", "-c", _without_exec(pod["script"])], env=pod["env"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert not old.exists()


def _without_exec(script: str) -> str:
    """The entrypoint up to (not including) the final exec of sshd."""
    lines = script.rstrip("\n").splitlines()
    assert lines[-1].startswith("exec "), lines[-1]
    return "\n".join(lines[:-1]) + "\n"
