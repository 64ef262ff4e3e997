"""Output helpers: kubectl-like tables, JSON/YAML, ages, progress lines.

Machine output (json/yaml/tables) goes to stdout without colour; progress and
warnings go to stderr. ``tabulate`` and ``yaml`` are imported lazily.
"""
from __future__ import annotations

import json
import re
import sys
from datetime import datetime, timezone
from typing import Any, Iterable, Sequence

import click

OUTPUT_FORMATS = ("table", "json", "yaml")
# What kubectl get offers for lists: wide (more columns), name (<resource>.<group>/<name>)
LIST_FORMATS = ("table", "wide", "name", "json", "yaml")


def output_option(*, default: str = "table", formats: Sequence[str] = OUTPUT_FORMATS):
    """The ``-o/--output`` option shared by every command that prints objects."""
    extra = "".join(text for fmt, text in ((
        "wide", "; wide adds columns"), ("name", "; name prints RESOURCE/NAME lines")) if fmt in formats)
    return click.option(
        "-o", "--output", "output",
        type=click.Choice(list(formats), case_sensitive=False),
        default=default, show_default=True,
        help=f"Output format (json/yaml print the API objects{extra}).",
    )


def selector_option(what: str = "objects"):
    """``-l/--selector``: a label selector sent to the API server as kubectl sends it."""
    return click.option(
        "-l", "--selector", metavar="SELECTOR",
        help=f"Only the {what} with these labels (kubectl's syntax: a=b,c!=d, 'e in (f,g)', h, !i).",
    )


def print_objects(items: list[dict], fmt: str, resource: str) -> bool:
    """Print a list of objects as json/yaml (a v1 List) or names (``-o name``); False when
    ``fmt`` is a table format (table, wide) that the caller prints."""
    if fmt == "name":
        for obj in items:
            click.echo(f"{resource}/{obj['metadata']['name']}")
        return True
    if fmt in ("json", "yaml"):
        print_object(as_list(items), fmt)
        return True
    return False


# -- time --------------------------------------------------------------------

def now() -> datetime:
    return datetime.now(timezone.utc)


def parse_time(value: Any) -> datetime | None:
    """An RFC3339 timestamp (``Z``, offsets, fractions) or a datetime, in UTC; None for anything
    else: the operator's one parser (module_utils/lifecycle.py ``time_or_none``)."""
    from ansible_collections.torchdev.operator.plugins.module_utils.lifecycle import time_or_none  # lazy

    return time_or_none(value)


