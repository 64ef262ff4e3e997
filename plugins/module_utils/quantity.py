# -*- coding: utf-8 -*-
# Apache-2.0
"""Kubernetes quantities: parse, compare, normalise, scale (the one implementation the roles,
the modules and devctl use)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
from decimal import Decimal, InvalidOperation

_QUANTITY_RE = re.compile(
    r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"((?:[KMGTPE]i)|[numkMGTPE]|(?:[eE][+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)))?$"
)
_BINARY = {"Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50, "Ei": 2 ** 60}
_DECIMAL = {
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
    "P": Decimal("1e15"), "E": Decimal("1e18"),
}


# --------------------------------------------------------------------------- quantities
def parse_quantity(value):
    """Return the Decimal value of a Kubernetes quantity (int, float or string)."""
    if isinstance(value, bool) or value is None:
        raise ValueError("invalid quantity: %r" % (value,))
    if isinstance(value, (int, float)):
        return Decimal(str(value))
    match = _QUANTITY_RE.match(str(value).strip())
    if not match:
        raise ValueError("invalid quantity: %r" % (value,))
    number, suffix = match.group(1), match.group(2) or ""
    try:
        base = Decimal(number)
    except InvalidOperation:  # pragma: no cover - the regex already checked it
        raise ValueError("invalid quantity: %r" % (value,))
    if suffix in _BINARY:
        return base * _BINARY[suffix]
    if suffix in _DECIMAL:
        return base * _DECIMAL[suffix]
    return base * (Decimal(10) ** Decimal(suffix[1:]))


def quantity(value):
    """Normalise a quantity for a manifest: always a string, validated."""
    parse_quantity(value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value).strip()


def quantity_cmp(left, right):
    """-1, 0 or 1 comparing two quantities by value."""
    a, b = parse_quantity(left), parse_quantity(right)
    return (a > b) - (a < b)


def is_quantity(value):
    try:
        parse_quantity(value)
    except ValueError:
        return False
    return True


_SUFFIX_RE = re.compile(r"^([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(.*)$")


def scale(value, factor):
    """``value`` (a quantity) times an integer, keeping its suffix: 20Gi x 3 = 60Gi."""
    if isinstance(factor, bool) or not isinstance(factor, int):
        raise ValueError("a quantity scales by a whole number, not %r" % (factor,))
    if factor == 0:
        return "0"
    match = _SUFFIX_RE.match(quantity(value))
    if not match:
        raise ValueError("cannot scale the quantity %r" % (value,))
    number, suffix = match.group(1), match.group(2)
    product = parse_quantity(number) * factor
    text = format(product.normalize(), "f") if product != product.to_integral_value() else str(int(product))
    return text + suffix
