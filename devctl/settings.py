"""devctl settings: the configuration file and namespace/owner resolution (``devctl config``
in config.py views and changes the file).

Config file: ``$DEVCTL_CONFIG``, else ``$XDG_CONFIG_HOME/devctl/config.yaml``,
else ``~/.config/devctl/config.yaml``. Keys: ``namespace``, ``owner``.

Namespace precedence: ``-n/--namespace`` > config ``namespace`` > the kube
context's namespace (if set and not ``default``) > ``dev-<user>``, where user is
the local part of the owner e-mail (``--owner``, config ``owner``, git
``user.email``) or ``$USER``, sanitised to a DNS-1123 label.
"""
from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from ansible_collections.torchdev.operator.plugins.module_utils.constants import EMAIL_PATTERN

from .errors import DevctlError

KNOWN_KEYS = ("namespace", "owner")
EMAIL_RE = re.compile(EMAIL_PATTERN)
DNS1123_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# An object name most kinds take (a Secret, a DevServerFlavor): a DNS-1123 subdomain, at most 253.
DNS1123_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def config_path() -> Path:
    explicit = os.environ.get("DEVCTL_CONFIG")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "devctl" / "config.yaml"


def load_config(path: Path | None = None) -> dict[str, Any]:
    import yaml  # lazy

    path = path or config_path()
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise DevctlError(f"cannot read config file {path}: {exc.strerror or exc}") from exc
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise DevctlError(f"config file {path} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise DevctlError(f"config file {path} must hold a mapping, got {type(data).__name__}")
    return data


def save_config(data: dict[str, Any], path: Path | None = None) -> Path:
    import yaml  # lazy

    path = path or config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(yaml.safe_dump(data, sort_keys=True, default_flow_style=False))
    os.replace(tmp, path)
    return path


def git_user_email() -> str | None:
    try:
        proc = subprocess.run(
            ["git", "config", "--get", "user.email"],
            capture_output=True, text=True, timeout=5, check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    email = proc.stdout.strip()
    return email or None


def sanitize_dns_label(text: str, max_len: int = 63) -> str:
    """Lower-case, map anything outside ``[a-z0-9-]`` to ``-``, trim to a label."""
    label = re.sub(r"[^a-z0-9-]+", "-", text.lower())
    label = re.sub(r"-{2,}", "-", label).strip("-")
    return label[:max_len].rstrip("-")


def user_from_owner(owner: str | None) -> str | None:
    if owner and "@" in owner:
        return sanitize_dns_label(owner.split("@", 1)[0], 59) or None
    return None


def validate_email(value: str) -> str:
    if not EMAIL_RE.match(value or ""):
        raise click.BadParameter(f"{value!r} is not an e-mail address (like alice@example.com)")
    return value


def validate_namespace(value: str) -> str:
    if not DNS1123_LABEL_RE.match(value or "") or len(value) > 63:
        raise click.BadParameter(f"{value!r} is not a valid namespace name (DNS-1123 label)")
    return value


@dataclass
class Settings:
    """What the global options and the config file decide; resolved lazily."""

    kubeconfig: str | None = None
    context: str | None = None
    namespace_flag: str | None = None
    _config: dict[str, Any] | None = field(default=None, repr=False)
    _api: Any = field(default=None, repr=False)

    @property
    def config(self) -> dict[str, Any]:
        if self._config is None:
            self._config = load_config()
        return self._config

    @property
    def api(self):
        if self._api is None:
            from .api import Api  # lazy: imports kubernetes on first use only

            self._api = Api(kubeconfig=self.kubeconfig, context=self.context)
            self._api.namespace_origin = self.namespace_origin
        return self._api

    def namespace_origin(self, namespace: str) -> str | None:
        """Where devctl took ``namespace`` from, when it is the default one and not given with -n
        (None otherwise): what a 'namespace does not exist' error and devctl whoami say."""
        try:
            default, source = self.namespace_with_source()
        except DevctlError:
            return None
        if namespace != default or source == "flag":  # -n: the user said so
            return None
        if source == "config":
            return "from the devctl config: 'devctl config set namespace'"
        if source == "kubeconfig":
            return "the namespace of your kubeconfig context"
        owner = self.owner()
        if not user_from_owner(owner):
            return "dev-<your login name>: no e-mail is known (devctl config set owner EMAIL)"
        how = "the devctl config's owner" if self.config.get("owner") else "git's user.email"
        return f"dev-<user> from your e-mail {owner} ({how})"

    def owner(self, override: str | None = None) -> str | None:
        """``--owner`` > config ``owner`` > ``git config user.email``."""
        return override or self.config.get("owner") or git_user_email()

    def namespace(self, owner_override: str | None = None) -> str:
        ns, _source = self.namespace_with_source(owner_override)
        return ns

    def namespace_with_source(self, owner_override: str | None = None) -> tuple[str, str]:
        if self.namespace_flag:
            return self.namespace_flag, "flag"
        configured = self.config.get("namespace")
        if configured:
            return str(configured), "config"
        context_ns = self.context_namespace()
        if context_ns and context_ns != "default":
            return context_ns, "kubeconfig"
        user = user_from_owner(self.owner(owner_override))
        if not user:
            user = sanitize_dns_label(os.environ.get("USER") or os.environ.get("LOGNAME") or "", 59)
        if not user:
            raise DevctlError(
                "cannot work out the namespace: pass -n/--namespace, or run "
                "'devctl config set-namespace NS' or 'devctl config set-owner EMAIL'"
            )
        return f"dev-{user}", "user"

    def context_namespace(self) -> str | None:
        """The namespace of the selected kube context, read without contacting the API."""
        from .api import kubeconfig_context_namespace  # lazy

        return kubeconfig_context_namespace(self.kubeconfig, self.context)
