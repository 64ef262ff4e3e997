"""Fixtures of the security tests: every role rendered once over its sample matrix
(hack/render_manifests.py, the same renderer `make checkov` uses) and `kubectl kustomize`
of config/."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from _cluster import kube, runtime, sim  # noqa: F401 (the end-to-end fixtures, for the tests that run the operator)
from hack import render_manifests as renderer

ROOT = Path(__file__).resolve().parents[2]
os.environ.setdefault("ANSIBLE_CONFIG", str(ROOT / "ansible.cfg"))


@pytest.fixture(scope="session")
def render_manifests():
    return renderer


@pytest.fixture(scope="session")
def rendered(render_manifests, tmp_path_factory):
    """{role: {case: [objects]}} for every role that renders objects."""
    return render_manifests.render_roles(tmp_path_factory.mktemp("security-render"))


@pytest.fixture(scope="session")
def deployed(render_manifests):
    """What `make deploy` applies: kubectl kustomize config/default."""
    return render_manifests.kustomize("default")
