"""Every kustomization of config/ (issue 16.4): `kubectl kustomize config/<dir>` builds, and every
object it renders is valid, strictly, against the schema of whoever owns its API:

| API group | validated against | how |
|---|---|---|
| Kubernetes' own (core, apps, rbac, apiextensions, ...) | the Kubernetes 1.33 OpenAPI | kubernetes-validate, strict (unknown fields rejected) |
| torchdev.io | our CRDs (config/crd) | kubesim's admission: schema, CEL, strict field validation |
| kueue.x-k8s.io | Kueue v0.19.2's CRDs (third_party/kueue-v0.19.2) | kubesim's admission, strict |
| monitoring.coreos.com | the Prometheus Operator's CRDs | hack/monitoring (npm validators generated from them; they do not reject unknown fields) |
| operators.coreos.com | OLM's ClusterServiceVersion CRD (third_party/operator-framework-api-v0.45.0) | kubesim's admission, strict |
| scorecard.operatorframework.io | the scorecard's Configuration (not an API: hack/bundle_validate.py SCORECARD_SCHEMA) | jsonschema, closed objects |

An object of any other group fails: a new kind in config/ needs a validator here. The objects'
contents are tested where they are made: tests/test_crds.py (CRDs, samples), tests/security
(config/default), tests/test_kueue_objects.py, tests/observability (config/prometheus),
tests/delivery/test_bundle.py (config/manifests, config/scorecard).
"""
from __future__ import annotations

import copy
from typing import Any, Callable

import kubernetes_validate
import pytest
import yaml

from _support import ROOT
from hack import bundle_validate, render_manifests

K8S_VERSION = "1.33.0"
KUSTOMIZATIONS = sorted(p.parent.name for p in (ROOT / "config").glob("*/kustomization.yaml"))


def _crd_models(crds: list[dict[str, Any]]) -> dict[tuple[str, str], Any]:
    from kubesim.validation import CRDModel

    return {("%s/%s" % (c["spec"]["group"], v["name"]), c["spec"]["names"]["kind"]): CRDModel(c).version(v["name"])
            for c in crds for v in c["spec"]["versions"] if v.get("served", True)}


def _custom(crds: Callable[[], list[dict[str, Any]]]) -> Callable[[list], list[str]]:
    models: dict = {}

    def check(objects: list[dict[str, Any]]) -> list[str]:
        if not models:
            models.update(_crd_models(crds()))
        errors = []
        for obj in objects:
            model = models.get((obj["apiVersion"], obj["kind"]))
            errors += (["%s %s: no CRD serves it" % (obj["apiVersion"], obj["kind"])] if model is None
                       else bundle_validate.admit(model, obj))
        return errors
    return check


def _torchdev_crds() -> list[dict[str, Any]]:
    return render_manifests.kustomize("crd")


def _kueue_crds() -> list[dict[str, Any]]:
    from kubesim import kueue

    return kueue.load_crds()


def _kubernetes(objects: list[dict[str, Any]]) -> list[str]:
    errors = []
    for obj in objects:
        try:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        except (kubernetes_validate.ValidationError, kubernetes_validate.SchemaNotFoundError) as err:
            errors.append(getattr(err, "message", str(err)))
    return errors


def _monitoring_crds() -> list[dict[str, Any]]:
    """The Prometheus Operator's CRDs kept in third_party (ServiceMonitor, PrometheusRule)."""
    return [yaml.safe_load(p.read_text())
            for p in sorted((ROOT / "third_party" / "prometheus-operator-v0.93.0").glob("monitoring.coreos.com_*.yaml"))]


def _olm(objects: list[dict[str, Any]]) -> list[str]:
    return [e for obj in objects for e in bundle_validate.admit(bundle_validate.csv_model(), obj)]


def _scorecard(objects: list[dict[str, Any]]) -> list[str]:
    return [e for obj in objects for e in bundle_validate.scorecard_errors(obj)]


