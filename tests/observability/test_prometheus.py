"""torchdev's metrics with a real Prometheus (issue 13): the exporter watches kubesim, a
Prometheus on a loopback port scrapes it with the shipped rules (config/prometheus/rules.yaml),
and the test reads the recording rules' results from Prometheus's HTTP API; promtool checks
and unit-tests the rules; every PromQL expression of the Grafana dashboard is accepted.

Needs Debian's `prometheus` package (prometheus and promtool; `make deps`, which `make test` runs, installs it).
"""
from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml

from _e2e_helpers import GROUP, VERSION, devserver
from kubesim.testing import wait_for

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "config" / "prometheus" / "rules.yaml"
DASHBOARD = ROOT / "config" / "grafana" / "torchdev-dashboard.json"
PRICE = 36.0  # dollars per hour: a cent every second


def tool(name):
    found = shutil.which(name)
    if not found:
        pytest.fail(f"{name} not found: this test runs a real Prometheus (Debian: apt-get install prometheus; "
                    "make deps installs it)", pytrace=False)
    return found


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait(predicate, timeout=90.0, what="condition"):
    return wait_for(predicate, timeout, 0.2, what)


@pytest.fixture(scope="module")
def rules_file(tmp_path_factory):
    """The rule groups of the PrometheusRule, as the file Prometheus and promtool read."""
    path = tmp_path_factory.mktemp("rules") / "torchdev.rules.yaml"
    path.write_text(yaml.safe_dump({"groups": yaml.safe_load(RULES.read_text())["spec"]["groups"]}))
    return path


