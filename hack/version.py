#!/usr/bin/env python3
"""One version everywhere (docs/delivery.md): the VERSION file at the repository root is the
source; everything else reads it or is checked against it.

    python -m hack.version check [--version X.Y.Z] [--img IMG] [--devserver-img IMG] [--bundle DIR]
                                                                          (make release-check)
    python -m hack.version set X.Y.Z     writes VERSION and the two copies that cannot read it
    python -m hack.version image         the operator image config/default deploys

| where                               | how it gets the version                                   |
|-------------------------------------|-----------------------------------------------------------|
| VERSION                             | the source                                                |
| pyproject.toml (the Python package) | reads it (setuptools dynamic version)                     |
| devctl.__version__, `devctl version`| reads it (devctl/__init__.py)                             |
| Makefile VERSION, IMG, BUNDLE_IMG   | reads it (`VERSION ?= $(shell cat VERSION)`)              |
| bundle/ (the CSV)                   | generated from it (`make bundle`, hack/bundle.py)         |
| galaxy.yml version                  | a copy (galaxy.yml is plain YAML): checked, written by set |
| config/default images newTag        | a copy (kustomize reads no file): checked, written by set |
| Makefile DEVSERVER_IMG              | reads it (images/devserver, `make docker-build-devserver`) |
| the DevServer CRD's default image,  | copies (a CRD default is a literal): checked, written by  |
| roles/devserver's defaults image    | set; the tag of DEVSERVER_REPO                            |

`check` prints one line per disagreement and exits 1 when there is any.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
# The placeholder image of config/manager/manager.yaml, replaced by config/default's images entry.
PLACEHOLDER = "controller"
# Semantic Versioning 2.0.0 (semver.org), the form OLM requires of a CSV's spec.version.
SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
                    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
                    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$")
GALAXY_VERSION = re.compile(r"^version:.*$", re.M)
# The DevServer image (images/devserver/Dockerfile): the default spec.image, tagged VERSION, in
# the CRD (a literal default) and in the devserver role's defaults (which mirror the CRD's).
DEVSERVER_REPO = "ghcr.io/torchdev/torchdev-devserver"
DEVSERVER_IMAGE_FILES = {
    "DevServer CRD default spec.image": ("config/crd/bases/torchdev.io_devservers.yaml", "default"),
    "roles/devserver defaults image": ("roles/devserver/defaults/main.yml", "image"),
}


def _devserver_image_line(key: str) -> re.Pattern:
    return re.compile(r"^([ \t]*%s: )%s:(\S*)[ \t]*$" % (key, re.escape(DEVSERVER_REPO)), re.M)


def devserver_images(root: Path = ROOT) -> dict[str, str]:
    """{where: tag} of the DevServer image in each copy ("" where the default is another image)."""
    found = {}
    for where, (path, key) in DEVSERVER_IMAGE_FILES.items():
        match = _devserver_image_line(key).search((root / path).read_text())
        found[where] = match.group(2) if match else ""
    return found
NEW_TAG = re.compile(r"^(\s*newTag:).*$", re.M)


def is_semver(version: str) -> bool:
    return bool(SEMVER.match(version or ""))


def read_version(root: Path = ROOT) -> str:
    return (root / "VERSION").read_text().strip()


def image_tag(image: str) -> str:
    """The tag of an image reference ("" without one; a digest is not a tag)."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return last.rsplit(":", 1)[1] if ":" in last else ""


def _default_images(root: Path) -> dict:
    kustomization = yaml.safe_load((root / "config" / "default" / "kustomization.yaml").read_text())
    return next((i for i in kustomization.get("images") or [] if i.get("name") == PLACEHOLDER), {})


def default_image(root: Path = ROOT) -> str:
    """The operator image `kubectl kustomize config/default` renders (newName:newTag)."""
    entry = _default_images(root)
    return "%s:%s" % (entry.get("newName", PLACEHOLDER), entry.get("newTag", "latest"))


def pyproject_version(root: Path) -> str:
    """The version pyproject.toml gives the Python package: its own, or the file it reads."""
    data = tomllib.loads((root / "pyproject.toml").read_text())
    project = data.get("project", {})
    if "version" in project:
        return str(project["version"])
    source = (data.get("tool", {}).get("setuptools", {}).get("dynamic", {}).get("version") or {}).get("file")
    if "version" not in project.get("dynamic", []) or not source:
        return ""
    return (root / source).read_text().strip()


