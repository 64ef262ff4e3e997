"""devctl: GPU dev servers on Kubernetes (torchdev).

Import discipline: this module and the command modules import only click and
the standard library at import time; ``kubernetes`` is imported by
``devctl.api`` on the first API call, so ``devctl --help`` stays fast.  A
command's module is imported when that command runs (``COMMANDS``): ``devctl
list`` does not import the modules of ``admin``, ``infer`` or ``run``.
"""
from __future__ import annotations

import importlib
import os
import sys

import click

from . import API_VERSION, __version__
from .settings import Settings
from .context import kube_options, pass_settings
from .errors import one_line
from .output import dump_json, output_option

# Every command but ``version``: its name -> "module:object", imported on first use.
COMMANDS = {
    "create": "devserver:create", "list": "devserver:list_", "get": "devserver:get", "delete": "devserver:delete",
    "stop": "lifecycle:stop", "start": "lifecycle:start", "cancel": "lifecycle:cancel", "extend": "lifecycle:extend",
    "keepalive": "lifecycle:keepalive", "autostop": "lifecycle:autostop", "reserve": "devserver:reserve", "ssh": "ssh:ssh", "run": "run:run",
    "monitor": "monitor:monitor", "flavors": "flavor:flavors", "queue": "queue:queue", "quota": "quota:quota",
    "usage": "usage:usage", "whoami": "whoami:whoami", "config": "config:config_group", "admin": "admin:admin",
    "train": "train:train", "infer": "infer:infer", "completion": "completion:completion",
    "ssh-config": "ssh_config:ssh_config", "ssh-proxy": "ssh_config:ssh_proxy",
}


# What `devctl --help` lists for each command of COMMANDS without importing it: the first
# paragraph of its help (tests/cli/test_devctl_help_fast.py keeps them equal); None: hidden.
SUMMARIES = {
    'admin': 'Onboard and offboard users (DevUser objects; cluster admins).',
    'autostop': ('Change when running or stopped servers (NAME... or -l SELECTOR) stop by themselves when idle: --idle'
            ' 30m, or --off; without either, show the setting. The operator applies it to a running server at its'
            ' next reconcile (the idle deadline moves; no restart).'),
    'cancel': ('End the reservation of NAME now (recorded as cancelled): the server stops, its home and the '
            "DevServer are kept, unlike 'devctl delete'."),
    'completion': 'Print the shell completion script for SHELL (bash, zsh or fish).',
    'config': 'View or change the devctl config file (namespace, owner, github-user).',
    'create': 'Create a dev server NAME of flavor --flavor.',
    'delete': 'Delete dev servers (NAME... or -l SELECTOR). Home volumes are kept unless --purge.',
    'extend': ("Add --hours to the reservation of NAME (spec.lifecycle.duration), within the cluster's and your "
            "DevUser's maximum; the new expiry is printed once the operator has applied it."),
    'flavors': ('List the dev server flavors (GPU type and count, CPU, memory, price; -o wide adds the node selector '
            "and the tolerations' keys)."),
    'get': ('Show dev servers (NAME... or -l SELECTOR): spec, status, conditions, pods and recent events; -o '
            'json|yaml prints the object (a List for several or -l), -o name their names.'),
    'infer': 'Image inference on a GPU, ephemeral (EphemeralAccelerationJobs): upload, run, download.',
    'keepalive': ("Keep NAME running while idle for --hours (spec.lifecycle.keepAliveUntil); the reservation's expiry "
            'still holds.'),
    'list': 'List dev servers (-o wide adds the image, replicas, owner and SSH command).',
    'monitor': 'Watch the replicas of dev server NAME: phase, readiness, restarts, node, age, CPU/memory.',
    'queue': 'List my dev servers waiting for GPUs (Kueue): position, ClusterQueue, flavor, GPUs.',
    'quota': 'Show the quota, used and limit, per flavor: GPUs, CPU, memory; storage and dev servers.',
    'reserve': 'Reserve GPUs for --hours: a dev server with that reservation (spec.lifecycle.duration).',
    'run': 'Run SCRIPT with torchrun (devrun) on every replica of dev server NAME.',
    'ssh': 'SSH into dev server NAME (extra arguments after -- go to ssh).',
    'ssh-config': ('Write ssh config entries for dev servers NAMES (default: every server of the namespace with SSH on),'
            ' so that `ssh NAME`, scp, rsync and VS Code Remote-SSH work by name. A server with a direct address '
            '(spec.ssh.serviceType NodePort or LoadBalancer) gets its HostName and Port; the others a '
            'ProxyCommand through devctl.'),
    'ssh-proxy': None,
    'start': ('Start stopped, expired or cancelled dev servers (NAME... or -l SELECTOR): they queue again (with '
            'Kueue) and a new reservation of spec.lifecycle.duration starts when each is Ready.'),
    'stop': ('Stop dev servers (NAME... or -l SELECTOR): scale to zero, keep their homes; ends their reservations.'
            " 'devctl start' resumes them."),
    'train': 'Distributed PyTorch training runs (TrainingJobs): submit, watch, suspend, resume.',
    'usage': ('What reservations and job runs used: launched, ended by reason, early cancellations, mean wait, GPU-'
            'hours, cost and the GPU-hours idle shutdown saved, per user, per flavor and per kind (DevServer, '
            'EphemeralAccelerationJob, TrainingJob).'),
    'whoami': 'Show who you are to the cluster, and your DevUser, namespace, queue and quota.',
}


