"""Fault injection (in-process `sim.faults.add` and `POST /kubesim/faults`) and
observability (`sim.metrics()`, `GET /kubesim/metrics`, `GET /kubesim/requests`)."""
from __future__ import annotations

import http.client as _http
import json
import time

import pytest
from kubernetes import client

from kubesim.testing import KubeSim

from .conftest import Http, all_controllers, api_client, assert_status, make_namespace


def cm(name):
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
            "data": {"k": "v"}}


@pytest.fixture(scope="module")
def sim():
    s = KubeSim(nodes="", disabled=all_controllers()).start()
    yield s
    s.stop()


@pytest.fixture
def env(sim):
    """(sim, Http, namespace) with faults cleared and metrics reset."""
    sim.faults.clear()
    ns = make_namespace(sim, "f")
    sim.reset_metrics()
    yield sim, Http(sim), ns
    sim.faults.clear()


def add_fault(sim, via, **spec):
    if via == "python":
        return sim.faults.add(**spec).describe()
    code, data = Http(sim).post("/kubesim/faults", spec)
    assert code == 201, data
    return data


VIAS = ["python", "http"]


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("code,reason", [(409, "Conflict"), (429, "TooManyRequests"),
                                         (500, "InternalError")])
def test_fail_next_n(env, via, code, reason):
    sim, http, ns = env
    add_fault(sim, via, verb="create", resource="configmaps", count=2, code=code)
    path = f"/api/v1/namespaces/{ns}/configmaps"
    results = [http.post(path, cm(f"c{i}")) for i in range(4)]
    assert [r[0] for r in results] == [code, code, 201, 201]
    assert_status(results[0][1], code, reason, "injected")
    if code == 429:
        assert results[0][1]["details"]["retryAfterSeconds"] >= 1
    # the failed requests wrote nothing
    assert [c["metadata"]["name"] for c in http.get(path)[1]["items"]] == ["c2", "c3"]
    counts = sim.metrics()["requests"]
    assert counts[f"create configmaps {code}"] == 2
    assert counts["create configmaps 201"] == 2


@pytest.mark.parametrize("via", VIAS)
def test_fault_scoped_to_verb_and_resource(env, via):
    sim, http, ns = env
    add_fault(sim, via, verb="get", resource="configmaps", count=100, code=500)
    base = f"/api/v1/namespaces/{ns}"
    assert http.post(f"{base}/configmaps", cm("a"))[0] == 201      # other verb
    assert http.get(f"{base}/configmaps")[0] == 200                 # list is not get
    assert http.get(f"{base}/configmaps/a")[0] == 500                # the target
    assert http.post(f"{base}/secrets", {"apiVersion": "v1", "kind": "Secret",
                                         "metadata": {"name": "s"}})[0] == 201
    assert http.get(f"{base}/secrets/s")[0] == 200                   # other resource


def test_fault_on_subresource_and_wildcards(env):
    sim, http, ns = env
    sim.faults.add(verb="*", resource="deployments.apps/status", count=1, code=409)
    base = f"/apis/apps/v1/namespaces/{ns}/deployments"
    d = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
         "spec": {"selector": {"matchLabels": {"a": "b"}},
                  "template": {"metadata": {"labels": {"a": "b"}},
                               "spec": {"containers": [{"name": "c", "image": "x"}]}}}}
    assert http.post(base, d)[0] == 201
    assert http.get(f"{base}/d")[0] == 200
    assert http.patch(f"{base}/d/status", {"status": {"replicas": 1}},
                      "application/merge-patch+json")[0] == 409
    assert http.patch(f"{base}/d/status", {"status": {"replicas": 1}},
                      "application/merge-patch+json")[0] == 200


@pytest.mark.parametrize("via", VIAS)
def test_fraction(env, via):
    sim, http, ns = env
    sim.cluster.faults._random.seed(7)  # reproducible
    add_fault(sim, via, verb="list", resource="configmaps", fraction=0.5, code=500)
    codes = [http.get(f"/api/v1/namespaces/{ns}/configmaps")[0] for _ in range(200)]
    failed = codes.count(500)
    assert 60 <= failed <= 140 and codes.count(200) == 200 - failed
    sim.faults.clear()
    add_fault(sim, via, verb="list", resource="configmaps", fraction=1.0, code=429)
    assert {http.get(f"/api/v1/namespaces/{ns}/configmaps")[0] for _ in range(5)} == {429}


