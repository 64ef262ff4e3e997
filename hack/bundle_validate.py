#!/usr/bin/env python3
"""Offline checks of an OLM bundle, after what `operator-sdk bundle validate` checks
(docs/delivery.md lists what is reproduced and what is not):

    python -m hack.bundle_validate [--bundle bundle] [--dockerfile bundle.Dockerfile] [--version X.Y.Z]

prints one line per problem, `<rule>: <message>`, and exits 1 when there is any
(`make bundle-validate`; tests/delivery/test_bundle.py runs every rule, by name, on the
generated bundle and on broken copies of it).

The ClusterServiceVersion is checked against OLM's own operators.coreos.com/v1alpha1 CRD,
operator-framework/api's crds/operators.coreos.com_clusterserviceversions.yaml at v0.45.0, kept in
third_party/operator-framework-api-v0.45.0 with its licence. It is admitted through kubesim's CRD admission (schema, required fields,
formats) with strict field validation (an unknown field is an error, as `kubectl apply
--validate=strict` makes it).
"""
from __future__ import annotations

import argparse
import base64
import copy
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from hack import version as versions

ROOT = Path(__file__).resolve().parents[1]
OLM_CSV_CRD = ROOT / "third_party" / "operator-framework-api-v0.45.0" / "operators.coreos.com_clusterserviceversions.yaml"
MEDIATYPE = "registry+v1"
INSTALL_MODES = ("OwnNamespace", "SingleNamespace", "MultiNamespace", "AllNamespaces")
# The kinds OLM installs from a registry+v1 bundle beside the CSV and CRDs
# (operator-framework/operator-registry's supported bundle objects).
SUPPORTED_KINDS = {
    "ClusterServiceVersion", "CustomResourceDefinition", "Secret", "ClusterRole", "ClusterRoleBinding",
    "ConfigMap", "ServiceAccount", "Service", "Role", "RoleBinding", "PrometheusRule", "ServiceMonitor",
    "PodDisruptionBudget", "PriorityClass", "VerticalPodAutoscaler", "ConsoleYAMLSample", "ConsoleQuickStart",
    "ConsoleCLIDownload", "ConsoleLink", "NetworkPolicy",
}
ICON_MEDIATYPES = {"image/gif", "image/jpeg", "image/png", "image/svg+xml"}
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
CHANNEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
# blang/semver ranges, as OLM parses olm.skipRange: comparators joined by spaces (and), "||" (or).
COMPARATOR = re.compile(r"^(>=|<=|>|<|==|=|!=)?(\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?)$")


INTERNAL_OBJECTS = "operators.operatorframework.io/internal-objects"


@dataclass
class Bundle:
    """A bundle directory, read: what the rules look at."""
    csv: dict[str, Any]
    crds: list[dict[str, Any]]
    others: list[dict[str, Any]]
    annotations: dict[str, str]
    labels: dict[str, str]
    copies: list[tuple[str, str]]
    version: str
    rbac: list[dict[str, Any]] = field(default_factory=list)  # config/rbac: the ClusterRole and Role
    scorecard: dict[str, Any] | None = None  # tests/scorecard/config.yaml

    @property
    def owned(self) -> list[dict[str, Any]]:
        return (self.csv["spec"].get("customresourcedefinitions") or {}).get("owned") or []

    @property
    def strategy(self) -> dict[str, Any]:
        return (self.csv["spec"].get("install") or {}).get("spec") or {}

    @property
    def internal(self) -> set[str]:
        """CRD names the CSV marks operators.operatorframework.io/internal-objects: objects only the
        operator creates (consoles hide them), so they need no example and list no resources."""
        try:
            names = json.loads((self.csv["metadata"].get("annotations") or {}).get(INTERNAL_OBJECTS) or "[]")
        except json.JSONDecodeError:
            return set()
        return {n for n in names if isinstance(n, str)} if isinstance(names, list) else set()

    def has_conditions(self, name: str) -> bool:
        """Whether the bundle's CRD ``name`` (plural.group) has status.conditions in a served version."""
        for crd in self.crds:
            if crd["spec"]["names"]["plural"] + "." + crd["spec"]["group"] == name:
                return any("conditions" in (((v.get("schema") or {}).get("openAPIV3Schema") or {}).get("properties", {})
                                            .get("status") or {}).get("properties", {})
                           for v in crd["spec"]["versions"] if v.get("served", True))
        return True

    def alm_examples(self) -> Any:
        """alm-examples as it parses (json.JSONDecodeError when it does not)."""
        return json.loads((self.csv["metadata"].get("annotations") or {}).get("alm-examples") or "[]")

    def examples(self) -> list[dict[str, Any]]:
        """The examples, [] when they do not parse (the rule alm-examples reports it)."""
        try:
            examples = self.alm_examples()
        except json.JSONDecodeError:
            return []
        return [e for e in examples if isinstance(e, dict)] if isinstance(examples, list) else []


