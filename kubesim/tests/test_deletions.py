"""The deletion log (kubesim/deletions.py): every object removed, who asked (an HTTP request with
its user agent, a controller, an in-process call) and its final state; also deletions still held
by finalizers."""
from __future__ import annotations

import pytest

from kubesim.testing import KubeSim

from .conftest import Http


def cm(name, owner=None):
    meta = {"name": name}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "ConfigMap", "name": owner["metadata"]["name"],
                                    "uid": owner["metadata"]["uid"]}]
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": "v"}}


@pytest.fixture(scope="module")
def sim():
    s = KubeSim(nodes="").start()
    yield s
    s.stop()


def test_who_deleted_what(sim):
    http = Http(sim)
    sim.call(sim.api.create, "namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "dl"}})
    parent = sim.call(sim.api.create, "configmaps", cm("parent"), "dl")
    sim.call(sim.api.create, "configmaps", cm("child", parent), "dl")
    sim.call(sim.api.create, "configmaps", cm("direct"), "dl")
    assert http.request("DELETE", "/api/v1/namespaces/dl/configmaps/parent",
                        headers={"User-Agent": "devctl/1.0"})[0] == 200
    sim.call(sim.api.delete, "configmaps", "dl", "direct")
    sim.wait_for(lambda: {r["name"] for r in sim.deletions("configmaps")} >= {"parent", "child", "direct"}, 30,
                 message="the garbage collector")
    by_name = {r["name"]: r for r in sim.deletions("configmaps")}
    assert by_name["parent"]["requested_by"] == {"via": "request", "verb": "delete",
                                                 "path": "/api/v1/namespaces/dl/configmaps/parent",
                                                 "user_agent": "devctl/1.0"}
    assert by_name["child"]["requested_by"] == {"via": "controller", "controller": "garbagecollector"}
    assert by_name["child"]["ownerReferences"][0]["name"] == "parent"
    assert by_name["direct"]["requested_by"] == {"via": "direct"}
    assert by_name["direct"]["object"]["data"] == {"k": "v"}
    code, data = http.get("/kubesim/deletions?resource=configmaps")
    assert code == 200 and {r["name"] for r in data["deletions"]} >= {"parent", "child", "direct"}


def test_a_deletion_held_by_finalizers_is_requested_then_removed(sim):
    sim.call(sim.api.create, "namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "dlf"}})
    obj = cm("held")
    obj["metadata"]["finalizers"] = ["example.com/hold"]
    sim.call(sim.api.create, "configmaps", obj, "dlf")
    sim.call(sim.api.delete, "configmaps", "dlf", "held")
    assert [r["name"] for r in sim.deletion_requests("configmaps") if r["namespace"] == "dlf"] == ["held"]
    assert [r for r in sim.deletions("configmaps") if r["namespace"] == "dlf"] == []  # still there
    live = sim.call(sim.api.get, "configmaps", "dlf", "held")
    live["metadata"]["finalizers"] = []
    sim.call(sim.api.update, "configmaps", live, "dlf")
    done = [r for r in sim.deletions("configmaps") if r["namespace"] == "dlf"]
    assert [r["name"] for r in done] == ["held"]
    assert done[0]["requested_by"] == {"via": "direct"} and done[0]["requested_at"] <= done[0]["time"]


def test_a_namespace_takes_its_objects_with_it(sim):
    sim.call(sim.api.create, "namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "dln"}})
    sim.call(sim.api.create, "configmaps", cm("inside"), "dln")
    sim.call(sim.api.delete, "namespaces", None, "dln")
    sim.wait_for(lambda: any(r["name"] == "dln" for r in sim.deletions("namespaces")), 30,
                 message="the namespace deleted")
    inside = [r for r in sim.deletions("configmaps") if r["namespace"] == "dln" and r["name"] == "inside"]
    assert inside[0]["requested_by"] == {"via": "controller", "controller": "namespace"}
