"""Table-driven tests of plugins/module_utils/durations.py, the one duration parser: what each
caller accepts (requeue_after's period, the lifecycle's durations, the usage retention)."""

import pytest

from ansible_collections.torchdev.operator.plugins.module_utils import durations, lifecycle, usage

NO = ValueError
# value: check_period (requeue_after: Go's time.ParseDuration), parse_duration (lifecycle,
# whole seconds), parse_retention (usage records: days and bare seconds too, more than 0s)
TABLE = [
    ("5s", "5s", 5, 5),
    (" 1m30s ", "1m30s", 90, 90),
    ("1h2m3s", "1h2m3s", 3723, 3723),
    ("4h", "4h", 14400, 14400),
    ("2m", "2m", 120, 120),
    ("1h0m5s", "1h0m5s", 3605, 3605),
    ("1.5h", "1.5h", 5400, 5400),
    ("30m1h", "30m1h", 5400, 5400),  # Go takes terms in any order
    ("250ms", "250ms", 0, NO),
    ("1500ms", "1500ms", 1, 1),
    ("10us", "10us", 0, NO),
    ("10µs", "10µs", 0, NO),
    ("10ns", "10ns", 0, NO),
    ("0s", "0s", 0, NO),
    ("90d", NO, NO, 90 * 86400),
    ("2160h", "2160h", 2160 * 3600, 2160 * 3600),
    ("1d12h", NO, NO, 36 * 3600),
    ("45", NO, NO, 45),
    (3600, NO, 3600, 3600),
    (90.7, NO, 90, 90),
    (-5, NO, NO, NO),                   # a lifecycle duration is never negative
    (0, "0", 0, NO),
    ("", "", NO, NO),
    (None, "", NO, NO),
    ("soon", NO, NO, NO),
    ("h", NO, NO, NO),
    ("5 s", NO, NO, NO),
    ("4 h", NO, NO, NO),
    ("90 d", NO, NO, NO),
    ("-1s", "-1s", NO, NO),             # Go reads a sign (tests/test_duration_grammar.py)
    ("-1d", NO, NO, NO),
    ("+1s", "+1s", 1, 1),
    ("1w", NO, NO, NO),
    ("1.h", "1.h", 3600, 3600),         # Go: digits on one side of the point suffice
    (".5h", ".5h", 1800, 1800),
    ("0", "0", 0, NO),
    ("1H", NO, NO, NO),
    (True, NO, NO, NO),
    (float("inf"), NO, NO, NO),
]


def _check(function, value, expected, match):
    if expected is NO:
        with pytest.raises(ValueError, match=match):
            function(value)
    else:
        assert function(value) == expected


@pytest.mark.parametrize("value,period,duration,retention", TABLE)
def test_each_caller(value, period, duration, retention):
    _check(durations.check_period, value, period, "Go duration")
    _check(durations.parse_duration, value, duration, "duration")
    _check(durations.parse_retention, value, retention, "retention")


def test_the_callers_use_this_implementation():
    assert lifecycle.parse_duration is durations.parse_duration
    assert lifecycle.format_duration is durations.format_duration
    assert usage.parse_retention is durations.parse_retention


@pytest.mark.parametrize("seconds, text", [(0, "0s"), (5400, "1h30m"), (90, "1m30s"), (-5, "0s"), (86400, "24h")])
def test_format_duration(seconds, text):
    assert durations.format_duration(seconds) == text
    assert durations.parse_duration(text) == max(seconds, 0)