def dockerfile_labels(text: str) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """(LABELs, COPY (source, destination) pairs) of a bundle.Dockerfile."""
    labels, copies = {}, []
    for line in text.splitlines():
        words = line.split()
        if words[:1] == ["LABEL"]:
            for pair in words[1:]:
                key, _, value = pair.partition("=")
                labels[key] = value
        elif words[:1] == ["COPY"] and len(words) == 3:
            copies.append((words[1], words[2]))
    return labels, copies


def rbac_roles(root: Path = ROOT) -> list[dict[str, Any]]:
    """config/rbac's manager ClusterRole and leader-election Role, as the files hold them."""
    docs = []
    for name in ("role.yaml", "leader_election_role.yaml"):
        docs += [d for d in yaml.safe_load_all((root / "config" / "rbac" / name).read_text()) if d]
    return docs


def load(bundle_dir: Path, dockerfile: Path, version: str | None = None, root: Path = ROOT) -> Bundle:
    objects = [yaml.safe_load(p.read_text()) for p in sorted((bundle_dir / "manifests").glob("*.yaml"))]
    csvs = [o for o in objects if o["kind"] == "ClusterServiceVersion"]
    if len(csvs) != 1:
        raise ValueError("%s/manifests holds %d ClusterServiceVersions, not one" % (bundle_dir, len(csvs)))
    annotations = yaml.safe_load((bundle_dir / "metadata" / "annotations.yaml").read_text())["annotations"]
    labels, copies = dockerfile_labels(dockerfile.read_text())
    scorecard = bundle_dir / "tests" / "scorecard" / "config.yaml"
    return Bundle(csv=csvs[0], crds=[o for o in objects if o["kind"] == "CustomResourceDefinition"],
                  others=[o for o in objects if o["kind"] not in ("ClusterServiceVersion", "CustomResourceDefinition")],
                  annotations=annotations, labels=labels, copies=copies,
                  version=version or versions.read_version(root), rbac=rbac_roles(root),
                  scorecard=yaml.safe_load(scorecard.read_text()) if scorecard.exists() else None)


# -- OLM's ClusterServiceVersion schema ----------------------------------------------------------

def csv_crd(path: Path = OLM_CSV_CRD) -> dict[str, Any]:
    """OLM's clusterserviceversions.operators.coreos.com CRD (third_party, unchanged)."""
    return yaml.safe_load(path.read_text())


_CSV_MODEL: list = []


def csv_model():
    """kubesim's admission model of OLM's ClusterServiceVersion (built once)."""
    from kubesim.validation import CRDModel

    if not _CSV_MODEL:
        crd = csv_crd()
        _CSV_MODEL.append(CRDModel(crd).version(crd["spec"]["versions"][0]["name"]))
    return _CSV_MODEL[0]


