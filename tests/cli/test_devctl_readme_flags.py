"""The README says which devctl commands take -n/--kubeconfig/--context and which -o formats
(issue 28.10); this walks devctl's Click tree and checks each claim of that paragraph."""
from __future__ import annotations

import pathlib
import re

import click

from devctl.main import cli

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _commands() -> dict[str, click.Command]:
    out = {}

    def walk(cmd, path):
        if isinstance(cmd, click.Group):
            ctx = click.Context(cmd)
            for name in cmd.list_commands(ctx):
                walk(cmd.get_command(ctx, name), [*path, name])
        else:
            out[" ".join(path)] = cmd

    walk(cli, [])
    return out


def _opts(cmd) -> set[str]:
    return {o for p in cmd.params for o in p.opts}


def _formats(cmd) -> list[str]:
    out = next((p for p in cmd.params if "--output" in p.opts), None)
    return list(out.type.choices) if out else []


def _paragraph() -> str:
    readme = (ROOT / "README.md").read_text()
    start = readme.index("Every command that talks to the cluster")
    return " ".join(readme[start:readme.index("`-o wide`", start)].split())


def test_the_flags_the_readme_names():
    commands, text = _commands(), _paragraph()
    no_cluster = {n for n, c in commands.items() if "--kubeconfig" not in _opts(c)}
    assert no_cluster == {n for n in commands if n.split()[0] in ("config", "completion")}
    assert all("--context" in _opts(c) for n, c in commands.items() if n not in no_cluster)
    cluster_wide = {n for n, c in commands.items() if n not in no_cluster and "--namespace" not in _opts(c)}
    assert cluster_wide == {n for n in commands if n.split()[0] in ("flavors", "admin", "version")}
    assert "cluster-wide `flavors`, `admin ...` and `version`" in text and "`config ...` and `completion`" in text


def test_the_output_formats_the_readme_names():
    commands, text = _commands(), _paragraph()
    listed = text.split("The commands that print objects (", 1)[1].split(") take", 1)[0]
    named = set()
    for token in re.findall(r"`([^`]+)`", listed):
        head, *rest = token.split()
        named |= {f"{head} {sub}" for sub in rest[0].split("|")} if rest else {head}
    objects = {n for n, c in commands.items() if set(_formats(c)) >= {"table", "json", "yaml"}}
    assert objects - {"usage"} == named
    assert _formats(commands["usage"])[-1] == "csv" and "(`usage` also `csv`)" in text
    assert _formats(commands["version"]) == ["text", "json", "yaml"] and "`version` takes `-o text|json|yaml`" in text
    assert _formats(commands["config view"]) == ["yaml", "json"] and "`config view` `-o yaml|json`" in text
    assert _formats(commands["monitor"]) == ["table", "json"] and "`monitor` `-o table|json`" in text
    assert _formats(commands["ssh"]) == _formats(commands["run"]) == ["text", "json"]
