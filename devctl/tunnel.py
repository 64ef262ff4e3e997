"""The way to a dev server's sshd: its direct address, a short TCP probe, or ``kubectl
port-forward`` to a free local port (the plan ``devctl ssh``, ``devctl ssh-proxy`` and
``devctl run``/``infer`` share; ssh.py is the command).

Direct to status.ssh's address when the server has one (spec.ssh.serviceType NodePort or
LoadBalancer: ``ssh -p PORT dev@HOST``, no kubectl); else direct when the SSH Service (or the
replica's pod) answers a short TCP connect from here (e.g. inside the cluster or over a VPN);
otherwise ``kubectl port-forward`` to a free local port and ``ssh -p PORT dev@127.0.0.1``.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

import click
from ansible_collections.torchdev.operator.plugins.module_utils.constants import SSH_PORT

from .settings import Settings
from .errors import ApiError, DevctlError, NotFound
from .output import info
from .servers import desired_replicas

SSH_SERVICE_PORT = 22
SSH_CONTAINER_PORT = SSH_PORT  # sshd in the dev container
REACH_TIMEOUT = 1.0          # seconds for the reachability probe
PORT_FORWARD_TIMEOUT = 15.0  # seconds for kubectl port-forward to listen


def tcp_reachable(host: str, port: int, timeout: float = REACH_TIMEOUT,
                  banner: bytes | None = None) -> bool:
    """True when a TCP connection to host:port succeeds within ``timeout`` (and, with
    ``banner``, the server's first bytes start with it: a transparent proxy or a NAT
    that accepts every connection is not an SSH server)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            if banner is None:
                return True
            sock.settimeout(timeout)
            return sock.recv(len(banner)) == banner
    except (OSError, ValueError):
        return False


def free_local_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def find_kubectl() -> str | None:
    found = shutil.which("kubectl")
    if found:
        return found
    candidate = os.path.join(os.path.dirname(sys.executable), "kubectl")
    return candidate if os.access(candidate, os.X_OK) else None


def split_endpoint(endpoint: str) -> tuple[str, int]:
    host, sep, port = endpoint.rpartition(":")
    if sep and port.isdigit():
        return host.strip("[]"), int(port)
    return endpoint, SSH_SERVICE_PORT


@dataclass
class SshPlan:
    mode: str                       # "direct" | "port-forward"
    host: str
    port: int
    ssh: list[str]
    port_forward: list[str] | None = None
    local_port: int | None = None
    target: str = ""                # svc/<name>-ssh or pod/<name>-<i>
    candidates: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"mode": self.mode, "target": self.target, "host": self.host, "port": self.port,
                "localPort": self.local_port, "portForward": self.port_forward, "ssh": self.ssh}


def direct_address(obj: dict) -> tuple[str, int] | None:
    """(host, port) of status.ssh, the direct address of a NodePort or LoadBalancer server, or None
    (ClusterIP, or an address not there yet: status.ssh.message says why)."""
    ssh = (obj.get("status") or {}).get("ssh")
    if not isinstance(ssh, dict):
        return None
    host, port = ssh.get("host"), ssh.get("port")
    if isinstance(host, str) and host and isinstance(port, int) and not isinstance(port, bool) and 0 < port < 65536:
        return host, port
    return None


def host_key_alias(host: str, namespace: str) -> str:
    """The name ssh keeps a server's (or a replica's: ``<name>-<i>``) host key under, whatever
    address reaches it (a port-forward, a node that changes): ``<host>.<namespace>.devserver``."""
    return f"{host}.{namespace}.devserver"


def ssh_argv(user: str, host: str, port: int, extra: tuple[str, ...], host_key_alias: str | None) -> list[str]:
    argv = ["ssh", "-p", str(port)]
    if host_key_alias:
        # 127.0.0.1 with a new port each time: keep known_hosts keyed by the server.
        argv += ["-o", f"HostKeyAlias={host_key_alias}"]
    argv.append(f"{user}@{host}")
    argv += list(extra)
    return argv


