"""SSH public keys from a GitHub account (``https://github.com/<user>.keys``).

The URL is a template with ``{user}``: the devctl config key ``github-keys-url`` or the
environment variable ``DEVCTL_GITHUB_KEYS_URL`` replace the default (a GitHub Enterprise
server, or a local server in tests).  urllib only (no extra dependency).

The keys become the keys that open a dev server, so the fetch trusts nothing but TLS: https://
only (plain http:// only to this machine: localhost, 127.0.0.0/8, ::1), no redirect to anything
else, at most MAX_KEYS_BYTES of answer, and ``timeout`` seconds for the whole answer (checked
between reads, each read itself bounded by the socket's ``timeout``).
"""
from __future__ import annotations

import ipaddress
import os
import re
import time
import urllib.parse
import urllib.request

from .errors import DevctlError
from .keys import SSH_KEY_RE

DEFAULT_KEYS_URL = "https://github.com/{user}.keys"
# GitHub's answer for an account with many keys is a few KiB.
MAX_KEYS_BYTES = 256 * 1024
# GitHub's username rules: alphanumerics and single hyphens, at most 39 characters.
GITHUB_USER_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9]|-(?=[A-Za-z0-9])){0,38}$")


def keys_url(user: str, config: dict | None = None) -> str:
    template = os.environ.get("DEVCTL_GITHUB_KEYS_URL") or (config or {}).get("github-keys-url") or DEFAULT_KEYS_URL
    if "{user}" not in template:
        raise DevctlError(f"the GitHub keys URL {template!r} has no {{user}} placeholder")
    return template.replace("{user}", user)


def _loopback(host: str | None) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host or "").is_loopback
    except ValueError:
        return False


def url_problem(url: str) -> str | None:
    """Why the keys may not come from ``url`` (None: https://, or http:// to this machine)."""
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname
    except ValueError:
        return "not a URL"
    if parts.scheme == "https" and host:
        return None
    if parts.scheme == "http" and _loopback(host):
        return None
    return "SSH keys are fetched over https:// only (http:// only from localhost)"


class _Redirects(urllib.request.HTTPRedirectHandler):
    """Follows a redirect only to a URL url_problem accepts."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        problem = url_problem(newurl)
        if problem:
            raise DevctlError(f"{req.full_url} redirects to {newurl}: refused, {problem}")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _read(response, url: str, deadline: float, timeout: float) -> bytes:
    """The body, at most MAX_KEYS_BYTES, read before ``deadline``."""
    length = response.headers.get("Content-Length")
    if length and length.isdigit() and int(length) > MAX_KEYS_BYTES:
        raise DevctlError(f"{url} answers {int(length)} bytes, more than the {MAX_KEYS_BYTES} an SSH key list may be")
    body = bytearray()
    read = getattr(response, "read1", response.read)  # what has arrived: a slow sender cannot hold a read
    while True:
        chunk = read(8192)
        if not chunk:
            return bytes(body)
        body += chunk
        if len(body) > MAX_KEYS_BYTES:
            raise DevctlError(f"{url} answers more than the {MAX_KEYS_BYTES} bytes an SSH key list may be")
        if time.monotonic() > deadline:
            raise DevctlError(f"{url} took more than {timeout:g}s to answer")


def fetch_keys(user: str, config: dict | None = None, timeout: float = 20.0) -> list[str]:
    """The account's public keys (OpenSSH lines, as the CRDs accept them), or a one-line error."""
    import urllib.error

    if not GITHUB_USER_RE.match(user or ""):
        raise DevctlError(f"{user!r} is not a GitHub user name")
    url = keys_url(user, config)
    problem = url_problem(url)
    if problem:
        raise DevctlError(f"cannot fetch the SSH keys of GitHub user {user!r} from {url}: {problem}")
    opener = urllib.request.build_opener(_Redirects)
    deadline = time.monotonic() + timeout
    try:
        with opener.open(urllib.request.Request(url, headers={"Accept": "text/plain"}), timeout=timeout) as response:
            text = _read(response, url, deadline, timeout).decode("utf-8", "replace")
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
