"""``devctl quota``: my quota, used and limit, per flavor (Kueue) or for the namespace.

With Kueue the limits are the nominal quotas of the ClusterQueue behind the namespace's
LocalQueue (or, when the ClusterQueue may not be read, the DevUser's ``spec.quota``) and
the usage is the LocalQueue's ``status.flavorsUsage``. Without Kueue the namespace
ResourceQuota ``torchdev-quota`` (``status.hard`` / ``status.used``) is the one row, flavor
``*``. Storage, volume and DevServer counts always come from that ResourceQuota.
"""
from __future__ import annotations

from typing import Any

import click

from . import GROUP
from .settings import Settings
from .context import kube_options, pass_settings
from .errors import ApiError, NotFound
from .output import format_table, human_size, info, output_option, print_object, warn
from .servers import gpu_count
from .users import DEFAULT_QUEUE, find_devuser, validate_user

RESOURCE_QUOTA = "torchdev-quota"
GPU = "nvidia.com/gpu"
# report key -> Kueue resource name / ResourceQuota key
FLAVOR_RESOURCES = (("gpus", GPU, f"requests.{GPU}"), ("cpu", "cpu", "requests.cpu"),
                    ("memory", "memory", "requests.memory"))
NAMESPACE_RESOURCES = (("storage", "requests.storage"),
                       ("persistentVolumeClaims", "persistentvolumeclaims"),
                       ("devServers", f"count/devservers.{GROUP}"))


def _usage(entries: list[dict] | None) -> dict[str, dict[str, str]]:
    """``flavorsUsage`` entries -> {flavor: {resource: total}}."""
    return {f["name"]: {r["name"]: str(r.get("total", "0")) for r in f.get("resources") or []}
            for f in entries or []}