def human_duration(seconds: float) -> str:
    """kubectl's HumanDuration (k8s.io/apimachinery/pkg/util/duration)."""
    s = int(seconds)
    if s < 0:
        return "0s"  # clock skew: kubectl shows a small value, never negative
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        rest = s % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d{rest}h" if rest else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    years = hours // (24 * 365)
    if years < 8:
        days = (hours // 24) % 365
        return f"{years}y{days}d" if days else f"{years}y"
    return f"{years}y"


def age(timestamp: Any, reference: datetime | None = None) -> str:
    """AGE column value for a timestamp; ``<unknown>`` like kubectl when missing."""
    t = parse_time(timestamp)
    if t is None:
        return "<unknown>"
    return human_duration(((reference or now()) - t).total_seconds())


_BARE_SECONDS = re.compile(r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)\Z")


def parse_duration(text: str | int | float) -> float:
    """``90``, ``1.5``, ``90s``, ``5m``, ``1h30m``, ``1.5h``, ``2d`` -> seconds: Go's duration
    grammar as module_utils/durations.py reads it (the operator's one implementation: ``.5s``,
    ``5.m``, a sign), with the unit ``d`` and a bare number taken as seconds."""
    from ansible_collections.torchdev.operator.plugins.module_utils import durations

    if isinstance(text, (int, float)):
        return float(text)
    raw = str(text).strip()
    if _BARE_SECONDS.match(raw):
        return float(raw)
    try:
        return float(durations.seconds(raw, days=True))
    except ValueError:
        raise ValueError(f"invalid duration {text!r} (use e.g. 90, 90s, 5m, 1h30m, 2d)") from None


class DurationType(click.ParamType):
    """A click parameter for durations (parse_duration: 90, 90s, 5m, 1h30m, 2d); returns seconds,
    a float, or a whole number with ``whole`` (rounded up: a deadline is never shortened), within
    [``minimum``, ``maximum``] seconds (NaN, infinities and negatives refused)."""

    name = "duration"

    def __init__(self, minimum: float = 0, maximum: float | None = None, whole: bool = False):
        self.minimum, self.maximum, self.whole = minimum, maximum, whole

    def convert(self, value, param, ctx):
        try:
            seconds = parse_duration(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        if seconds != seconds or seconds in (float("inf"), float("-inf")):
            self.fail(f"invalid duration {value!r} (use e.g. 90, 90s, 5m, 1h30m, 2d)", param, ctx)
        if seconds < self.minimum or (self.maximum is not None and seconds > self.maximum):
            bounds = f"between {human_duration(self.minimum) if self.minimum else '0'} and " \
                     f"{human_duration(self.maximum)}" if self.maximum is not None else \
                     f"at least {human_duration(self.minimum) if self.minimum else '0'}"
            self.fail(f"{value!r} is out of range: must be {bounds}", param, ctx)
        if self.whole:
            return int(-(-seconds // 1))
        return seconds


DURATION = DurationType()


# -- printing ----------------------------------------------------------------

def dump_json(obj: Any) -> str:
    return json.dumps(obj, indent=2, sort_keys=False, default=str)


def dump_yaml(obj: Any) -> str:
    import yaml  # lazy

    return yaml.safe_dump(obj, sort_keys=False, default_flow_style=False)


def print_object(obj: Any, fmt: str) -> None:
    """Print an object (or a List) as json or yaml on stdout."""
    if fmt == "json":
        click.echo(dump_json(obj))
    elif fmt == "yaml":
        click.echo(dump_yaml(obj), nl=False)
    else:  # pragma: no cover - callers handle table themselves
        raise ValueError(fmt)


def as_list(items: Iterable[dict]) -> dict:
    """Wrap objects in a ``v1/List`` like ``kubectl get -o json`` does."""
    return {"apiVersion": "v1", "kind": "List", "items": list(items), "metadata": {"resourceVersion": ""}}


def format_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A kubectl-like table: uppercase headers, no borders, 3-space gaps, left aligned."""
    import tabulate as tab  # lazy

    fmt = tab.TableFormat(
        lineabove=None, linebelowheader=None, linebetweenrows=None, linebelow=None,
        headerrow=tab.DataRow("", "   ", ""), datarow=tab.DataRow("", "   ", ""),
        padding=0, with_header_hide=None,
    )
    rows = [["" if v is None else str(v) for v in row] for row in rows]
    saved = tab.MIN_PADDING
    tab.MIN_PADDING = 0
    try:
        text = tab.tabulate(rows, headers=[h.upper() for h in headers], tablefmt=fmt,
                            disable_numparse=True, stralign="left")
    finally:
        tab.MIN_PADDING = saved
    return "\n".join(line.rstrip() for line in text.splitlines())


def print_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], *, empty: str | None = None) -> None:
    rows = list(rows)
    if not rows and empty:
        click.echo(empty, err=True)
        return
    click.echo(format_table(headers, rows))


_BINARY_UNITS = ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei")


def human_size(value: Any) -> str:
    """A memory or storage quantity in binary units, as people read them: 34359738368 -> 32Gi,
    1536Mi -> 1.5Gi, 2Ti -> 2Ti (one decimal at most); what is not a quantity, as it is."""
    from ansible_collections.torchdev.operator.plugins.module_utils.quantity import parse_quantity  # lazy

    try:
        amount = parse_quantity(value)
    except (ValueError, ArithmeticError):
        return str(value)
    if amount < 1024:
        return f"{amount.normalize():f}"
    unit = ""
    for unit in _BINARY_UNITS:
        amount /= 1024
        if amount < 1024:
            break
    text = f"{amount:.1f}".removesuffix(".0")
    return text + unit


def truncate(text: Any, width: int) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= width else text[: max(width - 3, 0)] + "..."


def warn(message: str) -> None:
    click.echo(f"warning: {message}", err=True)


def info(message: str) -> None:
    """Human progress/information line (stderr, so stdout stays machine-readable)."""
    click.echo(message, err=True)


def stderr_is_tty() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def stdin_is_tty() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (AttributeError, ValueError):
        return False
