"""One duration grammar (issue 28.6): Go's time.ParseDuration, read by the local ansible-operator
(torchdev_runtime/gotime.py, which may not import the collection), by the collection
(plugins/module_utils/durations.py: requeue periods, lifecycle durations, retentions) and by
devctl's flags (devctl/output.py, through module_utils, plus days and a bare number of seconds).
One table, each parser held to it. GO is what Go 1.26's time.ParseDuration answers (seconds, or
NO for its error)."""
from __future__ import annotations

import click
import pytest

from ansible_collections.torchdev.operator.plugins.module_utils import durations
from devctl.output import DurationType, parse_duration as devctl_duration
from torchdev_runtime.gotime import DurationError, parse_duration as go_duration

NO = None
SAME = object()  # devctl answers as Go does
# Beyond Go's int64 of nanoseconds (~292 years) Go and check_period (a requeue period for Go)
# refuse; module_utils' seconds() and the lifecycle read it (the lifecycle clamps a reservation
# to year 9999: tests/module_utils/test_lifecycle.py), and devctl's flags bound it themselves.
LONGER_THAN_GO = {"2562048h", "99999999999999999999s"}
# value, Go's time.ParseDuration, devctl's flags (SAME, or its own answer: days, bare seconds)
TABLE = [
    ("0", 0, SAME),
    ("-0", 0, SAME),
    ("+0", 0, SAME),
    ("0s", 0, SAME),
    (".5s", 0.5, SAME),
    ("5.m", 300, SAME),
    ("5.5m", 330, SAME),
    ("-1.5h", -5400, SAME),            # negative: parsed; DurationType's bounds refuse it (below)
    ("+3m", 180, SAME),
    ("1h30m", 5400, SAME),
    ("30m1h", 5400, SAME),             # terms in any order
    ("1h0m5s", 3605, SAME),
    ("300ms", 0.3, SAME),
    ("1.5ns", 1e-9, SAME),             # whole nanoseconds, truncated
    ("1us", 1e-6, SAME),
    ("1\u00b5s", 1e-6, SAME),          # micro sign
    ("1\u03bcs", 1e-6, SAME),          # Greek mu
    ("2562047h", 2562047 * 3600, SAME),
    ("2562048h", NO, 2562048 * 3600),  # more than an int64 of nanoseconds: see LONGER_THAN_GO
    ("99999999999999999999s", NO, 99999999999999999999),
    ("1" + "0" * 31 + "s", NO, NO),    # no parser reads 31 digits
    ("-0.5s", -0.5, SAME),
    ("5", NO, 5),                      # Go: missing unit; devctl: seconds
    ("1.5", NO, 1.5),
    (".5", NO, 0.5),
    ("-5", NO, -5),
    ("2d", NO, 172800),                # days: devctl (and retentions) only
    ("1d12h", NO, 129600),
    (".", NO, NO),
    ("-.s", NO, NO),
    (".s", NO, NO),
    ("s", NO, NO),
    ("", NO, NO),
    ("-", NO, NO),
    ("--1s", NO, NO),
    ("1h-5m", NO, NO),
    ("1.5.h", NO, NO),
    ("1.s.2", NO, NO),
    ("1h1", NO, NO),
    ("1H", NO, NO),
    ("1x", NO, NO),
    ("5 s", NO, NO),
    ("1e3s", NO, NO),
    ("1_000s", NO, NO),
    ("nan", NO, NO),
    ("inf", NO, NO),
    ("0x10s", NO, NO),
    ("\uff15s", NO, NO),               # a full-width digit
]


def _answer(function, value, errors=(ValueError,)):
    try:
        return float(function(value))
    except errors:
        return NO


@pytest.mark.parametrize("value, go, devctl", TABLE)
def test_each_parser_reads_go_durations_alike(value, go, devctl):
    expected = None if go is NO else pytest.approx(go, abs=1e-12)
    # the local ansible-operator: DurationError (a ValueError) is its only answer to a bad value
    assert _answer(go_duration, value, DurationError) == expected
    # the collection: check_period (requeue_after's period) reads what Go reads; seconds() too,
    # longer than Go's bound included, and the lifecycle any of them that is not negative
    if value == "":
        assert durations.check_period(value) == ""  # requeue_after's "no period"
    elif go is NO:
        with pytest.raises(ValueError, match="Go duration"):
            durations.check_period(value)
    else:
        assert durations.check_period(value) == value
    collection = devctl if value in LONGER_THAN_GO else go
    assert _answer(durations.seconds, value) == (None if collection is NO else pytest.approx(collection, abs=1e-12))
    lifecycle = None if collection is NO or collection < 0 else pytest.approx(int(collection))
    assert _answer(durations.parse_duration, value) == lifecycle
    # devctl's flags
    want = expected if devctl is SAME else (None if devctl is NO else pytest.approx(devctl))
    assert _answer(devctl_duration, value) == want


@pytest.mark.parametrize("value, go, devctl", TABLE)
def test_devctl_flags_refuse_what_is_not_a_duration_or_negative(value, go, devctl):
    seconds = go if devctl is SAME else devctl
    param = click.Option(["--idle"])
    if seconds is NO or seconds < 0 or seconds > 10 * 366 * 86400:
        with pytest.raises(click.BadParameter):
            DurationType(maximum=10 * 366 * 86400).convert(value, param, None)
    else:
        assert DurationType(maximum=10 * 366 * 86400).convert(value, param, None) == pytest.approx(seconds)


@pytest.mark.parametrize("value", [None, True, 5, 1.5, ["5s"], {"a": 1}, b"5s", "1h" * 20000,
                                   "9" * 100000 + "h", "0." + "1" * 100000 + "s"])
def test_hostile_values_are_answered_not_raised(value):
    """A parser answers with its own error (never another exception) to any value."""
    for function, errors in ((go_duration, DurationError), (durations.seconds, ValueError),
                             (durations.check_period, ValueError), (durations.parse_duration, ValueError)):
        try:
            function(value)
        except errors:
            pass
