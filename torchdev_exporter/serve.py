"""How the exporter serves /metrics: HTTPS, and only to a client whose bearer token the cluster
authenticates (TokenReview) and authorizes for ``get`` on the non-resource URL ``/metrics``
(SubjectAccessReview), as kube-rbac-proxy and the operator-sdk's ``--metrics-secure`` do; the
ClusterRole ``metrics-reader`` (config/rbac) grants that to whoever is bound to it, e.g. the
Prometheus's ServiceAccount (docs/metrics.md "Scraping in a cluster").

* ``Reviewer``: the two reviews through the ``kubernetes`` client; a token's result (allowed or
  not) is cached for ``ttl`` seconds, keyed by its SHA-256, at most ``max_entries`` tokens.
* ``guard(app, reviewer)``: the WSGI middleware: no token 401, a token the cluster does not
  authenticate 401, one it does not authorize 403, a review that fails 503 (never 200);
  ``/healthz`` answers 200 ``ok`` to anyone (the kubelet's probes; it carries no data).
* ``tls_context(cert_dir, workdir)``: the certificate ``tls.crt`` / ``tls.key`` of a mounted
  Secret (cert-manager's layout), else a self-signed one made at start (the ServiceMonitor then
  skips verification, as the operator-sdk's scaffold does).
* ``serve(...)``: the WSGI app on a threading server, TLS when a context is given.

``--insecure-loopback`` (``make run``, ``make demo``, the tests) serves plain HTTP without
authentication, and only on a loopback address.
"""
from __future__ import annotations

import datetime
import hashlib
import ipaddress
import logging
import os
import ssl
import tempfile
import threading
import time
from collections import OrderedDict
from typing import Callable
from wsgiref.simple_server import WSGIRequestHandler, make_server

log = logging.getLogger("torchdev_exporter")

METRICS_PATH = "/metrics"
HEALTH_PATH = "/healthz"
# What the exporter asks of the API server to authorize a scrape (tests/security/_rbac.py adds
# them to what the operator's ServiceAccount must be granted).
REVIEWS = (("authentication.k8s.io", "tokenreviews", "create"),
           ("authorization.k8s.io", "subjectaccessreviews", "create"))
TOKEN_MAX = 16384  # longer is no Kubernetes token: refused without a review


class Decision:
    ALLOWED, UNAUTHENTICATED, FORBIDDEN, UNAVAILABLE = 200, 401, 403, 503


def is_loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def kubernetes_review(api_client) -> Callable[[str], tuple[int, str]]:
    """token -> (Decision, who) through TokenReview then SubjectAccessReview."""
    from kubernetes import client

    authn, authz = client.AuthenticationV1Api(api_client), client.AuthorizationV1Api(api_client)

    def review(token: str) -> tuple[int, str]:
        tr = authn.create_token_review(client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token)))
        status = tr.status
        if status is None or not status.authenticated or status.user is None:
            return Decision.UNAUTHENTICATED, ""
        user = status.user
        sar = authz.create_subject_access_review(client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(
            user=user.username, uid=user.uid, groups=user.groups, extra=user.extra,
            non_resource_attributes=client.V1NonResourceAttributes(path=METRICS_PATH, verb="get"))))
        allowed = bool(sar.status is not None and sar.status.allowed)
        return (Decision.ALLOWED if allowed else Decision.FORBIDDEN), user.username or ""
    return review