def test_promtool_checks_the_rules(rules_file):
    out = subprocess.run([tool("promtool"), "check", "rules", str(rules_file)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS: 11 rules found" in out.stdout


def idle_job_alert(job, gpus):
    return {"exp_labels": {"severity": "warning", "namespace": "ml", "training_job": job},
            "exp_annotations": {
                "summary": f"TrainingJob ml/{job} holds {gpus} GPU(s) without progress",
                "description": "No progress change, or none reported, for 45 minutes: a hung rank, a stuck data "
                               "loader or code that does not report progress."}}


def test_promtool_unit_tests_the_rules(rules_file, tmp_path):
    tests = {
        "rule_files": [str(rules_file)],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                {"series": 'torchdev_cost_dollars_total{user="a@x.io",flavor="f"}', "values": "0+1x60"},
                {"series": 'torchdev_gpu_seconds_total{user="a@x.io",flavor="f"}', "values": "0+60x60"},
                {"series": 'torchdev_devservers{flavor="f",phase="Failed"}', "values": "1x10"},
                {"series": 'torchdev_queue_wait_seconds{flavor="f"}', "values": "3000+60x20"},
                {"series": 'torchdev_gpus_idle{user="a@x.io",flavor="f"}', "values": "1x180"},
                # ansible-operator's (and the local runtime's) reconcile errors: one a minute
                {"series": 'controller_runtime_reconcile_errors_total{controller="devserver-controller"}',
                 "values": "0x5 0+1x60"},
                {"series": 'torchdev_trainingjob_failed_total{namespace="ml",reason="BackoffLimitExceeded"}',
                 "values": "0x5 1x30"},
                {"series": 'torchdev_trainingjob_allocated_gpus{namespace="ml",training_job="stuck"}', "values": "4x90"},
                {"series": 'torchdev_trainingjob_progress_percent{namespace="ml",training_job="stuck"}',
                 "values": "0+1x10 10x80"},
                {"series": 'torchdev_trainingjob_allocated_gpus{namespace="ml",training_job="moving"}', "values": "4x90"},
                {"series": 'torchdev_trainingjob_progress_percent{namespace="ml",training_job="moving"}',
                 "values": "0+1x90"},
                # issue 14.5: holds GPUs and never reports progress (no progress series at all)
                {"series": 'torchdev_trainingjob_allocated_gpus{namespace="ml",training_job="silent"}', "values": "2x90"},
                # the same, but started 20 minutes before the evaluation at 80m: too young to tell
                {"series": 'torchdev_trainingjob_allocated_gpus{namespace="ml",training_job="young"}',
                 "values": "_x60 2x30"},
            ],
            "promql_expr_test": [
                {"expr": "user:torchdev_cost_dollars:sum", "eval_time": "60m",
                 "exp_samples": [{"labels": 'user:torchdev_cost_dollars:sum{user="a@x.io"}', "value": 60}]},
                {"expr": "user:torchdev_gpu_hours:sum", "eval_time": "60m",
                 "exp_samples": [{"labels": 'user:torchdev_gpu_hours:sum{user="a@x.io"}', "value": 1}]},
            ],
            "alert_rule_test": [
                {"eval_time": "6m", "alertname": "TorchdevDevServerFailed", "exp_alerts": [{
                    "exp_labels": {"severity": "warning", "flavor": "f"},
                    "exp_annotations": {
                        "summary": "1 DevServer(s) of flavor f failed",
                        "description": "`devctl list -A` shows which; `devctl get NAME -n NS` the Degraded condition "
                                       "and Events."}}]},
                {"eval_time": "4m", "alertname": "TorchdevDevServerFailed", "exp_alerts": []},
                {"eval_time": "19m", "alertname": "TorchdevQueueWaitLong", "exp_alerts": [{
                    "exp_labels": {"severity": "warning", "flavor": "f"},
                    "exp_annotations": {"summary": "A DevServer of flavor f has waited 1h 9m 0s for quota",
                                        "description": "Kueue has not admitted it for over an hour: quota, cohort "
                                                       "borrowing or priorities."}}]},
                {"eval_time": "121m", "alertname": "TorchdevGPUsIdle", "exp_alerts": [{
                    "exp_labels": {"severity": "info", "user": "a@x.io", "flavor": "f"},
                    "exp_annotations": {"summary": "a@x.io holds 1 idle f GPU(s) for 2h",
                                        "description": "Their lifecycle agents report no session, process or GPU "
                                                       "activity; autoShutdown may be off."}}]},
                {"eval_time": "15m", "alertname": "TorchdevReconcileErrors", "exp_alerts": []},
                {"eval_time": "30m", "alertname": "TorchdevReconcileErrors", "exp_alerts": [{
                    "exp_labels": {"severity": "warning", "controller": "devserver-controller"},
                    "exp_annotations": {
                        "summary": "The torchdev operator fails reconciles of devserver-controller",
                        "description": "Reconcile errors for 15 minutes; see the operator's logs and the objects' "
                                       "Degraded conditions."}}]},
                {"eval_time": "8m", "alertname": "TorchdevTrainingJobFailed", "exp_alerts": [{
                    "exp_labels": {"severity": "warning", "namespace": "ml", "reason": "BackoffLimitExceeded"},
                    "exp_annotations": {
                        "summary": "A TrainingJob in ml failed: BackoffLimitExceeded",
                        "description": "`devctl train list -n ml` shows which; `devctl train get NAME` the reason "
                                       "and Events."}}]},
                {"eval_time": "4m", "alertname": "TorchdevTrainingJobFailed", "exp_alerts": []},
                # silent: GPUs for 30m and no progress, pending 15m more: firing from 45m, not at 40m
                {"eval_time": "40m", "alertname": "TorchdevTrainingJobGPUsIdle", "exp_alerts": []},
                {"eval_time": "50m", "alertname": "TorchdevTrainingJobGPUsIdle",
                 "exp_alerts": [idle_job_alert("silent", 2)]},
                # stuck: progress stopped at 10m, so from 40m on it has not moved for 30m: firing at 55m
                {"eval_time": "60m", "alertname": "TorchdevTrainingJobGPUsIdle",
                 "exp_alerts": [idle_job_alert("silent", 2), idle_job_alert("stuck", 4)]},
                {"eval_time": "80m", "alertname": "TorchdevTrainingJobGPUsIdle",
                 "exp_alerts": [idle_job_alert("silent", 2), idle_job_alert("stuck", 4)]},
            ],
        }],
    }
    path = tmp_path / "rules_test.yaml"
    path.write_text(yaml.safe_dump(tests))
    out = subprocess.run([tool("promtool"), "test", "rules", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.fixture(scope="module")
def exporter(sim, kube):
    from torchdev_exporter.__main__ import Exporter

    flavor = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "DevServerFlavor", "metadata": {"name": "pricey"},
              "spec": {"description": "a dollar a 100 seconds", "pricePerHour": "%.4f" % PRICE,
                       "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}}}
    kube["custom"].create_cluster_custom_object(GROUP, VERSION, "devserverflavors", flavor)
    exp = Exporter(sim.kubeconfig).start(port=0, address="127.0.0.1", insecure_loopback=True)
    yield exp
    exp.close()


@pytest.fixture(scope="module")
def prometheus(exporter, rules_file, tmp_path_factory):
    base = tmp_path_factory.mktemp("prometheus")
    port = free_port()
    (base / "prometheus.yml").write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules_file)],
        "scrape_configs": [{"job_name": "torchdev", "static_configs": [{"targets": [f"127.0.0.1:{exporter.port}"]}]}],
    }))
    proc = subprocess.Popen([tool("prometheus"), f"--config.file={base / 'prometheus.yml'}",
                             f"--storage.tsdb.path={base / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait(lambda: urllib.request.urlopen(url + "/-/ready", timeout=5).status == 200, 60, "Prometheus ready")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def query(url, expr):
    with urllib.request.urlopen(url + "/api/v1/query?" + urllib.parse.urlencode({"query": expr}), timeout=10) as r:
        body = json.load(r)
    assert body["status"] == "success", body
    return body["data"]["result"]


def set_status(kube, ns, name, status):
    kube["custom"].patch_namespaced_custom_object_status(GROUP, VERSION, ns, "devservers", name, {"status": status})


def test_cost_per_user_from_a_real_prometheus_equals_price_times_hours(sim, kube, ns, exporter, prometheus, devuser):
    """No operator here: the test moves the DevServer's status itself (Running for a measured
    time, then Stopped), as the operator would, and Prometheus's recording rule must agree
    with price x hours to the cent."""
    owner = devuser(f"cost-{ns}@example.com")
    body = devserver("metered", flavor="pricey")
    body["spec"]["owner"] = owner
    kube["custom"].create_namespaced_custom_object(GROUP, VERSION, ns, "devservers", body)
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    started = time.monotonic()
    set_status(kube, ns, "metered", {"phase": "Running", "replicas": 1, "readyReplicas": 1,
                                     "reservation": {"startedAt": now, "extensions": 0}})
    # Prometheus sees it running (the cost rate), then it runs ~20 s more.
    wait(lambda: query(prometheus, f'user:torchdev_cost_per_hour_dollars:sum{{user="{owner}"}}'), 60, "cost rate")
    rate = float(query(prometheus, f'user:torchdev_cost_per_hour_dollars:sum{{user="{owner}"}}')[0]["value"][1])
    assert rate == PRICE
    time.sleep(max(0.0, 20 - (time.monotonic() - started)))
    set_status(kube, ns, "metered", {"phase": "Stopped", "replicas": 0, "readyReplicas": 0,
                                     "reservation": {"endedAt": now, "endReason": "Cancelled"}})
    ran = time.monotonic() - started
    expected = round(PRICE * ran / 3600, 2)

    def settled():
        result = query(prometheus, f'user:torchdev_cost_dollars:sum{{user="{owner}"}}')
        if not result or query(prometheus, f'user:torchdev_cost_per_hour_dollars:sum{{user="{owner}"}}'):
            return None  # still running in Prometheus's view
        return float(result[0]["value"][1])
    cost = wait(settled, 60, "the final cost")
    assert round(cost, 2) == expected, (cost, ran)
    ended = query(prometheus, f'torchdev_reservations_ended_total{{user="{owner}"}}')
    assert [(r["metric"]["reason"], r["value"][1]) for r in ended] == [("Cancelled", "1")]
    started_series = query(prometheus, f'torchdev_reservations_started_total{{user="{owner}"}}')
    assert started_series[0]["value"][1] == "1"


def test_every_dashboard_query_is_accepted_by_prometheus(prometheus):
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets") or []]
    assert len(exprs) >= 10
    for expr in exprs:
        query(prometheus, expr)  # asserts status success (a PromQL error is a 400 / error status)


def test_metric_names_and_labels_are_bounded(kube, ns, exporter, devuser):
    # A server of its own (the test does not depend on another test's objects): Running, then
    # its series are scraped once the exporter's watch has seen it.
    owner = devuser(f"bounded-{ns}@example.com")
    body = devserver("bounded", flavor="pricey")
    body["spec"]["owner"] = owner
    kube["custom"].create_namespaced_custom_object(GROUP, VERSION, ns, "devservers", body)
    set_status(kube, ns, "bounded", {"phase": "Running", "replicas": 1, "readyReplicas": 1})

    def scrape():
        with urllib.request.urlopen(f"http://127.0.0.1:{exporter.port}/metrics", timeout=10) as r:
            text = r.read().decode()
        return text if f'user="{owner}"' in text else None
    text = wait(scrape, 60, "the exporter's series of the server")
    names = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}
    ours = {n for n in names if n.startswith("torchdev_")}
    assert ours, text
    allowed = {"user", "namespace", "flavor", "phase", "reason", "le"}
    for line in text.splitlines():
        if line.startswith("torchdev_") and "{" in line:
            labels = {kv.split("=")[0] for kv in line[line.index("{") + 1:line.index("}")].split(",") if kv}
            assert labels <= allowed, line
