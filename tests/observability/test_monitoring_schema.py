"""config/prometheus against the Prometheus Operator's own schemas (issue 13.5): the rendered
ServiceMonitor and PrometheusRule are valid monitoring.coreos.com/v1 objects, checked by
validators generated from the operator's CRDs (npm @kubernetes-models/prometheus-operator,
pinned in hack/monitoring/package-lock.json; `make test` installs it with `npm ci`)."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from hack import monitoring_schema

ROOT = Path(__file__).resolve().parents[2]


def validate(objects, tmp_path):
    """(exit status, results) of hack/monitoring's validator (hack/monitoring_schema.py)."""
    try:
        return monitoring_schema.validate(objects)
    except monitoring_schema.Unavailable as err:
        pytest.fail(str(err), pytrace=False)


@pytest.fixture(scope="module")
def rendered():
    kubectl = ROOT / ".venv" / "bin" / "kubectl"
    out = subprocess.run([str(kubectl), "kustomize", str(ROOT / "config" / "prometheus")], capture_output=True,
                         text=True, check=True).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def test_config_prometheus_is_valid_against_the_operator_schemas(rendered, tmp_path):
    monitoring = [o for o in rendered if o["apiVersion"] == "monitoring.coreos.com/v1"]
    assert sorted(o["kind"] for o in monitoring) == ["PrometheusRule", "ServiceMonitor"]
    rc, results = validate(monitoring, tmp_path)
    assert rc == 0 and all(r["valid"] for r in results), results


@pytest.mark.parametrize("name,mutate,field", [
    ("an interval that is not a duration string", lambda o: o["spec"]["endpoints"][0].update(interval=30),
     "/spec/endpoints/0/interval"),
    ("endpoints not a list", lambda o: o["spec"].update(endpoints={"port": "metrics"}), "/spec/endpoints"),
    ("a scheme Prometheus does not know", lambda o: o["spec"]["endpoints"][0].update(scheme="ftp"),
     "/spec/endpoints/0/scheme"),
])
def test_a_broken_service_monitor_is_rejected_naming_the_field(rendered, tmp_path, name, mutate, field):
    monitor = json.loads(json.dumps(next(o for o in rendered if o["kind"] == "ServiceMonitor")))
    mutate(monitor)
    rc, results = validate([monitor], tmp_path)
    assert rc == 1 and not results[0]["valid"], name
    assert field in " ".join(results[0]["errors"]), (name, results)


def test_a_broken_rule_is_rejected(rendered, tmp_path):
    rule = json.loads(json.dumps(next(o for o in rendered if o["kind"] == "PrometheusRule")))
    rule["spec"]["groups"][0]["rules"][0].pop("expr")
    rc, results = validate([rule], tmp_path)
    assert rc == 1 and "expr" in " ".join(results[0]["errors"]), results
