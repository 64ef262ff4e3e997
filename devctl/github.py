"""SSH public keys from a GitHub account (``https://github.com/<user>.keys``).

The URL is a template with ``{user}``: the devctl config key ``github-keys-url`` or the
environment variable ``DEVCTL_GITHUB_KEYS_URL`` replace the default (a GitHub Enterprise
server, or a local server in tests).  urllib only (no extra dependency).
"""
from __future__ import annotations

import os
import re

from .errors import DevctlError

DEFAULT_KEYS_URL = "https://github.com/{user}.keys"
# GitHub's username rules: alphanumerics and single hyphens, at most 39 characters.
GITHUB_USER_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9]|-(?=[A-Za-z0-9])){0,38}$")


def keys_url(user: str, config: dict | None = None) -> str:
    template = os.environ.get("DEVCTL_GITHUB_KEYS_URL") or (config or {}).get("github-keys-url") or DEFAULT_KEYS_URL
    if "{user}" not in template:
        raise DevctlError(f"the GitHub keys URL {template!r} has no {{user}} placeholder")
    return template.replace("{user}", user)


def fetch_keys(user: str, config: dict | None = None, timeout: float = 20.0) -> list[str]:
    """The account's public keys (OpenSSH lines, as the CRDs accept them), or a one-line error."""
    import urllib.error
    import urllib.request

    from .devserver import SSH_KEY_RE

    if not GITHUB_USER_RE.match(user or ""):
        raise DevctlError(f"{user!r} is not a GitHub user name")
    url = keys_url(user, config)
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers={"Accept": "text/plain"}),
                                    timeout=timeout) as response:
            text = response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            raise DevctlError(f"GitHub user {user!r} not found ({url}: 404)") from None
        raise DevctlError(f"cannot fetch the SSH keys of GitHub user {user!r}: {url}: HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise DevctlError(f"cannot reach {url} for the SSH keys of GitHub user {user!r}: {reason}") from None
    keys = []
    for line in text.splitlines():
        line = line.strip()
        if line and SSH_KEY_RE.match(line) and line not in keys:
            keys.append(line)
    if not keys:
        raise DevctlError(f"GitHub user {user!r} has no public SSH keys ({url} lists none); "
                          f"add one at https://github.com/settings/keys or pass --ssh-key-file")
    return keys
