"""devctl errors: one line on stderr, exit 1 (API/runtime) or 2 (usage).

This module must not import kubernetes (``devctl --help`` never loads it).
"""
from __future__ import annotations

import re
from contextlib import contextmanager
from typing import Iterator

import click


def one_line(text: object) -> str:
    """Collapse any message to one line (API messages may contain newlines)."""
    return " ".join(str(text).split())


class DevctlError(click.ClickException):
    """A user-facing error: printed as ``error: <message>`` on stderr, exit 1."""

    exit_code = 1

    def __init__(self, message: str, exit_code: int | None = None):
        super().__init__(one_line(message))
        if exit_code is not None:
            self.exit_code = exit_code

    def show(self, file=None) -> None:  # noqa: D102 - click API
        click.echo(f"error: {self.format_message()}", err=True)


class ApiError(DevctlError):
    """An error answered by (or reaching) the Kubernetes API."""

    def __init__(self, message: str, status: int | None = None, reason: str | None = None):
        super().__init__(message)
        self.status = status
        self.reason = reason


class NotFound(ApiError):
    def __init__(self, kind: str, name: str, namespace: str | None = None):
        where = f' in namespace "{namespace}"' if namespace else ""
        super().__init__(f'{kind} "{name}" not found{where}', status=404, reason="NotFound")
        self.kind = kind
        self.name = name
        self.namespace = namespace


# A missing namespace as a Status message says it (not_found_message; also in details.kind).
_NS_MISSING = re.compile(r'^namespaces "([^"]+)" not found$')


def not_found_message(message: str, details: dict, kind: str, name: str | None, namespace: str | None,
                      resource: str, namespace_origin: str | None = None, torchdev: bool = True) -> str | None:
    """The one-line error for a 404 that is not about the object ``name`` itself (None: it is;
    the caller says '<kind> "<name>" not found'): what is missing and what to do.  ``message`` and
    ``details`` are the Status body's; ``namespace_origin`` says where the namespace came from
    (Settings.namespace_origin), ``torchdev`` whether ``resource`` is one of torchdev's CRDs."""
    details = details if isinstance(details, dict) else {}
    missing_ns = _NS_MISSING.match(message or "")
    if kind == "namespace" and name and (details.get("name") == name or missing_ns):
        return None  # the namespace asked for is the object
    if details.get("kind") == "namespaces" or missing_ns:
        ns = details.get("name") or (missing_ns.group(1) if missing_ns else namespace) or namespace
        origin = f" ({namespace_origin})" if namespace_origin and ns == namespace else ""
        return (f'namespace "{ns}" does not exist{origin}: if it should be yours, ask a cluster admin to run '
                f"'devctl admin onboard <user>'; otherwise pass -n NAMESPACE or run 'devctl config set namespace NAMESPACE' "
                f"('devctl whoami' shows your namespace)")
    if name and (details.get("name") == name or f'"{name}" not found' in (message or "")):
        return None
    if details.get("name"):
        return f'{details.get("kind") or "object"} "{details["name"]}" not found' + (
            f' in namespace "{namespace}"' if namespace else "")
    if torchdev:
        return (f"the server has no resource {resource}: the torchdev CRDs are not installed in this cluster "
                f"(a cluster admin runs 'make install' or 'make deploy'; 'kubectl get crd | grep torchdev.io' shows them)")
    return f"the server has no resource {resource} (is the API it belongs to installed in this cluster?)"


@contextmanager
def left_in_place(what: str, hint: str) -> Iterator[None]:
    """A failure inside says that ``what`` (made before it) is left in place, and ``hint`` how to
    use or remove it: a command that fails half-way never leaves objects behind unannounced."""
    try:
        yield
    except DevctlError as exc:
        raise DevctlError(f"{exc.format_message()}; {what} is left in place ({hint})", exc.exit_code) from None
    except (click.Abort, KeyboardInterrupt):
        raise DevctlError(f"aborted; {what} is left in place ({hint})") from None
