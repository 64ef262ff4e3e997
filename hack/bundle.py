#!/usr/bin/env python3
"""The OLM bundle of torchdev, laid out as `operator-sdk generate bundle` lays it out
(docs/delivery.md):

    python -m hack.bundle --version X.Y.Z [--image IMG] [--channels alpha] [--default-channel alpha]
                          [--replaces torchdev-operator.vA.B.C] [--skip-range '>=A.B.C <X.Y.Z'] [--root DIR]

writes, under --root (default: the checkout; `make bundle`),

    bundle/manifests/torchdev-operator.clusterserviceversion.yaml   the CSV
    bundle/manifests/<group>_<plural>.yaml                          every CRD of config/crd
    bundle/manifests/<name>_<group>_<version>_<kind>.yaml           objects OLM installs beside the
                                                                    CSV (the users' ClusterRoles)
    bundle/metadata/annotations.yaml                                package, channels, media types
    bundle/tests/scorecard/config.yaml                              config/scorecard
    bundle.Dockerfile                                               the bundle image, the same labels

from ONE `kubectl kustomize config/manifests`: the CSV skeleton (config/manifests/bases),
config/default (CRDs, RBAC, the Deployment), config/samples (alm-examples) and config/scorecard.
The functions are pure (objects in, objects out); main() is the only one that runs kustomize
or writes files. bundle/ is generated output: never edited, never committed (.gitignore).
"""
from __future__ import annotations

import argparse
import copy
import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "torchdev-operator"
CSV_KIND = "ClusterServiceVersion"
SCORECARD_KIND = "Configuration"
# Folded into the CSV's install strategy (or left to OLM), never bundle manifests of their own.
FOLDED = {"Namespace", "Deployment", "ServiceAccount"}
RBAC_BINDINGS = {"ClusterRoleBinding", "RoleBinding"}
MEDIATYPE = "registry+v1"
SCORECARD_MEDIATYPE = "scorecard+v1"
PROJECT_LAYOUT = "ansible.sdk.operatorframework.io/v1"


def group_of(obj: dict[str, Any]) -> str:
    api = obj.get("apiVersion", "")
    return api.split("/", 1)[0] if "/" in api else ""


def csv_name(version: str, package: str = PACKAGE) -> str:
    return "%s.v%s" % (package, version)


