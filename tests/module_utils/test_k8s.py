"""Table-driven tests of plugins/module_utils/k8s.py: the client configuration our modules
share with kubernetes.core's conventions (options, K8S_AUTH_*), raw requests, their errors and
their retries of transient failures."""

import json

import pytest
import urllib3
from kubernetes.client.rest import ApiException

from ansible_collections.torchdev.operator.plugins.module_utils import k8s

AUTH_ENV = ("K8S_AUTH_KUBECONFIG", "K8S_AUTH_CONTEXT", "K8S_AUTH_HOST", "K8S_AUTH_API_KEY", "K8S_AUTH_VERIFY_SSL",
            "K8S_AUTH_SSL_CA_CERT", "KUBECONFIG")


@pytest.fixture(autouse=True)
def _no_ambient_config(monkeypatch):
    for name in AUTH_ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("params,env,host,token,verify,ca", [
    ({"host": "https://api:6443", "api_key": "t0k"}, {}, "https://api:6443", "Bearer t0k", True, None),
    ({}, {"K8S_AUTH_HOST": "https://env:6443", "K8S_AUTH_API_KEY": "e"}, "https://env:6443", "Bearer e", True, None),
    ({"host": "https://opt"}, {"K8S_AUTH_HOST": "https://env"}, "https://opt", None, True, None),  # options win
    ({"host": "https://api"}, {"K8S_AUTH_VERIFY_SSL": "false"}, "https://api", None, False, None),
    ({"host": "https://api"}, {"K8S_AUTH_VERIFY_SSL": "yes"}, "https://api", None, True, None),
    ({"host": "https://api", "validate_certs": False}, {"K8S_AUTH_VERIFY_SSL": "true"}, "https://api", None, False, None),
    ({"host": "https://api", "ca_cert": "/ca.crt"}, {}, "https://api", None, True, "/ca.crt"),
    ({"host": "https://api"}, {"K8S_AUTH_SSL_CA_CERT": "/env-ca.crt"}, "https://api", None, True, "/env-ca.crt"),
])
def test_api_client_configuration(monkeypatch, params, env, host, token, verify, ca):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    conf = k8s.api_client(params).configuration
    assert conf.host == host
    assert (conf.api_key or {}).get("authorization") == token
    assert conf.verify_ssl is verify and conf.ssl_ca_cert == ca


def test_api_client_from_a_kubeconfig(tmp_path, monkeypatch):
    cfg = {"apiVersion": "v1", "kind": "Config", "current-context": "a",
           "clusters": [{"name": "c", "cluster": {"server": "https://from-kubeconfig:6443"}}],
           "users": [{"name": "u", "user": {"token": "kc"}}],
           "contexts": [{"name": "a", "context": {"cluster": "c", "user": "u"}}]}
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(cfg))
    monkeypatch.setenv("K8S_AUTH_KUBECONFIG", str(path))
    conf = k8s.api_client({}).configuration
    assert conf.host == "https://from-kubeconfig:6443"
    assert "Bearer kc" in [s.get("value") for s in conf.auth_settings().values()]


class _Response:
    def __init__(self, status, data, reason="R", headers=None):
        self.status, self.data, self.reason, self.headers = status, data, reason, headers or {}

    def getheader(self, name):
        return self.headers.get(name)


@pytest.mark.parametrize("answer,expected", [
    (_Response(200, b'{"kind": "Pod"}'), {"kind": "Pod"}),
    (_Response(201, b'{"a": 1}'), {"a": 1}),
    (_Response(200, b""), None),
    (_Response(404, b'{"reason": "NotFound"}', "Not Found"), k8s.RequestError),
    (_Response(422, b'{"code": 422}', "Unprocessable Entity"), k8s.RequestError),
    (ApiException(status=409, reason="Conflict"), k8s.RequestError),  # older clients raise on non-2xx
])
def test_request(answer, expected):
    client = k8s.api_client({"host": "https://api", "api_key": "t"})
    calls = []

    def fake_request(method, url, headers=None, body=None, _request_timeout=None):
        calls.append((method, url, headers, body, _request_timeout))
        if isinstance(answer, Exception):
            raise answer
        return answer

    client.rest_client.request = fake_request
    if expected is k8s.RequestError:
        with pytest.raises(k8s.RequestError) as err:
            k8s.request(client, "PATCH", "/apis/x", body={"b": 1}, content_type="application/apply-patch+yaml")
        assert err.value.status == getattr(answer, "status")
    else:
        assert k8s.request(client, "PATCH", "/apis/x", body={"b": 1},
                           content_type="application/apply-patch+yaml", timeout=7) == expected
    method, url, headers, body, timeout = calls[0]
    assert (method, url, body) == ("PATCH", "https://api/apis/x", {"b": 1})
    assert headers == {"Accept": "application/json", "Content-Type": "application/apply-patch+yaml",
                       "authorization": "Bearer t"}
    assert timeout in (7, 30)


OK = _Response(200, b'{"ok": true}')
BUSY = _Response(429, b'{"code": 429}', "Too Many Requests", {"Retry-After": "1"})
FAILING = _Response(500, b'{"code": 500}', "Internal Server Error")
DROPPED = urllib3.exceptions.ProtocolError("Connection aborted.", ConnectionResetError(104, "reset"))


@pytest.mark.parametrize("answers,result,pauses", [
    ([BUSY, OK], {"ok": True}, [1.0]),                              # Retry-After honoured
    ([FAILING, FAILING, OK], {"ok": True}, [0.1, 0.2]),             # backoff
    ([DROPPED, OK], {"ok": True}, [0.1]),                           # a broken connection
    ([FAILING] * 5, 500, [0.1, 0.2, 0.4, 0.8]),                     # five attempts, then the error
    ([DROPPED] * 5, urllib3.exceptions.ProtocolError, [0.1, 0.2, 0.4, 0.8]),
    ([_Response(422, b"{}", "Unprocessable Entity"), OK], 422, []),  # permanent: at once
    ([_Response(404, b"{}", "Not Found"), OK], 404, []),
    ([_Response(409, b"{}", "Conflict"), OK], 409, []),             # a conflict needs a fresh read
    ([_Response(429, b"{}", "Too Many Requests", {"Retry-After": "600"}), OK], {"ok": True}, [5.0]),  # capped
])
def test_request_retries_transient_failures(answers, result, pauses):
    client = k8s.api_client({"host": "https://api", "api_key": "t"})
    left, slept = list(answers), []

    def fake_request(method, url, headers=None, body=None, _request_timeout=None):
        answer = left.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    client.rest_client.request = fake_request
    if isinstance(result, int):
        with pytest.raises(k8s.RequestError) as err:
            k8s.request(client, "GET", "/api/v1/pods", sleep=slept.append)
        assert err.value.status == result
    elif isinstance(result, type):
        with pytest.raises(result):
            k8s.request(client, "GET", "/api/v1/pods", sleep=slept.append)
    else:
        assert k8s.request(client, "GET", "/api/v1/pods", sleep=slept.append) == result
    assert slept == pauses


class _Module:
    def __init__(self):
        self.failed = None

    def fail_json(self, **kw):
        self.failed = kw


@pytest.mark.parametrize("run,failed", [
    (lambda module: None, None),
    (lambda module: 1 / 0, "k8s_status: division by zero"),
])
def test_run_module_reports_a_client_error_as_the_module_failure(run, failed):
    module = _Module()
    k8s.run_module(module, run, "k8s_status")
    assert (module.failed or {}).get("msg") == failed
    if failed:
        assert "ZeroDivisionError" in module.failed["exception"]
