"""Waiting for DevServers to become Ready or to disappear, with progress on stderr."""
from __future__ import annotations

import time
from typing import Callable

from .errors import ApiError, DevctlError, NotFound
from .output import human_duration, info

# Seconds between polls; tests lower it.
POLL_INTERVAL = 1.0
# API answers worth retrying while waiting (None: the API could not be reached).
TRANSIENT = {None, 429, 500, 502, 503, 504}
# Degraded reasons that no amount of waiting fixes: the user must change something.
PERMANENT_REASONS = {"FlavorNotFound", "InvalidSpec", "InsufficientGPUs", "ClaimNotFound", "QuotaExceeded"}


def _transient(exc: ApiError) -> bool:
    return not isinstance(exc, NotFound) and exc.status in TRANSIENT


def condition(obj: dict, ctype: str) -> dict | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype:
            return cond
    return None


def is_ready(obj: dict) -> bool:
    status = obj.get("status") or {}
    ready = condition(obj, "Ready")
    if not ready or ready.get("status") != "True":
        return False
    observed = status.get("observedGeneration")
    generation = (obj.get("metadata") or {}).get("generation")
    return observed is None or generation is None or observed >= generation


def describe_state(obj: dict) -> str:
    """One-line summary: phase, replicas, conditions that matter."""
    status = obj.get("status") or {}
    parts = [status.get("phase") or "Pending"]
    if "replicas" in status or "readyReplicas" in status:
        parts.append(f"{status.get('readyReplicas') or 0}/{status.get('replicas') or 0} ready")
    for ctype in ("Ready", "Progressing", "Degraded"):
        cond = condition(obj, ctype)
        if not cond:
            continue
        bad = (ctype == "Ready" and cond.get("status") != "True") or \
              (ctype == "Degraded" and cond.get("status") == "True")
        if ctype == "Degraded" and not bad:
            continue
        text = f"{ctype}={cond.get('status')}"
        if cond.get("reason"):
            text += f" {cond['reason']}"
        if bad and cond.get("message"):
            text += f" ({' '.join(str(cond['message']).split())})"
        parts.append(text)
    return ", ".join(parts)


def wait_ready(get: Callable[[], dict], label: str, timeout: float,
               sleep: Callable[[float], None] = time.sleep) -> dict:
    """Poll ``get()`` until the DevServer is Ready; raise on Failed or timeout."""
    start = time.monotonic()
    last = None
    info(f"waiting for {label} to become Ready (timeout {human_duration(timeout)})")
    while True:
        try:
            obj = get()
        except ApiError as exc:
            if not _transient(exc) or time.monotonic() - start >= timeout:
                raise
            info(f"[{human_duration(time.monotonic() - start)}] {label}: retrying after: {exc.format_message()}")
            last = None
            sleep(POLL_INTERVAL)
            continue
        state = describe_state(obj)
        if state != last:
            info(f"[{human_duration(time.monotonic() - start)}] {label}: {state}")
            last = state
        if is_ready(obj):
            return obj
        if (obj.get("status") or {}).get("phase") == "Failed":
            raise DevctlError(f"{label} failed: {state}")
        degraded = condition(obj, "Degraded") or {}
        if degraded.get("status") == "True" and degraded.get("reason") in PERMANENT_REASONS:
            raise DevctlError(f"{label} cannot become Ready: {state}")
        if time.monotonic() - start >= timeout:
            raise DevctlError(f"timed out after {human_duration(timeout)} waiting for {label} "
                              f"to become Ready (last state: {state})")
        sleep(POLL_INTERVAL)


def wait_gone(checks: dict[str, Callable[[], object]], timeout: float,
              sleep: Callable[[float], None] = time.sleep) -> None:
    """Poll each ``label -> get`` until every get raises NotFound."""
    start = time.monotonic()
    pending = dict(checks)
    info(f"waiting for {', '.join(pending)} to be deleted (timeout {human_duration(timeout)})")
    while pending:
        for label, get in list(pending.items()):
            try:
                get()
            except NotFound:
                info(f"[{human_duration(time.monotonic() - start)}] {label} deleted")
                del pending[label]
            except ApiError as exc:
                if not _transient(exc):
                    raise
        if not pending:
            return
        if time.monotonic() - start >= timeout:
            raise DevctlError(f"timed out after {human_duration(timeout)} waiting for "
                              f"{', '.join(pending)} to be deleted")
        sleep(POLL_INTERVAL)
