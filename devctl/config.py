"""``devctl config``: view or change the devctl config file (settings.py reads it)."""
from __future__ import annotations

from typing import Any

import click

from .errors import DevctlError
from .output import output_option, print_object
from .settings import Settings, config_path, load_config, save_config, validate_email, validate_namespace

__all__ = ["config_group", "config_path", "load_config", "save_config"]


# -- `devctl config` -----------------------------------------------------------

@click.group("config")
def config_group() -> None:
    """View or change the devctl config file (namespace, owner, github-user)."""


@config_group.command("view")
@output_option(default="yaml", formats=("yaml", "json"))
@click.pass_obj
def config_view(settings: Settings, output: str) -> None:
    """Show the config file and the effective namespace and owner."""
    path = config_path()
    data = dict(settings.config)
    effective: dict[str, Any] = {"owner": settings.owner()}
    try:
        effective["namespace"], effective["namespaceSource"] = settings.namespace_with_source()
    except DevctlError as exc:
        effective["namespace"], effective["namespaceError"] = None, exc.format_message()
    print_object({"path": str(path), "exists": path.exists(), "config": data, "effective": effective}, output)


@config_group.command("set-namespace")
@click.argument("namespace", callback=lambda _c, _p, v: validate_namespace(v))
def config_set_namespace(namespace: str) -> None:
    """Set the default namespace for devctl commands."""
    _set_key("namespace", namespace)


@config_group.command("set-owner")
@click.argument("email", callback=lambda _c, _p, v: validate_email(v))
def config_set_owner(email: str) -> None:
    """Set the owner e-mail used for new dev servers."""
    _set_key("owner", email)


SETTABLE = ("namespace", "owner", "github-user", "github-keys-url")


# seed 002's spelling (and any key with _ for -): the same keys
def _key(_ctx, _param, value: str) -> str:
    key = value.strip().lower().replace("_", "-")
    if key not in SETTABLE:
        raise click.BadParameter(f"{value!r} is not one of {', '.join(SETTABLE)}", param_hint="'KEY'")
    return key


@config_group.command("set")
@click.argument("key", metavar="{" + "|".join(SETTABLE) + "}", callback=_key)
@click.argument("value")
def config_set(key: str, value: str) -> None:
    """Set KEY to VALUE in the config file.

    \b
    github-user U      fetch U's public SSH keys from GitHub now and keep them for
                       'devctl create' and 'devctl reserve' (with the keys in
                       ~/.ssh/id_*.pub; not with --ssh-key-file)
    github-keys-url T  where keys are fetched from ({user} in T; default
                       https://github.com/{user}.keys; https:// only, http://
                       only to localhost)
    namespace NS, owner EMAIL  as set-namespace / set-owner

    Keys may be written with _ (github_user, as seed 002's gpu-dev writes it).
    """
    if key == "namespace":
        value = validate_namespace(value)
    elif key == "owner":
        value = validate_email(value)
    elif key == "github-user":
        from .github import fetch_keys

        keys = fetch_keys(value, load_config())
        data = load_config()
        data["github-user"], data["ssh-public-keys"] = value, keys
        path = save_config(data)
        click.echo(f"github-user set to {value!r} in {path}: {len(keys)} SSH key(s) from GitHub")
        return
    elif key == "github-keys-url":
        from .github import url_problem

        problem = url_problem(value.replace("{user}", "user"))
        if problem:
            raise DevctlError(f"github-keys-url {value!r}: {problem}")
    _set_key(key, value)


def _set_key(key: str, value: str) -> None:
    data = load_config()
    data[key] = value
    path = save_config(data)
    click.echo(f"{key} set to {value!r} in {path}")
