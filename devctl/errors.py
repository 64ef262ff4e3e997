"""devctl errors: one line on stderr, exit 1 (API/runtime) or 2 (usage).

This module must not import kubernetes (``devctl --help`` never loads it).
"""
from __future__ import annotations

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
