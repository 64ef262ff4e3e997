"""devctl's light client (devctl/rest.py, issue 28.7) against a local HTTPS server with a CA of
its own (hack.cluster.pki): the kubeconfig's CA and client certificate (files and data), tokens
(inline, tokenFile relative to the kubeconfig, an exec plugin), insecure-skip-tls-verify, and
the kubeconfigs it leaves to the kubernetes client (auth-provider, proxy-url). The CLI and e2e
tests run every devctl read through it against kubesim (plain HTTP, a token) and tests/real's
RBAC matrix against kube-apiserver (TLS, a user's certificate)."""
from __future__ import annotations

import base64
import http.server
import json
import ssl
import sys
import threading

import pytest
import yaml

from devctl import rest
from devctl.api import Api
from devctl.errors import DevctlError, NotFound
from hack.cluster.pki import CA


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        peer = self.connection.getpeercert() or {}
        cn = next((v for rdn in peer.get("subject", ()) for k, v in rdn if k == "commonName"), None)
        seen = {"path": self.path, "authorization": self.headers.get("Authorization"), "cn": cn,
                "agent": self.headers.get("User-Agent")}
        status = 404 if "missing" in self.path else 200
        body = ({"kind": "Status", "reason": "NotFound", "message": "devservers.torchdev.io \"missing\" not found",
                 "details": {"name": "missing", "group": "torchdev.io", "kind": "devservers"}, "code": 404}
                if status == 404 else seen)
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tls")
    ca = CA(tmp)
    crt, key = ca.issue(tmp, "server", "server", server_names=("localhost",), ips=("127.0.0.1",))
    client_crt, client_key = ca.issue(tmp, "jane", "jane@example.com", orgs=("devs",))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(crt, key)
    ctx.load_verify_locations(ca.crt_path)
    ctx.verify_mode = ssl.CERT_OPTIONAL
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield {"url": f"https://127.0.0.1:{httpd.server_address[1]}", "ca": ca.crt_path, "crt": client_crt,
           "key": client_key, "dir": tmp}
    httpd.shutdown()


def _kubeconfig(tmp_path, cluster: dict, user: dict) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
        "clusters": [{"name": "k", "cluster": cluster}], "users": [{"name": "u", "user": user}]}))
    return str(path)


def _b64(path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def _get(kubeconfig: str) -> dict:
    conn = rest.connect([kubeconfig], None, "devctl/test")
    assert conn is not None
    return conn.request("GET", "/apis/torchdev.io/v1alpha1/devservers", {"labelSelector": "a=b"})


def test_ca_and_client_certificate_files(server, tmp_path):
    seen = _get(_kubeconfig(tmp_path, {"server": server["url"], "certificate-authority": str(server["ca"])},
                            {"client-certificate": str(server["crt"]), "client-key": str(server["key"])}))
    assert seen["cn"] == "jane@example.com" and seen["authorization"] is None and seen["agent"] == "devctl/test"
    assert seen["path"] == "/apis/torchdev.io/v1alpha1/devservers?labelSelector=a%3Db"


def test_ca_and_client_certificate_data(server, tmp_path):
    seen = _get(_kubeconfig(tmp_path, {"server": server["url"], "certificate-authority-data": _b64(server["ca"])},
                            {"client-certificate-data": _b64(server["crt"]), "client-key-data": _b64(server["key"])}))
    assert seen["cn"] == "jane@example.com"


def test_a_token_file_relative_to_the_kubeconfig(server, tmp_path):
    (tmp_path / "token").write_text("s3cret\n")
    seen = _get(_kubeconfig(tmp_path, {"server": server["url"], "certificate-authority": str(server["ca"])},
                            {"tokenFile": "token"}))
    assert seen["authorization"] == "Bearer s3cret" and seen["cn"] is None


def test_an_exec_plugin_token(server, tmp_path):
    plugin = tmp_path / "get-token"
    plugin.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                      "info = json.loads(os.environ['KUBERNETES_EXEC_INFO'])\n"
                      "assert info['spec']['interactive'] is False and os.environ['REGION'] == 'eu'\n"
                      "print(json.dumps({'kind': 'ExecCredential', 'status': {'token': 'from-exec-' + sys.argv[1]}}))\n")
    plugin.chmod(0o755)
    seen = _get(_kubeconfig(tmp_path, {"server": server["url"], "certificate-authority": str(server["ca"])},
                            {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": str(plugin),
                                      "args": ["eks"], "env": [{"name": "REGION", "value": "eu"}]}}))
    assert seen["authorization"] == "Bearer from-exec-eks"


