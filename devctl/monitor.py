"""``devctl monitor``: a live per-replica view of a dev server.

One row per replica: index, pod, phase, ready, restarts, node, age, and CPU/memory use
from metrics.k8s.io PodMetrics when the cluster serves them (metrics-server), else
``-``.  GPUS is the GPU count the pod was given (GPU utilisation is not part of
metrics.k8s.io).  On a terminal the view is redrawn in place every --interval;
otherwise one snapshot is printed per interval (JSON: one compact document per line).
"""
from __future__ import annotations

import sys
from time import sleep as _sleep  # patched by the tests

import click
from ansible_collections.torchdev.operator.plugins.module_utils import quantity
from ansible_collections.torchdev.operator.plugins.module_utils.constants import DEVSERVER_LABEL

from . import complete
from .settings import Settings
from .context import kube_options, pass_settings
from .errors import ApiError, NotFound
from .output import DurationType, age, dump_json, format_table, info, now, warn
from .servers import container_of, desired_replicas, phase_of, pod_index, ready_column

METRICS_GROUP, METRICS_VERSION = "metrics.k8s.io", "v1beta1"
HEADERS = ("replica", "pod", "phase", "ready", "restarts", "node", "age", "cpu", "memory", "gpus")
CLEAR = "\033[H\033[2J"
NONE = "-"

def parse_quantity(text) -> float | None:
    """A Kubernetes quantity (``250m``, ``123456n``, ``1.5Gi``, ``2``) as a float; None
    when it is missing or not a quantity (module_utils/quantity.py parses it)."""
    if text is None:
        return None
    try:
        return float(quantity.parse_quantity(text))
    except ValueError:
        return None


def format_cpu(cores: float | None) -> str:
    if cores is None:
        return NONE
    return f"{round(cores * 1000)}m"


def format_memory(size: float | None) -> str:
    if size is None:
        return NONE
    return f"{round(size / 2 ** 20)}Mi"


class Metrics:
    """PodMetrics for a label selector; remembers when the API is not served."""

    def __init__(self, api) -> None:
        self.api = api
        self.served = True

    def pods(self, namespace: str, selector: str) -> dict[str, dict] | None:
        """{pod name: {"cpu": cores, "memory": bytes}}, or None when unavailable."""
        if not self.served:
            return None
        api = self.api
        try:
            result = api._call(api.custom.list_namespaced_custom_object, METRICS_GROUP, METRICS_VERSION,
                               namespace, "pods", label_selector=selector, kind="podmetrics",
                               namespace=namespace, resource=f"pods.{METRICS_GROUP}")
        except ApiError as exc:
            if exc.status == 404:  # metrics-server not installed: stop asking
                self.served = False
            return None
        except Exception:  # noqa: BLE001 - metrics are optional; never fail the view
            return None
        out: dict[str, dict] = {}
        for item in (result or {}).get("items") or []:
            cpu = memory = 0.0
            seen = False
            for container in item.get("containers") or []:
                usage = container.get("usage") or {}
                c, m = parse_quantity(usage.get("cpu")), parse_quantity(usage.get("memory"))
                if c is not None:
                    cpu += c
                    seen = True
                if m is not None:
                    memory += m
            if seen:
                out[(item.get("metadata") or {}).get("name", "")] = {"cpu": cpu, "memory": memory}
        return out


