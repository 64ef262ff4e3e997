"""A light HTTP client for devctl's reads (issue 28.7): urllib3 and the kubeconfig, without the
kubernetes package, whose import alone costs a command 0.4 s of CPU.

:func:`connect` reads the kubeconfig as kubectl does (files merged, first entry wins; relative
paths from the file that names them) and supports what a user's kubeconfig usually holds: a
server with its CA (file or data) or ``insecure-skip-tls-verify`` and ``tls-server-name``; a
client certificate and key (files or data), a token or ``tokenFile``, basic auth, an ``exec``
credential plugin (``client.authentication.k8s.io`` v1/v1beta1: ``aws eks get-token``,
kubelogin) or, with no kubeconfig, the pod's ServiceAccount. Anything else (``auth-provider``,
``proxy-url``) returns None: the caller then uses the kubernetes client, which knows them.
"""
from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import tempfile
from typing import Any

from .errors import DevctlError, one_line

SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


class HTTPStatusError(Exception):
    """A response that is not 2xx, shaped like the kubernetes client's ApiException (status,
    reason, body) so that devctl's error translation reads both."""

    def __init__(self, status: int, reason: str, body: str):
        super().__init__(f"({status}) {reason}")
        self.status, self.reason, self.body = status, reason, body


def merged_kubeconfig(paths: list[str]) -> tuple[str | None, dict[str, dict]]:
    """current-context and {"contexts"|"clusters"|"users": {name: entry}}, each entry with the
    directory of the file that named it (``_dir``) for its relative paths."""
    import yaml  # lazy

    current, merged = None, {"contexts": {}, "clusters": {}, "users": {}}
    for path in paths:
        try:
            with open(path) as fh:
                data = yaml.safe_load(fh) or {}
        except (OSError, yaml.YAMLError):
            continue
        if not isinstance(data, dict):
            continue
        current = current or data.get("current-context") or None
        for section, key in (("contexts", "context"), ("clusters", "cluster"), ("users", "user")):
            for item in data.get(section) or []:
                value = (item.get(key) or {}) if isinstance(item, dict) else None
                if isinstance(value, dict) and item.get("name") and item["name"] not in merged[section]:
                    merged[section][item["name"]] = dict(value, _dir=os.path.dirname(os.path.abspath(path)))
    return current, merged


def _path(entry: dict, key: str) -> str | None:
    value = entry.get(key)
    if not value:
        return None
    value = os.path.expanduser(str(value))
    return value if os.path.isabs(value) else os.path.join(entry["_dir"], value)


def _data(entry: dict, key: str) -> bytes | None:
    """``<key>-data`` decoded, else the file ``<key>`` read, else None."""
    if entry.get(f"{key}-data"):
        try:
            return base64.b64decode("".join(str(entry[f"{key}-data"]).split()), validate=True)
        except ValueError:
            raise DevctlError(f"invalid Kubernetes configuration: {key}-data is not base64") from None
    path = _path(entry, key)
    if path is None:
        return None
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError as exc:
        raise DevctlError(f"invalid Kubernetes configuration: cannot read {key} {path}: {one_line(exc)}") from None