def post_without_answer(sim, ns, name):
    """POST a ConfigMap on a raw connection whose answer never comes (the connection breaks)."""
    host, port = sim.url.split("//")[1].split(":")
    conn = _http.HTTPConnection(host, int(port), timeout=5)
    conn.request("POST", f"/api/v1/namespaces/{ns}/configmaps", json.dumps(cm(name)),
                 {"Content-Type": "application/json"})
    with pytest.raises((ConnectionError, _http.RemoteDisconnected, _http.BadStatusLine)):
        conn.getresponse()
    conn.close()


@pytest.mark.parametrize("via", VIAS)
def test_dropped_connection(env, via):
    sim, http, ns = env
    add_fault(sim, via, verb="create", resource="configmaps", count=1, code="drop")
    post_without_answer(sim, ns, "d")
    assert sim.metrics()["requests"] == {"create configmaps 0": 1}  # code 0: no response
    # the official client sees a connection error too (no retries), then the next one works
    c = api_client(sim)
    c.configuration.retries = False
    add_fault(sim, via, verb="create", resource="configmaps", count=1, code="drop")
    v1 = client.CoreV1Api(client.ApiClient(c.configuration))
    with pytest.raises(Exception) as e:
        v1.create_namespaced_config_map(ns, cm("d"))
    assert not isinstance(e.value, client.ApiException)
    assert v1.create_namespaced_config_map(ns, cm("d")).metadata.name == "d"
    assert http.get("/version")[0] == 200


@pytest.mark.parametrize("via", VIAS)
def test_latency(env, via):
    sim, http, ns = env
    path = f"/api/v1/namespaces/{ns}/configmaps"
    add_fault(sim, via, verb="list", resource="configmaps", count=1, code=None, latency_ms=1500)
    t0 = time.monotonic()
    assert http.get(path)[0] == 200
    assert time.monotonic() - t0 >= 1.5
    t0 = time.monotonic()
    assert http.get(path)[0] == 200  # count exhausted: no latency again (room for a busy machine)
    assert time.monotonic() - t0 < 1.0
    # latency and an error together
    add_fault(sim, via, verb="list", resource="configmaps", count=1, code=500, latency_ms=200)
    t0 = time.monotonic()
    assert http.get(path)[0] == 500
    assert time.monotonic() - t0 >= 0.2


def test_official_client_sees_injected_errors(env):
    sim, http, ns = env
    v1 = client.CoreV1Api(api_client(sim))
    sim.faults.add(verb="patch", resource="configmaps", count=1, code=409)
    v1.create_namespaced_config_map(ns, cm("x"))
    with pytest.raises(client.ApiException) as e:
        v1.patch_namespaced_config_map("x", ns, {"data": {"k": "2"}})
    assert e.value.status == 409 and json.loads(e.value.body)["reason"] == "Conflict"
    assert v1.patch_namespaced_config_map("x", ns, {"data": {"k": "2"}}).data == {"k": "2"}


def test_admin_fault_endpoints(env):
    sim, http, ns = env
    code, rule = http.post("/kubesim/faults", {"verb": "delete", "resource": "pods",
                                                "count": 3, "code": 500})
    assert code == 201 and rule["id"] and rule["hits"] == 0
    code, listed = http.get("/kubesim/faults")
    assert code == 200 and [r["id"] for r in listed["faults"]] == [rule["id"]]
    assert http.delete("/kubesim/faults")[0] == 200
    assert http.get("/kubesim/faults")[1]["faults"] == []