class Reviewer:
    """Caches ``review(token)`` per token for ``ttl`` seconds (the last ``max_entries`` tokens).
    A review that raises is not cached: the scrape gets 503 and the next one asks again."""

    def __init__(self, review: Callable[[str], tuple[int, str]], ttl: float = 60.0, max_entries: int = 256,
                 clock: Callable[[], float] = time.monotonic):
        self.review, self.ttl, self.max_entries, self.clock = review, ttl, max_entries, clock
        self.cache: OrderedDict[str, tuple[float, int, str]] = OrderedDict()
        self.lock = threading.Lock()
        self.reviews = 0

    def __call__(self, token: str) -> int:
        key = hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()
        now = self.clock()
        with self.lock:
            hit = self.cache.get(key)
            if hit and hit[0] > now:
                self.cache.move_to_end(key)
                return hit[1]
        try:
            decision, who = self.review(token)
        except Exception as exc:  # noqa: BLE001 - the API server's error: refuse this scrape, not the process
            log.warning("metrics: the token review failed: %s", exc)
            return Decision.UNAVAILABLE
        self.reviews += 1
        if decision == Decision.FORBIDDEN:
            log.info("metrics: %s may not get %s (bind it to the metrics-reader ClusterRole)", who, METRICS_PATH)
        with self.lock:
            self.cache[key] = (now + self.ttl, decision, who)
            self.cache.move_to_end(key)
            while len(self.cache) > self.max_entries:
                self.cache.popitem(last=False)
        return decision


_MESSAGES = {Decision.UNAUTHENTICATED: "401 Unauthorized", Decision.FORBIDDEN: "403 Forbidden",
             Decision.UNAVAILABLE: "503 Service Unavailable"}


def guard(app, reviewer: Callable[[str], int] | None):
    """The WSGI ``app`` behind the bearer-token check (``reviewer`` None: no check)."""
    def wrapped(environ, start_response):
        if environ.get("PATH_INFO") == HEALTH_PATH:
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [b"ok\n"]
        if reviewer is not None:
            header = environ.get("HTTP_AUTHORIZATION") or ""
            scheme, _, token = header.partition(" ")
            token = token.strip()
            if scheme.lower() != "bearer" or not token or len(token) > TOKEN_MAX:
                decision = Decision.UNAUTHENTICATED
            else:
                decision = reviewer(token)
            if decision != Decision.ALLOWED:
                headers = [("Content-Type", "text/plain")]
                if decision == Decision.UNAUTHENTICATED:
                    headers.append(("WWW-Authenticate", 'Bearer realm="torchdev-exporter"'))
                start_response(_MESSAGES[decision], headers)
                return [_MESSAGES[decision].encode() + b"\n"]
        return app(environ, start_response)
    return wrapped


def self_signed(workdir: str, hosts: list[str]) -> tuple[str, str]:
    """A self-signed certificate and key for ``hosts`` in ``workdir`` (paths)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])])
    sans: list[x509.GeneralName] = []
    for host in dict.fromkeys(hosts):
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=365))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = os.path.join(workdir, "tls.crt"), os.path.join(workdir, "tls.key")
    with open(cert_path, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    return cert_path, key_path


def tls_context(cert_dir: str | None, hosts: list[str]) -> tuple[ssl.SSLContext, str]:
    """(a server context, the certificate's path): ``cert_dir``'s tls.crt and tls.key, else a
    self-signed pair made now in a temporary directory."""
    if cert_dir:
        cert, key = os.path.join(cert_dir, "tls.crt"), os.path.join(cert_dir, "tls.key")
    else:
        cert, key = self_signed(tempfile.mkdtemp(prefix="torchdev-exporter-"), hosts)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)
    return ctx, cert


class _QuietHandler(WSGIRequestHandler):
    timeout = 30  # seconds a connection may stay silent (handshake included)

    def log_message(self, format, *args):  # noqa: A002 - the base class's signature
        pass


def serve(app, address: str, port: int, ctx: ssl.SSLContext | None):
    """The WSGI ``app`` on ``address:port`` (TLS with ``ctx``), in a daemon thread: the server."""
    from prometheus_client.exposition import ThreadingWSGIServer

    class Server(ThreadingWSGIServer):
        pass
    if ":" in address:
        import socket
        Server.address_family = socket.AF_INET6
    httpd = make_server(address, port, app, Server, handler_class=_QuietHandler)
    if ctx is not None:
        # The handshake happens in the connection's own thread (its first read), not in the one
        # that accepts: a client that never completes it holds only its own connection.
        httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True, do_handshake_on_connect=False)
    threading.Thread(target=httpd.serve_forever, name="metrics-server", daemon=True).start()
    return httpd
