"""Label and field selectors in the string form the API accepts.

No maintained PyPI library parses Kubernetes' selector grammar (client
libraries only *build* selector strings), so this is a small tokenizer that
follows k8s.io/apimachinery/pkg/labels/selector.go: `=`, `==`, `!=`, `in`,
`notin`, existence (`key`) and non-existence (`!key`), comma separated.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

from kubesim.errors import bad_request

_KEY = r"[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?"
_VALUE = r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_SET_RE = re.compile(rf"^\s*({_KEY})\s+(in|notin)\s+\(([^)]*)\)\s*$")
_EQ_RE = re.compile(rf"^\s*({_KEY})\s*(==|=|!=)\s*({_VALUE})\s*$")
_EXISTS_RE = re.compile(rf"^\s*(!?)\s*({_KEY})\s*$")
_VALUE_RE = re.compile(rf"^{_VALUE}$")


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


def _split_top(s: str) -> list[str]:
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
        for part in _split_top(text or ""):
            if m := _SET_RE.match(part):
                values = tuple(v.strip() for v in m.group(4).split(",") if v.strip())
                for v in values:
                    if not _VALUE_RE.match(v):
                        raise bad_request(f"unable to parse requirement: invalid label value: {v!r}")
                reqs.append(Requirement(m.group(1), m.group(3), values))
            elif m := _EQ_RE.match(part):
                op = "=" if m.group(3) in ("=", "==") else "!="
                reqs.append(Requirement(m.group(1), op, (m.group(4),)))
            elif m := _EXISTS_RE.match(part):
                reqs.append(Requirement(m.group(2), "!" if m.group(1) else "exists"))
            else:
                raise bad_request(f"unable to parse requirement: found '{part}', expected a label "
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


def _get_path(obj: dict[str, Any], path: str) -> Any:
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, dict):
            return None
        cur = cur.get(part)
    return cur


# Field selectors the API server supports; everything else is a 400 like kube-apiserver.
COMMON_FIELDS = {"metadata.name", "metadata.namespace"}
FIELDS_BY_KIND = {
    "Pod": {"status.phase", "spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
            "spec.serviceAccountName", "status.podIP", "status.nominatedNodeName"},
    "Event": {"involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
              "involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion",
              "involvedObject.fieldPath", "reason", "reportingComponent", "source", "type",
              "regarding.name", "regarding.kind", "regarding.namespace", "regarding.uid"},
    "Secret": {"type"},
    "Namespace": {"status.phase"},
    "Node": {"spec.unschedulable"},
    "Job": {"status.successful"},
    "PersistentVolumeClaim": {"spec.volumeName"},
}


class FieldSelector:
    def __init__(self, terms: list[tuple[str, str, str]]):
        self.terms = terms  # (path, op, value)

    @classmethod
    def parse(cls, text: str | None, kind: str) -> "FieldSelector":
        terms = []
        allowed = COMMON_FIELDS | FIELDS_BY_KIND.get(kind, set())
        for part in _split_top(text or ""):
            m = re.match(r"^\s*([A-Za-z0-9_.]+)\s*(==|=|!=)\s*(.*?)\s*$", part)
            if not m:
                raise bad_request(f"invalid field selector: {part!r}")
            path, op, value = m.group(1), m.group(2), m.group(3)
            if path not in allowed:
                raise bad_request(f'field label not supported: {path}')
            terms.append((path, "!=" if op == "!=" else "=", value))
        return cls(terms)

    def matches(self, obj: dict[str, Any]) -> bool:
        for path, op, value in self.terms:
            got = _get_path(obj, path)
            got = "" if got is None else (str(got).lower() if isinstance(got, bool) else str(got))
            if (got == value) != (op == "="):
                return False
        return True

    def name(self) -> str | None:
        for path, op, value in self.terms:
            if path == "metadata.name" and op == "=":
                return value
        return None


def make_filter(label_selector: str | None, field_selector: str | None,
                kind: str) -> Callable[[dict[str, Any]], bool] | None:
    ls = LabelSelector.parse(label_selector) if label_selector else None
    fs = FieldSelector.parse(field_selector, kind) if field_selector else None
    if not ls and not fs:
        return None
    if ls is not None and fs is None and all(r.op == "=" and len(r.values) == 1
                                             for r in ls.requirements):
        # fast path for the common `k=v,k2=v2` selector (lists scan every object)
        pairs = tuple((r.key, r.values[0]) for r in ls.requirements)

        def match_eq(obj: dict[str, Any]) -> bool:
            labels = obj["metadata"].get("labels")
            if not labels:
                return not pairs
            for k, v in pairs:
                if labels.get(k) != v:
                    return False
            return True

        return match_eq

    def match(obj: dict[str, Any]) -> bool:
        if ls is not None and not ls.matches(obj.get("metadata", {}).get("labels")):
            return False
        return fs is None or fs.matches(obj)

    return match