def _exec_credential(spec: dict) -> dict:
    """The status of an ExecCredential from the user's exec plugin (non-interactive)."""
    command = spec.get("command")
    if not command:
        raise DevctlError("invalid Kubernetes configuration: exec without a command")
    env = dict(os.environ, KUBERNETES_EXEC_INFO=json.dumps({
        "apiVersion": spec.get("apiVersion") or "client.authentication.k8s.io/v1", "kind": "ExecCredential",
        "spec": {"interactive": False}}))
    env.update({str(e.get("name")): str(e.get("value", "")) for e in spec.get("env") or [] if isinstance(e, dict)})
    try:
        proc = subprocess.run([str(command), *map(str, spec.get("args") or [])], env=env, capture_output=True,
                              text=True, stdin=subprocess.DEVNULL, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DevctlError(f"the kubeconfig's exec plugin {command} failed: {one_line(exc)}") from None
    if proc.returncode:
        raise DevctlError(f"the kubeconfig's exec plugin {command} exited {proc.returncode}: "
                          f"{one_line(proc.stderr or proc.stdout)}")
    try:
        status = json.loads(proc.stdout).get("status") or {}
    except (ValueError, AttributeError):
        raise DevctlError(f"the kubeconfig's exec plugin {command} printed no ExecCredential") from None
    return status if isinstance(status, dict) else {}


def _client_context(ctx: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """Load a client certificate given as data (ssl reads files only): through a private
    temporary file removed at once."""
    with tempfile.TemporaryDirectory(prefix="devctl-") as tmp:
        cert_file, key_file = os.path.join(tmp, "cert"), os.path.join(tmp, "key")
        for path, data in ((cert_file, cert), (key_file, key)):
            with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "wb") as fh:
                fh.write(data)
        ctx.load_cert_chain(cert_file, key_file)


class Connection:
    """One API server, its TLS and its credentials; :meth:`request` returns the JSON answer."""

    def __init__(self, host: str, ssl_context: ssl.SSLContext | None, headers: dict[str, str],
                 server_hostname: str | None = None):
        import urllib3  # lazy

        self.host = host.rstrip("/")
        self.headers = headers
        kwargs: dict[str, Any] = {"retries": urllib3.Retry(1, redirect=False)}
        if ssl_context is not None:
            kwargs["ssl_context"] = ssl_context
            if server_hostname:
                kwargs["server_hostname"] = server_hostname
        self.pool = urllib3.PoolManager(**kwargs)

    def request(self, method: str, path: str, query: dict | None = None, timeout: tuple = (10, 60)) -> Any:
        import urllib3

        fields = {k: v for k, v in (query or {}).items() if v is not None}
        response = self.pool.request(method, self.host + path, fields=fields or None, headers=self.headers,
                                     timeout=urllib3.Timeout(connect=timeout[0], read=timeout[1]))
        body = response.data.decode("utf-8", "replace")
        if not 200 <= response.status < 300:
            raise HTTPStatusError(response.status, response.reason or "", body)
        try:
            return json.loads(body)
        except ValueError:
            raise HTTPStatusError(response.status, "the answer is not JSON", body) from None


def _tls(cluster: dict) -> ssl.SSLContext:
    """The cluster's CA only when it names one, else the system's; or no verification at all."""
    insecure = bool(cluster.get("insecure-skip-tls-verify"))
    ca = None if insecure else _data(cluster, "certificate-authority")
    ctx = ssl.create_default_context(cadata=ca.decode("ascii", "replace") if ca is not None else None)
    if insecure:
        import urllib3

        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)  # the user asked; kubectl says nothing
    return ctx


def connect(kubeconfig_paths: list[str], context: str | None, user_agent: str) -> Connection | None:
    """The Connection of the kubeconfig's context, or None where the kubernetes client is
    needed. Raises DevctlError with one line for a configuration that cannot work."""
    headers = {"User-Agent": user_agent, "Accept": "application/json"}
    if not any(os.path.exists(p) for p in kubeconfig_paths):
        host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT")
        if not (host and port):
            return None  # the caller's own message names the missing configuration
        with open(os.path.join(SERVICE_ACCOUNT, "token")) as fh:
            headers["Authorization"] = "Bearer " + fh.read().strip()
        ctx = ssl.create_default_context(cafile=os.path.join(SERVICE_ACCOUNT, "ca.crt"))
        return Connection(f"https://{f'[{host}]' if ':' in host else host}:{port}", ctx, headers)
    current, merged = merged_kubeconfig(kubeconfig_paths)
    name = context or current
    if not name or name not in merged["contexts"]:
        return None  # the kubernetes client's own error names it
    entry = merged["contexts"][name]
    cluster = merged["clusters"].get(str(entry.get("cluster") or ""))
    user = merged["users"].get(str(entry.get("user") or ""), {"_dir": ""})
    if not cluster or not cluster.get("server") or cluster.get("proxy-url") or user.get("auth-provider"):
        return None
    server = str(cluster["server"])
    ctx = _tls(cluster) if server.startswith("https://") else None
    cert, key = _data(user, "client-certificate"), _data(user, "client-key")
    token = user.get("token") or (_data(user, "tokenFile") or b"").decode().strip()
    if isinstance(user.get("exec"), dict):
        status = _exec_credential(user["exec"])
        token = status.get("token") or token
        if status.get("clientCertificateData") and status.get("clientKeyData"):
            cert, key = str(status["clientCertificateData"]).encode(), str(status["clientKeyData"]).encode()
    if cert and key and ctx is not None:
        _client_context(ctx, cert, key)
    if token:
        headers["Authorization"] = f"Bearer {token}"
    elif user.get("username") and user.get("password"):
        basic = base64.b64encode(f"{user['username']}:{user['password']}".encode()).decode()
        headers["Authorization"] = f"Basic {basic}"
    return Connection(server, ctx, headers, cluster.get("tls-server-name"))