@pytest.mark.parametrize("spec", [
    {"verb": "get", "code": 418},
    {"verb": "get", "count": 1, "fraction": 0.5},
    {"verb": "get", "fraction": 2},
    {"verb": "get", "count": -1},
    {"verb": "get", "code": None},
    {"verb": "get", "colour": "red"},
    "not an object",
])
def test_admin_fault_validation(env, spec):
    sim, http, ns = env
    code, data = http.post("/kubesim/faults", spec)
    assert code == 400
    assert_status(data, 400, "BadRequest", "invalid fault rule")
    assert http.get("/kubesim/faults")[1]["faults"] == []
    if isinstance(spec, dict):
        with pytest.raises(ValueError):
            sim.faults.add(**spec)


# ------------------------------------------------------------------------------------------
# metrics and the request log
# ------------------------------------------------------------------------------------------

def test_counters_by_verb_resource_code(env):
    sim, http, ns = env
    base = f"/api/v1/namespaces/{ns}/configmaps"
    http.post(base, cm("m1"))
    http.post(base, cm("m1"))                              # 409
    http.get(f"{base}/m1")
    http.get(f"{base}/nope")                               # 404
    http.get(base)
    http.patch(f"{base}/m1", {"data": {"a": "b"}}, "application/merge-patch+json")
    http.put(f"{base}/m1", {**cm("m1"), "data": {"c": "d"}})
    http.delete(f"{base}/m1")
    http.delete(base)
    http.get(f"{base}?watch=true&timeoutSeconds=0")
    http.patch(f"/apis/apps/v1/namespaces/{ns}/deployments/x/scale", {"spec": {}},
               "application/merge-patch+json")              # 404 on a subresource
    expected = {
        "create configmaps 201": 1, "create configmaps 409": 1, "get configmaps 200": 1,
        "get configmaps 404": 1, "list configmaps 200": 1, "patch configmaps 200": 1,
        "update configmaps 200": 1, "delete configmaps 200": 1,
        "deletecollection configmaps 200": 1, "watch configmaps 200": 1,
        "patch deployments.apps/scale 404": 1,
    }
    snap = sim.metrics()
    assert snap["requests"] == expected
    assert snap["total"] == 11
    assert snap["writes"] == 7
    assert snap["by_verb"]["get"] == 2 and snap["by_verb"]["create"] == 2
    assert sim.writes("configmaps") == 6
    # the same over HTTP (admin endpoints are not counted)
    code, data = http.get("/kubesim/metrics")
    assert code == 200 and data["requests"] == expected


def test_request_log(env):
    sim, http, ns = env
    http.post(f"/api/v1/namespaces/{ns}/configmaps", cm("r1"))
    http.get(f"/api/v1/namespaces/{ns}/configmaps/r1", headers={"User-Agent": "probe/1.0"})
    http.get("/version")
    log = sim.requests()
    assert [(r["verb"], r["resource"], r["code"]) for r in log] == [
        ("create", "configmaps", 201), ("get", "configmaps", 200), ("get", "", 200)]
    assert log[1]["path"] == f"/api/v1/namespaces/{ns}/configmaps/r1"
    assert log[1]["user_agent"] == "probe/1.0"
    assert all(r["latency_ms"] >= 0 and r["time"] > 0 for r in log)
    code, data = http.get("/kubesim/requests?limit=2")
    assert code == 200 and [r["path"] for r in data["requests"]] == [log[1]["path"], "/version"]
    # reset over HTTP
    assert http.post("/kubesim/metrics/reset", {})[0] == 200
    assert sim.metrics()["total"] == 0 and sim.requests() == []


def test_injected_faults_are_counted(env):
    sim, http, ns = env
    sim.faults.add(verb="list", resource="pods", count=2, code=429)
    for _ in range(3):
        http.get(f"/api/v1/namespaces/{ns}/pods")
    assert sim.metrics()["requests"] == {"list pods 429": 2, "list pods 200": 1}


