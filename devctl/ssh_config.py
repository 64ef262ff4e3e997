"""``devctl ssh-config``: dev servers by name for ssh, scp, rsync and VS Code Remote-SSH.

It writes one managed block at the top of ``~/.ssh/config`` (between the BEGIN and END lines
below; everything else in the file is kept as it is): a ``Host`` entry per server (and per
replica of a distributed one, ``<name>-<i>``) whose ``ProxyCommand`` is ``devctl ssh-proxy``:
that connects stdin/stdout to the server's sshd, directly when its address answers from here,
else through ``kubectl port-forward`` (as ``devctl ssh`` does).  A server with a direct address
(status.ssh: spec.ssh.serviceType NodePort or LoadBalancer) gets its ``HostName`` and ``Port``
instead, no ProxyCommand (its replicas' entries keep one).  ``devctl delete`` removes the
server's entries; ``--remove`` removes the named ones (all: the whole block).
"""
from __future__ import annotations

import os
import re
import shlex
import socket
import sys
import threading

import click

from . import completion as complete
from .config import Settings
from .context import kube_options, pass_settings
from .errors import DevctlError
from .output import info

BEGIN = "# BEGIN devctl ssh-config (managed by 'devctl ssh-config'; edits inside are replaced)"
END = "# END devctl ssh-config"


def default_path() -> str:
    return os.path.join(os.path.expanduser("~"), ".ssh", "config")


def split_block(text: str) -> tuple[list[list[str]], str]:
    """(the managed block's entries, each a list of lines starting with its Host line; the
    file without the block)."""
    lines = text.splitlines()
    if BEGIN not in lines:
        return [], text
    start = lines.index(BEGIN)
    if END not in lines[start:]:  # edited by hand: nothing of the file may be lost
        raise ValueError(f"the line {BEGIN!r} has no {END!r} after it: restore it, or remove the block by hand")
    end = lines.index(END, start)
    entries: list[list[str]] = []
    for line in lines[start + 1:end]:
        if line.startswith("Host "):
            entries.append([line])
        elif entries and line.strip():
            entries[-1].append(line)
    rest = lines[:start] + lines[end + 1:]
    while rest and not rest[0].strip():
        rest.pop(0)
    return entries, "\n".join(rest) + ("\n" if rest else "")


def entry_names(entry: list[str]) -> list[str]:
    return entry[0].split()[1:]


def join_block(entries: list[list[str]], rest: str) -> str:
    if not entries:
        return rest
    body = "\n".join("\n".join(entry) for entry in entries)
    return f"{BEGIN}\n{body}\n{END}\n" + (f"\n{rest}" if rest else "")


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
    from .ssh import host_key_alias

    host = name if replica is None else f"{name}-{replica}"
    alias = host_key_alias(host, namespace)
    where = [f"  HostName {direct[0]}", f"  Port {direct[1]}"] if direct else [f"  HostName {alias}"]
    via = [] if direct else [f"  ProxyCommand {proxy_command(settings, namespace, name, replica)}"]
    return [f"Host {host} {host}.{namespace}", *where, f"  User {user}", f"  HostKeyAlias {alias}", *via,
            "  ServerAliveInterval 30"]


def write_config(path: str, add: list[list[str]], remove: set[str], remove_all: bool = False) -> list[str]:
    """Apply to the file at ``path``: drop the entries named in ``remove`` (or all), add (or
    replace, by their names) ``add``; the file is created 0600 (its directory 0700) and written
    atomically. Returns the host names now in the block."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        text = ""
    try:
        entries, rest = split_block(text)
    except ValueError as exc:
        raise DevctlError(f"{path}: {exc}") from None
    names = {n for entry in add for n in entry_names(entry)} | set(remove)
    kept = [] if remove_all else [e for e in entries if not set(entry_names(e)) & names]
    entries = kept + add
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=0o700, exist_ok=True)
    tmp = f"{path}.devctl-tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(join_block(entries, rest))
    if os.path.exists(path):
        os.chmod(tmp, os.stat(path).st_mode & 0o777)
    os.replace(tmp, path)
    return [entry_names(e)[0] for e in entries]


def forget(names: list[str], namespace: str, path: str | None = None) -> None:
    """Remove the entries of the servers ``names`` of ``namespace`` (with their replicas') if the
    block has them: what ``devctl delete`` calls; a file without them is not touched."""
    path = path or default_path()
    try:
        with open(path, encoding="utf-8") as fh:
            entries, _rest = split_block(fh.read())
    except (OSError, ValueError):  # no file, or a block edited by hand: left alone
        return
    ours = [re.compile(r"^  (HostName|HostKeyAlias) %s(-\d+)?\.%s\.devserver$" % (re.escape(n), re.escape(namespace)))
            for n in names]
    gone = {n for entry in entries if any(p.match(line) for p in ours for line in entry) for n in entry_names(entry)}
    if gone:
        write_config(path, [], gone)


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
    from .devserver import desired_replicas
    from .ssh import direct_address

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
    from .ssh import forwarded, plan_ssh

    plan = plan_ssh(settings, name, replica, "dev", ())
    try:
        with forwarded(plan), socket.create_connection((plan.host, plan.port), timeout=30) as sock:
            sock.settimeout(None)
            upstream = threading.Thread(target=_pump, args=(sys.stdin.fileno(), sock), daemon=True)
            upstream.start()
            _pump(sock, sys.stdout.fileno())
    except OSError as exc:
        raise DevctlError(f"cannot reach {plan.target} at {plan.host}:{plan.port}: {exc}") from None
