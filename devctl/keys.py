"""SSH public keys: the lines the CRDs accept, read from files (``--ssh-key-file``, ~/.ssh/id_*.pub)
or named by a Secret (``--ssh-key-secret``), and the key flags of ``create`` and ``reserve``.
github.py fetches a GitHub account's keys with the same rule."""
from __future__ import annotations

import glob
import re
from pathlib import Path
from typing import Iterable

import click

from .settings import DNS1123_SUBDOMAIN_RE

# The CRD's rule for spec.sshPublicKeys items (config/crd/bases/torchdev.io_devservers.yaml).
SSH_KEY_RE = re.compile(
    r"^(ssh-(rsa|ed25519|dss)|ecdsa-sha2-nistp(256|384|521)|sk-(ssh-ed25519|ecdsa-sha2-nistp256)@openssh[.]com)"
    r" AAAA[A-Za-z0-9+/]+={0,3}( [^\n]*)?$")
MAX_SSH_KEYS = 32

# A Secret's data key (the CRD's sshKeySecretRef.key pattern).
SECRET_KEY_RE = re.compile(r"^[-._a-zA-Z0-9]+$")


def parse_key_secret(_ctx, _param, value: str | None) -> dict | None:
    """--ssh-key-secret NAME[:KEY] -> spec.sshKeySecretRef (KEY default authorized_keys)."""
    if value is None:
        return None
    name, sep, key = value.partition(":")
    if not DNS1123_SUBDOMAIN_RE.match(name) or len(name) > 253:
        raise click.BadParameter(f"{name!r} is not a Secret name (a DNS-1123 subdomain: lower case, digits, "
                                 "'-' and '.', at most 253)")
    if sep and (not SECRET_KEY_RE.match(key) or len(key) > 253):
        raise click.BadParameter(f"{key!r} is not a Secret key (letters, digits, '-', '_' and '.', at most 253)")
    return {"name": name, "key": key or "authorized_keys"}


def read_ssh_keys(paths: Iterable[str], explicit: bool) -> list[str]:
    """Public keys from files (one or more per file, authorized_keys style)."""
    keys: list[str] = []
    for path in paths:
        p = Path(path).expanduser()
        try:
            text = p.read_text()
        except OSError as exc:
            if explicit:
                raise click.BadParameter(f"cannot read {path}: {exc.strerror or exc}",
                                         param_hint="'--ssh-key-file'") from None
            continue
        for line in text.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if not SSH_KEY_RE.match(line):
                if "PRIVATE KEY" in text:
                    raise click.BadParameter(f"{path} is a private key; pass the .pub file",
                                             param_hint="'--ssh-key-file'")
                raise click.BadParameter(
                    f"{path}: not an OpenSSH public key line (ssh-ed25519 AAAA... comment)",
                    param_hint="'--ssh-key-file'")
            if line not in keys:
                keys.append(line)
    if len(keys) > MAX_SSH_KEYS:
        raise click.BadParameter(f"at most {MAX_SSH_KEYS} SSH keys, got {len(keys)}",
                                 param_hint="'--ssh-key-file'")
    return keys


def default_ssh_key_files() -> list[str]:
    return sorted(glob.glob(str(Path.home() / ".ssh" / "id_*.pub")))


def key_options(command):
    """The SSH key flags of ``create`` and ``reserve``."""
    for option in reversed((
        click.option("--ssh-key-file", "ssh_key_files", multiple=True, metavar="PATH",
                     help="SSH public key file (repeatable; default: ~/.ssh/id_*.pub and the keys of 'devctl config "
                          "set github-user'). The keys your DevUser was onboarded with are accepted too."),
        click.option("--ssh-key-secret", "ssh_key_secret", metavar="SECRET[:KEY]", callback=parse_key_secret,
                     help="Also accept the authorized_keys in this Secret of the namespace (KEY default "
                          "authorized_keys), instead of the keys your DevUser was onboarded with."),
        click.option("--no-user-keys", is_flag=True,
                     help="Accept only this server's keys, not those your DevUser was onboarded with."),
    )):
        command = option(command)
    return command
