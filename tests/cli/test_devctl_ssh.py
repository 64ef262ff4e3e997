"""devctl ssh: direct vs port-forward decision (only the TCP probe is mocked), --print,
replicas, and the port-forward run path with fake kubectl/ssh executables."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap

import pytest

from devctl_helpers import as_json


@pytest.fixture
def probes(monkeypatch):
    """Replace the reachability probe; records the (host, port) pairs it was asked about."""
    import devctl.tunnel

    calls: list[tuple[str, int]] = []
    state = {"reachable": set()}

    def fake(host, port, timeout=1.0, banner=None):
        calls.append((host, port))
        return (host, port) in state["reachable"] or "*" in state["reachable"]

    monkeypatch.setattr(devctl.tunnel, "tcp_reachable", fake)
    state["calls"] = calls
    return state


def _server(cluster, name, **spec):
    cluster.create_devserver(name, **spec)
    cluster.set_status(name, phase="Running", replicas=1, readyReplicas=1,
                       sshEndpoint=f"{name}-ssh.{cluster.ns}.svc.cluster.local:22")


def test_ssh_direct_when_service_reachable(devctl, cluster, probes):
    _server(cluster, "s1")
    ip = cluster.create_service("s1-ssh")["spec"]["clusterIP"]
    probes["reachable"] = {(ip, 22)}
    plan = as_json(devctl("ssh", "s1", "--print", "-o", "json"))
    assert plan["mode"] == "direct"
    assert plan["ssh"] == ["ssh", "-p", "22", f"dev@{ip}"]
    assert plan["portForward"] is None
    assert probes["calls"][0] == (ip, 22)


def test_ssh_port_forward_when_unreachable(devctl, cluster, ns, sim, probes):
    _server(cluster, "s2")
    cluster.create_service("s2-ssh")
    plan = as_json(devctl("ssh", "s2", "--print", "-o", "json", "--user", "root", "--", "-L", "8888:localhost:8888"))
    assert plan["mode"] == "port-forward"
    port = plan["localPort"]
    assert isinstance(port, int) and port > 0
    pf = plan["portForward"]
    assert os.path.basename(pf[0]) == "kubectl"
    assert pf[1:] == ["--kubeconfig", sim.kubeconfig, "port-forward", "-n", ns, "svc/s2-ssh", f"{port}:22"]
    assert plan["ssh"] == ["ssh", "-p", str(port), "-o", f"HostKeyAlias=s2.{ns}.devserver",
                           "root@127.0.0.1", "-L", "8888:localhost:8888"]
    # every candidate was probed before falling back
    assert len(probes["calls"]) == 2


def test_ssh_print_text(devctl, cluster, probes):
    _server(cluster, "s3")
    cluster.create_service("s3-ssh")
    result = devctl("ssh", "s3", "--print")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert "port-forward" in lines[0] and lines[0].endswith("&")
    assert lines[1].startswith("ssh -p ") and lines[1].endswith("dev@127.0.0.1")


def test_ssh_uses_endpoint_without_service(devctl, cluster, ns, probes):
    _server(cluster, "s4")
    probes["reachable"] = {"*"}
    plan = as_json(devctl("ssh", "s4", "--print", "-o", "json"))
    assert plan["mode"] == "direct"
    assert plan["host"] == f"s4-ssh.{ns}.svc.cluster.local" and plan["port"] == 22


def test_ssh_distributed_replica_targets_the_pod(devctl, cluster, ns, probes):
    cluster.create_devserver("dist", mode="distributed", distributed={"worldSize": 4, "nprocsPerNode": 2})
    cluster.set_status("dist", phase="Running", replicas=2, readyReplicas=2)
    cluster.core.create_namespaced_pod(ns, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "dist-1"},
        "spec": {"containers": [{"name": "dev", "image": "img"}]}})
    plan = as_json(devctl("ssh", "dist", "--replica", "1", "--print", "-o", "json"))
    assert plan["mode"] == "port-forward" and plan["target"] == "pod/dist-1"
    assert plan["portForward"][-2:] == ["pod/dist-1", f"{plan['localPort']}:2222"]
    assert f"dist-1.dist.{ns}.svc.cluster.local" in [h for h, _ in probes["calls"]]

    result = devctl("ssh", "dist", "--replica", "2", "--print")
    assert result.exit_code == 2 and "0..1" in result.stderr


def test_ssh_not_found_and_disabled(devctl, cluster, ns, probes):
    result = devctl("ssh", "ghost", "--print")
    assert result.exit_code == 1
    assert result.stderr.strip() == f'error: devserver "ghost" not found in namespace "{ns}"'
    cluster.create_devserver("nossh", enableSSH=False)
    result = devctl("ssh", "nossh", "--print")
    assert result.exit_code == 1 and "disabled" in result.stderr


def test_ssh_no_service_yet(devctl, cluster, probes):
    cluster.create_devserver("early")
    result = devctl("ssh", "early", "--print")
    assert result.exit_code == 1 and "no SSH service yet" in result.stderr


def _script(path, body):
    path.write_text(f"#!{sys.executable}\n" + textwrap.dedent(body))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_ssh_runs_port_forward_then_ssh(devctl, cluster, tmp_path, monkeypatch):
    """The real run path: fake kubectl listens on the local port, fake ssh records its argv."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "ssh-argv.json"
    _script(bin_dir / "kubectl", """
        import socket, sys, time
        local = int(sys.argv[-1].split(":")[0])
        srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("127.0.0.1", local)); srv.listen(5)
        while True:
            conn, _ = srv.accept(); conn.close()
        """)
    _script(bin_dir / "ssh", f"""
        import json, sys
        json.dump(sys.argv[1:], open({str(record)!r}, "w"))
        sys.exit(3)
        """)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    _server(cluster, "run1")
    cluster.create_service("run1-ssh")
    result = devctl("ssh", "run1", "--port-forward", "--", "hostname")
    assert result.exit_code == 3, result.stderr  # ssh's exit code is passed through
    argv = json.loads(record.read_text())
    assert argv[0] == "-p" and argv[-2:] == ["dev@127.0.0.1", "hostname"]
    assert "forwarding 127.0.0.1:" in result.stderr


