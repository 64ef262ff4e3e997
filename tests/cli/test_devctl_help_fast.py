"""`devctl --help` imports no command module and no kubernetes client (issue 28.7), yet lists
what click would list with every command loaded: main.SUMMARIES holds each command's first
paragraph of help, and this keeps it equal to the commands' own. Its time is measured by
bench/devctl_start.py (target <= 0.15 s)."""
from __future__ import annotations

import inspect
import json
import subprocess
import sys

import click

from devctl import main

PROBE = """
import contextlib, io, json, sys
from devctl.main import cli
import click
if sys.argv[1] == "eager":
    ctx = click.Context(cli)
    for name in cli.list_commands(ctx):
        cli.get_command(ctx, name)
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        cli.main(["--help"], prog_name="devctl", standalone_mode=False)
    except SystemExit:
        pass
print(json.dumps({"help": out.getvalue(), "modules": sorted(m for m in sys.modules
                  if m.startswith(("devctl.", "kubernetes", "yaml", "urllib3")))}))
"""


def _probe(mode: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, timeout=120,
                          env={"COLUMNS": "100", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_the_summaries_are_the_commands_first_paragraphs():
    ctx = click.Context(main.cli)
    for name in main.COMMANDS:
        command = main.cli.get_command(ctx, name)
        text = " ".join(inspect.cleandoc(command.short_help or command.help or "").split("\n\n")[0].split())
        assert main.SUMMARIES[name] == (None if command.hidden else text), name
    assert set(main.SUMMARIES) == set(main.COMMANDS)


def test_help_lists_the_same_commands_without_importing_them():
    lazy, eager = _probe("lazy"), _probe("eager")
    assert lazy["help"] == eager["help"] and "  list " in lazy["help"] and "ssh-proxy" not in lazy["help"]
    commands = {f"devctl.{spec.split(':')[0]}" for spec in main.COMMANDS.values()}
    assert commands & set(eager["modules"]) == commands  # the eager probe loads them: the check can fail
    assert not commands & set(lazy["modules"]), lazy["modules"]
    assert not [m for m in lazy["modules"] if m.startswith("kubernetes")], lazy["modules"]


LIST_PROBE = """
import json, sys
from devctl.main import cli
try:
    cli.main(["-n", sys.argv[1], "list", "-o", "json"], prog_name="devctl", standalone_mode=False)
finally:
    print(json.dumps(sorted(m for m in sys.modules if m.startswith("kubernetes"))), file=sys.stderr)
"""


def test_list_reads_without_the_kubernetes_client(sim, ns):
    """`devctl list` reads through devctl.rest: the kubernetes package is never imported."""
    import os

    from kubernetes import client

    client.CustomObjectsApi(sim.k8s).create_namespaced_custom_object("torchdev.io", "v1alpha1", ns, "devservers", {
        "apiVersion": "torchdev.io/v1alpha1", "kind": "DevServer", "metadata": {"name": "probe"},
        "spec": {"flavor": "cpu-small", "owner": "probe@example.com"}})
    env = dict(os.environ, KUBECONFIG=sim.kubeconfig)
    proc = subprocess.run([sys.executable, "-c", LIST_PROBE, ns], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert [s["metadata"]["name"] for s in json.loads(proc.stdout)["items"]] == ["probe"]
    assert json.loads(proc.stderr.strip().splitlines()[-1]) == []
