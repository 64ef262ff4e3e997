"""Fault injection for reliability tests.

A rule matches a verb (get, list, watch, create, update, patch, delete,
deletecollection, or "*") and a resource (kubectl-style key such as `pods`,
`statefulsets.apps`, `devservers.torchdev.io/status`, a plural alone, or "*").
It fails the next `count` matching requests, or a `fraction` of them, with
409, 429, 500 or "drop" (the connection is aborted), and/or adds latency.
"""
from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field

CODES = (409, 429, 500, "drop", None)
_ids = itertools.count(1)


@dataclass
class FaultRule:
    verb: str = "*"
    resource: str = "*"
    count: int | None = None
    fraction: float | None = None
    code: int | str | None = 500
    latency_ms: float = 0.0
    id: int = field(default_factory=lambda: next(_ids))
    hits: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.code, str) and self.code.isdigit():
            self.code = int(self.code)
        if self.code not in CODES:
            raise ValueError(f"code must be one of 409, 429, 500, 'drop' or null, not {self.code!r}")
        if self.count is not None and self.fraction is not None:
            raise ValueError("give count or fraction, not both")
        if self.fraction is not None and not 0.0 <= float(self.fraction) <= 1.0:
            raise ValueError("fraction must be between 0 and 1")
        if self.count is not None and int(self.count) < 0:
            raise ValueError("count must be >= 0")
        if self.code is None and not self.latency_ms:
            raise ValueError("a rule needs a code or a latency")

    def matches(self, verb: str, resource: str) -> bool:
        if self.verb not in ("*", verb):
            return False
        if self.resource in ("*", resource):
            return True
        base = resource.split("/")[0]
        return self.resource == base or self.resource == base.split(".")[0]

    @property
    def exhausted(self) -> bool:
        return self.count is not None and self.hits >= self.count

    def describe(self) -> dict:
        return {"id": self.id, "verb": self.verb, "resource": self.resource, "count": self.count,
                "fraction": self.fraction, "code": self.code, "latency_ms": self.latency_ms,
                "hits": self.hits}


class FaultInjector:
    def __init__(self, seed: int | None = None):
        self.rules: list[FaultRule] = []
        self._random = random.Random(seed)

    def add(self, **spec) -> FaultRule:
        allowed = {"verb", "resource", "count", "fraction", "code", "latency_ms"}
        unknown = set(spec) - allowed
        if unknown:
            raise ValueError(f"unknown fields: {', '.join(sorted(unknown))}")
        rule = FaultRule(**spec)
        self.rules.append(rule)
        return rule

    def clear(self) -> None:
        self.rules.clear()

    def check(self, verb: str, resource: str) -> FaultRule | None:
        """The rule that applies to this request, if any (and count it)."""
        for rule in self.rules:
            if rule.exhausted or not rule.matches(verb, resource):
                continue
            if rule.fraction is not None and self._random.random() >= rule.fraction:
                continue
            rule.hits += 1
            return rule
        return None
