"""Kubernetes resource quantities ("100m", "64Gi", "1e3") as exact Decimals: kubesim's one
quantity parser (the scheduler, the storage and Kueue controllers, the nodes file and the CEL
``quantity`` library of kubesim/validation.py).

The grammar is apimachinery's ``resource.Quantity`` (pkg/api/resource/quantity.go, its
``parseQuantityString`` and suffixer)::

    <quantity>        ::= <signedNumber><suffix>
    <signedNumber>    ::= <number> | <sign><number>
    <sign>            ::= "+" | "-"
    <number>          ::= <digits> | <digits>.<digits> | <digits>. | .<digits>
    <suffix>          ::= <binarySI> | <decimalExponent> | <decimalSI>
    <binarySI>        ::= Ki | Mi | Gi | Ti | Pi | Ei
    <decimalSI>       ::= n | u | m | "" | k | M | G | T | P | E
    <decimalExponent> ::= "e" <sign?><digits> | "E" <sign?><digits>

(the parser's decimal suffixes include n and u, which quantity.go's comment leaves out). No
whitespace. Values stay exact: apimachinery would round a non-zero value up to 1n and cap
BinarySI values at 2^63-1; kubesim does neither. kubesim keeps this parser rather than the
operator's plugins/module_utils/quantity.py: it stands in for kube-apiserver and imports
nothing of the operator (docs/architecture.md).
"""
from __future__ import annotations

import re
from decimal import Decimal
from typing import Any, Mapping

__all__ = ["parse_quantity", "parse_resources", "format_quantity", "add_resources"]

_GRAMMAR = re.compile(r"(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
                      r"(?:(?P<suffix>[KMGTPE]i|[numkMGTPE])|[eE](?P<exponent>[+-]?[0-9]+))?")
_BINARY_SI = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_SI = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
# apimachinery's ErrFormatWrong
FORMAT_ERROR = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"


def parse_quantity(value: Any, *, signed: bool = False) -> Decimal:
    """'100m' -> Decimal('0.1'), '64Gi' -> 68719476736, 4 -> 4. ValueError when invalid, and
    when negative unless ``signed`` (a resource amount is never negative; CEL's quantity() is)."""
    if isinstance(value, bool) or value is None:
        raise ValueError(f"invalid quantity {value!r}: {FORMAT_ERROR}")
    if isinstance(value, (int, Decimal)):
        q = Decimal(value)
    elif isinstance(value, float):
        q = Decimal(repr(value))  # as the JSON number reads
    else:
        m = _GRAMMAR.fullmatch(value) if isinstance(value, str) else None
        if not m:
            raise ValueError(f"invalid quantity {value!r}: {FORMAT_ERROR}")
        q = Decimal(m["number"])
        try:
            if m["suffix"] in _BINARY_SI:
                q *= 2 ** _BINARY_SI[m["suffix"]]
            elif m["suffix"] or m["exponent"]:
                q = q.scaleb(_DECIMAL_SI[m["suffix"]] if m["suffix"] else int(m["exponent"]))
        except ArithmeticError:  # decimal's Overflow / InvalidOperation: an exponent out of range
            raise ValueError(f"invalid quantity {value!r}: out of range") from None
    if not q.is_finite():
        raise ValueError(f"invalid quantity: {value!r}")
    if q < 0 and not signed:
        raise ValueError(f"invalid quantity {value!r}: must not be negative")
    return q


def parse_resources(resources: Mapping[str, Any] | None) -> dict[str, Decimal]:
    """A ResourceList ({"cpu": "500m", ...}) as Decimals."""
    return {k: parse_quantity(v) for k, v in (resources or {}).items()}


def add_resources(a: Mapping[str, Decimal], b: Mapping[str, Decimal]) -> dict[str, Decimal]:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, Decimal(0)) + v
    return out


_BINARY = (("Ei", 2 ** 60), ("Pi", 2 ** 50), ("Ti", 2 ** 40), ("Gi", 2 ** 30), ("Mi", 2 ** 20),
           ("Ki", 2 ** 10))


def format_quantity(q: Decimal, resource: str = "") -> str:
    """A compact string form: integral binary multiples as Gi/Mi/..., cpu fractions in m."""
    q = Decimal(q)
    if q == q.to_integral_value():
        n = int(q)
        if resource != "cpu" and n:
            for suffix, mult in _BINARY:
                if n % mult == 0:
                    return f"{n // mult}{suffix}"
        return str(n)
    milli = q * 1000
    if milli == milli.to_integral_value():
        return f"{int(milli)}m"
    return format(q.normalize(), "f")