def test_a_failing_exec_plugin_is_one_line(server, tmp_path):
    kubeconfig = _kubeconfig(tmp_path, {"server": server["url"], "insecure-skip-tls-verify": True},
                             {"exec": {"command": "false"}})
    with pytest.raises(DevctlError, match=r"^the kubeconfig's exec plugin false exited 1"):
        rest.connect([kubeconfig], None, "devctl/test")


def test_insecure_skip_tls_verify_and_an_unknown_ca_refused(server, tmp_path):
    assert _get(_kubeconfig(tmp_path, {"server": server["url"], "insecure-skip-tls-verify": True},
                            {"token": "t"}))["authorization"] == "Bearer t"
    other = CA(tmp_path / "other")
    conn = rest.connect([_kubeconfig(tmp_path, {"server": server["url"], "certificate-authority": str(other.crt_path)},
                                     {"token": "t"})], None, "devctl/test")
    with pytest.raises(Exception, match="CERTIFICATE_VERIFY_FAILED"):
        conn.request("GET", "/version")


@pytest.mark.parametrize("cluster, user", [
    ({"proxy-url": "http://proxy:3128"}, {"token": "t"}),
    ({}, {"auth-provider": {"name": "oidc", "config": {}}}),
])
def test_what_the_kubernetes_client_keeps(server, tmp_path, cluster, user):
    kubeconfig = _kubeconfig(tmp_path, {"server": server["url"], **cluster}, user)
    assert rest.connect([kubeconfig], None, "devctl/test") is None
    assert rest.connect([kubeconfig], "no-such-context", "devctl/test") is None


def test_bad_data_is_one_line(server, tmp_path):
    kubeconfig = _kubeconfig(tmp_path, {"server": server["url"], "certificate-authority-data": "%%%"}, {})
    with pytest.raises(DevctlError, match="certificate-authority-data is not base64"):
        rest.connect([kubeconfig], None, "devctl/test")


def test_api_reads_through_it_and_translates_a_404(server, tmp_path):
    api = Api(_kubeconfig(tmp_path, {"server": server["url"], "certificate-authority": str(server["ca"])},
                          {"token": "t"}))
    assert api.list_flavors(selector="gpu=yes") == []  # {"path": ...} has no items
    with pytest.raises(NotFound):
        api.get_devserver("dev-jane", "missing")
    assert api.host == server["url"]


def test_the_kubernetes_client_path_reads_the_same(sim):
    """Where devctl.rest gives way (Api.rest None: auth-provider, proxy-url), the same reads go
    through the kubernetes client: a list with a selector, a get, a 404, against kubesim."""
    from kubernetes import client

    light, heavy = Api(sim.kubeconfig), Api(sim.kubeconfig)
    heavy.__dict__["rest"] = None
    client.CustomObjectsApi(sim.k8s).create_cluster_custom_object("torchdev.io", "v1alpha1", "devserverflavors", {
        "apiVersion": "torchdev.io/v1alpha1", "kind": "DevServerFlavor",
        "metadata": {"name": "small", "labels": {"tier": "cpu"}},
        "spec": {"displayName": "small", "resources": {"cpu": "1", "memory": "1Gi"}}})
    for api in (light, heavy):
        assert [f["metadata"]["name"] for f in api.list_flavors(selector="tier=cpu")] == ["small"]
        assert api.list_flavors(selector="tier=gpu") == []
        assert api.get_flavor("small")["metadata"]["labels"] == {"tier": "cpu"}
        with pytest.raises(NotFound):
            api.get_flavor("missing")
    assert light.rest is not None
