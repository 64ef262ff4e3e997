"""`devctl ssh-config` (issue 28.4): a managed block in the ssh config file, so that the real
OpenSSH client reaches a dev server by name (`ssh NAME`, `scp`), through `devctl ssh-proxy` as
its ProxyCommand; the rest of the file is kept; `devctl delete` and `--remove` take entries out.

The server's sshd is Debian's OpenSSH server on a loopback port, published as the DevServer's
status.sshEndpoint (kubesim runs no pod: the proxy finds the Service address unreachable and the
endpoint reachable, as from a laptop on the cluster's network or VPN).  Needs ``sshd``, ``ssh``,
``scp`` and ``ssh-keygen`` (make deps installs openssh-server)."""
from __future__ import annotations

import os
import pwd
import subprocess
import time
from pathlib import Path

import pytest

from devctl.ssh_hosts import BEGIN, END, split_block
from _support import free_port as _free_port, system_tool as _which

USER_CONFIG = "Host other\n  HostName example.org\n  User me\n"


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    """A real sshd on 127.0.0.1:<port> accepting a generated key for the current user."""
    base = tmp_path_factory.mktemp("sshd")
    tools = {n: _which(n) for n in ("sshd", "ssh", "scp", "ssh-keygen")}
    subprocess.run([tools["ssh-keygen"], "-q", "-t", "ed25519", "-N", "", "-f", str(base / "host")], check=True)
    subprocess.run([tools["ssh-keygen"], "-q", "-t", "ed25519", "-N", "", "-f", str(base / "id")], check=True)
    (base / "authorized_keys").write_text((base / "id.pub").read_text())
    os.chmod(base / "authorized_keys", 0o600)
    port = _free_port()
    config = base / "sshd_config"
    config.write_text(f"Port {port}\nListenAddress 127.0.0.1\nHostKey {base / 'host'}\nPidFile {base / 'pid'}\n"
                      f"AuthorizedKeysFile {base / 'authorized_keys'}\nStrictModes no\nUsePAM no\nSubsystem sftp internal-sftp\n"
                      + ("PermitRootLogin prohibit-password\n" if os.geteuid() == 0 else ""))
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    proc = subprocess.Popen([tools["sshd"], "-D", "-e", "-f", str(config)], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not (base / "pid").exists():
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline, "sshd did not start"
        time.sleep(0.05)
    yield {"port": port, "key": base / "id", "tools": tools}
    proc.terminate()
    proc.wait(timeout=30)


def _server(cluster, name, port, **spec):
    cluster.custom.create_namespaced_custom_object("torchdev.io", "v1alpha1", cluster.ns, "devservers", {
        "apiVersion": "torchdev.io/v1alpha1", "kind": "DevServer", "metadata": {"name": name},
        "spec": dict({"owner": "jane@example.com", "flavor": "cpu-small"}, **spec)})
    cluster.set_status(name, phase="Running", sshEndpoint=f"127.0.0.1:{port}")


def _ssh(sshd, config, *argv, tool="ssh"):
    options = ["-F", str(config), "-i", str(sshd["key"]), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
               "-o", f"UserKnownHostsFile={config.parent / 'known_hosts'}", "-o", "LogLevel=ERROR"]
    env = dict(os.environ, DEVCTL_CONFIG=os.devnull)
    return subprocess.run([sshd["tools"][tool], *options, *argv], capture_output=True, text=True, timeout=120, env=env)


def test_ssh_and_scp_by_name(devctl, cluster, sim, sshd, tmp_path):
    me = pwd.getpwuid(os.geteuid()).pw_name
    config = tmp_path / "ssh" / "config"
    config.parent.mkdir(mode=0o700)
    config.write_text(USER_CONFIG)
    _server(cluster, "my-dev", sshd["port"])
    _server(cluster, "nossh", sshd["port"], enableSSH=False)
    result = devctl("ssh-config", "--file", str(config), "--user", me)
    assert result.exit_code == 0, result.output
    assert "my-dev" in result.stderr and "nossh" not in config.read_text()  # SSH off: no entry
    text = config.read_text()
    assert text.startswith(BEGIN + "\n") and END in text and text.endswith(USER_CONFIG)  # the user's kept, after
    entries, rest = split_block(text)
    assert rest == USER_CONFIG and [e[0] for e in entries] == [f"Host my-dev my-dev.{cluster.ns}"]
    assert oct(config.stat().st_mode & 0o777) == "0o644"  # an existing file keeps its mode

    proc = _ssh(sshd, config, "my-dev", "echo", "hello-from", "$((6*7))")
    assert proc.returncode == 0 and proc.stdout.strip() == "hello-from 42", proc.stderr
    (tmp_path / "payload").write_bytes(os.urandom(200_000))
    proc = _ssh(sshd, config, str(tmp_path / "payload"), f"my-dev.{cluster.ns}:{tmp_path / 'copied'}", tool="scp")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "copied").read_bytes() == (tmp_path / "payload").read_bytes()

    # Written again: replaced, not duplicated; deleting the server takes its entry out.
    assert devctl("ssh-config", "my-dev", "--file", str(config), "--user", me).exit_code == 0
    assert config.read_text().count("Host my-dev ") == 1
    from devctl.ssh_hosts import forget

    forget(["my-dev"], "another-namespace", str(config))  # another namespace's server of that name
    assert "Host my-dev " in config.read_text()
    forget(["my-dev"], cluster.ns, str(config))  # what devctl delete does to ~/.ssh/config (the next test)
    assert "my-dev" not in config.read_text() and config.read_text() == USER_CONFIG


