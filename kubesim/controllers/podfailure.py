"""batch/v1 Job podFailurePolicy (k8s >= 1.31): the action of the first rule that matches
a failed pod (helpers of controllers/job.py, not a controller).

Rules: `action` FailJob | FailIndex | Ignore | Count, with `onExitCodes` {containerName,
operator In | NotIn, values} (any terminated container with a non-zero exit code whose code
matches; NotIn never matches exit code 0) or `onPodConditions` [{type, status}]. A pod no
rule matches counts towards backoffLimit (Count)."""
from __future__ import annotations

from typing import Any

Obj = dict[str, Any]


def _terminated(pod: Obj) -> list[tuple[str, int]]:
    st = pod.get("status") or {}
    out = []
    for cs in (st.get("initContainerStatuses") or []) + (st.get("containerStatuses") or []):
        term = (cs.get("state") or {}).get("terminated")
        if term is not None:
            out.append((cs.get("name", ""), int(term.get("exitCode", 0))))
    return out


def _exit_codes_match(req: Obj, pod: Obj) -> tuple[str, int] | None:
    values = set(req.get("values") or [])
    for name, code in _terminated(pod):
        if req.get("containerName") and req["containerName"] != name:
            continue
        if code == 0:
            continue
        if (req.get("operator") == "In") == (code in values):
            return name, code
    return None


def _conditions_match(reqs: list[Obj], pod: Obj) -> str | None:
    conds = {c.get("type"): c.get("status") for c in (pod.get("status") or {}).get("conditions") or []}
    for req in reqs:
        if conds.get(req.get("type")) == req.get("status", "True"):
            return req.get("type")
    return None


def match(policy: Obj | None, pod: Obj) -> tuple[str, str] | None:
    """(action, message) of the first rule of ``policy`` matching the failed ``pod``, or None."""
    meta = pod.get("metadata") or {}
    for i, rule in enumerate((policy or {}).get("rules") or []):
        if rule.get("onExitCodes"):
            hit = _exit_codes_match(rule["onExitCodes"], pod)
            if hit:
                return rule.get("action", "Count"), (
                    f"Container {hit[0]} for pod {meta.get('namespace')}/{meta.get('name')} failed with exit "
                    f"code {hit[1]} matching {rule.get('action')} rule at index {i}")
        elif rule.get("onPodConditions"):
            hit = _conditions_match(rule["onPodConditions"], pod)
            if hit:
                return rule.get("action", "Count"), (
                    f"Pod {meta.get('namespace')}/{meta.get('name')} has condition {hit} matching "
                    f"{rule.get('action')} rule at index {i}")
    return None