VALIDATORS: dict[str, Callable[[list], list[str]]] = {
    "torchdev.io": _custom(_torchdev_crds),
    "kueue.x-k8s.io": _custom(_kueue_crds),
    "monitoring.coreos.com": _custom(_monitoring_crds),
    "operators.coreos.com": _olm,
    "scorecard.operatorframework.io": _scorecard,
}
KUBERNETES_GROUPS = {"", "apps", "rbac.authorization.k8s.io", "apiextensions.k8s.io", "batch", "networking.k8s.io",
                     "admissionregistration.k8s.io",
                     "policy", "scheduling.k8s.io", "coordination.k8s.io"}


def validate(objects: list[dict[str, Any]]) -> list[str]:
    """Every object by its API group's validator; '<kind>/<name>: <problem>' lines."""
    by_group: dict[str, list] = {}
    for obj in objects:
        group = obj["apiVersion"].rpartition("/")[0]
        by_group.setdefault(group, []).append(obj)
    problems = []
    for group, members in sorted(by_group.items()):
        if group in KUBERNETES_GROUPS:
            problems += _kubernetes(members)
        elif group in VALIDATORS:
            problems += VALIDATORS[group](members)
        else:
            problems += ["%s %s: no validator for the group %s" % (o["kind"], o["metadata"]["name"], group)
                         for o in members]
    return problems


@pytest.fixture(scope="module")
def rendered():
    return {directory: render_manifests.kustomize(directory) for directory in KUSTOMIZATIONS}


def test_the_kustomizations_of_issue_16():
    assert {"default", "crd", "rbac", "manager", "kueue", "prometheus", "manifests", "samples",
            "scorecard"} <= set(KUSTOMIZATIONS)


@pytest.mark.parametrize("directory", KUSTOMIZATIONS)
def test_every_rendered_object_is_strictly_valid(rendered, directory):
    objects = rendered[directory]
    assert objects, directory
    assert validate(objects) == []


def test_config_default_is_the_operator(rendered):
    kinds = {o["kind"] for o in rendered["default"]}
    assert {"CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ServiceAccount",
            "Deployment", "Namespace"} <= kinds
    assert all(o["metadata"]["name"].startswith("torchdev-") for o in rendered["default"]
               if o["kind"] not in ("CustomResourceDefinition",))


def test_config_manifests_is_config_default_and_the_samples_and_the_csv(rendered):
    def names(directory):
        return [(o["kind"], o["metadata"]["name"]) for o in rendered[directory]]
    assert set(names("default")) | set(names("samples")) | set(names("scorecard")) < set(names("manifests"))
    assert [k for k, _ in names("manifests")].count("ClusterServiceVersion") == 1


def _first(kind):
    return lambda objects: next(o for o in objects if o["kind"] == kind)


@pytest.mark.parametrize("directory,kind,mutate,message", [
    ("default", "Deployment", lambda o: o["spec"]["template"]["spec"].update(hostnetwork=True), "hostnetwork"),
    ("samples", "DevServer", lambda o: o["spec"].update(flavour="cpu-small"), 'unknown field "spec.flavour"'),
    ("kueue", "WorkloadPriorityClass", lambda o: o.update(priority=1), 'unknown field "priority"'),
    ("manifests", "ClusterServiceVersion", lambda o: o["spec"].update(maturty="alpha"), 'unknown field "spec.maturty"'),
    ("scorecard", "Configuration", lambda o: o["stages"][0].update(paralel=True), "paralel"),
    ("prometheus", "ServiceMonitor", lambda o: o["spec"]["endpoints"][0].update(interval=30), "interval"),
], ids=["kubernetes", "torchdev", "kueue", "olm", "scorecard", "prometheus"])
def test_each_validator_rejects_a_broken_object(rendered, directory, kind, mutate, message):
    obj = copy.deepcopy(_first(kind)(rendered[directory]))
    mutate(obj)
    problems = validate([obj])
    assert problems and message in " ".join(problems), problems


def test_an_object_of_an_unknown_group_is_an_error():
    obj = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    assert validate([obj]) == ["Widget w: no validator for the group example.com"]
