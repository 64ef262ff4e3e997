"""``devctl flavors``: the DevServerFlavors (cluster-scoped) users can pick from."""
from __future__ import annotations

import click
from ansible_collections.torchdev.operator.plugins.module_utils.flavor import flavor_gpu_count

from .config import Settings
from .context import kube_options, pass_settings
from .output import as_list, output_option, print_object, print_table, truncate


def gpu_count(obj: dict) -> int:
    """GPUs per replica of a DevServerFlavor, as the operator counts them
    (module_utils/flavor.py ``flavor_gpu_count``); 0 for a flavor it would reject."""
    try:
        return flavor_gpu_count(obj.get("spec") or {})
    except ValueError:
        return 0


def flavor_row(obj: dict) -> list[str]:
    spec = obj.get("spec") or {}
    resources = spec.get("resources") or {}
    requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
    gpu = spec.get("gpu") or {}
    gpus = gpu_count(obj)
    price = spec.get("pricePerHour")
    return [
        obj["metadata"]["name"],
        gpu.get("type") or "-",
        str(gpus),
        str(requests.get("cpu", limits.get("cpu", "-"))),
        str(requests.get("memory", limits.get("memory", "-"))),
        f"${price}" if price not in (None, "") else "-",
        truncate(spec.get("description", ""), 60),
    ]


@click.command("flavors")
@output_option()
@kube_options(namespaced=False)
@pass_settings
def flavors(settings: Settings, output: str) -> None:
    """List the dev server flavors (GPU type and count, CPU, memory, price)."""
    items = sorted(settings.api.list_flavors(), key=lambda o: o["metadata"]["name"])
    if output != "table":
        print_object(as_list(items), output)
        return
    print_table(["NAME", "GPU-TYPE", "GPUS", "CPU", "MEMORY", "PRICE/H", "DESCRIPTION"],
                [flavor_row(o) for o in items], empty="No devserver flavors found.")
