"""``devctl flavors``: the DevServerFlavors (cluster-scoped) users can pick from."""
from __future__ import annotations

import click

from . import GROUP
from .settings import Settings
from .context import kube_options, pass_settings
from .output import LIST_FORMATS, output_option, print_objects, print_table, selector_option, truncate
from .servers import gpu_count


def flavor_row(obj: dict, wide: bool = False) -> list[str]:
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
        truncate(spec.get("description", ""), 200 if wide else 60),
    ] + ([",".join(f"{k}={v}" for k, v in sorted((spec.get("nodeSelector") or {}).items())) or "-",
          ",".join(str(t.get("key") or "*") for t in spec.get("tolerations") or []) or "-"] if wide else [])


@click.command("flavors")
@selector_option("flavors")
@output_option(formats=LIST_FORMATS)
@kube_options(namespaced=False)
@pass_settings
def flavors(settings: Settings, selector: str | None, output: str) -> None:
    """List the dev server flavors (GPU type and count, CPU, memory, price; -o wide adds the node
    selector and the tolerations' keys)."""
    items = sorted(settings.api.list_flavors(selector), key=lambda o: o["metadata"]["name"])
    if print_objects(items, output, f"devserverflavor.{GROUP}"):
        return
    wide = output == "wide"
    print_table(["NAME", "GPU-TYPE", "GPUS", "CPU", "MEMORY", "PRICE/H", "DESCRIPTION"]
                + (["NODE-SELECTOR", "TOLERATIONS"] if wide else []),
                [flavor_row(o, wide) for o in items], empty="No devserver flavors found.")
