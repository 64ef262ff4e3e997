"""Kubernetes resource quantities ("100m", "64Gi", "1e3") as exact Decimals.

Parsing is `kubernetes.utils.parse_quantity` (the client library's port of
apimachinery's resource.Quantity), wrapped to reject what it lets through
(negative values, NaN/inf, bools) and to add a few helpers the scheduler and
the storage controller need.
"""
from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any, Mapping

from kubernetes.utils import parse_quantity as _k8s_parse_quantity

__all__ = ["parse_quantity", "parse_resources", "format_quantity", "add_resources"]


def parse_quantity(value: Any) -> Decimal:
    """'100m' -> Decimal('0.1'), '64Gi' -> 68719476736, 4 -> 4. ValueError when invalid."""
    if isinstance(value, bool) or value is None:
        raise ValueError(f"invalid quantity: {value!r}")
    if isinstance(value, str):
        text = value.strip()
        if not text or text != value or " " in text:
            raise ValueError(f"invalid quantity: {value!r}")
    try:
        q = _k8s_parse_quantity(value)
    except (ValueError, InvalidOperation, TypeError) as exc:
        raise ValueError(f"invalid quantity {value!r}: {exc}") from None
    if not q.is_finite():
        raise ValueError(f"invalid quantity: {value!r}")
    if q < 0:
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
