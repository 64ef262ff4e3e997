"""kubesim's one quantity parser (kubesim/quantity.py) against apimachinery's resource.Quantity
grammar: signs, the decimal SI suffixes n u m "" k M G T P E, the binary Ki..Ei, decimal
exponents e/E with an integer; nothing else (no whitespace, no fractional exponent)."""
from __future__ import annotations

from decimal import Decimal

import pytest

from kubesim import validation
from kubesim.quantity import parse_quantity

VALID = [
    ("0", "0"), ("1", "1"), ("007", "7"), ("+1", "1"), ("1.", "1"), (".5", "0.5"), ("1.5", "1.5"),
    # decimal SI
    ("5n", "5e-9"), ("100u", "0.0001"), ("100m", "0.1"), ("1.5m", "0.0015"), ("1k", "1000"), ("3M", "3e6"),
    ("1G", "1e9"), ("1T", "1e12"), ("1P", "1e15"), ("1E", "1e18"),
    # binary SI
    ("1Ki", "1024"), ("1Mi", str(2 ** 20)), ("2Gi", str(2 * 2 ** 30)), ("1.5Gi", str(3 * 2 ** 29)),
    ("1Ti", str(2 ** 40)), ("1Pi", str(2 ** 50)), ("1Ei", str(2 ** 60)),
    # decimal exponents
    ("1e3", "1000"), ("1E3", "1000"), ("1e+3", "1000"), ("2.5E-3", "0.0025"), ("1e0", "1"), (".5e1", "5"),
    # numbers, as a JSON body carries them
    (7, "7"), (0.1, "0.1"), (Decimal("1.25"), "1.25"),
]
NEGATIVE = [("-1", "-1"), ("-.5", "-0.5"), ("-100m", "-0.1"), ("-1Ki", "-1024"), ("-1e-3", "-0.001"), (-2, "-2")]
INVALID = [
    "", " 1", "1 ", "1 Gi", "1\n", "1x", "Gi", "e3", "1.2.3", "--1", "+-1",
    "1ki", "1K", "1Qi", "1mi", "1Ki3", "1Mi2", "1e3k",  # suffixes: case matters, one suffix only
    "1e", "1e1.5", "1ee3", "1e+",  # an exponent is an integer
    "+", "-", ".",  # apimachinery's scanner reads these as 0; the grammar has no empty number
    "NaN", "Infinity", "1_000", "0x10", "1e99999999",
    None, True, [1], {"a": 1},
]


@pytest.mark.parametrize("text,value", VALID + NEGATIVE)
def test_the_grammar(text, value):
    assert parse_quantity(text, signed=True) == Decimal(value)
    assert validation.parse_quantity(text) == Decimal(value)  # CEL's quantity() is the same parser


@pytest.mark.parametrize("text,value", VALID)
def test_resource_amounts(text, value):
    assert parse_quantity(text) == Decimal(value)


@pytest.mark.parametrize("text", [t for t, _ in NEGATIVE])
def test_a_resource_amount_is_never_negative(text):
    with pytest.raises(ValueError, match="must not be negative"):
        parse_quantity(text)


@pytest.mark.parametrize("text", INVALID)
def test_not_a_quantity(text):
    with pytest.raises(ValueError, match="invalid quantity"):
        parse_quantity(text, signed=True)
    with pytest.raises(ValueError):
        validation.parse_quantity(text)


@pytest.mark.parametrize("text,ok", [("100u", True), ("5n", True), ("-1", True), ("1 Gi", False), ("1e1.5", False)])
def test_cel_is_quantity(text, ok):
    assert bool(validation._is_quantity(text)) is ok
