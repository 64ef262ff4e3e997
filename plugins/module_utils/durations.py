# -*- coding: utf-8 -*-
# Apache-2.0
"""Durations, the one implementation: Go's duration strings (``5s``, ``1m30s``, ``1.5h``,
``250ms``) as ansible-operator's requeue_after reads them, the lifecycle's durations
(``4h``, ``1h30m``, ``90s`` or a number of seconds) and the usage records' retentions,
which add days (``90d``, ``1d12h``) and a bare count of seconds (``"45"``).

A duration is one or more ``<number><unit>`` terms, as Go's time.ParseDuration reads them
(units ns, us, µs, ms, s, m, h; a number may have a fraction; no sign, no spaces), with the
unit ``d`` (24h) where ``days`` is allowed and a string of digits (seconds) where ``bare`` is.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
from decimal import Decimal

GO_UNITS = ("ns", "us", "µs", "ms", "s", "m", "h")
_UNIT_SECONDS = {
    "ns": Decimal("1e-9"), "us": Decimal("1e-6"), "µs": Decimal("1e-6"), "ms": Decimal("1e-3"),
    "s": Decimal(1), "m": Decimal(60), "h": Decimal(3600), "d": Decimal(86400),
}
_TERM = r"([0-9]+(?:\.[0-9]+)?)(ns|us|µs|ms|s|m|h|d)"
_TERMS = re.compile("(?:%s)+" % _TERM)


def seconds(value, days=False, bare=False):
    """Decimal seconds of a duration: a number (int or float, taken as seconds) or a string of
    ``<number><unit>`` terms (Go's units; ``d`` too when ``days``; digits alone when ``bare``).
    Surrounding spaces are ignored. ValueError when it is none of these."""
    if isinstance(value, bool) or value is None:
        raise ValueError("not a duration: %r" % (value,))
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError("not a duration: %r" % (value,))
        return Decimal(repr(value))
    text = str(value).strip()
    if bare and text.isdigit():
        return Decimal(text)
    if not _TERMS.fullmatch(text):
        raise ValueError("not a duration: %r" % (value,))
    terms = re.findall(_TERM, text)
    if not days and any(unit == "d" for _, unit in terms):
        raise ValueError("not a duration (no days): %r" % (value,))
    return sum((Decimal(number) * _UNIT_SECONDS[unit] for number, unit in terms), Decimal(0))


def check_period(period):
    """The period as a Go duration string ('' requeues nothing); ValueError otherwise."""
    period = "" if period is None else str(period).strip()
    if period:
        try:
            seconds(period)
        except ValueError:
            raise ValueError("period must be a Go duration such as 5s or 1m30s, got %r" % period)
    return period


def parse_duration(value):
    """Whole seconds of a lifecycle duration such as "4h", "1h30m", "90s" (any Go duration) or a
    number of seconds."""
    try:
        return int(seconds(value))
    except ValueError:
        raise ValueError("%r is not a duration such as 4h, 1h30m or 90s" % (value,))


def format_duration(seconds_):
    """"1h30m" for 5400; "0s" for 0; negative durations are 0s."""
    total = max(0, int(seconds_))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    text = ("%dh" % hours if hours else "") + ("%dm" % minutes if minutes else "") + ("%ds" % secs if secs else "")
    return text or "0s"


def parse_retention(value):
    """Whole seconds, more than 0, of a retention such as "90d", "2160h", "1d12h", "120s" or a
    number of seconds ("45", 45)."""
    try:
        result = int(seconds(value, days=True, bare=True))
    except ValueError:
        raise ValueError("%r is not a retention such as 90d, 2160h or 120s" % (value,))
    if result <= 0:
        raise ValueError("a retention must be longer than 0s, got %r" % (value,))
    return result
