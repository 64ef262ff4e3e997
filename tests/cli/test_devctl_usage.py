"""devctl usage against kubesim: the UsageRecords of a namespace (or every one), aggregated per
user and per flavor (module_utils/usage.py usage_summary, tested table-driven in
tests/module_utils/test_usage.py), as JSON, YAML, CSV and a table.

No operator runs: the tests write the records as the operator would (kubesim admits them
against the UsageRecord CRD).
"""
from __future__ import annotations

import csv
import io
import json
from datetime import datetime, timedelta, timezone

import pytest
import yaml

from devctl_helpers import GROUP, VERSION, as_json, invoke, unique

JANE, ADA = "jane@example.com", "ada@example.com"


def ago(**delta) -> str:
    return (datetime.now(timezone.utc) - timedelta(**delta)).strftime("%Y-%m-%dT%H:%M:%SZ")


def record(cluster, name, user=JANE, flavor="gpu-a10g-1", reason="Expired", ended_days=1, hours=2, wait_s=60,
           gpus=1, price="1.2120", early=False, saved="0.0000", namespace=None) -> dict:
    ended = datetime.now(timezone.utc) - timedelta(days=ended_days)
    started = ended - timedelta(hours=hours)
    expires = ended + timedelta(hours=1) if early or reason == "Idle" else ended
    stamp = lambda t: t.strftime("%Y-%m-%dT%H:%M:%SZ")  # noqa: E731
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "UsageRecord",
            "metadata": {"name": name, "labels": {"torchdev.io/devserver": name}},
            "spec": {"user": user, "server": name, "flavor": flavor, "replicas": 1, "gpus": gpus,
                     "pricePerHour": price, "queuedAt": stamp(started - timedelta(seconds=wait_s)),
                     "startedAt": stamp(started), "expiresAt": stamp(expires), "endedAt": stamp(ended),
                     "endReason": reason, "gpuHours": "%.4f" % (hours * gpus), "cost": "%.4f" % (hours * float(price)),
                     "idleSavedGPUHours": saved}}
    return cluster.custom.create_namespaced_custom_object(GROUP, VERSION, namespace or cluster.ns, "usagerecords", body)


@pytest.fixture
def history(cluster):
    """Jane: an expiry, an early cancellation and an idle shutdown on an A10G, a run on 8 H100s;
    Ada (sharing the namespace): one stop; and one of Jane's from 40 days ago."""
    record(cluster, "a", reason="Expired", hours=2, wait_s=30)
    record(cluster, "b", reason="Cancelled", hours=1, wait_s=90, early=True)
    record(cluster, "c", reason="Idle", hours=1, wait_s=0, saved="1.0000")
    record(cluster, "d", flavor="gpu-h100-8", reason="Stopped", hours=1, gpus=8, price="98.3200", wait_s=600)
    record(cluster, "e", user=ADA, reason="Stopped", hours=3, wait_s=120)
    record(cluster, "old", reason="Deleted", ended_days=40, hours=5)


def test_json_aggregates_per_user_and_flavor(devctl, history, ns):
    report = as_json(devctl("usage", "-o", "json"))
    assert report["namespace"] == ns and report["records"] == 5  # the 40-day-old one is outside --since 30d
    total = report["total"]
    assert total["launched"] == 5
    assert total["ended"] == {"Expired": 1, "Cancelled": 1, "Idle": 1, "Stopped": 2, "Deleted": 0, "Succeeded": 0,
                              "Failed": 0, "Preempted": 0, "Evicted": 0}
    assert total["earlyCancellations"] == 1
    assert total["meanWaitSeconds"] == (30 + 90 + 0 + 600 + 120) // 5
    assert total["gpuHours"] == "15.0000"  # 2 + 1 + 1 + 8 + 3
    assert total["cost"] == "106.8040"  # (2 + 1 + 1 + 3) x 1.212 + 98.32
    assert total["idleSavedGPUHours"] == "1.0000"
    users = {row["user"]: row for row in report["byUser"]}
    assert list(users) == [ADA, JANE]
    assert users[JANE]["launched"] == 4 and users[ADA]["launched"] == 1 and users[ADA]["gpuHours"] == "3.0000"
    flavors = {row["flavor"]: row for row in report["byFlavor"]}
    assert flavors["gpu-h100-8"]["gpuHours"] == "8.0000" and flavors["gpu-h100-8"]["cost"] == "98.3200"
    assert flavors["gpu-a10g-1"]["launched"] == 4 and flavors["gpu-a10g-1"]["earlyCancellations"] == 1