def admit(model, obj: dict[str, Any]) -> list[str]:
    """What kubesim's admission of `obj` through `model` (a CRD version) says, strictly: [] or the error."""
    from kubesim.errors import ApiError

    try:
        model.admit(copy.deepcopy(obj), field_validation="Strict")
    except ApiError as err:
        return [err.message]
    return []


# -- the rules -------------------------------------------------------------------------------------

def rule_csv_schema(b: Bundle) -> list[str]:
    """The CSV is a valid operators.coreos.com/v1alpha1 ClusterServiceVersion (OLM's schema, strict)."""
    if (b.csv.get("apiVersion"), b.csv.get("kind")) != ("operators.coreos.com/v1alpha1", "ClusterServiceVersion"):
        return ["not an operators.coreos.com/v1alpha1 ClusterServiceVersion: %s %s"
                % (b.csv.get("apiVersion"), b.csv.get("kind"))]
    return admit(csv_model(), b.csv)


def _crd_keys(crd: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {(crd["metadata"]["name"], v["name"], crd["spec"]["names"]["kind"])
            for v in crd["spec"]["versions"] if v.get("served", True)}


def rule_crds_owned(b: Bundle) -> list[str]:
    """Every owned CRD is in the bundle, every bundle CRD is owned (name, version, kind)."""
    owned = {(o.get("name"), o.get("version"), o.get("kind")) for o in b.owned}
    shipped = set().union(*map(_crd_keys, b.crds)) if b.crds else set()
    errors = ["owned %s %s %s is not a CRD of the bundle" % key for key in sorted(owned - shipped)]
    errors += ["CRD %s %s %s is not owned by the CSV" % key for key in sorted(shipped - owned)]
    for crd in b.crds:
        if crd["metadata"]["name"] != "%s.%s" % (crd["spec"]["names"]["plural"], crd["spec"]["group"]):
            errors.append("CRD %s: the name is not <plural>.<group>" % crd["metadata"]["name"])
    return errors


def rule_alm_examples(b: Bundle) -> list[str]:
    """alm-examples parses, names owned kinds only, and every example is admitted unchanged by
    its CRD through kubesim (schema, CEL rules, strict: no field pruned)."""
    from kubesim.validation import CRDModel

    try:
        examples = b.alm_examples()
    except json.JSONDecodeError as err:
        return ["alm-examples is not JSON: %s" % err]
    if not isinstance(examples, list) or not examples:
        return ["alm-examples is not a non-empty list"]
    models = {(c["spec"]["group"], v["name"], c["spec"]["names"]["kind"]): CRDModel(c).version(v["name"])
              for c in b.crds for v in c["spec"]["versions"] if v.get("served", True)}
    owned = {(o.get("name", "").split(".", 1)[-1], o.get("version"), o.get("kind")) for o in b.owned}
    errors = ["owned %s has no example" % o.get("kind") for o in b.owned
              if o.get("kind") not in {e.get("kind") for e in examples if isinstance(e, dict)}
              and o.get("name") not in b.internal]
    for example in examples:
        group, _, ver = example.get("apiVersion", "").rpartition("/")
        key = (group, ver, example.get("kind"))
        what = "%s %s" % (example.get("kind"), (example.get("metadata") or {}).get("name"))
        if key not in owned:
            errors.append("%s: %s/%s %s is not an owned CRD" % (what, group, ver, key[2]))
        elif key not in models:
            errors.append("%s: no CRD of the bundle serves it" % what)
        else:
            errors += ["%s: %s" % (what, e) for e in admit(models[key], example)]
    return errors


def rule_annotations(b: Bundle) -> list[str]:
    """metadata/annotations.yaml: registry+v1, the manifests/ and metadata/ paths, the package of
    the CSV, channels with the default among them."""
    a, errors = b.annotations, []
    expect = {"operators.operatorframework.io.bundle.mediatype.v1": MEDIATYPE,
              "operators.operatorframework.io.bundle.manifests.v1": "manifests/",
              "operators.operatorframework.io.bundle.metadata.v1": "metadata/"}
    errors += ["%s is %r, not %r" % (k, a.get(k), v) for k, v in expect.items() if a.get(k) != v]
    package = a.get("operators.operatorframework.io.bundle.package.v1")
    if not package or not b.csv["metadata"]["name"].startswith(package + ".v"):
        errors.append("package %r does not name the CSV %s" % (package, b.csv["metadata"]["name"]))
    channels = (a.get("operators.operatorframework.io.bundle.channels.v1") or "").split(",")
    default = a.get("operators.operatorframework.io.bundle.channel.default.v1")
    if default is not None and default not in channels:
        errors.append("the default channel %r is not one of the channels %s" % (default, channels))
    return errors


def rule_dockerfile_labels(b: Bundle) -> list[str]:
    """bundle.Dockerfile's LABELs are annotations.yaml's, and it copies the directories they name."""
    errors = ["LABEL %s=%s, annotations.yaml says %s" % (k, b.labels.get(k), v)
              for k, v in b.annotations.items() if b.labels.get(k) != v]
    errors += ["LABEL %s is not in annotations.yaml" % k for k in b.labels if k not in b.annotations]
    targets = {dst.strip("/") for _, dst in b.copies}
    for key in ("operators.operatorframework.io.bundle.manifests.v1", "operators.operatorframework.io.bundle.metadata.v1",
                "operators.operatorframework.io.test.config.v1"):
        if key in b.annotations and b.annotations[key].strip("/") not in targets:
            errors.append("nothing is copied to /%s (%s)" % (b.annotations[key], key))
    return errors


def rule_semver(b: Bundle) -> list[str]:
    """spec.version is a semantic version, the VERSION file's; the CSV is <package>.v<version>;
    minKubeVersion is a version."""
    spec, errors = b.csv["spec"], []
    ver = str(spec.get("version", ""))
    if not versions.is_semver(ver):
        errors.append("spec.version %r is not a semantic version" % ver)
    if ver != b.version:
        errors.append("spec.version %s, VERSION says %s" % (ver, b.version))
    name = b.csv["metadata"]["name"]
    if not name.endswith(".v" + ver):
        errors.append("metadata.name %s does not end in .v%s" % (name, ver))
    if len(name) > 253 or not DNS1123_SUBDOMAIN.match(name):
        errors.append("metadata.name %s is not a DNS-1123 subdomain" % name)
    if "minKubeVersion" in spec and not versions.is_semver(str(spec["minKubeVersion"])):
        errors.append("minKubeVersion %r is not a version" % spec["minKubeVersion"])
    return errors


def rule_channels(b: Bundle) -> list[str]:
    """Channel names: at least one, no empty name, no blanks or commas inside."""
    channels = (b.annotations.get("operators.operatorframework.io.bundle.channels.v1") or "").split(",")
    default = b.annotations.get("operators.operatorframework.io.bundle.channel.default.v1")
    return ["channel %r is not a channel name" % c for c in channels + ([default] if default is not None else [])
            if not CHANNEL.match(c)]


def _semver_key(ver: str) -> tuple:
    core, _, pre = ver.split("+", 1)[0].partition("-")
    return tuple(int(x) for x in core.split(".")) + ((1,) if not pre else (0, pre))


def parse_range(text: str) -> list[list[tuple[str, str]]]:
    """A semver range ('>=0.1.0 <0.2.0 || 0.3.0') as [[(operator, version)]]; ValueError if it is none."""
    alternatives = []
    for part in text.split("||"):
        comparators = []
        for word in part.split():
            match = COMPARATOR.match(word)
            if not match:
                raise ValueError("%r is not a comparator" % word)
            comparators.append((match.group(1) or "=", match.group(2)))
        if not comparators:
            raise ValueError("an empty range")
        alternatives.append(comparators)
    return alternatives


def rule_upgrade_edges(b: Bundle) -> list[str]:
    """replaces and skips name older CSVs of the package; olm.skipRange parses as a semver range."""
    errors, spec = [], b.csv["spec"]
    package = b.csv["metadata"]["name"].split(".v", 1)[0]
    ver = str(spec.get("version", "0.0.0"))
    edges = [("replaces", spec["replaces"])] if "replaces" in spec else []
    for what, name in edges + [("skips", s) for s in spec.get("skips", [])]:
        old = name[len(package) + 2:] if name.startswith(package + ".v") else ""
        if not versions.is_semver(old):
            errors.append("%s %r is not %s.v<semver>" % (what, name, package))
        elif versions.is_semver(ver) and _semver_key(old) >= _semver_key(ver):
            errors.append("%s %s is not older than %s" % (what, name, ver))
    skip_range = (b.csv["metadata"].get("annotations") or {}).get("olm.skipRange")
    if skip_range is not None:
        try:
            parse_range(skip_range)
        except ValueError as err:
            errors.append("olm.skipRange %r: %s" % (skip_range, err))
    return errors


def rule_permissions(b: Bundle) -> list[str]:
    """clusterPermissions are config/rbac's manager ClusterRole, permissions its leader-election
    Role, for the service account the Deployment runs as."""
    errors, spec = [], b.strategy
    expected = {"clusterPermissions": [r for r in b.rbac if r["kind"] == "ClusterRole"],
                "permissions": [r for r in b.rbac if r["kind"] == "Role"]}
    accounts = {d["spec"]["template"]["spec"].get("serviceAccountName", "default") for d in spec.get("deployments", [])}
    for key, roles in expected.items():
        entries = spec.get(key) or []
        rules = [rule for entry in entries for rule in entry.get("rules", [])]
        want = [rule for role in roles for rule in role.get("rules", [])]
        if rules != want:
            errors.append("%s rules differ from config/rbac %s" % (key, ", ".join(r["metadata"]["name"] for r in roles)))
        errors += ["%s for service account %s, which no Deployment runs as" % (key, e.get("serviceAccountName"))
                   for e in entries if e.get("serviceAccountName") not in accounts]
    return errors


def rule_install_modes(b: Bundle) -> list[str]:
    """Each install mode type once, AllNamespaces supported (the operator watches all namespaces)."""
    modes = [m.get("type") for m in b.csv["spec"].get("installModes") or []]
    errors = ["install mode %r is not one of %s" % (m, ", ".join(INSTALL_MODES)) for m in modes if m not in INSTALL_MODES]
    errors += ["install mode %s is listed %d times" % (m, modes.count(m)) for m in INSTALL_MODES if modes.count(m) > 1]
    supported = {m.get("type") for m in b.csv["spec"].get("installModes") or [] if m.get("supported")}
    if "AllNamespaces" not in supported:
        errors.append("AllNamespaces is not supported")
    return errors


def rule_install_strategy(b: Bundle) -> list[str]:
    """A deployment strategy whose Deployments are valid apps/v1 Deployments (Kubernetes 1.33
    OpenAPI, strict)."""
    import kubernetes_validate

    install = b.csv["spec"].get("install") or {}
    if install.get("strategy") != "deployment":
        return ["install strategy %r, not deployment" % install.get("strategy")]
    errors = [] if b.strategy.get("deployments") else ["no deployments"]
    for entry in b.strategy.get("deployments") or []:
        obj = {"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": entry.get("name"), "labels": entry.get("label") or {}}, "spec": entry.get("spec")}
        try:
            kubernetes_validate.validate(obj, "1.33.0", strict=True)
        except kubernetes_validate.ValidationError as err:
            where = ".".join(str(p) for p in err.path)
            errors.append("deployment %s: %s: %s" % (entry.get("name"), where, err.message))
    return errors