def test_delete_forgets_the_servers_entries(devctl, cluster, sshd):
    home = Path(os.environ["HOME"])  # the CLI tests' isolated HOME
    _server(cluster, "gone", sshd["port"], mode="distributed", distributed={"worldSize": 2})
    _server(cluster, "stays", sshd["port"])
    assert devctl("ssh-config").exit_code == 0
    config = home / ".ssh" / "config"
    hosts = [e[0].split()[1] for e in split_block(config.read_text())[0]]
    assert hosts == ["gone", "gone-0", "gone-1", "stays"]
    assert oct(config.stat().st_mode & 0o777) == "0o600" and oct(config.parent.stat().st_mode & 0o777) == "0o700"
    assert devctl("delete", "gone").exit_code == 0
    assert [e[0].split()[1] for e in split_block(config.read_text())[0]] == ["stays"]
    assert devctl("ssh-config", "--remove").exit_code == 0
    assert config.read_text() == ""


def test_a_block_edited_by_hand_is_never_lost(devctl, cluster, sshd, tmp_path):
    """A BEGIN line without its END: devctl refuses to rewrite the file (nothing of it is lost)."""
    config = tmp_path / "config"
    text = f"{BEGIN}\nHost old\n  HostName x\n" + USER_CONFIG
    config.write_text(text)
    _server(cluster, "box", sshd["port"])
    result = devctl("ssh-config", "--file", str(config))
    assert result.exit_code == 1 and "has no" in result.output and "END" in result.output
    assert config.read_text() == text
    from devctl.ssh_hosts import forget

    forget(["old"], cluster.ns, str(config))
    assert config.read_text() == text


def test_a_server_with_a_direct_address_gets_hostname_and_port(devctl, cluster, sshd, tmp_path):
    """spec.ssh.serviceType NodePort / LoadBalancer (issue 27.6): status.ssh's address is the entry's
    HostName and Port, no ProxyCommand (plain OpenSSH reaches it, no devctl or kubectl), the host key
    kept by the server's name; its replicas' entries keep the ProxyCommand; devctl delete forgets it."""
    me = pwd.getpwuid(os.geteuid()).pw_name
    config = tmp_path / "ssh" / "config"
    _server(cluster, "direct", 1, mode="distributed", distributed={"worldSize": 2})  # sshEndpoint: nothing answers
    cluster.set_status("direct", ssh={"serviceType": "NodePort", "host": "127.0.0.1", "port": sshd["port"],
                                      "command": f"ssh -p {sshd['port']} dev@127.0.0.1"})
    _server(cluster, "waiting", sshd["port"])
    cluster.set_status("waiting", ssh={"serviceType": "LoadBalancer", "message": "waiting for the load balancer's address"})
    assert devctl("ssh-config", "--file", str(config), "--user", me).exit_code == 0
    entries = {e[0].split()[1]: e for e in split_block(config.read_text())[0]}
    assert entries["direct"] == [f"Host direct direct.{cluster.ns}", "  HostName 127.0.0.1", f"  Port {sshd['port']}",
                                 f"  User {me}", f"  HostKeyAlias direct.{cluster.ns}.devserver", "  ServerAliveInterval 30"]
    assert any(line.startswith("  ProxyCommand ") for line in entries["direct-0"])
    assert any(line.startswith("  ProxyCommand ") for line in entries["waiting"])  # no address yet: devctl finds one
    proc = _ssh(sshd, config, "direct", "echo", "direct-$((6*7))")
    assert proc.returncode == 0 and proc.stdout.strip() == "direct-42", proc.stderr
    from devctl.ssh_hosts import forget

    forget(["direct"], cluster.ns, str(config))
    assert sorted(e[0].split()[1] for e in split_block(config.read_text())[0]) == ["waiting"]