def _gpus(pod: dict) -> int:
    total = 0
    for c in (pod.get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        value = (res.get("limits") or {}).get("nvidia.com/gpu") or (res.get("requests") or {}).get("nvidia.com/gpu")
        try:
            total += int(value or 0)
        except (TypeError, ValueError):
            pass
    return total


def replica_row(index: int, pod: dict | None, name: str, usage: dict | None) -> dict:
    if pod is None:
        return {"index": index, "pod": f"{name}-{index}", "phase": "Missing", "ready": False,
                "readyContainers": NONE, "restarts": None, "node": None, "age": NONE,
                "creationTimestamp": None, "cpu": None, "memory": None, "gpus": None}
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    statuses = status.get("containerStatuses") or []
    total = len(statuses) or len((pod.get("spec") or {}).get("containers") or [])
    ready_count = sum(1 for c in statuses if c.get("ready"))
    phase = status.get("phase") or "Pending"
    main = container_of(pod)
    for c in statuses:
        waiting = (c.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") and (c.get("name") == main or phase != "Running"):
            phase = waiting["reason"]
    if meta.get("deletionTimestamp"):
        phase = "Terminating"
    cpu = memory = None
    if usage is not None and meta.get("name") in usage:
        cpu, memory = usage[meta["name"]]["cpu"], usage[meta["name"]]["memory"]
    return {"index": index, "pod": meta.get("name", ""), "phase": phase,
            "ready": bool(statuses) and ready_count == total,
            "readyContainers": f"{ready_count}/{total}",
            "restarts": sum(int(c.get("restartCount") or 0) for c in statuses),
            "node": (pod.get("spec") or {}).get("nodeName"),
            "age": age(meta.get("creationTimestamp")),
            "creationTimestamp": meta.get("creationTimestamp"),
            "cpu": None if cpu is None else format_cpu(cpu),
            "memory": None if memory is None else format_memory(memory),
            "gpus": _gpus(pod)}


def snapshot(api, metrics: Metrics, namespace: str, name: str) -> dict:
    obj = api.get_devserver(namespace, name)
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    selector = f"{DEVSERVER_LABEL}={name}"
    pods = api.list_pods(namespace, selector)
    by_index: dict[int, dict] = {}
    extra: list[dict] = []
    for pod in pods:
        idx = pod_index(pod, name)
        if idx is None or idx in by_index:
            extra.append(pod)
        else:
            by_index[idx] = pod
    expected = status.get("replicas")
    expected = desired_replicas(obj) if expected is None else int(expected)
    usage = metrics.pods(namespace, selector) if pods else None
    indices = sorted(set(range(expected)) | set(by_index))
    rows = [replica_row(i, by_index.get(i), name, usage) for i in indices]
    return {
        "devserver": name, "namespace": namespace,
        "mode": spec.get("mode") or "standalone",
        "phase": phase_of(obj), "ready": ready_column(obj),
        "time": now().strftime("%Y-%m-%dT%H:%M:%SZ"),
        "metricsAvailable": usage is not None,
        "replicas": rows,
    }


def render_table(snap: dict) -> str:
    rows = [[r["index"], r["pod"], r["phase"], r["readyContainers"],
             NONE if r["restarts"] is None else r["restarts"], r["node"] or NONE, r["age"],
             r["cpu"] or NONE, r["memory"] or NONE, NONE if r["gpus"] is None else r["gpus"]]
            for r in snap["replicas"]]
    return format_table(HEADERS, rows) if rows else "No replicas (suspended or not created yet)."


def render_header(snap: dict, interval: float | None) -> str:
    text = (f"devserver {snap['devserver']} (namespace {snap['namespace']}, {snap['mode']}): "
            f"{snap['phase']}, {snap['ready']} ready")
    if not snap["metricsAvailable"]:
        text += "; metrics unavailable"
    if interval is not None:
        text += f"  [every {interval:g}s, Ctrl-C to quit, {snap['time']}]"
    return text


@click.command("monitor")
@click.argument("name", shell_complete=complete.servers)
@click.option("--interval", type=DurationType(0.1, 3600), default="2", show_default=True, metavar="DURATION",
              help="Time between refreshes (2, 0.5, 10s, 1m).")
@click.option("--once", is_flag=True, help="Print one snapshot and exit.")
@click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table", show_default=True,
              help="table, or json (with --once one document; otherwise one compact document per line).")
@kube_options()
@pass_settings
def monitor(settings: Settings, name: str, interval: float, once: bool, output: str) -> None:
    """Watch the replicas of dev server NAME: phase, readiness, restarts, node, age, CPU/memory.

    CPU and MEMORY come from metrics.k8s.io (metrics-server) and show '-' when the
    cluster does not serve them; GPUS is the GPU count of each pod. On a terminal the
    view is redrawn in place; when piped, one snapshot is printed per --interval.

    \b
    Examples:
      devctl monitor train
      devctl monitor train --once -o json
      devctl monitor train --interval 10 > replicas.log
    """
    if interval <= 0:
        raise click.BadParameter("must be greater than 0", param_hint="'--interval'")
    namespace = settings.namespace()
    api = settings.api
    metrics = Metrics(api)
    tty = _stdout_is_tty()
    try:
        while True:
            try:
                snap = snapshot(api, metrics, namespace, name)
            except NotFound:
                raise
            except ApiError as exc:
                if once:
                    raise
                warn(f"{exc.format_message()} (retrying in {interval:g}s)")
                _sleep(interval)
                continue
            if output == "json":
                click.echo(dump_json(snap) if once else _compact(snap))
            elif once:
                info(render_header(snap, None))
                click.echo(render_table(snap))
            elif not tty:
                click.echo(render_header(snap, None) + f" at {snap['time']}")
                click.echo(render_table(snap) + "\n")
            else:
                click.echo(CLEAR + render_header(snap, interval) + "\n" + render_table(snap), color=True)
            if once:
                return
            sys.stdout.flush()
            _sleep(interval)
    except KeyboardInterrupt:
        return


def _compact(obj: dict) -> str:
    import json

    return json.dumps(obj, separators=(",", ":"), default=str)


def _stdout_is_tty() -> bool:
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False
