"""``devctl ssh-config``: dev servers by name for ssh, scp, rsync and VS Code Remote-SSH.

It writes one managed block at the top of ``~/.ssh/config`` (between the BEGIN and END lines
of ssh_hosts.py; everything else in the file is kept as it is): a ``Host`` entry per server (and per
replica of a distributed one, ``<name>-<i>``) whose ``ProxyCommand`` is ``devctl ssh-proxy``:
that connects stdin/stdout to the server's sshd, directly when its address answers from here,
else through ``kubectl port-forward`` (as ``devctl ssh`` does).  A server with a direct address
(status.ssh: spec.ssh.serviceType NodePort or LoadBalancer) gets its ``HostName`` and ``Port``
instead, no ProxyCommand (its replicas' entries keep one).  ``devctl delete`` removes the
server's entries; ``--remove`` removes the named ones (all: the whole block).
"""
from __future__ import annotations

import os
import shlex
import socket
import sys
import threading

import click

from . import complete
from .settings import Settings
from .tunnel import host_key_alias
from .context import kube_options, pass_settings
from .errors import DevctlError
from .output import info
from .ssh_hosts import default_path, entry_names, write_config

def proxy_command(settings: Settings, namespace: str, name: str, replica: int | None) -> str:
    """The ProxyCommand: this Python running devctl (VS Code and scp run it without a PATH of
    ours), with the cluster options of the command line; % doubled (ssh's tokens)."""
    argv = [sys.executable, "-m", "devctl.main"]
    if settings.kubeconfig:
        argv += ["--kubeconfig", os.path.abspath(settings.kubeconfig)]
    if settings.context:
        argv += ["--context", settings.context]
    argv += ["ssh-proxy", name, "-n", namespace]
    if replica is not None:
        argv += ["--replica", str(replica)]
    return shlex.join(argv).replace("%", "%%")


def host_entry(settings: Settings, namespace: str, name: str, user: str, replica: int | None = None,
               direct: tuple[str, int] | None = None) -> list[str]:
    """A server's (or replica's) Host entry: through ``devctl ssh-proxy``, or with a ``direct``
    (host, port) straight there; the host key kept by the server's name either way (HostKeyAlias:
    the node, hence the address, may change)."""
    host = name if replica is None else f"{name}-{replica}"
    alias = host_key_alias(host, namespace)
    where = [f"  HostName {direct[0]}", f"  Port {direct[1]}"] if direct else [f"  HostName {alias}"]
    via = [] if direct else [f"  ProxyCommand {proxy_command(settings, namespace, name, replica)}"]
    return [f"Host {host} {host}.{namespace}", *where, f"  User {user}", f"  HostKeyAlias {alias}", *via,
            "  ServerAliveInterval 30"]


@click.command("ssh-config")
@click.argument("names", nargs=-1, shell_complete=complete.servers)
@click.option("--user", default="dev", show_default=True, help="Remote user of the entries.")
@click.option("--remove", is_flag=True, help="Remove the entries of NAMES (no NAMES: the whole block).")
@click.option("--file", "path", metavar="PATH", help="The ssh config file (default ~/.ssh/config).")
@click.option("--print", "print_only", is_flag=True, help="Print the entries instead of writing them.")
@kube_options()
@pass_settings
def ssh_config(settings: Settings, names: tuple[str, ...], user: str, remove: bool, path: str | None,
               print_only: bool) -> None:
    """Write ssh config entries for dev servers NAMES (default: every server of the namespace
    with SSH on), so that `ssh NAME`, scp, rsync and VS Code Remote-SSH work by name.  A server
    with a direct address (spec.ssh.serviceType NodePort or LoadBalancer) gets its HostName and
    Port; the others a ProxyCommand through devctl.

    \b
    Examples:
      devctl ssh-config my-dev && ssh my-dev
      rsync -a ./data my-dev:data/
      devctl ssh-config --remove my-dev
    """
    from .servers import desired_replicas
    from .tunnel import direct_address

    path = path or default_path()
    if remove:
        now = write_config(path, [], set(names), remove_all=not names)
        info(f"{path}: {len(now)} devctl host(s) left")
        return
    namespace = settings.namespace()
    api = settings.api
    servers = [api.get_devserver(namespace, n) for n in names] if names else api.list_devservers(namespace)
    entries = []
    for obj in servers:
        spec, name = obj.get("spec") or {}, obj["metadata"]["name"]
        if spec.get("enableSSH", True) is False:
            if names:
                raise DevctlError(f'ssh is disabled for devserver "{name}" (spec.enableSSH is false)')
            continue
        entries.append(host_entry(settings, namespace, name, user, direct=direct_address(obj)))
        if spec.get("mode") == "distributed":
            entries += [host_entry(settings, namespace, name, user, i) for i in range(desired_replicas(obj))]
    if print_only:
        click.echo("\n".join("\n".join(e) for e in entries))
        return
    if not entries:
        raise DevctlError(f'no dev server with SSH in namespace "{namespace}" (see devctl list)')
    write_config(path, entries, set())
    hosts = [entry_names(e)[0] for e in entries]
    info(f"{path}: {', '.join(hosts)} (try: ssh {hosts[0]})")


def _pump(source, sink) -> None:
    try:
        while True:
            data = source.recv(65536) if isinstance(source, socket.socket) else os.read(source, 65536)
            if not data:
                break
            if isinstance(sink, socket.socket):
                sink.sendall(data)
            else:
                os.write(sink, data)
    except OSError:
        pass
    finally:
        if isinstance(sink, socket.socket):
            try:
                sink.shutdown(socket.SHUT_WR)
            except OSError:
                pass


@click.command("ssh-proxy", hidden=True)
@click.argument("name", shell_complete=complete.servers)
@click.option("--replica", type=click.IntRange(min=0))
@kube_options()
@pass_settings
def ssh_proxy(settings: Settings, name: str, replica: int | None) -> None:
    """ProxyCommand of 'devctl ssh-config': stdin/stdout to dev server NAME's sshd."""
    from .tunnel import forwarded, plan_ssh

    plan = plan_ssh(settings, name, replica, "dev", ())
    try:
        with forwarded(plan), socket.create_connection((plan.host, plan.port), timeout=30) as sock:
            sock.settimeout(None)
            upstream = threading.Thread(target=_pump, args=(sys.stdin.fileno(), sock), daemon=True)
            upstream.start()
            _pump(sock, sys.stdout.fileno())
    except OSError as exc:
        raise DevctlError(f"cannot reach {plan.target} at {plan.host}:{plan.port}: {exc}") from None
