"""The exporter's /metrics is HTTPS and authorized per scrape (issue 25.7), as kube-rbac-proxy
and the operator-sdk's --metrics-secure: the bearer token is reviewed by the cluster
(TokenReview: who is it; SubjectAccessReview: may it get the non-resource URL /metrics).

kubesim serves neither review, so the two endpoints are a small fake here (``FakeReviews``):
the exporter's own review code (serve.kubernetes_review, the ``kubernetes`` client) calls it,
and it authorizes exactly the users bound to the shipped ClusterRole metrics-reader
(config/rbac, as `make deploy` renders it).  The exporter itself is real: it watches kubesim
and serves over TLS, and a real client (urllib, verifying the exporter's certificate) scrapes
it: 401 without a token or with one the cluster does not know, 403 for a user not bound to
metrics-reader, 200 with the torchdev_* series for one that is; a failed review is 503.
"""
from __future__ import annotations

import json
import socket
import ssl
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from hack import render_manifests
from kubesim.testing import wait_for
from torchdev_exporter import serve
from torchdev_exporter.__main__ import Exporter

PROMETHEUS = "system:serviceaccount:monitoring:prometheus"
EVE = "system:serviceaccount:dev-eve:default"
TOKENS = {"prometheus-token": PROMETHEUS, "eve-token": EVE}


def metrics_reader_grants_get_metrics() -> bool:
    (role,) = [o for o in render_manifests.kustomize("default")
               if o["kind"] == "ClusterRole" and o["metadata"]["name"] == "torchdev-metrics-reader"]
    return any("/metrics" in (r.get("nonResourceURLs") or []) and "get" in r.get("verbs", []) for r in role["rules"])


class FakeReviews:
    """authentication.k8s.io TokenReview and authorization.k8s.io SubjectAccessReview: TOKENS
    are the users; ``bound`` the users bound to metrics-reader."""

    def __init__(self, bound: set[str]):
        self.bound, self.requests, self.fail = bound, [], False
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append((self.path, body))
                if fake.fail:
                    return self._send(500, {"kind": "Status", "status": "Failure", "code": 500})
                spec = body["spec"]
                if self.path == "/apis/authentication.k8s.io/v1/tokenreviews":
                    user = TOKENS.get(spec.get("token"))
                    status = {"authenticated": True, "user": {"username": user, "uid": "uid-" + user,
                                                              "groups": ["system:serviceaccounts"]}} if user else {
                        "authenticated": False}
                    return self._send(201, dict(body, status=status))
                if self.path == "/apis/authorization.k8s.io/v1/subjectaccessreviews":
                    attrs = spec.get("nonResourceAttributes") or {}
                    allowed = (spec.get("user") in fake.bound and attrs == {"path": "/metrics", "verb": "get"}
                               and metrics_reader_grants_get_metrics())
                    return self._send(201, dict(body, status={"allowed": allowed}))
                return self._send(404, {"kind": "Status", "code": 404})

            def _send(self, code, obj):
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def api_client(self):
        from kubernetes import client
        conf = client.Configuration()
        conf.host = "http://127.0.0.1:%d" % self.server.server_address[1]
        return client.ApiClient(conf)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def reviews():
    fake = FakeReviews(bound={PROMETHEUS})
    yield fake
    fake.close()


@pytest.fixture(scope="module")
def exporter(sim, reviews):
    exp = Exporter(sim.kubeconfig).start(port=0, address="127.0.0.1",
                                         review=serve.kubernetes_review(reviews.api_client()))
    yield exp
    exp.close()


def get(exporter, token=None, path="/metrics"):
    """(status, body) of a real HTTPS request that verifies the exporter's certificate."""
    ctx = ssl.create_default_context(cafile=exporter.cert_file)
    req = urllib.request.Request(f"https://127.0.0.1:{exporter.port}{path}")
    if token is not None:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=10, context=ctx) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.mark.parametrize("token,code", [
    (None, 401),                    # no Authorization header
    ("", 401),                      # an empty bearer token
    ("forged-token", 401),          # the cluster does not authenticate it
    ("x" * 20000, 401),             # no Kubernetes token is that long: refused without a review
    ("eve-token", 403),             # a real user, not bound to metrics-reader
    ("prometheus-token", 200),      # bound to metrics-reader
])
def test_a_scrape_needs_a_token_allowed_to_get_metrics(exporter, reviews, token, code):
    status, body = get(exporter, token)
    assert status == code, body
    assert ("torchdev_devservers" in body) == (code == 200)
    assert "user=" not in body or code == 200


def test_the_review_asks_for_get_on_metrics_with_the_reviewed_user(exporter, reviews):
    reviews.requests.clear()
    assert get(exporter, "prometheus-token")[0] == 200
    # cached: the same token is not reviewed again within the cache's time
    assert [p for p, _ in reviews.requests] == []
    exporter.reviewer.cache.clear()
    assert get(exporter, "prometheus-token")[0] == 200
    (tr_path, tr), (sar_path, sar) = reviews.requests
    assert tr_path.endswith("/tokenreviews") and tr["spec"]["token"] == "prometheus-token"
    assert sar_path.endswith("/subjectaccessreviews")
    assert sar["spec"]["user"] == PROMETHEUS and sar["spec"]["groups"] == ["system:serviceaccounts"]
    assert sar["spec"]["nonResourceAttributes"] == {"path": "/metrics", "verb": "get"}


def test_a_failed_review_is_503_and_not_cached(exporter, reviews):
    exporter.reviewer.cache.clear()
    reviews.fail = True
    try:
        assert get(exporter, "prometheus-token")[0] == 503
    finally:
        reviews.fail = False
    assert get(exporter, "prometheus-token")[0] == 200


def test_healthz_answers_without_a_token_and_carries_no_data(exporter):
    assert get(exporter, None, "/healthz") == (200, "ok\n")


def test_plain_http_gets_no_metrics(exporter):
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        with urllib.request.urlopen(f"http://127.0.0.1:{exporter.port}/metrics", timeout=10) as r:
            r.read()


def test_a_client_that_never_completes_the_handshake_blocks_no_one(exporter):
    with socket.create_connection(("127.0.0.1", exporter.port)):
        assert get(exporter, "prometheus-token")[0] == 200


def test_the_review_cache_is_bounded():
    calls = []
    reviewer = serve.Reviewer(lambda t: calls.append(t) or (serve.Decision.UNAUTHENTICATED, ""), max_entries=8)
    for i in range(100):
        reviewer("token-%d" % i)
    assert len(reviewer.cache) == 8 and len(calls) == 100
    reviewer("token-99")
    assert len(calls) == 100  # still cached


@pytest.mark.parametrize("address", ["0.0.0.0", "10.0.0.5", "::"])
def test_insecure_loopback_is_refused_off_loopback(address):
    out = subprocess.run([sys.executable, "-m", "torchdev_exporter", "--insecure-loopback", "--address", address,
                          "--kubeconfig", "/nonexistent"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "loopback" in out.stderr, out.stderr


def test_the_default_is_tls_with_authentication(sim):
    exp = Exporter(sim.kubeconfig).start(port=0, address="127.0.0.1", review=lambda token: (403, "someone"))
    try:
        assert exp.scheme == "https" and exp.reviewer is not None
        wait_for(lambda: get(exp, None, "/healthz")[0] == 200, 30, 0.1, "the exporter up")
        assert get(exp, "any")[0] == 403
    finally:
        exp.close()