class DevctlGroup(click.Group):
    """Prints every error as one ``error: ...`` line: exit 2 for usage, 1 otherwise.  The
    commands of ``COMMANDS`` are imported when they are looked up (click's lazily loaded
    subcommands)."""

    def format_commands(self, ctx, formatter):
        """click's list of commands, where a command not imported yet stands in as a Command
        with its SUMMARIES line (None: hidden): ``devctl --help`` imports no command module."""
        rows = []
        for name in self.list_commands(ctx):
            command = self.commands.get(name) or click.Command(name, help=SUMMARIES[name],
                                                               hidden=SUMMARIES[name] is None)
            if not command.hidden:
                rows.append((name, command))
        if rows:
            limit = formatter.width - 6 - max(len(name) for name, _ in rows)
            with formatter.section("Commands"):
                formatter.write_dl([(name, command.get_short_help_str(limit)) for name, command in rows])

    def list_commands(self, ctx):
        return sorted(set(super().list_commands(ctx)) | set(COMMANDS))

    def get_command(self, ctx, cmd_name):
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            module, _, name = COMMANDS[cmd_name].partition(":")
            command = getattr(importlib.import_module("." + module, __package__), name)
            if command.name != cmd_name:
                raise RuntimeError("devctl: COMMANDS[%r] is the command %r" % (cmd_name, command.name))
            self.add_command(command)
        return super().get_command(ctx, cmd_name)

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.UsageError as exc:
            hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
            click.echo(f"error: {one_line(exc.format_message())}{hint}", err=True)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("error: aborted", err=True)
            sys.exit(1)
        except BrokenPipeError:
            # `devctl list | head`: stop quietly, like kubectl.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)


CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


@click.group("devctl", cls=DevctlGroup, context_settings=CONTEXT_SETTINGS)
@click.option("--kubeconfig", metavar="PATH", envvar=None, help="Path to the kubeconfig file (default $KUBECONFIG, ~/.kube/config).")
@click.option("--context", "kube_context", metavar="NAME", help="Kubeconfig context to use.")
@click.option("-n", "--namespace", metavar="NS",
              help="Namespace (default: devctl config, kube context namespace, dev-<user>).")
@click.version_option(__version__, "--version", prog_name="devctl", message="%(prog)s %(version)s")
@click.pass_context
def cli(ctx: click.Context, kubeconfig: str | None, kube_context: str | None, namespace: str | None) -> None:
    """Create and use GPU dev servers on Kubernetes (torchdev).

    \b
    Quick start:
      devctl flavors
      devctl create my-dev --flavor gpu-a10g-1 --wait
      devctl ssh my-dev
      devctl delete my-dev
    """
    settings = ctx.ensure_object(Settings)
    # Options given after the subcommand are applied later and win.
    settings.kubeconfig = kubeconfig
    settings.context = kube_context
    settings.namespace_flag = namespace


@cli.command("version")
@click.option("--client", "client_only", is_flag=True, help="Only devctl's version (no cluster).")
@output_option(default="text", formats=("text", "json", "yaml"))
@kube_options(namespaced=False)
@pass_settings
def version(settings: Settings, client_only: bool, output: str) -> None:
    """Print devctl's version, the API version it speaks and the operator's version (the image tag
    of its Deployment; "unknown" with the reason when devctl cannot read it)."""
    info = {"clientVersion": __version__, "apiVersion": API_VERSION,
            "python": ".".join(map(str, sys.version_info[:3]))}
    if not client_only:
        from .version import operator_version

        operator = operator_version(settings)
        info["operatorVersion"] = operator["version"]
        info["operator"] = operator
    if output == "json":
        click.echo(dump_json(info))
    elif output == "yaml":
        from .output import dump_yaml

        click.echo(dump_yaml(info), nl=False)
    else:
        click.echo(f"devctl {__version__} ({API_VERSION}, python {info['python']})")
        if not client_only:
            where = operator.get("deployment") or operator.get("reason")
            detail = ", ".join(x for x in (operator.get("image"), where if operator.get("deployment") else None,
                                           operator.get("reason")) if x)
            click.echo(f"operator {operator['version']}" + (f" ({detail})" if detail else ""))


def kubectl_plugin() -> None:
    """The console script ``kubectl-devctl``: kubectl runs an executable named kubectl-<name> on
    PATH as ``kubectl <name>`` (``kubectl devctl list``); usage and errors name it so."""
    cli(prog_name="kubectl devctl", complete_var="_DEVCTL_COMPLETE")


if __name__ == "__main__":  # pragma: no cover
    cli()
