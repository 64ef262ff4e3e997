"""Waiting for DevServers to become Ready or to disappear, with progress on stderr."""
from __future__ import annotations

import time
from typing import Callable

import click

from .errors import ApiError, DevctlError, NotFound, one_line
from .output import human_duration, info, parse_time, now, stderr_is_tty

# Seconds between polls; tests lower it.
POLL_INTERVAL = 1.0
# API answers worth retrying while waiting (None: the API could not be reached).
TRANSIENT = {None, 429, 500, 502, 503, 504}
# Degraded reasons that no amount of waiting fixes: the user must change something.
PERMANENT_REASONS = {"FlavorNotFound", "InvalidSpec", "InsufficientGPUs", "ClaimNotFound", "QuotaExceeded"}
# Those of them that the spec itself causes (the namespace's claims and quotas may change; these not)
SPEC_REASONS = {"FlavorNotFound", "InvalidSpec", "InsufficientGPUs"}


class Rejected(DevctlError):
    """The operator says the DevServer cannot become Ready until something changes (``reason``:
    one of PERMANENT_REASONS)."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


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


def pod_reason(pods: list[dict]) -> str | None:
    """Why the first of ``pods`` that is not running yet waits, as the scheduler, Kueue or the
    kubelet says it ("Unschedulable: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu",
    "SchedulingGated: ...", "ErrImagePull: ..."), or None; hostile or odd pod objects give None."""
    for pod in sorted((p for p in pods or [] if isinstance(p, dict)),
                      key=lambda p: str((p.get("metadata") or {}).get("name") or "")):
        status = pod.get("status") if isinstance(pod.get("status"), dict) else {}
        for cond in status.get("conditions") or []:
            if isinstance(cond, dict) and cond.get("type") == "PodScheduled" and cond.get("status") == "False":
                return one_line(f"{cond.get('reason') or 'Unschedulable'}: {cond.get('message') or ''}")[:300]
        for container in status.get("containerStatuses") or []:
            waiting = ((container or {}).get("state") or {}).get("waiting") if isinstance(container, dict) else None
            if isinstance(waiting, dict) and waiting.get("reason") not in (None, "ContainerCreating", "PodInitializing"):
                return one_line(f"{waiting['reason']}: {waiting.get('message') or ''}")[:300]
    return None


def queue_state(obj: dict, reference=None) -> str | None:
    """"queued #2 in torchdev-ada, ETA 25m" from status.queue while Queued, else None."""
    status = obj.get("status") or {}
    queue = status.get("queue") if isinstance(status.get("queue"), dict) else None
    if status.get("phase") != "Queued" or not queue:
        return None
    text = "queued"
    if queue.get("position"):
        text += f" #{queue['position']}"
    if queue.get("clusterQueue"):
        text += f" in {queue['clusterQueue']}"
    eta = parse_time(queue.get("estimatedStartTime"))
    if eta is not None:
        left = (eta - (reference or now())).total_seconds()
        text += f", ETA {human_duration(left)}" if left > 0 else ", ETA now"
    return text


def describe_state(obj: dict) -> str:
    """One-line summary: phase, replicas, the queue, conditions that matter."""
    status = obj.get("status") or {}
    parts = [status.get("phase") or "Pending"]
    said: set[str] = set()  # Ready and Degraded often carry the same message: it is shown once
    if "replicas" in status or "readyReplicas" in status:
        parts.append(f"{status.get('readyReplicas') or 0}/{status.get('replicas') or 0} ready")
    queued = queue_state(obj)
    if queued:
        parts.append(queued)
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
        message = " ".join(str(cond.get("message") or "").split())
        if bad and message and message not in said:
            said.add(message)
            text += f" ({message})"
        parts.append(text)
    return ", ".join(parts)


def server_pods_reason(api, namespace: str, name: str) -> Callable[[], str | None]:
    """``why`` for wait_ready of the DevServer ``name``: pod_reason of its pods."""
    from ansible_collections.torchdev.operator.plugins.module_utils.constants import DEVSERVER_LABEL

    return lambda: pod_reason(api.list_pods(namespace, f"{DEVSERVER_LABEL}={name}"))


class Progress:
    """The --wait line: on a terminal one line rewritten in place at every poll (the elapsed time
    moves), otherwise a plain line each time the state changes; ``done()`` ends the line."""

    def __init__(self, label: str, tty: bool | None = None):
        self.label, self.tty = label, stderr_is_tty() if tty is None else tty
        self.last, self.open = None, False

    def show(self, elapsed: float, state: str) -> None:
        line = f"[{human_duration(elapsed)}] {self.label}: {state}"
        if self.tty:
            click.echo("\r\x1b[K" + line, nl=False, err=True)
            self.open = True
        elif state != self.last:
            info(line)
        self.last = state

    def done(self) -> None:
        if self.open:
            click.echo("", err=True)
            self.open = False


def wait_ready(get: Callable[[], dict], label: str, timeout: float,
               sleep: Callable[[float], None] = time.sleep,
               why: Callable[[], str | None] | None = None) -> dict:
    """Poll ``get()`` until the DevServer is Ready; raise on Failed or timeout.  ``why()`` (e.g.
    pod_reason of the server's pods) says what holds it while it is not Ready (the scheduler's,
    Kueue's or the kubelet's reason), shown in the progress line and in a timeout's error."""
    start = time.monotonic()
    progress = Progress(label)
    info(f"waiting for {label} to become Ready (timeout {human_duration(timeout)})")
    try:
        while True:
            try:
                obj = get()
            except ApiError as exc:
                if not _transient(exc) or time.monotonic() - start >= timeout:
                    raise
                progress.done()
                info(f"[{human_duration(time.monotonic() - start)}] {label}: retrying after: {exc.format_message()}")
                progress.last = None
                sleep(POLL_INTERVAL)
                continue
            state = describe_state(obj)
            if not is_ready(obj) and why is not None and (obj.get("status") or {}).get("phase") != "Queued":
                try:
                    reason = why()
                except ApiError:
                    reason = None  # only a hint: the wait goes on without it
                if reason:
                    state += f"; {reason}"
            # an end is said once, by the error: no progress line repeats the operator's message
            if (obj.get("status") or {}).get("phase") == "Failed":
                raise DevctlError(f"{label} failed: {state}")
            degraded = condition(obj, "Degraded") or {}
            if degraded.get("status") == "True" and degraded.get("reason") in PERMANENT_REASONS and not is_ready(obj):
                raise Rejected(f"{label} cannot become Ready: {state}", degraded["reason"])
            progress.show(time.monotonic() - start, state)
            if is_ready(obj):
                return obj
            if time.monotonic() - start >= timeout:
                raise DevctlError(f"timed out after {human_duration(timeout)} waiting for {label} "
                                  f"to become Ready; still waiting: {state}")
            sleep(POLL_INTERVAL)
    finally:
        progress.done()


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
