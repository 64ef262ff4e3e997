"""Kubernetes label selectors: the string form the API accepts and metav1.LabelSelector.

No maintained PyPI library parses Kubernetes' selector grammar (client libraries only
*build* selector strings), so this is a small tokenizer that follows
k8s.io/apimachinery/pkg/labels/selector.go: `=`, `==`, `!=`, `in`, `notin`, existence
(`key`) and non-existence (`!key`), comma separated.

A package of its own: kubesim (the API simulator) and torchdev_runtime (the operator's local
runtime, for a watch's selector) both use it, and neither depends on the other.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


_KEY = r"[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?"
_VALUE = r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_SET_RE = re.compile(rf"^\s*({_KEY})\s+(in|notin)\s+\(([^)]*)\)\s*$")
_EQ_RE = re.compile(rf"^\s*({_KEY})\s*(==|=|!=)\s*({_VALUE})\s*$")
_EXISTS_RE = re.compile(rf"^\s*(!?)\s*({_KEY})\s*$")
_VALUE_RE = re.compile(rf"^{_VALUE}$")


class SelectorError(ValueError):
    """A selector that does not parse (kube-apiserver answers 400)."""


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!"
    values: tuple[str, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        if self.op == "exists":
            return self.key in labels
        if self.op == "!":
            return self.key not in labels
        if self.op in ("=", "in"):
            return self.key in labels and labels[self.key] in self.values
        # "!=" and "notin" match when the key is absent, like Kubernetes
        return labels.get(self.key) not in self.values


def split_top(s: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in s:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p for p in (p.strip() for p in parts) if p]


class LabelSelector:
    def __init__(self, requirements: list[Requirement]):
        self.requirements = requirements

    @classmethod
    def parse(cls, text: str | None) -> "LabelSelector":
        reqs: list[Requirement] = []
        for part in split_top(text or ""):
            if m := _SET_RE.match(part):
                values = tuple(v.strip() for v in m.group(4).split(",") if v.strip())
                for v in values:
                    if not _VALUE_RE.match(v):
                        raise SelectorError(f"unable to parse requirement: invalid label value: {v!r}")
                reqs.append(Requirement(m.group(1), m.group(3), values))
            elif m := _EQ_RE.match(part):
                op = "=" if m.group(3) in ("=", "==") else "!="
                reqs.append(Requirement(m.group(1), op, (m.group(4),)))
            elif m := _EXISTS_RE.match(part):
                reqs.append(Requirement(m.group(2), "!" if m.group(1) else "exists"))
            else:
                raise SelectorError(f"unable to parse requirement: found '{part}', expected a label "
                                "selector requirement (key=value, key!=value, key in (a,b), "
                                "key notin (a,b), key or !key)")
        return cls(reqs)

    @classmethod
    def from_dict(cls, selector: dict[str, Any] | None) -> "LabelSelector":
        """metav1.LabelSelector {matchLabels, matchExpressions}."""
        reqs: list[Requirement] = []
        selector = selector or {}
        for k, v in (selector.get("matchLabels") or {}).items():
            reqs.append(Requirement(k, "=", (str(v),)))
        ops = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}
        for e in selector.get("matchExpressions") or []:
            reqs.append(Requirement(e["key"], ops[e["operator"]], tuple(e.get("values") or ())))
        return cls(reqs)

    def matches(self, labels: dict[str, str] | None) -> bool:
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)

    def empty(self) -> bool:
        return not self.requirements

    def equality_pairs(self) -> list[tuple[str, str]]:
        """key=value requirements, usable for index lookups."""
        return [(r.key, r.values[0]) for r in self.requirements if r.op == "=" and len(r.values) == 1]