def rule_service_accounts(b: Bundle) -> list[str]:
    """No ServiceAccount manifest has the name of a Deployment's service account (OLM creates that one)."""
    accounts = {d["spec"]["template"]["spec"].get("serviceAccountName") for d in b.strategy.get("deployments") or []}
    return ["ServiceAccount %s is the Deployment's: OLM creates it, the bundle must not" % o["metadata"]["name"]
            for o in b.others if o["kind"] == "ServiceAccount" and o["metadata"]["name"] in accounts]


def rule_supported_kinds(b: Bundle) -> list[str]:
    """Every manifest is of a kind OLM installs from a bundle."""
    return ["%s %s: OLM does not install this kind from a bundle" % (o["kind"], o["metadata"]["name"])
            for o in b.others if o["kind"] not in SUPPORTED_KINDS]


def rule_crds_have_validation(b: Bundle) -> list[str]:
    """Every served CRD version has an openAPIV3Schema with spec properties (scorecard
    olm-crds-have-validation)."""
    errors = []
    for crd in b.crds:
        for v in crd["spec"]["versions"]:
            schema = (v.get("schema") or {}).get("openAPIV3Schema") or {}
            if not ((schema.get("properties") or {}).get("spec") or {}).get("properties"):
                errors.append("%s %s: no spec schema" % (crd["metadata"]["name"], v["name"]))
    return errors


