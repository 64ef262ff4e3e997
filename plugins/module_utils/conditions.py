# -*- coding: utf-8 -*-
# Apache-2.0
"""Status conditions (metav1.Condition) and status writes: build, merge by type keeping
lastTransitionTime, the /status merge patch, and the classification of a failed run."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import datetime
import re

from ansible_collections.torchdev.operator.plugins.module_utils.constants import PROBLEM_REASONS, REASON_INVALID_SPEC, REASON_RECONCILE_ERROR
from ansible_collections.torchdev.operator.plugins.module_utils.plan import kind_of, plain

CONDITION_KEYS = ("type", "status", "reason", "message", "observedGeneration", "lastTransitionTime")


def utc_now():
    """RFC 3339 UTC timestamp with second precision, as the apiserver stores it."""
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def normalize_condition(cond, observed_generation=None):
    if not isinstance(cond, dict) or not cond.get("type"):
        raise ValueError("each condition needs a type: %r" % (cond,))
    status = cond.get("status", "Unknown")
    if status is True or status is False:
        status = "True" if status else "False"
    status = str(status)
    if status not in ("True", "False", "Unknown"):
        raise ValueError("condition %s: status must be True, False or Unknown" % cond["type"])
    result = {
        "type": str(cond["type"]),
        "status": status,
        "reason": str(cond.get("reason") or "Unknown"),
        "message": str(cond.get("message") or ""),
    }
    generation = cond.get("observedGeneration", observed_generation)
    if generation is not None:
        result["observedGeneration"] = int(generation)
    if cond.get("lastTransitionTime"):
        result["lastTransitionTime"] = cond["lastTransitionTime"]
    return result


def merge_conditions(existing, desired, now=None, observed_generation=None):
    """Return (merged list, changed) - see the module docstring."""
    now = now or utc_now()
    existing = [c for c in (existing or []) if isinstance(c, dict) and c.get("type")]
    by_type = {c["type"]: c for c in existing}
    merged = []
    handled = set()
    desired_norm = [normalize_condition(c, observed_generation) for c in (desired or [])]
    desired_by_type = {c["type"]: c for c in desired_norm}
    # Keep the live order for known types, append new ones in the desired order.
    order = [c["type"] for c in existing] + [c["type"] for c in desired_norm if c["type"] not in by_type]
    for ctype in order:
        if ctype in handled:
            continue
        handled.add(ctype)
        old = by_type.get(ctype)
        new = desired_by_type.get(ctype)
        if new is None:
            merged.append(copy.deepcopy(old))
            continue
        cond = dict(new)
        if old is not None and old.get("status") == cond["status"] and old.get("lastTransitionTime"):
            cond["lastTransitionTime"] = old["lastTransitionTime"]
        elif not new.get("lastTransitionTime") or (old is not None and old.get("status") != cond["status"]):
            cond["lastTransitionTime"] = now
        merged.append({k: cond[k] for k in CONDITION_KEYS if k in cond})
    return merged, _canon(merged) != _canon(existing)


def _canon(conditions):
    return [{k: c.get(k) for k in CONDITION_KEYS if c.get(k) is not None} for c in conditions or []]


def _prune(value):
    """``value`` without the None entries of its maps (absent in merge-patch terms)."""
    if isinstance(value, dict):
        return {k: _prune(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_prune(v) for v in value]
    return value


def _equal(a, b):
    if a in (None, {}, []) and b in (None, {}, []):
        return True
    return kind_of(a) == kind_of(b) and _prune(a) == _prune(b)


def status_patch(live_status, desired_status=None, desired_conditions=None, now=None, observed_generation=None):
    """Return (patch or None, resulting status).

    ``desired_status`` keys are set; a ``None`` value removes the key, also inside a map
    value (``{"queue": {"position": None}}`` removes queue.position).  Keys not named
    are left alone (merge patch semantics).  ``desired_conditions`` (when not None) are
    merged with ``merge_conditions``.
    """
    live_status = live_status or {}
    patch = {}
    for key, value in (desired_status or {}).items():
        if key == "conditions":
            continue
        if value is None:
            if key in live_status:
                patch[key] = None
        elif not _equal(live_status.get(key), value):
            patch[key] = copy.deepcopy(value)
    if desired_conditions is not None:
        merged, changed = merge_conditions(live_status.get("conditions"), desired_conditions, now, observed_generation)
        if changed:
            patch["conditions"] = merged
    result = copy.deepcopy(live_status)
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _prune(value)
    return (patch or None), result


def resource_path(api_version, plural, name, namespace=None, subresource=None):
    """REST path of a named object, e.g. /apis/torchdev.io/v1alpha1/namespaces/ns/devservers/x/status."""
    if "/" in api_version:
        base = "/apis/%s" % api_version
    else:
        base = "/api/%s" % api_version
    if namespace:
        base += "/namespaces/%s" % namespace
    path = "%s/%s/%s" % (base, plural, name)
    if subresource:
        path += "/" + subresource
    return path


def default_plural(kind):
    lower = kind.lower()
    if lower.endswith("s"):
        return lower + "es"
    if lower.endswith("y") and not lower.endswith(("ay", "ey", "oy", "uy")):
        return lower[:-1] + "ies"
    return lower + "s"


# --------------------------------------------------------------------------- building
def condition(ctype, status, reason, message="", generation=None):
    """A metav1.Condition without lastTransitionTime (the status module sets it)."""
    if status in (True, False):
        status = "True" if status else "False"
    if status not in ("True", "False", "Unknown"):
        raise ValueError("condition status must be True, False or Unknown, got %r" % (status,))
    result = {"type": str(ctype), "status": status, "reason": str(reason), "message": str(message or "")}
    if generation is not None:
        result["observedGeneration"] = int(generation)
    return result


def problem_status(problem, generation=None):
    """The status of an object whose spec cannot be served at all ({reason, message}): phase
    Failed, Ready False ``ReconcileFailed`` and Degraded True with the reason, both with the
    message (a running DevServer is not reported this way: rejected_spec_status)."""
    message = str(problem.get("message") or "").strip()[:1024]
    return {"phase": "Failed", "observedGeneration": generation,
            "conditions": [condition("Ready", "False", "ReconcileFailed", message, generation),
                           condition("Degraded", "True", problem["reason"], message, generation)]}


def status_changes(live_status, desired_status, conditions=None, observed_generation=None):
    """The merge patch the status module would send for this status, or None: lets a role
    skip the module run (a process and a client import) when the status is unchanged."""
    patch, _result = status_patch(plain(live_status), plain(desired_status), plain(conditions),
                                  observed_generation=observed_generation)
    return patch


def failure_reason(failed_result=None, explicit=None):
    """Classify a failed task: (reason, transient).

    FlavorNotFound, InvalidSpec and InsufficientGPUs are permanent until the spec or the flavor changes
    (both trigger a reconcile), so the run ends successfully after recording them;
    anything else is a ReconcileError and the run fails so the runtime requeues with
    backoff.  A 422 (Invalid) from the apiserver is a spec problem -> InvalidSpec.
    """
    if explicit in PROBLEM_REASONS:
        return {"reason": explicit, "transient": False}
    result = failed_result or {}
    msg = str(result.get("msg") or "")
    for reason in PROBLEM_REASONS:
        if msg.startswith(reason + ":"):
            return {"reason": reason, "transient": False}
    text = " ".join(str(result.get(k, "")) for k in ("msg", "reason", "status", "error"))
    if result.get("status") == 422 or "Unprocessable Entity" in text or "(422)" in text or '"code":422' in text.replace(" ", ""):
        return {"reason": REASON_INVALID_SPEC, "transient": False}
    return {"reason": REASON_RECONCILE_ERROR, "transient": True}


# HTTP statuses of a failed API request worth another try in the same run: a conflict (the next
# attempt reads and applies afresh), too many requests, the server's transient failures.
RETRYABLE_STATUSES = (409, 429, 500, 502, 503, 504)
# What a client library says of a connection that failed or broke (urllib3, http.client).
CONNECTION_ERRORS = ("Connection aborted", "RemoteDisconnected", "Connection refused", "Connection reset",
                     "Max retries exceeded", "timed out", "BadStatusLine", "IncompleteRead", "ProtocolError")


def retryable(result=None):
    """Whether a task that called the API (kubernetes.core.k8s) failed for a reason that passes:
    an answer in RETRYABLE_STATUSES, or a connection that failed or broke.  A task with
    ``until: not (r | torchdev.operator.retryable)`` tries again; anything else (422, 403,
    404, ...) fails at once, and a success is never retried."""
    result = result or {}
    if not result.get("failed"):
        return False
    text = " ".join(str(result.get(k, "")) for k in ("msg", "reason", "error", "status"))
    codes = [int(c) for c in re.findall(r'"code"\s*:\s*(\d{3})', text)]
    for key in ("status", "error", "status_code"):
        if isinstance(result.get(key), int):
            codes.append(result[key])
    if codes:
        return codes[-1] in RETRYABLE_STATUSES
    return any(marker in text for marker in CONNECTION_ERRORS)


def failure_message(failed_result=None, limit=1024):
    result = failed_result or {}
    msg = result.get("msg") or result.get("message") or "reconcile failed"
    msg = re.sub(r"\s+", " ", str(msg)).strip()
    return msg[: int(limit)]
