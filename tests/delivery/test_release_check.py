"""One version everywhere (issue 16.5, docs/delivery.md): the VERSION file is read by
pyproject.toml, devctl and the Makefile, and `make release-check VERSION=x.y.z` fails, one line
per place, when galaxy.yml, config/default's image tag, the Makefile's IMG or DEVSERVER_IMG, the DevServer
image the CRD and the devserver role default to (issue 27.5) or bundle/ disagree."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from _support import ROOT, tool
from hack import bundle, version

# What `make release-check` reads, copied into a scratch checkout the tests may edit.
FILES = ("VERSION", "galaxy.yml", "pyproject.toml", "Makefile", "config/default/kustomization.yaml",
         "hack/version.py", "devctl", "config/crd/bases/torchdev.io_devservers.yaml", "roles/devserver/defaults/main.yml")


def write_bundle(root: Path, ver: str, manifests: list) -> None:
    """bundle/ as `make bundle VERSION=ver` writes it."""
    bundle.write(root, bundle.build(manifests, ver, image="ghcr.io/torchdev/torchdev-operator:" + ver))


@pytest.fixture
def checkout(tmp_path, manifests):
    for name in FILES:
        src, dst = ROOT / name, tmp_path / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, dst)
    ver = version.read_version()
    write_bundle(tmp_path, ver, manifests)
    return tmp_path


def release_check(root: Path, *args: str) -> subprocess.CompletedProcess:
    venv = Path(sys.executable).parent.parent
    return subprocess.run([tool("make"), "--no-print-directory", "-C", str(root), "release-check",
                           "VENV=%s" % venv, *args], capture_output=True, text=True, timeout=120)


def test_this_checkout_says_one_version():
    ver = version.read_version()
    assert version.is_semver(ver)
    assert version.disagreements(ver) == []
    assert version.default_image() == "ghcr.io/torchdev/torchdev-operator:" + ver


def test_devctl_version_prints_it():
    out = subprocess.run([tool("devctl"), "version", "-o", "json"], capture_output=True, text=True, timeout=60)
    assert yaml.safe_load(out.stdout)["clientVersion"] == version.read_version()


def test_release_check_passes_when_everything_agrees(checkout):
    res = release_check(checkout)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "every place says %s" % version.read_version() in res.stdout


def test_release_check_fails_one_line_per_disagreement(checkout):
    ver = version.read_version()
    galaxy = checkout / "galaxy.yml"
    galaxy.write_text(galaxy.read_text().replace("version: " + ver, "version: 9.9.9"))
    res = release_check(checkout)
    assert res.returncode != 0
    lines = [line for line in res.stderr.splitlines() if line.startswith("release-check:")]
    assert lines == ["release-check: galaxy.yml version: 9.9.9, expected %s" % ver], res.stderr


def test_release_check_of_another_version_names_every_place(checkout):
    res = release_check(checkout, "VERSION=0.2.0", "IMG=example.com/op:0.1.0")
    assert res.returncode != 0
    places = [line.split(": ", 1)[1].split(":", 1)[0] for line in res.stderr.splitlines()
              if line.startswith("release-check:")]
    assert places == ["VERSION", "galaxy.yml version", "pyproject.toml version", "devctl version",
                      "config/default images newTag", "DevServer CRD default spec.image tag (ghcr.io/torchdev/torchdev-devserver)",
                      "roles/devserver defaults image tag (ghcr.io/torchdev/torchdev-devserver)",
                      "Makefile IMG tag (example.com/op",
                      "bundle CSV spec.version",
                      "bundle CSV metadata.name", "bundle CSV containerImage"], res.stderr


def test_release_check_needs_a_bundle(checkout):
    shutil.rmtree(checkout / "bundle")
    res = release_check(checkout)
    assert res.returncode != 0 and "no ClusterServiceVersion (make bundle" in res.stderr


@pytest.mark.parametrize("bad", ["1.2", "v1.2.3", "1.2.3.4", "01.2.3"])
def test_a_version_that_is_not_semver_is_refused(checkout, bad):
    res = release_check(checkout, "VERSION=" + bad)
    assert res.returncode != 0 and "not a semantic version" in res.stderr
    with pytest.raises(ValueError):
        version.set_version(bad, checkout)


def test_set_version_writes_the_copies(checkout, manifests):
    version.set_version("1.2.3", checkout)
    write_bundle(checkout, "1.2.3", manifests)
    res = release_check(checkout)
    assert res.returncode == 0, res.stderr
    assert version.default_image(checkout) == "ghcr.io/torchdev/torchdev-operator:1.2.3"
    assert version.devserver_images(checkout) == {"DevServer CRD default spec.image": "1.2.3",
                                                  "roles/devserver defaults image": "1.2.3"}
    assert "# The repository root is the Ansible collection" in (checkout / "galaxy.yml").read_text()  # comments kept


def test_the_default_devserver_image_is_this_version():
    """The CRD's default spec.image is the DevServer image the Makefile builds (issue 27.5)."""
    crd = yaml.safe_load((ROOT / "config" / "crd" / "bases" / "torchdev.io_devservers.yaml").read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert spec["image"]["default"] == "%s:%s" % (version.DEVSERVER_REPO, version.read_version())
    assert (ROOT / "images" / "devserver" / "Dockerfile").is_file()


@pytest.mark.parametrize("where,path,old", [
    ("DevServer CRD default spec.image", "config/crd/bases/torchdev.io_devservers.yaml", "default: "),
    ("roles/devserver defaults image", "roles/devserver/defaults/main.yml", "image: "),
])
def test_release_check_fails_when_the_devserver_image_is_not_this_version(checkout, where, path, old):
    ver = version.read_version()
    target = checkout / path
    image = "%s:%s" % (version.DEVSERVER_REPO, ver)
    target.write_text(target.read_text().replace(old + image, old + version.DEVSERVER_REPO + ":0.0.1"))
    res = release_check(checkout)
    assert res.returncode != 0
    lines = [line for line in res.stderr.splitlines() if line.startswith("release-check:")]
    assert lines == ["release-check: %s tag (%s): 0.0.1, expected %s" % (where, version.DEVSERVER_REPO, ver)]


def test_release_check_checks_the_devserver_image_the_makefile_builds(checkout):
    res = release_check(checkout, "DEVSERVER_IMG=example.com/dev:0.0.1")
    assert res.returncode != 0
    assert "release-check: Makefile DEVSERVER_IMG tag (example.com/dev:0.0.1): 0.0.1, expected" in res.stderr