def test_ssh_port_forward_failure_is_reported(devctl, cluster, tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _script(bin_dir / "kubectl", """
        import sys
        sys.stderr.write("error: unable to forward port: connection refused\\n")
        sys.exit(1)
        """)
    _script(bin_dir / "ssh", "import sys; sys.exit(0)\n")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    _server(cluster, "run2")
    cluster.create_service("run2-ssh")
    result = devctl("ssh", "run2", "--port-forward")
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("error: kubectl port-forward exited with code 1")
    assert "connection refused" in lines[-1]


def test_ssh_direct_execs_ssh(sim, cluster, ns, tmp_path):
    """Direct mode replaces the process with ssh (os.execvp): run devctl in a subprocess."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _script(bin_dir / "ssh", """
        import json, sys
        print(json.dumps(sys.argv[1:]))
        """)
    _server(cluster, "ex1")
    ip = cluster.create_service("ex1-ssh")["spec"]["clusterIP"]
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.run(
        [sys.executable, "-c", "from devctl.main import cli; cli()", "--kubeconfig", sim.kubeconfig,
         "-n", ns, "ssh", "ex1", "--direct", "--user", "me"],
        capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == ["-p", "22", f"me@{ip}"]


@pytest.mark.parametrize("greeting,expected", [(b"SSH-2.0-OpenSSH_9.6\r\n", True),
                                               (b"HTTP/1.1 400 Bad Request\r\n", False),
                                               (None, False)])
def test_reachability_probe_wants_an_ssh_banner(greeting, expected):
    """A listener that accepts but is not an SSH server (a transparent proxy) is not reachable."""
    import socket
    import threading

    import devctl.tunnel

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]

    def serve():
        try:
            conn, _ = srv.accept()
            with conn:
                if greeting:
                    conn.sendall(greeting)
                conn.recv(1)  # hold the connection until the client closes it
        except OSError:  # the client hung up first
            pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        assert devctl.tunnel.tcp_reachable("127.0.0.1", port, timeout=0.5, banner=b"SSH-") is expected
    finally:
        t.join(2)
        srv.close()


NODE_PORT = {"serviceType": "NodePort", "host": "203.0.113.7", "port": 30022, "command": "ssh -p 30022 dev@203.0.113.7"}


def test_ssh_goes_to_the_direct_address_without_a_probe(devctl, cluster, ns, probes):
    """spec.ssh.serviceType NodePort / LoadBalancer (issue 27.6): status.ssh's address, no port-forward,
    no probe; the host key kept by the server's name; --port-forward still forwards."""
    _server(cluster, "np", ssh={"serviceType": "NodePort"})
    cluster.create_service("np-ssh")
    cluster.set_status("np", ssh=NODE_PORT)
    plan = as_json(devctl("ssh", "np", "--print", "-o", "json", "--", "nvidia-smi"))
    assert plan["mode"] == "direct" and (plan["host"], plan["port"]) == ("203.0.113.7", 30022)
    assert plan["portForward"] is None and probes["calls"] == []
    assert plan["ssh"] == ["ssh", "-p", "30022", "-o", f"HostKeyAlias=np.{ns}.devserver", "dev@203.0.113.7", "nvidia-smi"]
    result = devctl("ssh", "np", "--print")
    assert result.exit_code == 0 and result.stdout.strip() == f"ssh -p 30022 -o HostKeyAlias=np.{ns}.devserver dev@203.0.113.7"
    forwarded = as_json(devctl("ssh", "np", "--print", "-o", "json", "--port-forward"))
    assert forwarded["mode"] == "port-forward" and forwarded["portForward"][-2:] == ["svc/np-ssh", f"{forwarded['localPort']}:22"]


def test_ssh_while_the_load_balancer_has_no_address(devctl, cluster, probes):
    """A LoadBalancer without an address yet (none without a cloud controller): as a ClusterIP server."""
    _server(cluster, "lb", ssh={"serviceType": "LoadBalancer"})
    cluster.create_service("lb-ssh")
    cluster.set_status("lb", ssh={"serviceType": "LoadBalancer", "message": "waiting for the load balancer's address"})
    plan = as_json(devctl("ssh", "lb", "--print", "-o", "json"))
    assert plan["mode"] == "port-forward" and len(probes["calls"]) == 2


def test_get_and_list_print_the_direct_command(devctl, cluster, ns):
    _server(cluster, "np", ssh={"serviceType": "NodePort"})
    cluster.set_status("np", ssh=NODE_PORT)
    _server(cluster, "lb", ssh={"serviceType": "LoadBalancer"})
    cluster.set_status("lb", ssh={"serviceType": "LoadBalancer", "message": "waiting for the load balancer's address"})
    _server(cluster, "plain")
    text = devctl("get", "np").stdout
    assert "SSH direct:" in text and "ssh -p 30022 dev@203.0.113.7 (NodePort)" in text
    assert "<pending: waiting for the load balancer's address>" in devctl("get", "lb").stdout
    assert "SSH direct" not in devctl("get", "plain").stdout
    assert as_json(devctl("get", "np", "-o", "json"))["status"]["ssh"] == NODE_PORT
    wide = {line.split()[0]: line for line in devctl("list", "-o", "wide").stdout.splitlines()[1:]}
    assert wide["np"].endswith("ssh -p 30022 dev@203.0.113.7") and wide["plain"].endswith(" -")


@pytest.mark.parametrize("args,ssh", [
    (["--ssh-service-type", "NodePort"], {"serviceType": "NodePort"}),
    (["--ssh-service-type", "LoadBalancer"], {"serviceType": "LoadBalancer"}),
    ([], None),  # the cluster's default
])
def test_create_ssh_service_type(devctl, tmp_path, args, ssh):
    key = tmp_path / "id.pub"
    key.write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE2eTestKeyForTorchdevEndToEndxxxxxxxxxxxxx t@t\n")
    body = as_json(devctl("create", "n", "--flavor", "gpu-a10g-1", "--ssh-key-file", str(key), "--owner", "jane@example.com", "--dry-run",
                          "-o", "json", *args))
    assert body["spec"].get("ssh") == ssh
