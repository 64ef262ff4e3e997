"""config/prometheus against the Prometheus Operator's own CRDs (issue 13.5): the rendered
ServiceMonitor and PrometheusRule are admitted by the real monitoring.coreos.com/v1 schemas
(third_party/prometheus-operator-v0.93.0, kept in the repository), the way an apiserver with
those CRDs admits them: kubesim's CRD admission (pruning with strict field validation, so a
misspelt field is an error, defaults, the OpenAPI schema and the CEL rules)."""
from __future__ import annotations

import copy
import subprocess
from pathlib import Path

import pytest
import yaml

from kubesim.errors import ApiError
from kubesim.validation import CRDModel

ROOT = Path(__file__).resolve().parents[2]
CRDS = ROOT / "third_party" / "prometheus-operator-v0.93.0"


@pytest.fixture(scope="module")
def models():
    out = {}
    for path in sorted(CRDS.glob("monitoring.coreos.com_*.yaml")):
        crd = yaml.safe_load(path.read_text())
        out[crd["spec"]["names"]["kind"]] = CRDModel(crd).version("v1")
    assert sorted(out) == ["PrometheusRule", "ServiceMonitor"]
    return out


def admit(models, obj):
    return models[obj["kind"]].admit(copy.deepcopy(obj), field_validation="Strict")


@pytest.fixture(scope="module")
def rendered():
    kubectl = ROOT / ".venv" / "bin" / "kubectl"
    out = subprocess.run([str(kubectl), "kustomize", str(ROOT / "config" / "prometheus")], capture_output=True,
                         text=True, check=True).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def test_config_prometheus_is_admitted_by_the_operator_schemas(models, rendered):
    monitoring = [o for o in rendered if o["apiVersion"] == "monitoring.coreos.com/v1"]
    assert sorted(o["kind"] for o in monitoring) == ["PrometheusRule", "ServiceMonitor"]
    for obj in monitoring:
        admitted = admit(models, obj)
        assert admitted["spec"] == {**admitted["spec"], **obj["spec"]}  # nothing pruned, only defaults added


def mutated(rendered, kind, mutate):
    obj = copy.deepcopy(next(o for o in rendered if o["kind"] == kind))
    mutate(obj)
    return obj


@pytest.mark.parametrize("name,kind,mutate,field", [
    ("an interval that is not a duration string", "ServiceMonitor",
     lambda o: o["spec"]["endpoints"][0].update(interval="30"), "spec.endpoints[0].interval"),
    ("endpoints not a list", "ServiceMonitor", lambda o: o["spec"].update(endpoints={"port": "metrics"}),
     "spec.endpoints"),
    ("a scheme Prometheus does not know", "ServiceMonitor", lambda o: o["spec"]["endpoints"][0].update(scheme="ftp"),
     "spec.endpoints[0].scheme"),
    ("a misspelt field", "ServiceMonitor", lambda o: o["spec"]["endpoints"][0].update(intervall="30s"),
     "spec.endpoints[0].intervall"),
    ("a rule without expr", "PrometheusRule", lambda o: o["spec"]["groups"][0]["rules"][0].pop("expr"),
     "spec.groups[0].rules[0].expr"),
    ("a group without a name", "PrometheusRule", lambda o: o["spec"]["groups"][0].pop("name"),
     "spec.groups[0].name"),
])
def test_a_broken_object_is_rejected_naming_the_field(models, rendered, name, kind, mutate, field):
    with pytest.raises(ApiError) as err:
        admit(models, mutated(rendered, kind, mutate))
    assert field in str(err.value), (name, str(err.value))
