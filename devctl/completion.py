"""``devctl completion bash|zsh|fish``: shell completion of commands, flags and names.

The script printed is click's (the shell asks ``devctl`` itself, with ``_DEVCTL_COMPLETE`` set,
for the words that fit); complete.py completes the names of servers, flavors, jobs and users.
"""
from __future__ import annotations

import click

from .complete import COMPLETE_VAR

SHELLS = ("bash", "zsh", "fish")


@click.command("completion")
@click.argument("shell", type=click.Choice(SHELLS))
def completion(shell: str) -> None:
    """Print the shell completion script for SHELL (bash, zsh or fish).

    Commands, flags, and the names of servers, flavors, jobs and users (read from the cluster,
    2 s at most) complete with TAB.

    \b
    bash:  source <(devctl completion bash)        # or: devctl completion bash > /etc/bash_completion.d/devctl
    zsh:   source <(devctl completion zsh)         # after compinit
    fish:  devctl completion fish > ~/.config/fish/completions/devctl.fish
    """
    from click.shell_completion import get_completion_class

    cli = click.get_current_context().find_root().command  # devctl's group (main.cli)
    click.echo(get_completion_class(shell)(cli, {}, "devctl", COMPLETE_VAR).source())
