"""``devctl ssh``: connect to a dev server, directly or through kubectl port-forward.

Direct to status.ssh's address when the server has one (spec.ssh.serviceType NodePort or
LoadBalancer: ``ssh -p PORT dev@HOST``, no kubectl); else direct when the SSH Service (or the
replica's pod) answers a short TCP connect from here (e.g. inside the cluster or over a VPN);
otherwise ``kubectl port-forward`` to a free local port and ``ssh -p PORT dev@127.0.0.1``.
"""
from __future__ import annotations

import shlex
import sys

import click

from . import complete
from .context import kube_options, pass_settings
from .output import dump_json
from .settings import Settings
from .tunnel import plan_ssh, run_plan


@click.command("ssh", context_settings={"ignore_unknown_options": False})
@click.argument("name", shell_complete=complete.servers)
@click.option("--replica", type=click.IntRange(min=0), help="Replica (pod index) of a distributed server.")
@click.option("--user", default="dev", show_default=True, help="Remote user.")
@click.option("--print", "print_only", is_flag=True, help="Only print the command(s); do not connect.")
@click.option("--port-forward", "force", flag_value="port-forward", default=None,
              help="Always use kubectl port-forward.")
@click.option("--direct", "force", flag_value="direct", help="Never use port-forward.")
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="With --print: shell commands or a JSON plan.")
@kube_options()
@click.argument("ssh_args", nargs=-1, type=click.UNPROCESSED, metavar="[-- SSH_ARGS...]")
@pass_settings
def ssh(settings: Settings, name: str, replica: int | None, user: str, print_only: bool,
        force: str | None, output: str, ssh_args: tuple[str, ...]) -> None:
    """SSH into dev server NAME (extra arguments after -- go to ssh).

    A server with a direct address (spec.ssh.serviceType NodePort or LoadBalancer: status.ssh)
    is reached there; any other through kubectl port-forward unless its address answers from here.

    \b
    Examples:
      devctl ssh my-dev
      devctl ssh train --replica 2 -- nvidia-smi
      devctl ssh my-dev --print -- -L 8888:localhost:8888
    """
    plan = plan_ssh(settings, name, replica, user, ssh_args, force)
    if print_only:
        if output == "json":
            click.echo(dump_json(plan.as_dict()))
        else:
            if plan.port_forward:
                click.echo(shlex.join(plan.port_forward) + " &")
            click.echo(shlex.join(plan.ssh))
        return
    sys.exit(run_plan(plan))
