"""status.conditions management, ported from ansible-operator.

Sources: internal/ansible/controller/status/types.go, status/utils.go and the markRunning /
markError / markDone functions of internal/ansible/controller/reconcile.go.

Condition types Running / Successful / Failure; reasons Running / Successful / Failed;
messages "Running reconciliation", "Awaiting next reconciliation", "Last reconciliation
succeeded". ``SetCondition`` keeps an existing condition untouched when type, status and
reason are equal (except for Failure, which is always replaced), and keeps
lastTransitionTime when only the reason/message changes. Conditions are re-serialised with
the Go struct's fields only (type, status, lastTransitionTime, ansibleResult, reason,
message); other keys of ``status`` are preserved.
"""
from __future__ import annotations

import copy
import datetime as _dt
import re
from typing import Any

RUNNING = "Running"
FAILURE = "Failure"
SUCCESSFUL = "Successful"

RUNNING_REASON = "Running"
SUCCESSFUL_REASON = "Successful"
FAILED_REASON = "Failed"

RUNNING_MESSAGE = "Running reconciliation"
AWAITING_MESSAGE = "Awaiting next reconciliation"
SUCCESSFUL_MESSAGE = "Last reconciliation succeeded"

HOST = "localhost"

_LTT = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")


def now_rfc3339() -> str:
    """metav1.Now() marshalled: RFC3339, UTC, second precision."""
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_event_time(value: str | None) -> str:
    """eventapi.EventTime.MarshalJSON: "2006-01-02T15:04:05.99999999+00:00" (UTC)."""
    t = None
    if value:
        try:
            t = _dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            t = None
    if t is None:
        return "0001-01-01T00:00:00+00:00"
    if t.tzinfo is not None:
        t = t.astimezone(_dt.timezone.utc)
    base = t.strftime("%Y-%m-%dT%H:%M:%S")
    frac = f"{t.microsecond:06d}".rstrip("0")
    return base + ("." + frac if frac else "") + "+00:00"


def ansible_result_from_stats(stats_event: dict[str, Any] | None) -> dict[str, Any]:
    """status.NewAnsibleResultFromStatusJobEvent (counts for host "localhost")."""
    ed = (stats_event or {}).get("event_data") or {}

    def count(key: str) -> int:
        v = ed.get(key)
        if isinstance(v, dict):
            return int(v.get(HOST, 0) or 0)
        return 0

    return {
        "ok": count("ok"),
        "changed": count("changed"),
        "skipped": count("skipped"),
        "failures": count("failures"),
        "completion": format_event_time((stats_event or {}).get("created")),
    }


def _result_from_map(m: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"ok": 0, "changed": 0, "skipped": 0, "failures": 0,
                           "completion": "0001-01-01T00:00:00+00:00"}
    for k in ("ok", "changed", "skipped", "failures"):
        if isinstance(m.get(k), (int, float)) and not isinstance(m.get(k), bool):
            out[k] = int(m[k])
    if isinstance(m.get("completion"), str):
        out["completion"] = format_event_time(m["completion"])
    return out


def new_condition(ctype: str, status: str, ansible_result: dict[str, Any] | None,
                  reason: str, message: str) -> dict[str, Any]:
    c: dict[str, Any] = {"type": ctype, "status": status, "lastTransitionTime": now_rfc3339()}
    if ansible_result is not None:
        c["ansibleResult"] = ansible_result
    c["reason"] = reason
    c["message"] = message
    return c


def _condition_from_map(cm: dict[str, Any]) -> dict[str, Any]:
    """createConditionFromMap."""
    ctype = cm.get("type") if isinstance(cm.get("type"), str) else RUNNING
    status = cm.get("status") if isinstance(cm.get("status"), str) else "True"
    reason = cm.get("reason") if isinstance(cm.get("reason"), str) else ""
    message = cm.get("message") if isinstance(cm.get("message"), str) else ""
    ltt = cm.get("lastTransitionTime")
    if not (isinstance(ltt, str) and _LTT.match(ltt)):
        ltt = now_rfc3339()
    c: dict[str, Any] = {"type": ctype, "status": status, "lastTransitionTime": ltt}
    if isinstance(cm.get("ansibleResult"), dict):
        c["ansibleResult"] = _result_from_map(cm["ansibleResult"])
    c["reason"] = reason
    c["message"] = message
    return c


class Status:
    """status.Status: conditions + the rest of the status map (CustomStatus)."""

    def __init__(self, status_map: dict[str, Any] | None):
        status_map = status_map if isinstance(status_map, dict) else {}
        self.custom = {k: copy.deepcopy(v) for k, v in status_map.items() if k != "conditions"}
        self.conditions: list[dict[str, Any]] = []
        conds = status_map.get("conditions")
        if isinstance(conds, list):
            for ci in conds:
                if isinstance(ci, dict):
                    self.conditions.append(_condition_from_map(ci))

    @classmethod
    def of(cls, obj: dict[str, Any]) -> "Status":
        return cls(obj.get("status"))

    def get(self, ctype: str) -> dict[str, Any] | None:
        for c in self.conditions:
            if c["type"] == ctype:
                return dict(c)
        return None

    def set(self, cond: dict[str, Any]) -> None:
        """status.SetCondition."""
        cur = self.get(cond["type"])
        if cur is not None and cond["type"] != FAILURE and cur["status"] == cond["status"] \
                and cur["reason"] == cond["reason"]:
            return
        cond = dict(cond)
        if cur is not None and cur["status"] == cond["status"]:
            cond["lastTransitionTime"] = cur["lastTransitionTime"]
        self.conditions = [c for c in self.conditions if c["type"] != cond["type"]] + [cond]

    def to_map(self) -> dict[str, Any]:
        """GetJSONMap: {"conditions": [...]} merged over the custom status."""
        out = dict(self.custom)
        out["conditions"] = [dict(c) for c in self.conditions]
        return out


def mark_running(obj: dict[str, Any]) -> dict[str, Any]:
    st = Status.of(obj)
    sc = st.get(SUCCESSFUL)
    if sc is not None:
        sc["status"] = "False"
        st.set(sc)
    st.set(new_condition(RUNNING, "True", None, RUNNING_REASON, RUNNING_MESSAGE))
    return st.to_map()


def mark_error(obj: dict[str, Any], message: str) -> dict[str, Any]:
    st = Status.of(obj)
    rc = st.get(RUNNING)
    if rc is not None:
        rc["status"] = "False"
        st.set(rc)
    sc = st.get(SUCCESSFUL)
    if sc is not None:
        sc["status"] = "False"
        st.set(sc)
    st.set(new_condition(FAILURE, "True", None, FAILED_REASON, message))
    return st.to_map()


def mark_done(obj: dict[str, Any], stats_event: dict[str, Any] | None,
              failure_messages: list[str]) -> dict[str, Any]:
    st = Status.of(obj)
    result = ansible_result_from_stats(stats_event)
    if not failure_messages:
        st.set(new_condition(RUNNING, "True", result, SUCCESSFUL_REASON, AWAITING_MESSAGE))
        st.set(new_condition(SUCCESSFUL, "True", None, SUCCESSFUL_REASON, SUCCESSFUL_MESSAGE))
        st.set(new_condition(FAILURE, "False", None, "", ""))
    else:
        rc = st.get(RUNNING)
        if rc is not None:
            rc["status"] = "False"
            st.set(rc)
        st.set(new_condition(FAILURE, "True", result, FAILED_REASON,
                             "\n".join(failure_messages)))
        st.set(new_condition(SUCCESSFUL, "False", None, "", ""))
    return st.to_map()
