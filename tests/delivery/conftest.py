"""Fixtures of the delivery tests: the bundle as `make bundle` writes it, generated once per
session into a scratch directory (bundle/ is generated output, never committed)."""
from __future__ import annotations

import pytest
import yaml

from hack import bundle, render_manifests, version


@pytest.fixture(scope="session")
def manifests():
    """`kubectl kustomize config/manifests`: what hack/bundle.py reads."""
    return render_manifests.kustomize("manifests")


@pytest.fixture(scope="session")
def generated(manifests, tmp_path_factory):
    """(root, {path: text}): bundle/ and bundle.Dockerfile for the VERSION file's version."""
    root = tmp_path_factory.mktemp("bundle-root")
    files = bundle.build(manifests, version.read_version())
    bundle.write(root, files)
    return root, files


@pytest.fixture(scope="session")
def csv(generated):
    root, _ = generated
    (path,) = (root / "bundle" / "manifests").glob("*.clusterserviceversion.yaml")
    return yaml.safe_load(path.read_text())


@pytest.fixture(scope="session")
def validated(generated):
    """The generated bundle as hack/bundle_validate.py reads it."""
    from hack import bundle_validate

    root, _ = generated
    return bundle_validate.load(root / "bundle", root / "bundle.Dockerfile")