def nominal_quotas(cq: dict) -> dict[str, dict[str, str]]:
    """{flavor: {resource: nominalQuota}} of a ClusterQueue, in its order."""
    out: dict[str, dict[str, str]] = {}
    for group in (cq.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            quotas = out.setdefault(flavor["name"], {})
            for res in flavor.get("resources") or []:
                quotas[res["name"]] = str(res.get("nominalQuota", "0"))
    return out


def devuser_quotas(devuser: dict, flavors: list[dict]) -> dict[str, dict[str, str]]:
    """The per-flavor limits a DevUser's ``spec.quota`` asks for, as the DevUser role renders
    them into its ClusterQueue (plugins/filter/devuser.py ``resource_groups``): an override,
    else the defaults, ``gpus`` only for flavors with GPUs."""
    quota = (devuser.get("spec") or {}).get("quota") or {}
    overrides = {f["name"]: f for f in quota.get("flavors") or []}
    out: dict[str, dict[str, str]] = {}
    names = sorted(f["metadata"]["name"] for f in flavors) or list(overrides)
    gpu_flavors = {f["metadata"]["name"] for f in flavors if gpu_count(f) > 0}
    for name in names:
        o = overrides.get(name, {})
        gpus = o.get("gpus", quota.get("gpus", 0) if name in gpu_flavors else 0)
        out[name] = {GPU: str(gpus), "cpu": str(o.get("cpu", quota.get("cpu", "64"))),
                     "memory": str(o.get("memory", quota.get("memory", "256Gi")))}
    return out


def _pair(used: str | None, limit: str | None) -> dict[str, str | None]:
    return {"used": used if used is not None else "0", "limit": limit}


def quota_report(api, *, namespace: str, devuser: dict | None) -> dict[str, Any]:
    status = (devuser or {}).get("status") or {}
    report: dict[str, Any] = {"user": devuser["metadata"]["name"] if devuser else None,
                              "namespace": namespace, "kueue": False, "localQueue": None,
                              "clusterQueue": None, "limitsFrom": None, "usageFrom": None,
                              "flavors": [], "namespaceQuota": {}}
    try:
        rq = api.get_resourcequota(namespace, RESOURCE_QUOTA)
    except NotFound:
        rq = None
        warn(f'resourcequota "{RESOURCE_QUOTA}" not found in namespace "{namespace}"')
    rq_status = (rq or {}).get("status") or {}
    hard = rq_status.get("hard") or ((rq or {}).get("spec") or {}).get("hard") or {}
    used = rq_status.get("used") or {}
    if rq is not None:
        report["namespaceQuota"] = {key: _pair(used.get(name), hard.get(name))
                                    for key, name in NAMESPACE_RESOURCES if name in hard}

    lq = None
    if status.get("kueue") is not False:
        lq_name = status.get("queueName") or DEFAULT_QUEUE
        try:
            lq = api.get_localqueue(namespace, lq_name)
        except ApiError as exc:
            if exc.status != 404:  # not found, or Kueue not served
                raise
    if lq is None:
        report.update(limitsFrom="ResourceQuota" if rq else None, usageFrom="ResourceQuota" if rq else None)
        if rq is not None:
            row: dict[str, Any] = {"flavor": "*"}
            row.update({key: _pair(used.get(name), hard.get(name)) for key, _res, name in FLAVOR_RESOURCES})
            report["flavors"].append(row)
        return report

    cq_name = (lq.get("spec") or {}).get("clusterQueue")
    report.update(kueue=True, localQueue=lq["metadata"]["name"], clusterQueue=cq_name)
    cq = None
    try:
        cq = api.get_clusterqueue(cq_name) if cq_name else None
    except ApiError as exc:
        if exc.status not in (403, 404):
            raise
    if cq is not None:
        limits, report["limitsFrom"] = nominal_quotas(cq), "ClusterQueue"
    elif devuser is not None:
        try:
            flavors = api.list_flavors()
        except ApiError:
            flavors = []
        limits, report["limitsFrom"] = devuser_quotas(devuser, flavors), "DevUser"
    else:
        limits = {}
        warn(f"cannot read ClusterQueue {cq_name} nor your DevUser: the limits are unknown")
    lq_status = lq.get("status") or {}
    # v1beta2 flavorsUsage; v1beta1 called it flavorUsage
    entries = lq_status.get("flavorsUsage") or lq_status.get("flavorUsage")
    if entries is not None:
        usage, report["usageFrom"] = _usage(entries), "LocalQueue"
    elif cq is not None and (cq.get("status") or {}).get("flavorsUsage") is not None:
        usage, report["usageFrom"] = _usage(cq["status"]["flavorsUsage"]), "ClusterQueue"
    else:
        usage = {}
    for flavor in list(limits) + [f for f in usage if f not in limits]:
        row = {"flavor": flavor}
        row.update({key: _pair((usage.get(flavor) or {}).get(res), (limits.get(flavor) or {}).get(res))
                    for key, res, _rq in FLAVOR_RESOURCES})
        report["flavors"].append(row)
    return report


def _cell(pair: dict, size: bool = False) -> str:
    """used/limit; memory and storage in binary units (human_size)."""
    show = human_size if size else str
    return f"{show(pair['used'])}/{show(pair['limit']) if pair['limit'] is not None else '-'}"


@click.command("quota")
@click.option("--user", callback=lambda c, p, v: validate_user(c, p, v) if v else v, metavar="USER",
              help="Show this user's quota (default: yours).")
@output_option()
@kube_options()
@pass_settings
def quota(settings: Settings, user: str | None, output: str) -> None:
    """Show the quota, used and limit, per flavor: GPUs, CPU, memory; storage and dev servers."""
    api = settings.api
    if user:
        devuser, _how = find_devuser(api, name=user)
        namespace = (devuser.get("status") or {}).get("namespace") or f"dev-{user}"
    else:
        namespace = settings.namespace()
        devuser, _how = find_devuser(api, emails=[settings.owner()], namespace=namespace)
    report = quota_report(api, namespace=namespace, devuser=devuser)
    if output != "table":
        print_object(report, output)
        return
    where = f"namespace {namespace}"
    if report["kueue"]:
        where += f", LocalQueue {report['localQueue']} -> ClusterQueue {report['clusterQueue']}"
    info(where)
    if report["flavors"]:
        click.echo(format_table(["FLAVOR", "GPUS", "CPU", "MEMORY"],
                                [[r["flavor"], _cell(r["gpus"]), _cell(r["cpu"]), _cell(r["memory"], size=True)]
                                 for r in report["flavors"]]))
    else:
        info("no flavor quota found")
    if report["namespaceQuota"]:
        click.echo()
        click.echo(format_table(["RESOURCE", "USED", "LIMIT"],
                                [[key, *((human_size(v) if key == "storage" and v is not None else v)
                                         for v in (pair["used"], pair["limit"]))]
                                 for key, pair in report["namespaceQuota"].items()]))
