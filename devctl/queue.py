"""``devctl queue``: my DevServers waiting for Kueue admission (``status.phase: Queued``)."""
from __future__ import annotations

from typing import Any

import click

from .settings import Settings
from .context import kube_options, pass_settings
from .errors import ApiError
from .output import age, info, output_option, print_object, print_table, truncate
from .servers import desired_replicas, eta_column, gpu_count
from .wait import condition


def flavor_gpus(api) -> dict[str, int]:
    """GPUs per pod of every flavor; empty when flavors may not be read."""
    try:
        flavors = api.list_flavors()
    except ApiError:
        return {}
    return {f["metadata"]["name"]: gpu_count(f) for f in flavors}


def queued_entry(obj: dict, gpus_per_pod: dict[str, int]) -> dict[str, Any]:
    meta, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
    queue = status.get("queue") or {}
    replicas = desired_replicas(dict(obj, spec=dict(spec, suspend=False)))
    per_pod = gpus_per_pod.get(spec.get("flavor", ""))
    return {
        "name": meta["name"], "namespace": meta.get("namespace"),
        "position": queue.get("position"), "localQueue": queue.get("name"),
        "estimatedStartTime": queue.get("estimatedStartTime"),
        "clusterQueue": queue.get("clusterQueue"), "workload": queue.get("workload"),
        "flavor": spec.get("flavor"), "replicas": replicas,
        "gpus": per_pod * replicas if per_pod is not None else None,
        "queuedSince": status.get("lastTransitionTime"),
        "creationTimestamp": meta.get("creationTimestamp"),
        "message": (condition(obj, "Ready") or {}).get("message") or "",
    }


def _order(entry: dict) -> tuple:
    position = entry["position"]
    return (entry["namespace"] or "", entry["clusterQueue"] or "",
            position if isinstance(position, int) else float("inf"), entry["name"])


@click.command("queue")
@click.option("-A", "--all-namespaces", is_flag=True, help="Queued dev servers in every namespace.")
@output_option()
@kube_options()
@pass_settings
def queue(settings: Settings, all_namespaces: bool, output: str) -> None:
    """List my dev servers waiting for GPUs (Kueue): position, ClusterQueue, flavor, GPUs."""
    namespace = None if all_namespaces else settings.namespace()
    api = settings.api
    queued = [o for o in api.list_devservers(namespace)
              if (o.get("status") or {}).get("phase") == "Queued"]
    gpus_per_pod = flavor_gpus(api) if queued else {}
    entries = sorted((queued_entry(o, gpus_per_pod) for o in queued), key=_order)
    if not entries:  # like kubectl: the note on stderr, nothing (or []) on stdout
        where = "any namespace" if all_namespaces else f'namespace "{namespace}"'
        info(f"No queued devservers in {where}.")
    if output != "table":
        print_object(entries, output)
        return
    if not entries:
        return
    headers = ["NAME", "POSITION", "ETA", "CLUSTERQUEUE", "FLAVOR", "GPUS", "AGE", "MESSAGE"]
    if all_namespaces:
        headers.insert(0, "NAMESPACE")
    rows = []
    for e in entries:
        row = [e["name"], e["position"] if e["position"] is not None else "-", eta_column(e["estimatedStartTime"]),
               e["clusterQueue"] or "-",
               e["flavor"], e["gpus"] if e["gpus"] is not None else "?",
               age(e["creationTimestamp"]), truncate(e["message"], 60)]
        if all_namespaces:
            row.insert(0, e["namespace"])
        rows.append(row)
    print_table(headers, rows)
