"""Every request the operator really makes is granted by its ClusterRole.

The dynamic twin of test_rbac_least_privilege.py: kubesim + the local runtime run the real
roles through create, home growth, SSH off (prune), a missing flavor (Warning Event) and a
flavor change (the flavor role annotates its DevServers); then every request in kubesim's
request log that did not come from this test's own client is checked against the manager
ClusterRole of config/rbac.  Discovery requests (/api, /apis, /version, /openapi) are
non-resource URLs every authenticated client may GET (system:discovery).
"""
from __future__ import annotations


import pytest
import yaml

import _rbac
from _rbac import Access, allows

from _e2e_helpers import GROUP, VERSION, devserver, new_namespace, wait_degraded, wait_ready, warning_events

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TEST_AGENT = "torchdev-security-test"
DISCOVERY = ("/api", "/apis", "/version", "/openapi")


def request_access(path: str, verb: str) -> Access | None:
    """The RBAC attributes of a resource request path; None for a non-resource URL."""
    segs = [s for s in path.split("/") if s]
    if segs[:1] == ["api"] and len(segs) >= 3:
        group, rest = "", segs[2:]
    elif segs[:1] == ["apis"] and len(segs) >= 4:
        group, rest = segs[1], segs[3:]
    else:
        return None
    if rest[0] == "namespaces" and len(rest) >= 3:
        rest = rest[2:]
    resource = rest[0] + ("/" + rest[2] if len(rest) >= 3 else "")
    return Access(group, resource, verb, rest[1] if len(rest) >= 2 else "")


@pytest.mark.parametrize("path, verb, expected", [
    ("/api/v1/namespaces/ns/pods", "list", Access("", "pods", "list")),
    ("/api/v1/namespaces/ns", "get", Access("", "namespaces", "get", "ns")),
    ("/apis/apps/v1/namespaces/ns/statefulsets/x", "patch", Access("apps", "statefulsets", "patch", "x")),
    ("/apis/torchdev.io/v1alpha1/namespaces/ns/devservers/x/status", "patch",
     Access("torchdev.io", "devservers/status", "patch", "x")),
    ("/apis/torchdev.io/v1alpha1/devserverflavors", "watch", Access("torchdev.io", "devserverflavors", "watch")),
    ("/apis", "get", None),
    ("/api/v1", "get", None),
])
def test_request_access(path, verb, expected):
    assert request_access(path, verb) == expected


@pytest.fixture(scope="module")
def cluster(sim, kube, runtime):
    """The e2e fixtures (tests/e2e/conftest.py), with this test's client marked."""
    kube["core"].api_client.user_agent = TEST_AGENT  # one ApiClient behind every API object
    return sim, kube, runtime


def _exercise(sim, kube, rt) -> None:
    ns = new_namespace(kube)
    custom, core = kube["custom"], kube["core"]
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, "devservers", devserver("rbac"))
    wait_ready(sim, kube, ns, "rbac")
    # the home grows: a server-side apply of the observed PVC
    custom.patch_namespaced_custom_object(GROUP, VERSION, ns, "devservers", "rbac", {"spec": {"persistentHomeSize": "200Gi"}})
    sim.wait_for(lambda: core.read_namespaced_persistent_volume_claim("home-rbac-0", ns)
                 .spec.resources.requests["storage"] == "200Gi", 90, message="home PVC resized")
    # SSH off: the SSH Service and ConfigMap are pruned
    custom.patch_namespaced_custom_object(GROUP, VERSION, ns, "devservers", "rbac", {"spec": {"enableSSH": False}})
    sim.wait_for(lambda: not [s for s in core.list_namespaced_service(ns).items if s.metadata.name == "rbac-ssh"],
                 90, message="rbac-ssh pruned")
    # a missing flavor: Degraded and a Warning Event
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, "devservers", devserver("lost", flavor="no-such-flavor"))
    wait_degraded(sim, kube, ns, "lost", "FlavorNotFound")
    sim.wait_for(lambda: warning_events(kube, ns, "lost", "FlavorNotFound"), 60, message="Warning Event")
    # a flavor change: the flavor role annotates the DevServers that use it
    before = get_annotation(custom, ns, "rbac")
    custom.patch_cluster_custom_object(GROUP, VERSION, "devserverflavors", "cpu-small", {"spec": {"shmSize": "2Gi"}})
    sim.wait_for(lambda: get_annotation(custom, ns, "rbac") not in (None, before), 90, message="flavor-hash annotation")
    assert rt.wait_idle(180)


def get_annotation(custom, ns, name):
    obj = custom.get_namespaced_custom_object(GROUP, VERSION, ns, "devservers", name)
    return (obj["metadata"].get("annotations") or {}).get("torchdev.io/flavor-hash")


def test_every_operator_request_is_granted(cluster):
    sim, kube, rt = cluster
    sim.reset_metrics()
    _exercise(sim, kube, rt)
    role = [d for d in yaml.safe_load_all((_rbac.RBAC / "role.yaml").read_text()) if d and d["kind"] == "ClusterRole"]
    rules = role[0]["rules"]
    requests = [r for r in sim.requests(20000) if r["user_agent"] != TEST_AGENT]
    seen, denied, other = set(), {}, set()
    for r in requests:
        access = request_access(r["path"], r["verb"])
        if access is None:
            if not r["path"].startswith(DISCOVERY):
                other.add(r["path"])
            continue
        seen.add(Access(access.group, access.resource, access.verb))
        if not allows(rules, access):
            denied.setdefault(str(Access(access.group, access.resource, access.verb)), r["path"])
    assert not other, "non-resource requests outside discovery: %s" % sorted(other)
    assert not denied, "requests the manager ClusterRole does not grant:\n" + "\n".join(
        "  %s  (e.g. %s)" % item for item in sorted(denied.items()))
    # the scenario did reach every kind of write it is meant to check
    for must in (Access("", "persistentvolumeclaims", "patch"), Access("", "services", "delete"),
                 Access("", "events", "create"), Access("torchdev.io", "devservers", "patch"),
                 Access("torchdev.io", "devservers/status", "patch"), Access("apps", "statefulsets", "patch")):
        assert must in seen, "the scenario made no %s request" % must
