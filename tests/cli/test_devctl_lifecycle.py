"""devctl's lifecycle commands offline: the flavor `reserve` picks and the hours it books (the
commands against a cluster are exercised end to end in tests/e2e/test_lifecycle_e2e.py)."""
from __future__ import annotations

import click
import pytest

from devctl.errors import DevctlError
from devctl.devserver import hours_to_duration, pick_flavor


def flavor(name, gpus, price=None):
    spec = {"resources": {"limits": {"nvidia.com/gpu": gpus}} if gpus else {"requests": {"cpu": "2"}}}
    if gpus:
        spec["gpu"] = {"count": gpus, "type": "A10G"}
    if price is not None:
        spec["pricePerHour"] = price
    return {"metadata": {"name": name}, "spec": spec}


FLAVORS = [flavor("cpu", 0, "0.10"), flavor("a10g-1", 1, "1.21"), flavor("l4-1", 1, "0.98"),
           flavor("h100-8", 8, "98.32"), flavor("h100-8-spot", 8), flavor("h100-2", 2, "24.00")]


@pytest.mark.parametrize("gpus, replicas, expected", [
    (1, 1, "l4-1"),          # the cheapest of the 1-GPU flavors
    (0, 1, "cpu"),
    (8, 1, "h100-8"),        # a flavor without a price comes last
    (16, 2, "h100-8"),       # 8 per pod
    (4, 2, "h100-2"),
])
def test_reserve_picks_the_cheapest_flavor_that_fits(gpus, replicas, expected):
    assert pick_flavor(FLAVORS, gpus, replicas)["metadata"]["name"] == expected


def test_reserve_says_which_gpu_counts_exist():
    with pytest.raises(DevctlError, match=r"no flavor has 3 GPU\(s\) per pod \(flavors offer \[0, 1, 2, 8\]"):
        pick_flavor(FLAVORS, 3, 1)
    with pytest.raises(click.BadParameter, match="do not split evenly"):
        pick_flavor(FLAVORS, 5, 2)


@pytest.mark.parametrize("hours, duration", [(4, "4h"), (1.5, "1h30m"), (0.25, "15m"), (24, "24h")])
def test_hours_to_duration(hours, duration):
    assert hours_to_duration(hours) == duration