def rule_crds_have_resources(b: Bundle) -> list[str]:
    """Every owned CRD lists the resources it creates (scorecard olm-crds-have-resources), but an
    internal object (INTERNAL_OBJECTS) that creates nothing."""
    return ["%s: no resources" % o.get("name") for o in b.owned
            if not o.get("resources") and o.get("name") not in b.internal]


def rule_spec_descriptors(b: Bundle) -> list[str]:
    """Every spec field an alm-example sets has a specDescriptor (scorecard olm-spec-descriptors)."""
    paths = {o.get("kind"): {d["path"] for d in o.get("specDescriptors") or []} for o in b.owned}
    return ["%s %s: spec.%s has no specDescriptor" % (e["kind"], e["metadata"]["name"], f)
            for e in b.examples() for f in sorted(e.get("spec") or {}) if f not in paths.get(e["kind"], set())]


def rule_status_descriptors(b: Bundle) -> list[str]:
    """Every owned CRD with status.conditions describes them (scorecard olm-status-descriptors)."""
    return ["%s: no statusDescriptor for conditions" % o.get("name") for o in b.owned
            if "conditions" not in {d["path"] for d in o.get("statusDescriptors") or []}
            and b.has_conditions(o.get("name", ""))]


# The scorecard's configuration file (not an API object: no CRD exists for it), written from the
# Go types of operator-framework/api pkg/apis/scorecard/v1alpha3 (configuration_types.go).
_STORAGE = {"type": "object", "additionalProperties": False, "properties": {"spec": {
    "type": "object", "additionalProperties": False, "properties": {"mountPath": {
        "type": "object", "additionalProperties": False, "properties": {"path": {"type": "string"}}}}}}}
