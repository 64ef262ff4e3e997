# -*- coding: utf-8 -*-
# Apache-2.0
"""Kubernetes client setup and raw requests shared by the torchdev modules (the way kubernetes.core does it)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import time
import traceback

try:
    import kubernetes
    from kubernetes.client.rest import ApiException
    HAS_K8S = True
except ImportError:  # pragma: no cover
    HAS_K8S = False
    ApiException = Exception


# Connection options every torchdev module accepts (same names as kubernetes.core).
AUTH_ARG_SPEC = dict(
    kubeconfig=dict(type="path"),
    context=dict(type="str"),
    host=dict(type="str"),
    api_key=dict(type="str", no_log=True),
    validate_certs=dict(type="bool", aliases=["verify_ssl"]),
    ca_cert=dict(type="path", aliases=["ssl_ca_cert"]),
    request_timeout=dict(type="int", default=30),
)


def run_module(module, run, name):
    """Runs ``run(module)`` for one of our Kubernetes modules: fails clearly when the kubernetes
    library is missing, and reports any client error as a failure of module ``name``."""
    if not HAS_K8S:
        from ansible.module_utils.basic import missing_required_lib
        module.fail_json(msg=missing_required_lib("kubernetes"))
    try:
        run(module)
    except Exception as exc:  # noqa: BLE001 - report any client error as a module failure
        module.fail_json(msg="%s: %s" % (name, exc), exception=traceback.format_exc())


def _env(name):
    value = os.environ.get(name)
    return value if value not in (None, "") else None


def api_client(params):
    """An ApiClient configured like kubernetes.core does (options, K8S_AUTH_*, KUBECONFIG, in-cluster)."""
    kubeconfig = params.get("kubeconfig") or _env("K8S_AUTH_KUBECONFIG")
    context = params.get("context") or _env("K8S_AUTH_CONTEXT")
    host = params.get("host") or _env("K8S_AUTH_HOST")
    api_key = params.get("api_key") or _env("K8S_AUTH_API_KEY")
    verify = params.get("validate_certs")
    if verify is None and _env("K8S_AUTH_VERIFY_SSL") is not None:
        verify = _env("K8S_AUTH_VERIFY_SSL").lower() in ("1", "true", "yes", "on")
    ca_cert = params.get("ca_cert") or _env("K8S_AUTH_SSL_CA_CERT")

    configuration = kubernetes.client.Configuration()
    if host:
        configuration.host = host
        if api_key:
            configuration.api_key = {"authorization": "Bearer " + api_key}
    elif kubeconfig or _env("KUBECONFIG"):
        kubernetes.config.load_kube_config(
            config_file=os.path.expanduser(kubeconfig) if kubeconfig else None,
            context=context, client_configuration=configuration)
    else:
        try:
            kubernetes.config.load_incluster_config(client_configuration=configuration)
        except kubernetes.config.ConfigException:
            kubernetes.config.load_kube_config(context=context, client_configuration=configuration)
    if verify is not None:
        configuration.verify_ssl = verify
    if ca_cert:
        configuration.ssl_ca_cert = ca_cert
    return kubernetes.client.ApiClient(configuration)


class RequestError(Exception):
    """A non-2xx answer: status, reason and the response body (and Retry-After, seconds)."""

    def __init__(self, status, reason, body, retry_after=None):
        Exception.__init__(self, "%s %s" % (status, reason))
        self.status, self.reason, self.body, self.retry_after = status, reason, body, retry_after


# Answers worth another try: too many requests, and the server's transient failures. client-go
# retries a 429 and a 5xx that carries Retry-After (rest.Request, up to 10 times); a reconcile
# makes tens of requests, one of which failing fails the whole run, so every 5xx counts here.
RETRY_STATUSES = (429, 500, 502, 503, 504)
# Attempts of one request, and the pauses between them (seconds); a Retry-After wins, up to
# MAX_RETRY_AFTER. What our modules send is idempotent (GETs, merge patches of a status): a
# request whose connection broke is sent again.
ATTEMPTS = 5
BACKOFF = (0.1, 0.2, 0.4, 0.8)
MAX_RETRY_AFTER = 5.0


def _retry_after(value):
    try:
        return min(max(float(value), 0.0), MAX_RETRY_AFTER)
    except (TypeError, ValueError):
        return None


def request(client, method, path, body=None, content_type=None, timeout=30, attempts=ATTEMPTS,
            sleep=time.sleep):
    """One request through the client's REST layer (its TLS, proxy and auth settings);
    returns the decoded JSON body, raises RequestError on a non-2xx answer.

    Transient failures (RETRY_STATUSES, a connection that broke) are tried again, up to
    ``attempts`` times in all, with a short backoff (BACKOFF, or the answer's Retry-After).

    The typed API methods are avoided on purpose: on recent client generations the
    first call of each method builds its validators (~0.1 s each, per process), and the
    JSON comes back exactly as the server sent it, on old and new client generations.
    """
    for attempt in range(attempts):
        last = attempt + 1 >= attempts
        try:
            return _request(client, method, path, body, content_type, timeout)
        except RequestError as exc:
            if last or exc.status not in RETRY_STATUSES:
                raise
            pause = exc.retry_after if exc.retry_after is not None else BACKOFF[min(attempt, len(BACKOFF) - 1)]
        except (OSError, _connection_errors()):
            if last:
                raise
            pause = BACKOFF[min(attempt, len(BACKOFF) - 1)]
        sleep(pause)


def _connection_errors():
    """The client library's errors for a connection that failed or broke (urllib3's)."""
    try:
        import urllib3
        return urllib3.exceptions.HTTPError
    except ImportError:  # pragma: no cover - kubernetes requires urllib3
        return OSError


def _request(client, method, path, body, content_type, timeout):
    headers = {"Accept": "application/json"}
    if content_type:
        headers["Content-Type"] = content_type
    for setting in (client.configuration.auth_settings() or {}).values():
        if setting.get("in") == "header" and setting.get("value"):
            headers[setting["key"]] = setting["value"]
    try:
        response = client.rest_client.request(method, client.configuration.host + path, headers=headers,
                                              body=body, _request_timeout=timeout)
    except ApiException as exc:  # older clients raise on non-2xx
        raise RequestError(exc.status, exc.reason, exc.body,
                           _retry_after((getattr(exc, "headers", None) or {}).get("Retry-After")))
    data = response.data if response.data is not None else response.read()
    if not 200 <= response.status < 300:
        getheader = getattr(response, "getheader", None)
        raise RequestError(response.status, response.reason, data,
                           _retry_after(getheader("Retry-After") if getheader else None))
    return json.loads(data) if data else None