@pytest.mark.parametrize("args, launched", [
    (["--since", "60d"], 6), (["--since", "0"], 6), (["--since", "36h"], 5), (["--since", "12h"], 0),
    (["--user", ADA], 1), (["--user", JANE, "--since", "0"], 5), (["--user", "nobody@example.com"], 0),
])
def test_filters(devctl, history, args, launched):
    report = as_json(devctl("usage", "-o", "json", *args))
    assert report["total"]["launched"] == launched
    if "--user" in args:
        assert all(row["user"] == args[args.index("--user") + 1] for row in report["byUser"])


def test_csv_is_one_row_per_user_flavor_and_total(devctl, history):
    result = devctl("usage", "-o", "csv")
    assert result.exit_code == 0, result.stderr
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert [(r["group"], r["key"]) for r in rows] == [
        ("user", ADA), ("user", JANE), ("flavor", "gpu-a10g-1"), ("flavor", "gpu-h100-8"), ("kind", "DevServer"),
        ("total", "")]
    total = rows[-1]
    assert (total["launched"], total["expired"], total["cancelled"], total["earlyCancellations"], total["idle"],
            total["stopped"], total["deleted"]) == ("5", "1", "1", "1", "1", "2", "0")
    assert (total["gpuHours"], total["cost"], total["idleSavedGPUHours"]) == ("15.0000", "106.8040", "1.0000")


def test_yaml_matches_json(devctl, history):
    result = devctl("usage", "-o", "yaml")
    assert result.exit_code == 0, result.stderr
    from_yaml, from_json = yaml.safe_load(result.stdout), as_json(devctl("usage", "-o", "json"))
    # 'since' is now minus 30 days, read from the clock by each call: the two calls may be a second apart
    stamps = [datetime.strptime(r.pop("since"), "%Y-%m-%dT%H:%M:%SZ") for r in (from_yaml, from_json)]
    assert timedelta(0) <= stamps[1] - stamps[0] <= timedelta(minutes=5)
    assert from_yaml == from_json


def test_table(devctl, history):
    result = devctl("usage")
    assert result.exit_code == 0, result.stderr
    users, flavors, kinds = result.stdout.strip().split("\n\n")
    header, *rows = [line.split() for line in users.splitlines()]
    assert header[:3] == ["USER", "LAUNCHED", "EXPIRED"] and header[-1] == "IDLE-SAVED-GPU-H"
    assert [r[0] for r in rows] == [ADA, JANE, "TOTAL"]
    assert rows[-1][:5] == ["TOTAL", "5", "1", "1", "(1"] and rows[-1][-3:] == ["15.00", "$106.80", "1.00"]
    assert [line.split()[0] for line in flavors.splitlines()] == ["FLAVOR", "gpu-a10g-1", "gpu-h100-8", "TOTAL"]
    assert [line.split()[0] for line in kinds.splitlines()] == ["KIND", "DevServer", "TOTAL"]


def test_all_namespaces(devctl, sim, cluster, history):
    from kubernetes import client

    other = unique("dev-u")
    client.CoreV1Api(sim.k8s).create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other}})
    record(cluster, "elsewhere", user="bob@example.com", namespace=other)
    mine = as_json(devctl("usage", "-o", "json"))
    assert "bob@example.com" not in [row["user"] for row in mine["byUser"]]
    everywhere = as_json(devctl("usage", "--all", "-o", "json"))
    assert everywhere["namespace"] is None
    assert "bob@example.com" in [row["user"] for row in everywhere["byUser"]]
    bob = as_json(devctl("usage", "-A", "--user", "bob@example.com", "-o", "json"))
    assert bob["total"]["launched"] == 1


