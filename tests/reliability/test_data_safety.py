"""Issue 17, item 5: the data-safety invariant itself (tests/_data_safety.py), which every module
of this suite checks when its simulator stops. Here, without an operator, each rule is shown
to hold and to fail: a claim holding user data deleted with the user's consent passes, the same
deletion without it is a violation naming the claim and who deleted it."""
from __future__ import annotations

import datetime as dt

import pytest
import urllib3

from _data_safety import DataSafety, data_class
from _reliability import start_sim

G = "torchdev.io/v1alpha1"
OPERATOR_AGENT = "OpenAPI-Generator/33.1.0/python"  # what the operator's requests carry


@pytest.fixture
def sim():
    s = start_sim()  # not the module's: these cases violate the invariant on purpose
    yield s
    s.stop()


def ns(sim, name, labels=None):
    sim.call(sim.api.create, "namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                            "metadata": {"name": name, "labels": labels or {}}})


def pvc(sim, namespace, name, labels, owner=None):
    meta = {"name": name, "labels": labels}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                    "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"]}]
    return sim.call(sim.api.create, "persistentvolumeclaims", {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta,
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}, namespace)


def http_delete(sim, path, agent):
    r = urllib3.PoolManager(retries=False).request("DELETE", sim.url + path, headers={"User-Agent": agent})
    assert r.status in (200, 202), r.data


def devserver(sim, namespace, name, policy):
    return sim.call(sim.api.create, "devservers.torchdev.io", {
        "apiVersion": G, "kind": "DevServer", "metadata": {"name": name},
        "spec": {"owner": "a@example.com", "flavor": "cpu-small", "homeRetentionPolicy": policy}}, namespace)


def wait_gone(sim, resource, namespace, name):
    sim.wait_for(lambda: any(r["name"] == name and r["namespace"] == namespace for r in sim.deletions(resource)),
                 60, interval=0.05, message=f"{resource} {namespace}/{name} deleted")


@pytest.mark.parametrize("obj,cls", [
    ({"metadata": {"name": "home-a-0", "labels": {"torchdev.io/devserver": "a"}}}, "home"),
    ({"metadata": {"name": "bob-shared-efs", "labels": {"torchdev.io/user": "bob"}}}, "shared"),
    ({"metadata": {"name": "artifacts-j", "labels": {"torchdev.io/ephemeralaccelerationjob": "j"}}}, "artifacts"),
    ({"metadata": {"name": "t-checkpoints", "labels": {"torchdev.io/trainingjob": "t"}}}, "checkpoints"),
    ({"metadata": {"name": "scratch", "labels": {}}}, None),
    ({"metadata": {"name": "home-a-0", "labels": {}}}, None),
])
def test_what_is_user_data(obj, cls):
    assert data_class(obj) == cls


def test_the_user_may_delete_anything_the_operator_nothing(sim):
    ns(sim, "ds1")
    pvc(sim, "ds1", "home-a-0", {"torchdev.io/devserver": "a"})
    pvc(sim, "ds1", "home-b-0", {"torchdev.io/devserver": "b"})
    pvc(sim, "ds1", "home-c-0", {"torchdev.io/devserver": "c"})
    sim.call(sim.api.delete, "persistentvolumeclaims", "ds1", "home-a-0")  # the user, in-process
    http_delete(sim, "/api/v1/namespaces/ds1/persistentvolumeclaims/home-b-0", "devctl/0.1.0")  # --purge
    http_delete(sim, "/api/v1/namespaces/ds1/persistentvolumeclaims/home-c-0", OPERATOR_AGENT)
    violations = DataSafety(sim).violations()
    assert violations == [f"home volume ds1/home-c-0 deleted by DELETE /api/v1/namespaces/ds1/persistentvolumeclaims/"
                          f"home-c-0 ({OPERATOR_AGENT}): nobody asked for it"]


