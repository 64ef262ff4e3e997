"""meta.k8s.io/v1 Table responses for `kubectl get` (name, age and a CRD's printer columns)."""
from __future__ import annotations

import datetime as _dt
from typing import Any

from kubesim.registry import ResourceType


def _age(ts: str | None) -> str:
    if not ts:
        return "<unknown>"
    then = _dt.datetime.fromisoformat(ts.replace("Z", "+00:00"))
    s = int((_dt.datetime.now(_dt.timezone.utc) - then).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s // size}{unit}"
    return f"{max(s, 0)}s"


def _jsonpath(obj: Any, path: str) -> Any:
    cur = obj
    for part in path.strip().lstrip(".").split("."):
        if not part:
            continue
        if isinstance(cur, dict):
            cur = cur.get(part)
        else:
            return None
    return cur


def table_for(rt: ResourceType, items: list[dict[str, Any]], meta: dict[str, Any]) -> dict[str, Any]:
    cols = [{"name": "Name", "type": "string", "format": "name", "description": "Name", "priority": 0}]
    printer = [c for c in rt.extra.get("printerColumns", []) if c.get("jsonPath") != ".metadata.creationTimestamp"]
    for c in printer:
        cols.append({"name": c["name"], "type": c.get("type", "string"), "format": c.get("format", ""),
                     "description": c.get("description", ""), "priority": c.get("priority", 0)})
    cols.append({"name": "Age", "type": "string", "format": "", "description": "Age", "priority": 0})
    rows = []
    for o in items:
        cells: list[Any] = [o["metadata"]["name"]]
        for c in printer:
            v = _jsonpath(o, c["jsonPath"])
            cells.append("" if v is None else v)
        cells.append(_age(o["metadata"].get("creationTimestamp")))
        rows.append({"cells": cells, "object": {"kind": "PartialObjectMetadata",
                                                 "apiVersion": "meta.k8s.io/v1",
                                                 "metadata": o["metadata"]}})
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta,
            "columnDefinitions": cols, "rows": rows}