def partition(objects: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The kustomize output sorted into what the bundle does with it: the CSV skeleton, the CRDs,
    the samples (objects of a CRD's group), the scorecard configuration and the rest."""
    crds = [o for o in objects if o["kind"] == "CustomResourceDefinition"]
    groups = {c["spec"]["group"] for c in crds}
    parts: dict[str, list] = {"csv": [], "crds": crds, "samples": [], "scorecard": [], "objects": []}
    for obj in objects:
        if obj["kind"] == "CustomResourceDefinition":
            continue
        if obj["kind"] == CSV_KIND:
            parts["csv"].append(obj)
        elif obj["kind"] == SCORECARD_KIND and group_of(obj) == "scorecard.operatorframework.io":
            parts["scorecard"].append(obj)
        elif group_of(obj) in groups:
            parts["samples"].append(obj)
        else:
            parts["objects"].append(obj)
    if len(parts["csv"]) != 1:
        raise ValueError("config/manifests must hold exactly one ClusterServiceVersion skeleton, found %d"
                         % len(parts["csv"]))
    return parts


def _binds(binding: dict[str, Any], account: str, namespace: str) -> bool:
    return any(s.get("kind") == "ServiceAccount" and s.get("name") == account
               and s.get("namespace", binding["metadata"].get("namespace")) == namespace
               for s in binding.get("subjects") or [])


def bound_roles(objects: list[dict[str, Any]], account: str, namespace: str) -> tuple[list, list, list]:
    """(ClusterRoles bound cluster-wide, Roles and ClusterRoles bound in the namespace, the bindings)
    of the service account `namespace/account`."""
    by_kind_name = {(o["kind"], o["metadata"]["name"]): o for o in objects if o["kind"] in ("ClusterRole", "Role")}
    cluster, local, bindings = [], [], []
    for binding in objects:
        if binding["kind"] not in RBAC_BINDINGS or not _binds(binding, account, namespace):
            continue
        role = by_kind_name.get((binding["roleRef"]["kind"], binding["roleRef"]["name"]))
        if role is None:
            raise ValueError("%s %s binds %s %s, which is not in config/default" % (
                binding["kind"], binding["metadata"]["name"], binding["roleRef"]["kind"], binding["roleRef"]["name"]))
        bindings.append(binding)
        (cluster if binding["kind"] == "ClusterRoleBinding" else local).append(role)
    return cluster, local, bindings


def _rules(roles: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [copy.deepcopy(rule) for role in roles for rule in role.get("rules") or []]


def install_strategy(objects: list[dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The CSV's install strategy (deployments, clusterPermissions, permissions per service
    account) and the objects it folds in (the Deployments, their service accounts and bindings,
    the roles bound only to them, the namespace)."""
    deployments = [o for o in objects if o["kind"] == "Deployment"]
    if not deployments:
        raise ValueError("config/default renders no Deployment")
    spec: dict[str, Any] = {"clusterPermissions": [], "deployments": [], "permissions": []}
    folded: list[dict[str, Any]] = []
    for deployment in deployments:
        namespace = deployment["metadata"].get("namespace", "")
        account = deployment["spec"]["template"]["spec"].get("serviceAccountName", "default")
        cluster, local, bindings = bound_roles(objects, account, namespace)
        if cluster:
            spec["clusterPermissions"].append({"rules": _rules(cluster), "serviceAccountName": account})
        if local:
            spec["permissions"].append({"rules": _rules(local), "serviceAccountName": account})
        entry = {"name": deployment["metadata"]["name"], "spec": copy.deepcopy(deployment["spec"])}
        if deployment["metadata"].get("labels"):
            entry["label"] = dict(deployment["metadata"]["labels"])
        spec["deployments"].append(entry)
        folded += [deployment, *cluster, *local, *bindings]
        folded += [o for o in objects if o["kind"] == "ServiceAccount" and o["metadata"]["name"] == account]
    for key in ("clusterPermissions", "permissions"):
        if not spec[key]:
            del spec[key]
    folded += [o for o in objects if o["kind"] == "Namespace"]
    return {"strategy": "deployment", "spec": spec}, folded


def related_images(strategy: dict[str, Any]) -> list[dict[str, str]]:
    """Every image the Deployments run, once (named after its first container)."""
    seen: dict[str, str] = {}
    for deployment in strategy["spec"]["deployments"]:
        pod = deployment["spec"]["template"]["spec"]
        for container in pod.get("initContainers", []) + pod.get("containers", []):
            seen.setdefault(container["image"], container["name"])
    return [{"name": name, "image": image} for image, name in seen.items()]


def set_image(strategy: dict[str, Any], old: str, new: str) -> None:
    """`make bundle IMG=...`: the operator image in place of config/default's."""
    for deployment in strategy["spec"]["deployments"]:
        pod = deployment["spec"]["template"]["spec"]
        for container in pod.get("initContainers", []) + pod.get("containers", []):
            if container["image"] == old:
                container["image"] = new


def schema_at(crd: dict[str, Any], version: str, path: str) -> dict[str, Any] | None:
    """The openAPIV3Schema node of a dotted path ("spec.distributed.worldSize"; "[0]" and list
    items are walked through), None when the CRD has no such field."""
    served = next((v for v in crd["spec"]["versions"] if v["name"] == version), None)
    node = served and served["schema"]["openAPIV3Schema"]
    for part in path.replace("[0]", "").split("."):
        while node is not None and node.get("type") == "array":
            node = node.get("items")
        node = ((node or {}).get("properties") or {}).get(part)
        if node is None:
            return None
    return node


SENTENCE_END = re.compile(r"(?<!e\.g)(?<!i\.e)\.\s+(?=[A-Z(])")


def _first_sentence(text: str) -> str:
    text = " ".join(text.split())
    end = SENTENCE_END.search(text)
    return text[:end.start() + 1] if end else text


def owned_crds(skeleton: list[dict[str, Any]], crds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """spec.customresourcedefinitions.owned: one entry per CRD version the bundle serves, with the
    skeleton's display name, description, resources and descriptors (a descriptor's description
    from the CRD's schema when the skeleton gives none). A skeleton entry of a CRD the bundle does
    not hold, or a descriptor of a field the CRD does not have, is an error."""
    by_key = {(c["spec"]["names"]["plural"] + "." + c["spec"]["group"], v["name"]): (c, v)
              for c in crds for v in c["spec"]["versions"] if v.get("served", True)}
    given = {(e["name"], e["version"]): e for e in skeleton}
    unknown = sorted(set(given) - set(by_key))
    if unknown:
        raise ValueError("config/manifests owns CRDs the bundle does not hold: %s" % unknown)
    owned = []
    for key in sorted(by_key):
        crd, version = by_key[key]
        entry = copy.deepcopy(given.get(key, {}))
        entry.update(name=key[0], version=key[1], kind=crd["spec"]["names"]["kind"])
        entry.setdefault("displayName", crd["spec"]["names"]["kind"])
        entry.setdefault("description", _first_sentence(version["schema"]["openAPIV3Schema"].get("description", "")))
        for part in ("spec", "status"):
            for descriptor in entry.get(part + "Descriptors", []):
                node = schema_at(crd, key[1], part + "." + descriptor["path"])
                if node is None:
                    raise ValueError("%s %sDescriptor %s: %s has no such field" % (key[0], part, descriptor["path"], part))
                if not descriptor.get("description") and node.get("description"):
                    descriptor["description"] = _first_sentence(node["description"])
        owned.append(dict(sorted(entry.items())))
    return owned


def alm_examples(samples: list[dict[str, Any]]) -> str:
    """The samples as OLM's alm-examples annotation (a JSON list), in config/samples' order."""
    return json.dumps(samples, indent=2)


def build_csv(skeleton: dict[str, Any], parts: dict[str, list], version: str, image: str | None = None,
              replaces: str | None = None, skip_range: str | None = None) -> tuple[dict[str, Any], list]:
    """The ClusterServiceVersion and the objects it folds in."""
    csv = copy.deepcopy(skeleton)
    strategy, folded = install_strategy(parts["objects"])
    default = strategy["spec"]["deployments"][0]["spec"]["template"]["spec"]["containers"][0]["image"]
    if image:
        set_image(strategy, default, image)
    operator_image = image or default
    meta = csv["metadata"]
    meta["name"] = csv_name(version, meta["name"].split(".v", 1)[0])
    annotations = meta.setdefault("annotations", {})
    annotations["alm-examples"] = alm_examples(parts["samples"])
    annotations["containerImage"] = operator_image
    if skip_range:
        annotations["olm.skipRange"] = skip_range
    spec = csv["spec"]
    spec["install"] = strategy
    spec["customresourcedefinitions"] = dict(spec.get("customresourcedefinitions") or {},
                                             owned=owned_crds((spec.get("customresourcedefinitions") or {})
                                                              .get("owned", []), parts["crds"]))
    spec["relatedImages"] = related_images(strategy)
    spec["version"] = version
    if replaces:
        spec["replaces"] = replaces
    meta["annotations"] = dict(sorted(annotations.items()))
    csv["spec"] = dict(sorted(spec.items()))
    return csv, folded


def bundle_annotations(package: str, channels: list[str], default_channel: str | None) -> dict[str, str]:
    """metadata/annotations.yaml (and the bundle image's labels)."""
    annotations = {
        "operators.operatorframework.io.bundle.mediatype.v1": MEDIATYPE,
        "operators.operatorframework.io.bundle.manifests.v1": "manifests/",
        "operators.operatorframework.io.bundle.metadata.v1": "metadata/",
        "operators.operatorframework.io.bundle.package.v1": package,
        "operators.operatorframework.io.bundle.channels.v1": ",".join(channels),
    }
    if default_channel:
        annotations["operators.operatorframework.io.bundle.channel.default.v1"] = default_channel
    annotations["operators.operatorframework.io.metrics.mediatype.v1"] = "metrics+v1"
    annotations["operators.operatorframework.io.metrics.project_layout"] = PROJECT_LAYOUT
    annotations["operators.operatorframework.io.test.mediatype.v1"] = SCORECARD_MEDIATYPE
    annotations["operators.operatorframework.io.test.config.v1"] = "tests/scorecard/"
    return annotations


def bundle_dockerfile(annotations: dict[str, str]) -> str:
    """bundle.Dockerfile: a scratch image holding bundle/, labelled like metadata/annotations.yaml."""
    lines = ["FROM scratch", "", "# Labels of metadata/annotations.yaml (hack/bundle.py writes both)."]
    lines += ["LABEL %s=%s" % item for item in annotations.items()]
    lines += ["", "# Copy files to locations specified by labels.",
              "COPY bundle/manifests /manifests/", "COPY bundle/metadata /metadata/",
              "COPY bundle/tests/scorecard /tests/scorecard/", ""]
    return "\n".join(lines)


def manifest_filename(obj: dict[str, Any], package: str = PACKAGE) -> str:
    """operator-sdk's file names: <package>.clusterserviceversion.yaml, <group>_<plural>.yaml for
    a CRD, <name>_<group>_<version>_<kind>.yaml for anything else."""
    if obj["kind"] == CSV_KIND:
        return "%s.clusterserviceversion.yaml" % package
    if obj["kind"] == "CustomResourceDefinition":
        return "%s_%s.yaml" % (obj["spec"]["group"], obj["spec"]["names"]["plural"])
    group, _, version = obj["apiVersion"].rpartition("/")
    return "%s_%s_%s_%s.yaml" % (obj["metadata"]["name"], group or version, version, obj["kind"].lower())


def dump(obj: Any) -> str:
    return yaml.safe_dump(obj, sort_keys=False, width=120)


def build(objects: list[dict[str, Any]], version: str, image: str | None = None, channels: list[str] | None = None,
          default_channel: str | None = None, replaces: str | None = None,
          skip_range: str | None = None) -> dict[str, str]:
    """{path relative to the output root: text} of bundle/ and bundle.Dockerfile, from the
    objects of `kubectl kustomize config/manifests`."""
    channels = channels or ["alpha"]
    default_channel = default_channel or channels[0]
    parts = partition(objects)
    skeleton = parts["csv"][0]
    package = skeleton["metadata"]["name"].split(".v", 1)[0]
    csv, folded = build_csv(skeleton, parts, version, image, replaces, skip_range)
    folded_ids = {id(o) for o in folded}
    extra = [o for o in parts["objects"] if id(o) not in folded_ids and o["kind"] not in FOLDED]
    files = {"bundle/manifests/" + manifest_filename(csv, package): dump(csv)}
    for obj in parts["crds"] + extra:
        files["bundle/manifests/" + manifest_filename(obj, package)] = dump(obj)
    annotations = bundle_annotations(package, channels, default_channel)
    files["bundle/metadata/annotations.yaml"] = dump({"annotations": annotations})
    if len(parts["scorecard"]) != 1:
        raise ValueError("config/manifests must include config/scorecard (one scorecard Configuration)")
    scorecard = copy.deepcopy(parts["scorecard"][0])
    files["bundle/tests/scorecard/config.yaml"] = dump(scorecard)
    files["bundle.Dockerfile"] = bundle_dockerfile(annotations)
    return dict(sorted(files.items()))


def write(root: Path, files: dict[str, str]) -> None:
    """Replace root/bundle (no stale file survives) and write bundle.Dockerfile."""
    shutil.rmtree(root / "bundle", ignore_errors=True)
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def main(argv: list[str]) -> int:
    from hack import render_manifests, version as versions

    parser = argparse.ArgumentParser(description="Write the OLM bundle (bundle/, bundle.Dockerfile).")
    parser.add_argument("--version", help="the bundle's version (default: the VERSION file)")
    parser.add_argument("--image", help="the operator image (default: config/default's)")
    parser.add_argument("--channels", default="alpha", help="comma-separated channels (default: alpha)")
    parser.add_argument("--default-channel", help="the default channel (default: the first channel)")
    parser.add_argument("--replaces", help="the CSV this one replaces, e.g. torchdev-operator.v0.1.0")
    parser.add_argument("--skip-range", help="olm.skipRange, e.g. '>=0.1.0 <0.2.0'")
    parser.add_argument("--root", type=Path, default=ROOT, help="where bundle/ and bundle.Dockerfile go")
    args = parser.parse_args(argv)
    ver = args.version or versions.read_version()
    if not versions.is_semver(ver):
        parser.error("--version %r is not a semantic version" % ver)
    files = build(render_manifests.kustomize("manifests"), ver, args.image,
                  [c for c in args.channels.split(",") if c], args.default_channel, args.replaces, args.skip_range)
    write(args.root, files)
    print("bundle %s: %d files in %s" % (csv_name(ver), len(files), args.root / "bundle"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
