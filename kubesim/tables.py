"""meta.k8s.io/v1 Table responses for `kubectl get` (name, age and a CRD's printer columns)."""
from __future__ import annotations

import datetime as _dt
from typing import Any

from kubesim.controllers._util import parse_time
from kubesim.registry import ResourceType


def _age(ts: str | None) -> str:
    then = parse_time(ts)
    if then is None:
        return "<unknown>"
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


def _pod_status(o: dict[str, Any]) -> str:
    if o["metadata"].get("deletionTimestamp"):
        return "Terminating"
    st = o.get("status") or {}
    for c in st.get("containerStatuses") or []:
        state = c.get("state") or {}
        if state.get("waiting", {}).get("reason"):
            return state["waiting"]["reason"]
        if state.get("terminated", {}).get("reason") and st.get("phase") not in ("Succeeded", "Failed"):
            return state["terminated"]["reason"]
    for cond in st.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False" and cond.get("reason"):
            return "Pending" if cond["reason"] == "Unschedulable" else cond["reason"]
    return st.get("phase") or "Pending"


def _ready_containers(o: dict[str, Any]) -> str:
    statuses = (o.get("status") or {}).get("containerStatuses") or []
    total = len((o.get("spec") or {}).get("containers") or [])
    return "%d/%d" % (sum(1 for c in statuses if c.get("ready")), total)


def _ports(o: dict[str, Any]) -> str:
    out = []
    for p in (o.get("spec") or {}).get("ports") or []:
        port = str(p.get("port"))
        if p.get("nodePort"):
            port += ":%s" % p["nodePort"]
        out.append("%s/%s" % (port, p.get("protocol", "TCP")))
    return ",".join(out) or "<none>"


def _node_status(o: dict[str, Any]) -> str:
    ready = next((c for c in (o.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"), {})
    status = "Ready" if ready.get("status") == "True" else "NotReady"
    return status + (",SchedulingDisabled" if (o.get("spec") or {}).get("unschedulable") else "")


def _get(path: str):
    return lambda o: _jsonpath(o, path)


# kubectl's columns for the built-in kinds our tests and the demo look at:
# (name, cell function, priority); priority 1 columns show with -o wide. AGE comes last.
BUILTIN_COLUMNS: dict[str, list[tuple[str, Any, int]]] = {
    "Pod": [("Ready", _ready_containers, 0), ("Status", _pod_status, 0),
            ("Restarts", lambda o: sum(int(c.get("restartCount") or 0)
                                       for c in (o.get("status") or {}).get("containerStatuses") or []), 0),
            ("IP", _get(".status.podIP"), 1), ("Node", _get(".spec.nodeName"), 1)],
    "StatefulSet": [("Ready", lambda o: "%d/%d" % ((o.get("status") or {}).get("readyReplicas") or 0,
                                                   (o.get("spec") or {}).get("replicas", 1)), 0)],
    "Deployment": [("Ready", lambda o: "%d/%d" % ((o.get("status") or {}).get("readyReplicas") or 0,
                                                  (o.get("spec") or {}).get("replicas", 1)), 0),
                   ("Up-to-date", lambda o: (o.get("status") or {}).get("updatedReplicas") or 0, 0),
                   ("Available", lambda o: (o.get("status") or {}).get("availableReplicas") or 0, 0)],
    "Job": [("Status", lambda o: next((c["type"] for c in (o.get("status") or {}).get("conditions") or []
                                       if c.get("status") == "True" and c.get("type") in ("Complete", "Failed",
                                                                                           "Suspended")),
                                      "Running"), 0),
            ("Completions", lambda o: "%d/%d" % ((o.get("status") or {}).get("succeeded") or 0,
                                                 (o.get("spec") or {}).get("completions") or 1), 0)],
    "Service": [("Type", _get(".spec.type"), 0), ("Cluster-IP", _get(".spec.clusterIP"), 0),
                ("External-IP", lambda o: ",".join(i.get("hostname") or i.get("ip", "")
                                                   for i in ((o.get("status") or {}).get("loadBalancer") or {})
                                                   .get("ingress") or []) or "<none>", 0),
                ("Port(s)", _ports, 0)],
    "PersistentVolumeClaim": [("Status", _get(".status.phase"), 0), ("Volume", _get(".spec.volumeName"), 0),
                              ("Capacity", _get(".status.capacity.storage"), 0),
                              ("Access Modes", lambda o: ",".join(
                                  {"ReadWriteOnce": "RWO", "ReadWriteMany": "RWX", "ReadOnlyMany": "ROX",
                                   "ReadWriteOncePod": "RWOP"}.get(m, m)
                                  for m in (o.get("status") or {}).get("accessModes") or []), 0),
                              ("StorageClass", _get(".spec.storageClassName"), 0)],
    "Node": [("Status", _node_status, 0)],
    "Namespace": [("Status", _get(".status.phase"), 0)],
}


def table_for(rt: ResourceType, items: list[dict[str, Any]], meta: dict[str, Any]) -> dict[str, Any]:
    cols = [{"name": "Name", "type": "string", "format": "name", "description": "Name", "priority": 0}]
    if rt.crd:
        printer = [(c["name"], _get(c["jsonPath"]), c.get("priority", 0), c)
                   for c in rt.extra.get("printerColumns", [])
                   if c.get("jsonPath") != ".metadata.creationTimestamp"]
    else:
        printer = [(name, fn, prio, {}) for name, fn, prio in BUILTIN_COLUMNS.get(rt.kind, [])]
    main = [p for p in printer if p[2] == 0]
    wide = [p for p in printer if p[2] != 0]
    for name, _fn, prio, c in main:
        cols.append({"name": name, "type": c.get("type", "string"), "format": c.get("format", ""),
                     "description": c.get("description", ""), "priority": prio})
    cols.append({"name": "Age", "type": "string", "format": "", "description": "Age", "priority": 0})
    for name, _fn, prio, c in wide:
        cols.append({"name": name, "type": c.get("type", "string"), "format": c.get("format", ""),
                     "description": c.get("description", ""), "priority": prio})
    rows = []
    for o in items:
        cells: list[Any] = [o["metadata"]["name"]]
        for _name, fn, _prio, _c in main:
            v = fn(o)
            cells.append("" if v is None else v)
        cells.append(_age(o["metadata"].get("creationTimestamp")))
        for _name, fn, _prio, _c in wide:
            v = fn(o)
            cells.append("" if v is None else v)
        rows.append({"cells": cells, "object": {"kind": "PartialObjectMetadata",
                                                 "apiVersion": "meta.k8s.io/v1",
                                                 "metadata": o["metadata"]}})
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta,
            "columnDefinitions": cols, "rows": rows}