def test_user_picks_their_namespace(sim, cluster):
    """Without -n, --user jane@... reads dev-jane (as every devctl command derives it)."""
    from kubernetes import client

    core = client.CoreV1Api(sim.k8s)
    if "dev-jane" not in [n.metadata.name for n in core.list_namespace().items]:
        core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "dev-jane"}})
    record(cluster, unique("jane-"), namespace="dev-jane")
    report = as_json(invoke(["--kubeconfig", sim.kubeconfig, "usage", "--user", JANE, "-o", "json"]))
    assert report["namespace"] == "dev-jane" and report["total"]["launched"] >= 1


def test_nothing_recorded_is_not_an_error(devctl, ns):
    result = devctl("usage", "-o", "json")
    report = as_json(result)
    assert report["records"] == 0 and report["byUser"] == [] and report["total"]["gpuHours"] == "0.0000"
    assert f'No usage records in namespace "{ns}"' in result.stderr
    table = devctl("usage")
    assert table.exit_code == 0 and table.stdout == "" and "No usage records" in table.stderr


@pytest.mark.parametrize("args, text", [(["--since", "a week"], "invalid duration"), (["-o", "xml"], "xml")])
def test_usage_errors_are_one_line(devctl, args, text):
    result = devctl("usage", *args)
    assert result.exit_code == 2 and text in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_api_errors_are_one_line(tmp_path):
    bad = tmp_path / "kubeconfig"
    bad.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "current-context": "x",
                                   "contexts": [{"name": "x", "context": {"cluster": "x", "user": "x"}}],
                                   "clusters": [{"name": "x", "cluster": {"server": "https://127.0.0.1:1"}}],
                                   "users": [{"name": "x", "user": {"token": "t"}}]}))
    result = invoke(["--kubeconfig", str(bad), "-n", "dev-x", "usage", "-o", "json"])
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.startswith("error: cannot reach the Kubernetes API") and len(result.stderr.splitlines()) == 1
    json.dumps(result.stderr)  # printable


def test_a_reservation_still_running_is_counted_apart(devctl, history, cluster):
    """An open record (issue 25.5: written when the reservation starts) is not summed: it counts
    once it ends."""
    started = datetime.now(timezone.utc) - timedelta(hours=1)
    stamp = started.strftime("%Y-%m-%dT%H:%M:%SZ")
    cluster.custom.create_namespaced_custom_object(GROUP, VERSION, cluster.ns, "usagerecords", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "UsageRecord",
        "metadata": {"name": "live", "labels": {"torchdev.io/devserver": "live"}},
        "spec": {"user": JANE, "server": "live", "flavor": "gpu-a10g-1", "replicas": 1, "gpus": 1,
                 "pricePerHour": "1.2120", "queuedAt": stamp, "startedAt": stamp}})
    for since in ("30d", "0"):
        result = devctl("usage", "-o", "json", "--since", since)
        assert result.exit_code == 0, result.stderr
        report = json.loads(result.stdout)
        assert report["running"] == 1 and "1 reservation(s) still running" in result.stderr
        assert report["total"]["launched"] == (5 if since == "30d" else 6)


def job_record(cluster, name, kind, gpus, hours, reason="Succeeded", replicas=1) -> dict:
    """A job's record as the operator writes it (module_utils/usage.py job_usage_record): kind, no flavor, price 0."""
    ended = datetime.now(timezone.utc) - timedelta(hours=1)
    started = ended - timedelta(hours=hours)
    stamp = lambda t: t.strftime("%Y-%m-%dT%H:%M:%SZ")  # noqa: E731
    return cluster.custom.create_namespaced_custom_object(GROUP, VERSION, cluster.ns, "usagerecords", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "UsageRecord", "metadata": {"name": name},
        "spec": {"kind": kind, "user": JANE, "server": name, "replicas": replicas, "gpus": gpus, "pricePerHour": "0",
                 "queuedAt": stamp(started), "startedAt": stamp(started), "endedAt": stamp(ended), "endReason": reason,
                 "gpuHours": "%.4f" % (hours * gpus), "cost": "0.0000", "idleSavedGPUHours": "0.0000"}})


