"""``devctl usage``: what my reservations used, from the UsageRecords the operator writes (docs/api.md
"UsageRecord"): per user, per flavor and per kind (DevServer, EphemeralAccelerationJob,
TrainingJob: spec.kind), the reservations and job runs launched, how they ended, early
cancellations, the mean wait, GPU-hours, cost and the GPU-hours idle shutdown saved. The
aggregation is module_utils/usage.py ``usage_summary``: the record of a reservation still
running (open) is counted apart (``running``), not summed.
"""
from __future__ import annotations

import csv
import io
from datetime import timedelta
from typing import Any

import click
from ansible_collections.torchdev.operator.plugins.module_utils.usage import KINDS, RECORD_END_REASONS, usage_summary

from .settings import Settings
from .context import kube_options, pass_settings
from .output import DURATION, format_table, human_duration, info, now, output_option, print_object

# The columns of a row, in table, CSV and JSON order (besides the key).
CSV_COLUMNS = ["launched", *(reason.lower() for reason in RECORD_END_REASONS), "earlyCancellations", "meanWaitSeconds",
               "gpuHours", "cost", "idleSavedGPUHours"]


def _row(row: dict, key_name: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {key_name: row["key"]} if key_name else {}
    out.update({k: v for k, v in row.items() if k != "key"})
    return out


def report(records: list[dict], *, since: str | None, user: str | None, namespace: str | None,
           kind: str | None = None) -> dict[str, Any]:
    """The machine-readable report (``-o json|yaml``)."""
    summary = usage_summary(records, since=since, user=user, kind=kind)
    return {"namespace": namespace, "user": user, "kind": kind, "since": since, "records": summary["records"],
            "running": summary["running"],
            "byUser": [_row(r, "user") for r in summary["byUser"]],
            "byFlavor": [_row(r, "flavor") for r in summary["byFlavor"]],
            "byKind": [_row(r, "kind") for r in summary["byKind"]],
            "total": _row(summary["total"], None)}


def _flat(row: dict) -> list[Any]:
    ended = row["ended"]
    return [row["launched"], *(ended[reason] for reason in RECORD_END_REASONS), row["earlyCancellations"],
            row["meanWaitSeconds"], row["gpuHours"], row["cost"], row["idleSavedGPUHours"]]


def to_csv(data: dict[str, Any]) -> str:
    """One row per user, per flavor, per kind and the total: ``group,key,<CSV_COLUMNS>``."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["group", "key", *CSV_COLUMNS])
    for group, key in (("byUser", "user"), ("byFlavor", "flavor"), ("byKind", "kind")):
        for row in data[group]:
            writer.writerow([key, row[key], *_flat(row)])
    writer.writerow(["total", "", *_flat(data["total"])])
    return buf.getvalue()


def _table_row(key: str, row: dict) -> list[str]:
    ended = row["ended"]
    return [key, str(row["launched"]), str(ended["Expired"]), "%d (%d early)" % (ended["Cancelled"], row["earlyCancellations"]),
            str(ended["Idle"]), str(ended["Stopped"]), str(ended["Deleted"]), str(ended["Succeeded"]),
            str(ended["Failed"]), str(ended["Preempted"]), str(ended["Evicted"]),
            human_duration(row["meanWaitSeconds"]) if row["launched"] else "-",
            "%.2f" % float(row["gpuHours"]), "$%.2f" % float(row["cost"]), "%.2f" % float(row["idleSavedGPUHours"])]


def to_table(data: dict[str, Any]) -> str:
    columns = ["LAUNCHED", "EXPIRED", "CANCELLED", "IDLE", "STOPPED", "DELETED", "SUCCEEDED", "FAILED", "PREEMPTED",
               "EVICTED", "MEAN-WAIT",
               "GPU-HOURS", "COST", "IDLE-SAVED-GPU-H"]
    parts = []
    for group, key in (("byUser", "user"), ("byFlavor", "flavor"), ("byKind", "kind")):
        # a job's record has no flavor: "-"
        rows = [_table_row(row[key] or "-", row) for row in data[group]] + [_table_row("TOTAL", data["total"])]
        parts.append(format_table([key.upper(), *columns], rows))
    return "\n\n".join(parts)


@click.command("usage")
@click.option("--user", metavar="EMAIL", help="Only this user's reservations (spec.user); also picks their namespace dev-<user>.")
@click.option("--all", "-A", "--all-namespaces", "all_", is_flag=True,
              help="Every namespace the credentials may read (admins).")
@click.option("--since", type=DURATION, default="30d", show_default=True,
              help="Reservations that ended in this window (e.g. 7d, 12h); 0 for every record kept.")
@click.option("--kind", type=click.Choice(KINDS),
              help="Only the records of this kind (DevServer reservations, or EphemeralAccelerationJob / TrainingJob runs).")
@output_option(formats=("table", "json", "yaml", "csv"))
@kube_options()
@pass_settings
def usage(settings: Settings, user: str | None, all_: bool, since: float, kind: str | None, output: str) -> None:
    """What reservations and job runs used: launched, ended by reason, early cancellations,
    mean wait, GPU-hours, cost and the GPU-hours idle shutdown saved, per user, per flavor and
    per kind (DevServer, EphemeralAccelerationJob, TrainingJob).

    Reads the UsageRecords of your namespace (-n, --user's, or --all), kept by the operator for
    its retention (90 days by default) after each reservation ends. Reservations still running
    (open records) are counted apart and summed once they end.
    """
    namespace = None if all_ else settings.namespace(user)
    start = None
    if since > 0:
        start = (now() - timedelta(seconds=since)).strftime("%Y-%m-%dT%H:%M:%SZ")
    data = report(settings.api.list_usagerecords(namespace), since=start, user=user, namespace=namespace, kind=kind)
    if data["running"]:
        info(f"{data['running']} reservation(s) still running: counted when they end.")
    if not data["records"]:  # like kubectl: the note on stderr, the (empty) report on stdout
        where = "any namespace" if all_ else f'namespace "{namespace}"'
        info(f"No usage records in {where}" + (f" since {start}." if start else "."))
    if output == "csv":
        click.echo(to_csv(data), nl=False)
    elif output != "table":
        print_object(data, output)
    elif data["records"]:
        click.echo(to_table(data))
