# -*- coding: utf-8 -*-
# Apache-2.0
"""Durations, the one implementation: Go's duration strings (``5s``, ``1m30s``, ``1.5h``,
``250ms``) as ansible-operator's requeue_after reads them, the lifecycle's durations
(``4h``, ``1h30m``, ``90s`` or a number of seconds) and the usage records' retentions,
which add days (``90d``, ``1d12h``) and a bare count of seconds (``"45"``).

A duration is what Go's time.ParseDuration reads: an optional sign, then ``0`` or one or more
``<number><unit>`` terms (units ns, us, µs, μs, ms, s, m, h; a number may have a fraction with
digits on either side of the point: ``.5s``, ``5.m``; no spaces; check_period holds a period to
Go's bound of 2^63-1 nanoseconds), with the unit ``d`` (24h) where ``days`` is allowed and a
string of digits (seconds) where ``bare`` is.
torchdev_runtime/gotime.py is the same grammar for the local ansible-operator (which may not
import the collection); tests/test_duration_grammar.py runs one table against both and devctl.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
from decimal import Context, Decimal

GO_UNITS = ("ns", "us", "µs", "μs", "ms", "s", "m", "h")
_UNIT_SECONDS = {
    "ns": Decimal("1e-9"), "us": Decimal("1e-6"), "µs": Decimal("1e-6"), "μs": Decimal("1e-6"),
    "ms": Decimal("1e-3"), "s": Decimal(1), "m": Decimal(60), "h": Decimal(3600), "d": Decimal(86400),
}
_NUMBER = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
_TERM = r"(%s)(ns|us|µs|μs|ms|s|m|h|d)" % _NUMBER
_DURATION = re.compile(r"([-+]?)(0|(?:%s)+)\Z" % _TERM)
_MAX_NANOSECONDS = 2 ** 63 - 1  # Go's time.Duration is an int64 of nanoseconds
_EXACT = Context(prec=64)  # 30 digits of days in nanoseconds, unrounded


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
    match = _DURATION.match(text)
    if not match:
        raise ValueError("not a duration: %r" % (value,))
    sign, body = match.group(1), match.group(2)
    terms = [] if body == "0" else re.findall(_TERM, body)
    if not days and any(unit == "d" for _, unit in terms):
        raise ValueError("not a duration (no days): %r" % (value,))
    # Go counts whole nanoseconds, each term truncated (its int64 bound is check_period's: the
    # lifecycle clamps a longer reservation rather than refuse it)
    nanoseconds = 0
    for number, unit in terms:
        if len(number.split(".")[0].lstrip("0")) > 30:  # beyond any clamp, and Decimal's range
            raise ValueError("not a duration (too long): %r" % (value,))
        nanoseconds += int(Decimal(number) * _UNIT_SECONDS[unit] * 1000000000)
    result = Decimal(nanoseconds).scaleb(-9, _EXACT)
    return -result if sign == "-" else result


def check_period(period):
    """The period as a Go duration string ('' requeues nothing); ValueError otherwise."""
    period = "" if period is None else str(period).strip()
    if period:
        try:
            nanoseconds = seconds(period) * 1000000000
        except ValueError:
            nanoseconds = None
        if nanoseconds is None or not -_MAX_NANOSECONDS - 1 <= nanoseconds <= _MAX_NANOSECONDS:
            raise ValueError("period must be a Go duration such as 5s or 1m30s, got %r" % period)
    return period


def parse_duration(value):
    """Whole seconds, 0 or more, of a lifecycle duration such as "4h", "1h30m", "90s" (any Go
    duration that is not negative) or a number of seconds."""
    try:
        result = seconds(value)
    except ValueError:
        result = -1
    if result < 0:
        raise ValueError("%r is not a duration such as 4h, 1h30m or 90s" % (value,))
    return int(result)


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
