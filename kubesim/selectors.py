"""Label and field selectors in the string form the API accepts: label selectors are
kubeselect's (a parse error is a 400), field selectors the fields kube-apiserver supports."""
from __future__ import annotations

import re
from typing import Any, Callable

from kubeselect import LabelSelector, Requirement, SelectorError, split_top
from kubesim.errors import bad_request

__all__ = ["FieldSelector", "LabelSelector", "Requirement", "make_filter"]


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
        for part in split_top(text or ""):
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
    try:
        ls = LabelSelector.parse(label_selector) if label_selector else None
    except SelectorError as exc:
        raise bad_request(str(exc)) from None
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
