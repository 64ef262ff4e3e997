"""Table-driven tests of plugins/module_utils/durations.py (requeue_after's period)."""

import pytest

from ansible_collections.torchdev.operator.plugins.module_utils import durations


@pytest.mark.parametrize("period,expected", [("5s", "5s"), (" 1m30s ", "1m30s"), ("", ""), (None, ""),
                                             ("250ms", "250ms"), ("1h2m3s", "1h2m3s")])
def test_check_period(period, expected):
    assert durations.check_period(period) == expected


@pytest.mark.parametrize("period", ["5", "soon", "5 s", "-1s", "1d"])
def test_check_period_rejects(period):
    with pytest.raises(ValueError, match="Go duration"):
        durations.check_period(period)