def devctl_version(root: Path) -> str:
    """What `devctl version` prints as its clientVersion (devctl/__init__.py of that tree)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
    out = subprocess.run([sys.executable, "-c", "import devctl; print(devctl.__version__)"], cwd=root, env=env,
                         capture_output=True, text=True, timeout=60)
    return out.stdout.strip() if out.returncode == 0 else "(devctl does not import: %s)" % out.stderr.strip()[-200:]


def bundle_versions(bundle: Path) -> dict[str, str]:
    """{what: version} of a generated bundle/: the CSV's spec.version, its name's suffix and the
    tag of its operator image."""
    csvs = sorted((bundle / "manifests").glob("*.clusterserviceversion.yaml"))
    if not csvs:
        return {}
    csv = yaml.safe_load(csvs[0].read_text())
    name = csv["metadata"]["name"]
    found = {"spec.version": str(csv["spec"].get("version", "")),
             "metadata.name": name.split(".v", 1)[1] if ".v" in name else name}
    image = (csv["metadata"].get("annotations") or {}).get("containerImage", "")
    found["containerImage"] = image_tag(image)
    return found


def disagreements(version: str, root: Path = ROOT, img: str | None = None, bundle: Path | None = None,
                  devserver_img: str | None = None) -> list[str]:
    """One line per place that does not say `version` (empty: they all agree)."""
    out = []
    if not is_semver(version):
        out.append("VERSION %r: not a semantic version (MAJOR.MINOR.PATCH[-PRE][+BUILD])" % version)

    def compare(where: str, found: str) -> None:
        if found != version:
            out.append("%s: %s, expected %s" % (where, found or "(none)", version))

    compare("VERSION", read_version(root))
    compare("galaxy.yml version", str(yaml.safe_load((root / "galaxy.yml").read_text()).get("version", "")))
    compare("pyproject.toml version", pyproject_version(root))
    compare("devctl version", devctl_version(root))
    compare("config/default images newTag", str(_default_images(root).get("newTag", "")))
    for where, tag in devserver_images(root).items():
        compare("%s tag (%s)" % (where, DEVSERVER_REPO), tag)
    if img is not None:
        compare("Makefile IMG tag (%s)" % img, image_tag(img))
    if devserver_img is not None:
        compare("Makefile DEVSERVER_IMG tag (%s)" % devserver_img, image_tag(devserver_img))
    if bundle is not None:
        found = bundle_versions(bundle)
        if not found:
            out.append("%s: no ClusterServiceVersion (make bundle VERSION=%s)" % (bundle, version))
        for what, value in found.items():
            compare("bundle CSV %s" % what, value)
    return out


def set_version(version: str, root: Path = ROOT) -> None:
    """Write `version` into VERSION and the copies that cannot read it (galaxy.yml, config/default)."""
    if not is_semver(version):
        raise ValueError("not a semantic version: %r" % version)
    (root / "VERSION").write_text(version + "\n")
    galaxy = root / "galaxy.yml"
    galaxy.write_text(GALAXY_VERSION.sub("version: " + version, galaxy.read_text(), count=1))
    kustomization = root / "config" / "default" / "kustomization.yaml"
    kustomization.write_text(NEW_TAG.sub(lambda m: "%s %s" % (m.group(1), version), kustomization.read_text(), count=1))
    for path, key in DEVSERVER_IMAGE_FILES.values():
        target = root / path
        target.write_text(_devserver_image_line(key).sub(
            lambda m: "%s%s:%s" % (m.group(1), DEVSERVER_REPO, version), target.read_text(), count=1))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="One version everywhere: check, set, or print the deployed image.")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout (default: this one)")
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="every place agrees with VERSION (exit 1, one line per disagreement)")
    check.add_argument("--version", help="the version to expect (default: the VERSION file)")
    check.add_argument("--img", help="the operator image the Makefile builds (its tag must be the version)")
    check.add_argument("--devserver-img", help="the DevServer image the Makefile builds (its tag too)")
    check.add_argument("--bundle", type=Path, help="a generated bundle directory to check too")
    setter = sub.add_parser("set", help="write the version into VERSION, galaxy.yml, config/default and the "
                                        "DevServer image defaults")
    setter.add_argument("version")
    sub.add_parser("image", help="print the operator image config/default renders")
    args = parser.parse_args(argv)
    if args.command == "image":
        print(default_image(args.root))
        return 0
    if args.command == "set":
        set_version(args.version, args.root)
        return 0
    version = args.version or read_version(args.root)
    lines = disagreements(version, args.root, args.img, args.bundle, args.devserver_img)
    for line in lines:
        print("release-check: " + line, file=sys.stderr)
    if not lines:
        print("release-check: every place says %s" % version)
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