def plan_ssh(settings: Settings, name: str, replica: int | None, user: str,
             extra: tuple[str, ...], force: str | None = None) -> SshPlan:
    namespace = settings.namespace()
    api = settings.api
    obj = api.get_devserver(namespace, name)
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    if spec.get("enableSSH", True) is False:
        raise DevctlError(f'ssh is disabled for devserver "{name}" (spec.enableSSH is false)')
    if spec.get("suspend"):
        raise DevctlError(f'devserver "{name}" is suspended (spec.suspend is true); nothing to connect to')
    replicas = status.get("replicas") or desired_replicas(obj)
    if replica is not None and not 0 <= replica < max(replicas, 1):
        raise click.BadParameter(f"devserver {name} has {replicas} replica(s): use 0..{max(replicas, 1) - 1}",
                                 param_hint="'--replica'")
    use_pod = replica is not None and spec.get("mode") == "distributed"

    candidates: list[tuple[str, int]] = []
    if use_pod:
        pod_name = f"{name}-{replica}"
        target, remote_port = f"pod/{pod_name}", SSH_CONTAINER_PORT
        try:
            ip = (api.get_pod(namespace, pod_name).get("status") or {}).get("podIP")
        except NotFound:
            raise DevctlError(f'pod "{pod_name}" of devserver "{name}" not found in namespace '
                              f'"{namespace}" (is the server running? see devctl get {name})') from None
        except ApiError:
            ip = None
        if ip:
            candidates.append((ip, SSH_CONTAINER_PORT))
        candidates.append((f"{pod_name}.{name}.{namespace}.svc.cluster.local", SSH_CONTAINER_PORT))
        alias = host_key_alias(pod_name, namespace)
    else:
        service = f"{name}-ssh"
        target, remote_port = f"svc/{service}", SSH_SERVICE_PORT
        alias = host_key_alias(name, namespace)
        direct = direct_address(obj)
        if direct and force != "port-forward":
            # the address the cluster gives it outside (status.ssh): no probe, no kubectl; the host key
            # is known by the server's name (the node, hence the address, may change)
            host, port = direct
            return SshPlan("direct", host, port, ssh_argv(user, host, port, extra, alias),
                           target=target, candidates=[f"{host}:{port}"])
        try:
            svc = api.get_service(namespace, service)
            ip = (svc.get("spec") or {}).get("clusterIP")
            if ip and ip != "None":
                candidates.append((ip, SSH_SERVICE_PORT))
        except NotFound:
            if not status.get("sshEndpoint"):
                raise DevctlError(f'devserver "{name}" has no SSH service yet (service "{service}" not '
                                  f'found in namespace "{namespace}"); see devctl get {name}') from None
        except ApiError:
            pass  # may not be allowed to read Services; fall back to the endpoint
        if status.get("sshEndpoint"):
            candidates.append(split_endpoint(status["sshEndpoint"]))
        else:
            candidates.append((f"{service}.{namespace}.svc.cluster.local", SSH_SERVICE_PORT))

    labels = [f"{h}:{p}" for h, p in candidates]
    if force != "port-forward":
        for host, port in candidates:
            if force == "direct" or tcp_reachable(host, port, banner=b"SSH-"):
                return SshPlan("direct", host, port, ssh_argv(user, host, port, extra, None),
                               target=target, candidates=labels)

    local_port = free_local_port()
    kubectl = find_kubectl() or "kubectl"
    pf = [kubectl, *api.kubectl_args(), "port-forward", "-n", namespace, target,
          f"{local_port}:{remote_port}"]
    return SshPlan("port-forward", "127.0.0.1", local_port,
                   ssh_argv(user, "127.0.0.1", local_port, extra, alias),
                   port_forward=pf, local_port=local_port, target=target, candidates=labels)


def _wait_listening(proc: subprocess.Popen, port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = (proc.stderr.read() if proc.stderr else b"").decode(errors="replace")
            raise DevctlError(f"kubectl port-forward exited with code {proc.returncode}: "
                              f"{err.strip() or 'no output'}")
        if tcp_reachable("127.0.0.1", port, timeout=0.2):
            return
        time.sleep(0.1)
    raise DevctlError(f"kubectl port-forward did not listen on 127.0.0.1:{port} within {timeout:.0f}s")


@contextmanager
def forwarded(plan: SshPlan) -> Iterator[None]:
    """While inside: the plan's ``kubectl port-forward`` listening on plan.local_port (nothing
    for a direct plan); stopped on exit."""
    if plan.mode != "port-forward":
        yield
        return
    kubectl = plan.port_forward[0] if plan.port_forward else ""
    if not (os.path.exists(kubectl) or shutil.which(kubectl)):
        raise DevctlError("kubectl not found on PATH (needed for port-forward to the SSH service)")
    proc = subprocess.Popen(plan.port_forward, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        _wait_listening(proc, plan.local_port or 0, PORT_FORWARD_TIMEOUT)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()


def run_plan(plan: SshPlan) -> int:
    ssh = shutil.which("ssh")
    if not ssh:
        raise DevctlError("ssh not found on PATH; install an OpenSSH client")
    if plan.mode == "direct":
        sys.stdout.flush()
        sys.stderr.flush()
        os.execvp(ssh, plan.ssh)
    info(f"forwarding 127.0.0.1:{plan.local_port} to {plan.target} with kubectl port-forward")
    with forwarded(plan):
        return subprocess.call([ssh, *plan.ssh[1:]])
