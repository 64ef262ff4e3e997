"""Table-driven tests of plugins/module_utils/quantity.py."""

from decimal import Decimal

import pytest

from ansible_collections.torchdev.operator.plugins.module_utils import quantity



@pytest.mark.parametrize("value,expected", [
    ("1Gi", Decimal(2 ** 30)), ("500m", Decimal("0.5")), (8, Decimal(8)), ("1.5", Decimal("1.5")),
    ("1e3", Decimal(1000)), ("2k", Decimal(2000)), ("100Mi", Decimal(100 * 2 ** 20)), ("0.5Gi", Decimal(2 ** 29)),
])
def test_parse_quantity(value, expected):
    assert quantity.parse_quantity(value) == expected


@pytest.mark.parametrize("bad", ["", "abc", "1GB", "1 Gi", None, True, "--1"])
def test_parse_quantity_rejects(bad):
    with pytest.raises(ValueError):
        quantity.parse_quantity(bad)


@pytest.mark.parametrize("a,b,cmp", [("1Gi", "1024Mi", 0), ("1", "1000m", 0), ("200Gi", "100Gi", 1), (1, "2", -1)])
def test_quantity_cmp(a, b, cmp):
    assert quantity.quantity_cmp(a, b) == cmp
