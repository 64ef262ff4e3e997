"""Fixtures of the security tests: every role rendered once over its sample matrix
(hack/render_manifests.py, the same renderer `make checkov` uses) and `kubectl kustomize`
of config/."""
from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

import pytest

from _cluster import kube, ns, real_tier, runtime, sim  # noqa: F401 (the end-to-end fixtures, for the tests that run the operator)
from hack import render_manifests as renderer

ROOT = Path(__file__).resolve().parents[2]
os.environ.setdefault("ANSIBLE_CONFIG", str(ROOT / "ansible.cfg"))


@pytest.fixture(scope="session")
def render_manifests():
    return renderer


@pytest.fixture(scope="session")
def rendered(render_manifests, tmp_path_factory):
    """{role: {case: [objects]}} for every role that renders objects: rendered once per test
    run, also when pytest-xdist runs the security files on several workers (the first worker
    renders under a lock into the run's shared temporary directory; the others read it)."""
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # .../pytest-N/popen-gwK -> .../pytest-N, one per run
    cache = shared / "security-render.json"
    with open(shared / "security-render.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not cache.exists():
            objects = render_manifests.render_roles(tmp_path_factory.mktemp("security-render"))
            tmp = cache.with_suffix(".tmp")
            tmp.write_text(json.dumps(objects))
            tmp.replace(cache)
        return json.loads(cache.read_text())


@pytest.fixture(scope="session")
def deployed(render_manifests):
    """What `make deploy` applies: kubectl kustomize config/default."""
    return render_manifests.kustomize("default")
