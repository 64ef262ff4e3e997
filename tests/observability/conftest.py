"""Fixtures of the end-to-end tests: tests/_cluster.py (kubesim per module, the CRDs and
sample flavors, one local operator runtime, a namespace per test)."""
import uuid

import pytest

from _cluster import kube, ns, real_tier, runtime, sim  # noqa: F401 (fixtures)
from _e2e_helpers import GROUP, VERSION


@pytest.fixture
def devuser(kube):  # noqa: F811 - kube is the fixture imported above
    """``devuser(email)``: a DevUser of that e-mail (the exporter's ``user`` label takes an owner
    only when it is a DevUser's e-mail, docs/metrics.md); removed after the test."""
    made = []

    def create(email: str) -> str:
        name = "u-" + uuid.uuid4().hex[:10]
        kube["custom"].create_cluster_custom_object(GROUP, VERSION, "devusers", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "DevUser", "metadata": {"name": name},
            "spec": {"email": email}})
        made.append(name)
        return email
    yield create
    for name in made:
        kube["custom"].delete_cluster_custom_object(GROUP, VERSION, "devusers", name)
