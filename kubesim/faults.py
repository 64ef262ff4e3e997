"""Fault injection for reliability tests.

A rule matches a verb (get, list, watch, create, update, patch, delete,
deletecollection, "*", or a list or comma-separated string of them) and a resource (kubectl-style key such as `pods`,
`statefulsets.apps`, `devservers.torchdev.io/status`, a plural alone, or "*").
It fails the next `count` matching requests, or a `fraction` of them, with
401, 403, 404, 409, 429, 500, "drop" (the connection is aborted before the request is
served) or "drop-after" (the request is served, then the connection is aborted: the
client never learns that its write happened), and/or adds latency. `code` may be a list:
each hit picks one of them at random (one rule: "20 % of requests fail with one of 409,
429, 500 or a dropped connection").

Every matching rule that fires adds its latency; the first one that fires with a code
decides the answer.
"""
from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field

CODES = (401, 403, 404, 409, 429, 500, "drop", "drop-after", None)
_ids = itertools.count(1)


def _code(value):
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if value not in CODES:
        raise ValueError("code must be one of 401, 403, 404, 409, 429, 500, 'drop', "
                         f"'drop-after' or null (or a list of them), not {value!r}")
    return value


@dataclass
class FaultRule:
    verb: str = "*"
    resource: str = "*"
    count: int | None = None
    fraction: float | None = None
    code: int | str | list | None = 500
    latency_ms: float = 0.0
    id: int = field(default_factory=lambda: next(_ids))
    hits: int = 0
    # hits per answer (code, "drop", "drop-after", "latency")
    by_code: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.verb, (list, tuple)):
            self.verb = ",".join(self.verb)
        if not isinstance(self.verb, str) or not self.verb:
            raise ValueError(f"verb must be a verb, '*' or a list of verbs, not {self.verb!r}")
        if isinstance(self.code, (list, tuple)):
            if not self.code:
                raise ValueError("code: an empty list")
            self.code = [_code(c) for c in self.code]
            if None in self.code:
                raise ValueError("code: a list of codes cannot hold null")
        else:
            self.code = _code(self.code)
        if self.count is not None and self.fraction is not None:
            raise ValueError("give count or fraction, not both")
        if self.fraction is not None and not 0.0 <= float(self.fraction) <= 1.0:
            raise ValueError("fraction must be between 0 and 1")
        if self.count is not None and int(self.count) < 0:
            raise ValueError("count must be >= 0")
        if self.code is None and not self.latency_ms:
            raise ValueError("a rule needs a code or a latency")

    def matches(self, verb: str, resource: str) -> bool:
        if self.verb != "*" and verb not in self.verb.split(","):
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
                "hits": self.hits, "by_code": {str(k): v for k, v in self.by_code.items()}}


@dataclass
class Fault:
    """What happens to one request: added latency, then an answer (a code, "drop",
    "drop-after") or none (served normally)."""
    latency_ms: float = 0.0
    code: int | str | None = None


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

    def seed(self, value: int) -> None:
        """Make the fractions and the codes picked from lists reproducible."""
        self._random.seed(value)

    def clear(self) -> None:
        self.rules.clear()

    def injected(self) -> dict[str, int]:
        """Hits per answer over every rule: {"409": n, "drop": n, "latency": n, ...}."""
        total: dict[str, int] = {}
        for rule in self.rules:
            for k, v in rule.by_code.items():
                total[str(k)] = total.get(str(k), 0) + v
        return total

    def check(self, verb: str, resource: str) -> Fault | None:
        """What the rules do to this request, if anything (and count the rules that fire)."""
        fault: Fault | None = None
        for rule in self.rules:
            if rule.exhausted or not rule.matches(verb, resource):
                continue
            if fault is not None and fault.code is not None and rule.code is not None:
                continue  # the answer is decided: only latency rules still apply
            if rule.fraction is not None and self._random.random() >= rule.fraction:
                continue
            rule.hits += 1
            fault = fault or Fault()
            fault.latency_ms += rule.latency_ms
            code = self._random.choice(rule.code) if isinstance(rule.code, list) else rule.code
            key = code if code is not None else "latency"
            rule.by_code[key] = rule.by_code.get(key, 0) + 1
            if code is not None:
                fault.code = code
        return fault