def test_usage_by_kind(devctl, history, cluster):
    """Issue 25.3: EphemeralAccelerationJob and TrainingJob runs are shown (and filtered) by kind."""
    job_record(cluster, "eaj-infer-1", "EphemeralAccelerationJob", gpus=1, hours=2)
    job_record(cluster, "tj-train-1", "TrainingJob", gpus=8, hours=3, reason="Failed", replicas=4)
    report = as_json(devctl("usage", "-o", "json"))
    kinds = {row["kind"]: row for row in report["byKind"]}
    assert list(kinds) == ["DevServer", "EphemeralAccelerationJob", "TrainingJob"]
    assert (kinds["DevServer"]["launched"], kinds["DevServer"]["gpuHours"]) == (5, "15.0000")
    assert (kinds["EphemeralAccelerationJob"]["gpuHours"], kinds["EphemeralAccelerationJob"]["ended"]["Succeeded"]) == \
        ("2.0000", 1)
    assert (kinds["TrainingJob"]["gpuHours"], kinds["TrainingJob"]["ended"]["Failed"]) == ("24.0000", 1)
    assert report["total"]["gpuHours"] == "41.0000" and report["total"]["launched"] == 7
    only = as_json(devctl("usage", "-o", "json", "--kind", "TrainingJob"))
    assert only["kind"] == "TrainingJob" and only["records"] == 1 and only["total"]["gpuHours"] == "24.0000"
    assert [row["kind"] for row in only["byKind"]] == ["TrainingJob"]
    table = devctl("usage", "--kind", "EphemeralAccelerationJob")
    assert table.exit_code == 0, table.stderr
    kinds_table = table.stdout.strip().split("\n\n")[2]
    assert [line.split()[0] for line in kinds_table.splitlines()] == ["KIND", "EphemeralAccelerationJob", "TOTAL"]
    assert "-" in [line.split()[0] for line in table.stdout.strip().split("\n\n")[1].splitlines()]  # no flavor
    bad = devctl("usage", "--kind", "Pod")
    assert bad.exit_code == 2 and "Pod" in bad.stderr


def test_usage_counts_trainingjob_admissions_that_kueue_ended(devctl, history, cluster):
    """Issue 26.5: Kueue evicted a TrainingJob twice (preempted, then a PodsReadyTimeout): each
    admission's record is closed with endReason Preempted or Evicted (the UsageRecord CRD admits
    them for a TrainingJob) and devctl usage counts them by reason, in every output."""
    job_record(cluster, "tj-train-1", "TrainingJob", gpus=8, hours=1, reason="Preempted", replicas=2)
    job_record(cluster, "tj-train-2", "TrainingJob", gpus=8, hours=2, reason="Evicted", replicas=2)
    job_record(cluster, "tj-train-3", "TrainingJob", gpus=8, hours=3, reason="Succeeded", replicas=2)
    only = as_json(devctl("usage", "-o", "json", "--kind", "TrainingJob"))
    ended = only["total"]["ended"]
    assert (ended["Preempted"], ended["Evicted"], ended["Succeeded"], only["total"]["launched"]) == (1, 1, 1, 3)
    assert only["total"]["gpuHours"] == "48.0000"
    csv_text = devctl("usage", "-o", "csv", "--kind", "TrainingJob").stdout
    header, *rows = csv_text.splitlines()
    total = dict(zip(header.split(","), rows[-1].split(",")))
    assert (total["preempted"], total["evicted"], total["succeeded"]) == ("1", "1", "1")
    table = devctl("usage", "--kind", "TrainingJob")
    assert table.exit_code == 0, table.stderr
    kinds_table = table.stdout.strip().split("\n\n")[2].splitlines()
    columns, total_row = kinds_table[0].split(), kinds_table[-1].split()
    assert columns[columns.index("PREEMPTED"):columns.index("EVICTED") + 1] == ["PREEMPTED", "EVICTED"]
    at = columns.index("PREEMPTED") + 2  # CANCELLED's value "0 (0 early)" is three words
    assert total_row[0] == "TOTAL" and total_row[at:at + 2] == ["1", "1"]
