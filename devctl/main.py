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


class DevctlGroup(click.Group):
    """Prints every error as one ``error: ...`` line: exit 2 for usage, 1 otherwise.  The
    commands of ``COMMANDS`` are imported when they are looked up (click's lazily loaded
    subcommands)."""

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
