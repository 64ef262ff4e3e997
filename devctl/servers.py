"""What the commands read alike off a DevServer and its flavor: the replicas it wants, its phase
and READY column, a pod's replica index and main container, a flavor's GPUs per pod, the
queue's ETA; and the NAME... / -l SELECTOR
targets the commands that act on several servers share."""
from __future__ import annotations

from datetime import datetime, timezone

import click
from ansible_collections.torchdev.operator.plugins.module_utils.constants import POD_INDEX_LABEL
from ansible_collections.torchdev.operator.plugins.module_utils.flavor import flavor_gpu_count
from ansible_collections.torchdev.operator.plugins.module_utils.lifecycle import format_duration, time_or_none

from . import complete
from .errors import DevctlError, NotFound
from .output import info, selector_option
from .settings import Settings

MAX_IDLE_TIMEOUT = 604800
DEFAULT_CONTAINER = "dev"
DEFAULT_CONTAINER_ANNOTATION = "kubectl.kubernetes.io/default-container"


def desired_replicas(obj: dict) -> int:
    spec = obj.get("spec") or {}
    if spec.get("suspend"):
        return 0
    if spec.get("mode") == "distributed":
        dist = spec.get("distributed") or {}
        world = int(dist.get("worldSize") or 1)
        per_node = int(dist.get("nprocsPerNode") or 1)
        return max(world // max(per_node, 1), 1)
    return 1


def ready_column(obj: dict) -> str:
    status = obj.get("status") or {}
    replicas = status.get("replicas")
    if replicas is None:
        replicas = desired_replicas(obj)
    return f"{status.get('readyReplicas') or 0}/{replicas}"


def phase_of(obj: dict) -> str:
    return (obj.get("status") or {}).get("phase") or "Pending"


def pod_index(pod: dict, name: str) -> int | None:
    meta = pod.get("metadata") or {}
    raw = (meta.get("labels") or {}).get(POD_INDEX_LABEL)
    if raw is None:
        prefix = f"{name}-"
        pod_name = meta.get("name") or ""
        raw = pod_name[len(prefix):] if pod_name.startswith(prefix) else None
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def container_of(pod: dict | None) -> str:
    if pod:
        annotated = ((pod.get("metadata") or {}).get("annotations") or {}).get(DEFAULT_CONTAINER_ANNOTATION)
        names = [c.get("name") for c in ((pod.get("spec") or {}).get("containers") or [])]
        if annotated and annotated in names:
            return annotated
        if DEFAULT_CONTAINER in names or not names:
            return DEFAULT_CONTAINER
        return names[0]
    return DEFAULT_CONTAINER


def gpu_count(obj: dict) -> int:
    """GPUs per replica of a DevServerFlavor, as the operator counts them
    (module_utils/flavor.py ``flavor_gpu_count``); 0 for a flavor it would reject."""
    try:
        return flavor_gpu_count(obj.get("spec") or {})
    except ValueError:
        return 0


def eta_column(when: str | None) -> str:
    """"in 25m (10:40:00Z)", "now", or "unknown" (a holder has no reservation end)."""
    start = time_or_none(when)
    if start is None:
        return "unknown"
    left = (start - datetime.now(timezone.utc)).total_seconds()
    return "now" if left <= 0 else f"in {format_duration(left)}"


def targets_arguments(fn):
    """NAME... or -l SELECTOR: the dev servers a command acts on (``targets``)."""
    fn = selector_option("dev servers")(fn)
    return click.argument("names", nargs=-1, shell_complete=complete.servers)(fn)


def targets(settings: Settings, names: tuple[str, ...], selector: str | None) -> list[str]:
    """The names given, or those of the dev servers of the namespace matching ``selector``
    (kubectl's rules: one of the two, never both)."""
    if names and selector:
        raise click.UsageError("give NAME... or -l SELECTOR, not both")
    if not names and not selector:
        raise click.UsageError("give one or more NAMEs or -l SELECTOR")
    if names:
        return list(dict.fromkeys(names))
    namespace = settings.namespace()
    found = sorted(o["metadata"]["name"] for o in settings.api.list_devservers(namespace, selector))
    if not found:
        info(f'No devservers matching {selector} found in namespace "{namespace}".')
    return found


def for_each(names: list[str], action) -> list:
    """``action(name)`` for each name; the ones not found are one error line at the end, after
    the others are done (as kubectl does)."""
    results, missing = [], []
    for name in names:
        try:
            results.append(action(name))
        except NotFound as exc:
            missing.append(exc)
    if len(missing) == 1:
        raise missing[0]
    if missing:
        raise DevctlError("; ".join(exc.format_message() for exc in missing))
    return results