# ------------------------------------------------------------------------------------------
# What tests/reliability needs: more answers, a list of codes, writes that happened without an
# answer, no-op writes in the request log, authentication
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("code,reason,fragment", [
    (401, "Unauthorized", "Unauthorized"),
    (403, "Forbidden", 'cannot get resource "configmaps" in API group ""'),
    (404, "NotFound", "could not find the requested resource"),
])
def test_auth_and_not_found_answers(env, code, reason, fragment):
    sim, http, ns = env
    http.post(f"/api/v1/namespaces/{ns}/configmaps", cm("a"))
    sim.faults.add(verb="get", resource="configmaps", count=1, code=code)
    got = http.get(f"/api/v1/namespaces/{ns}/configmaps/a")
    assert got[0] == code
    assert_status(got[1], code, reason, fragment)


def test_code_list_verb_list_and_injected_counts(env):
    sim, http, ns = env
    sim.faults.seed(3)
    sim.faults.add(verb="create,get", resource="configmaps", fraction=1.0, code=[409, 500])
    codes = {http.post(f"/api/v1/namespaces/{ns}/configmaps", cm(f"x{i}"))[0] for i in range(20)}
    assert codes == {409, 500}
    assert http.get(f"/api/v1/namespaces/{ns}/configmaps")[0] == 200  # list is not in the list
    injected = sim.faults.injected()
    assert injected["409"] + injected["500"] == 20
    with pytest.raises(ValueError):
        sim.faults.add(code=[None])
    with pytest.raises(ValueError):
        sim.faults.add(code=[])


def test_a_latency_rule_does_not_hide_a_failing_rule(env):
    sim, http, ns = env
    sim.faults.add(code=None, latency_ms=50)
    sim.faults.add(verb="list", resource="configmaps", count=1, code=500)
    t0 = time.monotonic()
    assert http.get(f"/api/v1/namespaces/{ns}/configmaps")[0] == 500
    assert time.monotonic() - t0 >= 0.05
    assert sim.faults.injected() == {"latency": 1, "500": 1}


def test_drop_after_serves_the_write_and_loses_the_answer(env):
    sim, http, ns = env
    sim.faults.add(verb="create", resource="configmaps", count=1, code="drop-after")
    post_without_answer(sim, ns, "late")
    assert http.get(f"/api/v1/namespaces/{ns}/configmaps/late")[0] == 200  # it was written
    assert sim.metrics()["requests"]["create configmaps 0"] == 1


def test_noop_writes_are_marked_in_the_request_log(env):
    sim, http, ns = env
    base = f"/api/v1/namespaces/{ns}/configmaps"
    http.post(base, cm("n"))
    http.patch(f"{base}/n", {"data": {"k": "v"}}, "application/merge-patch+json")      # no change
    http.patch(f"{base}/n", {"data": {"k": "w"}}, "application/merge-patch+json")      # a change
    marks = [(r["verb"], r.get("noop")) for r in sim.requests() if r["verb"] != "get"]
    assert marks == [("create", False), ("patch", True), ("patch", False)]


def test_put_of_a_missing_object_is_not_found_unless_the_kind_allows_it(env):
    """A client retrying an update after a lost answer must not bring a deleted object back."""
    sim, http, ns = env
    code, data = http.put(f"/api/v1/namespaces/{ns}/configmaps/gone", cm("gone"))
    assert code == 404 and data["reason"] == "NotFound"
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "r"}, "rules": []}
    assert http.put(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles/r", role)[0] == 201
    stale = dict(role, metadata={"name": "r2", "resourceVersion": "5"})
    assert http.put(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles/r2", stale)[0] == 409


def test_bearer_tokens_are_checked_when_configured():
    sim = KubeSim(nodes="", disabled=all_controllers(), tokens=["good"]).start()
    try:
        http = Http(sim)
        assert http.get("/api/v1/namespaces")[0] == 401
        assert http.get("/api/v1/namespaces", headers={"Authorization": "Bearer bad"})[0] == 401
        assert http.get("/api/v1/namespaces", headers={"Authorization": "Bearer good"})[0] == 200
        assert http.get("/version")[0] == 200 and http.get("/kubesim/metrics")[0] == 200  # public
        # the kubeconfig carries the first token: the official client gets in
        v1 = client.CoreV1Api(api_client(sim))
        assert v1.list_namespace().items
    finally:
        sim.stop()