SCORECARD_SCHEMA = {
    "type": "object", "additionalProperties": False, "required": ["apiVersion", "kind", "stages"],
    "properties": {
        "apiVersion": {"const": "scorecard.operatorframework.io/v1alpha3"},
        "kind": {"const": "Configuration"},
        "metadata": {"type": "object", "additionalProperties": False, "properties": {"name": {"type": "string"}}},
        "serviceaccount": {"type": "string"},
        "storage": _STORAGE,
        "stages": {"type": "array", "minItems": 1, "items": {
            "type": "object", "additionalProperties": False, "required": ["tests"],
            "properties": {
                "parallel": {"type": "boolean"},
                "tests": {"type": "array", "items": {
                    "type": "object", "additionalProperties": False, "required": ["image"],
                    "properties": {"image": {"type": "string", "minLength": 1}, "uniqueID": {"type": "string"},
                                   "entrypoint": {"type": "array", "items": {"type": "string"}},
                                   "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                                   "storage": _STORAGE}}}}}}},
}


def scorecard_errors(config: Any) -> list[str]:
    """What is wrong with a scorecard Configuration ([] when nothing)."""
    import jsonschema

    return ["%s: %s" % ("/".join(map(str, e.absolute_path)) or "<root>", e.message)
            for e in jsonschema.Draft7Validator(SCORECARD_SCHEMA).iter_errors(config)]


def rule_scorecard_config(b: Bundle) -> list[str]:
    """tests/scorecard/config.yaml is a scorecard v1alpha3 Configuration with at least one test."""
    if b.scorecard is None:
        return ["no tests/scorecard/config.yaml"]
    errors = scorecard_errors(b.scorecard)
    if not errors and not any(stage["tests"] for stage in b.scorecard["stages"]):
        errors.append("no test in any stage")
    return errors


def rule_icon(b: Bundle) -> list[str]:
    """The icon is base64 of an image type the console shows."""
    errors = []
    for icon in b.csv["spec"].get("icon") or []:
        if icon.get("mediatype") not in ICON_MEDIATYPES:
            errors.append("icon mediatype %r is not one of %s" % (icon.get("mediatype"), sorted(ICON_MEDIATYPES)))
        try:
            base64.b64decode(icon.get("base64data", ""), validate=True)
        except ValueError:
            errors.append("icon base64data is not base64")
    return errors or ([] if b.csv["spec"].get("icon") else ["no icon"])


def rule_related_images(b: Bundle) -> list[str]:
    """relatedImages lists every image the Deployments run and containerImage."""
    related = {r.get("image") for r in b.csv["spec"].get("relatedImages") or []}
    images = {c["image"] for d in b.strategy.get("deployments") or []
              for c in d["spec"]["template"]["spec"].get("containers", [])}
    image = (b.csv["metadata"].get("annotations") or {}).get("containerImage")
    return ["%s is not in relatedImages" % i for i in sorted(images | ({image} if image else set())) if i not in related]


RULES: dict[str, Callable[[Bundle], list[str]]] = {
    "csv-schema": rule_csv_schema,
    "crds-owned": rule_crds_owned,
    "alm-examples": rule_alm_examples,
    "annotations": rule_annotations,
    "dockerfile-labels": rule_dockerfile_labels,
    "semver": rule_semver,
    "channels": rule_channels,
    "upgrade-edges": rule_upgrade_edges,
    "permissions": rule_permissions,
    "install-modes": rule_install_modes,
    "install-strategy": rule_install_strategy,
    "service-accounts": rule_service_accounts,
    "supported-kinds": rule_supported_kinds,
    "crds-have-validation": rule_crds_have_validation,
    "crds-have-resources": rule_crds_have_resources,
    "spec-descriptors": rule_spec_descriptors,
    "status-descriptors": rule_status_descriptors,
    "scorecard-config": rule_scorecard_config,
    "icon": rule_icon,
    "related-images": rule_related_images,
}


def validate(b: Bundle) -> list[str]:
    """`<rule>: <message>` for every problem of every rule."""
    return ["%s: %s" % (name, message) for name, rule in RULES.items() for message in rule(b)]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="Validate an OLM bundle offline (docs/delivery.md).")
    parser.add_argument("--bundle", type=Path, default=ROOT / "bundle")
    parser.add_argument("--dockerfile", type=Path, default=ROOT / "bundle.Dockerfile")
    parser.add_argument("--version", help="the version the bundle must have (default: the VERSION file)")
    args = parser.parse_args(argv)
    problems = validate(load(args.bundle, args.dockerfile, args.version))
    for line in problems:
        print(line, file=sys.stderr)
    if not problems:
        print("bundle %s: every rule passes (%s)" % (args.bundle, ", ".join(RULES)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