@pytest.mark.parametrize("policy,violation", [("Delete", False), ("Retain", True)])
def test_a_home_garbage_collected_with_its_server_follows_its_retention_policy(sim, policy, violation):
    ns(sim, "ds2")
    server = devserver(sim, "ds2", "srv", policy)
    pvc(sim, "ds2", "home-srv-0", {"torchdev.io/devserver": "srv"}, owner=server)
    sim.call(sim.api.delete, "devservers.torchdev.io", "ds2", "srv")
    wait_gone(sim, "persistentvolumeclaims", "ds2", "home-srv-0")
    found = DataSafety(sim).violations()
    assert bool(found) is violation, found
    if violation:
        assert "garbage-collected with its DevServer, whose homeRetentionPolicy was Retain" in found[0]


@pytest.mark.parametrize("policy,violation", [("Delete", False), ("Retain", True)])
def test_a_shared_volume_goes_only_with_a_namespace_its_user_gave_up(sim, policy, violation):
    ns(sim, "dev-carol", {"torchdev.io/user": "carol"})
    sim.call(sim.api.create, "devusers.torchdev.io", {
        "apiVersion": G, "kind": "DevUser", "metadata": {"name": "carol", "finalizers": ["torchdev.io/devuser-cleanup"]},
        "spec": {"email": "carol@example.com", "deletionPolicy": policy}})
    pvc(sim, "dev-carol", "carol-shared-efs", {"torchdev.io/user": "carol"})
    sim.call(sim.api.delete, "devusers.torchdev.io", None, "carol")  # the user offboards
    http_delete(sim, "/api/v1/namespaces/dev-carol", OPERATOR_AGENT)  # the operator's finalizer
    wait_gone(sim, "persistentvolumeclaims", "dev-carol", "carol-shared-efs")
    found = DataSafety(sim).violations()
    assert bool(found) is violation, found
    if violation:
        assert "no DevUser with deletionPolicy Delete owned it" in found[0]


@pytest.mark.parametrize("expires_in,violation", [(-5, False), (600, True)])
def test_artifacts_go_at_their_ttl_not_before(sim, expires_in, violation):
    ns(sim, "ds3")
    when = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=expires_in)).strftime("%Y-%m-%dT%H:%M:%SZ")
    job = sim.call(sim.api.create, "ephemeralaccelerationjobs.torchdev.io", {
        "apiVersion": G, "kind": "EphemeralAccelerationJob", "metadata": {"name": "j"},
        "spec": {"model": "resnet50", "input": {"type": "image", "path": "/artifacts/x.jpg"}}}, "ds3")
    job["status"] = {"phase": "Succeeded", "artifactsExpireAt": when}
    sim.call(sim.api.update, "ephemeralaccelerationjobs.torchdev.io", job, "ds3", "status")
    pvc(sim, "ds3", "artifacts-j", {"torchdev.io/ephemeralaccelerationjob": "j"}, owner=job)
    http_delete(sim, "/api/v1/namespaces/ds3/persistentvolumeclaims/artifacts-j", OPERATOR_AGENT)
    found = DataSafety(sim).violations()
    assert bool(found) is violation, found
    summary = DataSafety(sim).summary()
    assert summary["deleted_user_volumes"] == 1 and summary["violations"] == int(violation)


def test_artifacts_go_with_the_job_the_user_deleted(sim):
    ns(sim, "ds4")
    job = sim.call(sim.api.create, "ephemeralaccelerationjobs.torchdev.io", {
        "apiVersion": G, "kind": "EphemeralAccelerationJob", "metadata": {"name": "j"},
        "spec": {"model": "resnet50", "input": {"type": "image", "path": "/artifacts/x.jpg"}}}, "ds4")
    pvc(sim, "ds4", "artifacts-j", {"torchdev.io/ephemeralaccelerationjob": "j"}, owner=job)
    sim.call(sim.api.delete, "ephemeralaccelerationjobs.torchdev.io", "ds4", "j")
    wait_gone(sim, "persistentvolumeclaims", "ds4", "artifacts-j")
    assert DataSafety(sim).violations() == []
    assert DataSafety(sim).summary()["by_consent"] == {"artifacts: its EphemeralAccelerationJob was deleted": 1}
