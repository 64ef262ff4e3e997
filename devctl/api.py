"""The Kubernetes calls devctl makes.

Everything here returns plain dicts (camelCase, like the API's JSON) and raises
:class:`devctl.errors.ApiError` subclasses with one-line messages. Reads of torchdev
objects go through the light client of ``devctl.rest`` (no kubernetes import: ``devctl
list`` costs what kubectl does); the rest through the ``kubernetes`` package, imported
lazily on the first call that needs it, so ``devctl --help`` stays fast and works
without it.
"""
from __future__ import annotations

import json
import os
from functools import cached_property
from typing import Any, Callable

from . import GROUP, VERSION, __version__
from .errors import ApiError, DevctlError, NotFound, not_found_message, one_line

DEVSERVERS = "devservers"
FLAVORS = "devserverflavors"
DEVUSERS = "devusers"
USAGE_RECORDS = "usagerecords"
KUEUE_GROUP, KUEUE_VERSION = "kueue.x-k8s.io", "v1beta2"
# The field manager of devctl's server-side applies.
FIELD_MANAGER = "devctl"
# (connect, read) seconds for every request; a CLI should not hang forever.
REQUEST_TIMEOUT = (10, 60)


# -- kubeconfig (read without the kubernetes package) ---------------------------

def kubeconfig_paths(kubeconfig: str | None) -> list[str]:
    if kubeconfig:
        return [os.path.expanduser(kubeconfig)]
    env = os.environ.get("KUBECONFIG")
    if env:
        return [os.path.expanduser(p) for p in env.split(os.pathsep) if p]
    return [os.path.expanduser("~/.kube/config")]


def _load_kubeconfig_files(kubeconfig: str | None) -> tuple[str | None, dict[str, dict]]:
    """Merge kubeconfig files like kubectl: first current-context and first context wins."""
    from .rest import merged_kubeconfig  # lazy

    current, merged = merged_kubeconfig(kubeconfig_paths(kubeconfig))
    return current, {name: {k: v for k, v in entry.items() if k != "_dir"}
                     for name, entry in merged["contexts"].items()}


def kubeconfig_context(kubeconfig: str | None, context: str | None) -> tuple[str | None, dict]:
    """The selected context's name and entry (``cluster``, ``user``, ``namespace``)."""
    if kubeconfig and not os.path.exists(os.path.expanduser(kubeconfig)):
        raise DevctlError(f"kubeconfig {kubeconfig} does not exist")
    current, contexts = _load_kubeconfig_files(kubeconfig)
    name = context or current
    return name, dict(contexts.get(name or "") or {})


def kubeconfig_context_namespace(kubeconfig: str | None, context: str | None) -> str | None:
    ns = kubeconfig_context(kubeconfig, context)[1].get("namespace")
    return str(ns) if ns else None


# -- the API -------------------------------------------------------------------------

class Api:
    """The Kubernetes calls devctl makes, as dicts, with devctl errors."""

    def __init__(self, kubeconfig: str | None = None, context: str | None = None):
        self.kubeconfig = kubeconfig
        self.context = context
        # namespace -> where devctl took it from (Settings.namespace_origin), for 404 messages
        self.namespace_origin: Callable[[str], str | None] | None = None
        # (connect, read) seconds of each request; shell completion shortens it
        self.request_timeout: tuple = REQUEST_TIMEOUT

    # connection ---------------------------------------------------------------
    @cached_property
    def client(self):
        from kubernetes import client, config  # lazy

        cfg = client.Configuration()
        paths = kubeconfig_paths(self.kubeconfig)
        have_file = any(os.path.exists(p) for p in paths)
        try:
            if self.kubeconfig or have_file:
                if self.kubeconfig and not os.path.exists(paths[0]):
                    raise DevctlError(f"kubeconfig {self.kubeconfig} does not exist")
                config.load_kube_config(
                    config_file=os.pathsep.join(paths), context=self.context,
                    client_configuration=cfg, persist_config=False,
                )
            elif os.environ.get("KUBERNETES_SERVICE_HOST"):
                config.load_incluster_config(client_configuration=cfg)
            else:
                raise DevctlError(
                    "no Kubernetes configuration found: set KUBECONFIG, pass --kubeconfig, "
                    "or create ~/.kube/config"
                )
        except DevctlError:
            raise
        except Exception as exc:  # noqa: BLE001 - ConfigException, YAML errors, malformed entries
            raise DevctlError(f"invalid Kubernetes configuration ({os.pathsep.join(paths)}): "
                              f"{one_line(exc)}") from None
        cfg.retries = 1
        api_client = client.ApiClient(cfg)
        # like kubectl's kubectl/<version>: the API server's logs (and kubesim's deletion
        # log, tests/_data_safety.py) tell the user's requests from the operator's
        api_client.user_agent = f"devctl/{__version__}"
        return api_client

    @cached_property
    def rest(self):
        """The light client of devctl's reads (devctl.rest), None where the kubeconfig needs
        the kubernetes client (auth-provider, proxy-url) or there is none."""
        from .rest import connect  # lazy

        paths = kubeconfig_paths(self.kubeconfig)
        if self.kubeconfig and not os.path.exists(paths[0]):
            raise DevctlError(f"kubeconfig {self.kubeconfig} does not exist")
        try:
            return connect(paths, self.context, f"devctl/{__version__}")
        except DevctlError:
            raise
        except Exception as exc:  # noqa: BLE001 - ssl errors (a bad CA or key), malformed entries
            raise DevctlError(f"invalid Kubernetes configuration ({os.pathsep.join(paths)}): "
                              f"{one_line(exc)}") from None

    @property
    def host(self) -> str:
        if "rest" in self.__dict__ and self.rest is not None:
            return self.rest.host
        return self.client.configuration.host

    def _read(self, path: str, fallback: Callable, *, kind: str, name: str | None = None,
              namespace: str | None = None, resource: str | None = None, label_selector: str | None = None) -> Any:
        """GET `path` through the light client, or `fallback(**kwargs)` (the same read through
        the kubernetes client) where the light one cannot connect; errors translated alike."""
        if self.rest is None:
            kwargs = {"label_selector": label_selector} if label_selector else {}
            return self._call(fallback, kind=kind, name=name, namespace=namespace, resource=resource, **kwargs)
        from .rest import HTTPStatusError

        return self._guarded(lambda: self.rest.request("GET", path, {"labelSelector": label_selector},
                                                       self.request_timeout),
                             HTTPStatusError, kind, name, namespace, resource)

    def _custom_path(self, plural: str, namespace: str | None = None, name: str | None = None,
                     group: str = GROUP, version: str = VERSION) -> str:
        from urllib.parse import quote

        path = f"/apis/{group}/{version}" + (f"/namespaces/{quote(namespace, safe='')}" if namespace else "")
        return path + f"/{plural}" + (f"/{quote(name, safe='')}" if name else "")

    @cached_property
    def custom(self):
        from kubernetes import client

        return client.CustomObjectsApi(self.client)

    @cached_property
    def core(self):
        from kubernetes import client

        return client.CoreV1Api(self.client)

    @cached_property
    def apps(self):
        from kubernetes import client

        return client.AppsV1Api(self.client)

    @cached_property
    def events_v1(self):
        from kubernetes import client

        return client.EventsV1Api(self.client)

    @cached_property
    def authentication(self):
        from kubernetes import client

        return client.AuthenticationV1Api(self.client)

    def to_dict(self, obj: Any) -> Any:
        return self.client.sanitize_for_serialization(obj)

    def kubectl_args(self) -> list[str]:
        """Global flags that make kubectl talk to the same cluster as devctl."""
        args: list[str] = []
        if self.kubeconfig:
            args += ["--kubeconfig", self.kubeconfig]
        if self.context:
            args += ["--context", self.context]
        return args

    # error translation ----------------------------------------------------------
    def _call(self, fn: Callable, *args, kind: str, name: str | None = None,
              namespace: str | None = None, resource: str | None = None, **kwargs) -> Any:
        from kubernetes.client.exceptions import ApiException  # lazy

        return self._guarded(lambda: fn(*args, _request_timeout=self.request_timeout, **kwargs), ApiException,
                             kind, name, namespace, resource)

    def _guarded(self, send: Callable[[], Any], status_error: type, kind: str, name: str | None,
                 namespace: str | None, resource: str | None) -> Any:
        """`send()`, its error answers (`status_error`: status, reason, body) and unreachable
        servers as one-line ApiErrors."""
        import urllib3

        try:
            return send()
        except status_error as exc:
            raise self._translate(exc, kind, name, namespace, resource) from None
        except urllib3.exceptions.HTTPError as exc:
            reason = getattr(exc, "reason", None) or exc
            raise ApiError(f"cannot reach the Kubernetes API at {self.host}: {one_line(reason)}") from None
        except OSError as exc:
            raise ApiError(f"cannot reach the Kubernetes API at {self.host}: {one_line(exc)}") from None

    def _translate(self, exc, kind: str, name: str | None, namespace: str | None,
                   resource: str | None) -> ApiError:
        status = exc.status
        body: dict[str, Any] = {}
        try:
            body = json.loads(exc.body) if exc.body else {}
        except (TypeError, ValueError):
            body = {}
        if not isinstance(body, dict):
            body = {}
        message = one_line(body.get("message") or exc.reason or "")
        reason = body.get("reason") or exc.reason
        details = body.get("details") or {}
        resource = resource or kind
        origin = self.namespace_origin
        if status == 404:
            explained = not_found_message(message, details, kind, name, namespace, resource,
                                          origin(namespace) if origin else None, resource.endswith(GROUP))
            if explained is None:
                return NotFound(kind, name, namespace)
            return ApiError(explained, status=404, reason=reason)
        if status == 409 and reason == "AlreadyExists":
            where = f' in namespace "{namespace}"' if namespace else ""
            return ApiError(f'{kind} "{name}" already exists{where}', status=409, reason=reason)
        if status == 401:
            return ApiError(f"unauthorized: {message or 'check the credentials in your kubeconfig'}",
                            status=status, reason=reason)
        if status == 403:
            return ApiError(f"forbidden: {message}", status=status, reason=reason)
        if status == 422:
            return ApiError(message or f"{kind} {name} is invalid", status=status, reason=reason)
        return ApiError(f"{reason or 'error'} ({status}): {message}", status=status, reason=reason)

    # DevServers ----------------------------------------------------------------
    def get_devserver(self, namespace: str, name: str) -> dict:
        return self._read(self._custom_path(DEVSERVERS, namespace, name),
                          lambda **kw: self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, DEVSERVERS,
                                                                                name, **kw),
                          kind="devserver", name=name, namespace=namespace, resource=f"{DEVSERVERS}.{GROUP}")

    def _list_namespaced(self, plural: str, kind: str, namespace: str | None,
                         selector: str | None = None) -> list[dict]:
        """The objects of a namespaced torchdev kind in ``namespace`` (None: every namespace)
        whose labels match ``selector`` (a label selector the API server applies)."""
        if namespace is None:
            fallback = lambda **kw: self.custom.list_cluster_custom_object(GROUP, VERSION, plural, **kw)  # noqa: E731
        else:
            fallback = lambda **kw: self.custom.list_namespaced_custom_object(  # noqa: E731
                GROUP, VERSION, namespace, plural, **kw)
        result = self._read(self._custom_path(plural, namespace), fallback, kind=kind, namespace=namespace,
                            resource=f"{plural}.{GROUP}", label_selector=selector)
        return list(result.get("items") or [])

    def list_devservers(self, namespace: str | None, selector: str | None = None) -> list[dict]:
        return self._list_namespaced(DEVSERVERS, "devserver", namespace, selector)

    def create_devserver(self, namespace: str, body: dict) -> dict:
        return self._call(self.custom.create_namespaced_custom_object, GROUP, VERSION, namespace,
                          DEVSERVERS, body, kind="devserver", name=body["metadata"]["name"],
                          namespace=namespace, resource=f"{DEVSERVERS}.{GROUP}")

    def patch_devserver(self, namespace: str, name: str, patch: dict) -> dict:
        """A JSON merge patch (None removes a key)."""
        return self._call(self.custom.patch_namespaced_custom_object, GROUP, VERSION, namespace,
                          DEVSERVERS, name, patch, kind="devserver", name=name, namespace=namespace,
                          resource=f"{DEVSERVERS}.{GROUP}", _content_type="application/merge-patch+json")

    def delete_devserver(self, namespace: str, name: str) -> dict:
        return self._call(self.custom.delete_namespaced_custom_object, GROUP, VERSION, namespace,
                          DEVSERVERS, name, kind="devserver", name=name, namespace=namespace,
                          resource=f"{DEVSERVERS}.{GROUP}")

    # flavors --------------------------------------------------------------------
    def get_flavor(self, name: str) -> dict:
        return self._read(self._custom_path(FLAVORS, name=name),
                          lambda **kw: self.custom.get_cluster_custom_object(GROUP, VERSION, FLAVORS, name, **kw),
                          kind="devserverflavor", name=name, resource=f"{FLAVORS}.{GROUP}")

    def list_flavors(self, selector: str | None = None) -> list[dict]:
        result = self._read(self._custom_path(FLAVORS),
                            lambda **kw: self.custom.list_cluster_custom_object(GROUP, VERSION, FLAVORS, **kw),
                            kind="devserverflavor", resource=f"{FLAVORS}.{GROUP}", label_selector=selector)
        return list(result.get("items") or [])

    # core objects ---------------------------------------------------------------------
    def list_pvcs(self, namespace: str, label_selector: str | None = None) -> list[dict]:
        kwargs = {"label_selector": label_selector} if label_selector else {}
        result = self._call(self.core.list_namespaced_persistent_volume_claim, namespace,
                            kind="persistentvolumeclaim", namespace=namespace, **kwargs)
        return list(self.to_dict(result).get("items") or [])

    def get_pvc(self, namespace: str, name: str) -> dict:
        return self.to_dict(self._call(self.core.read_namespaced_persistent_volume_claim, name, namespace,
                                       kind="persistentvolumeclaim", name=name, namespace=namespace))

    def delete_pvc(self, namespace: str, name: str) -> None:
        self._call(self.core.delete_namespaced_persistent_volume_claim, name, namespace,
                   kind="persistentvolumeclaim", name=name, namespace=namespace)

    def get_service(self, namespace: str, name: str) -> dict:
        return self.to_dict(self._call(self.core.read_namespaced_service, name, namespace,
                                       kind="service", name=name, namespace=namespace))

    def get_pod(self, namespace: str, name: str) -> dict:
        return self.to_dict(self._call(self.core.read_namespaced_pod, name, namespace,
                                       kind="pod", name=name, namespace=namespace))

    def list_pods(self, namespace: str, label_selector: str) -> list[dict]:
        result = self._call(self.core.list_namespaced_pod, namespace, label_selector=label_selector,
                            kind="pod", namespace=namespace)
        return list(self.to_dict(result).get("items") or [])

    def get_deployment(self, namespace: str, name: str) -> dict:
        return self.to_dict(self._call(self.apps.read_namespaced_deployment, name, namespace,
                                       kind="deployment", name=name, namespace=namespace))

    def list_deployments(self, selector: str) -> list[dict]:
        """The Deployments of every namespace whose labels match ``selector``."""
        result = self._call(self.apps.list_deployment_for_all_namespaces, label_selector=selector,
                            kind="deployment")
        return list(self.to_dict(result).get("items") or [])

    def get_statefulset(self, namespace: str, name: str) -> dict:
        return self.to_dict(self._call(self.apps.read_namespaced_stateful_set, name, namespace,
                                       kind="statefulset", name=name, namespace=namespace))

    def _list_raw(self, fn: Callable, namespace: str, field_selector: str) -> list[dict]:
        """A list as the API server sent it (JSON), not the client's models: an Event written
        through core/v1 (kube-controller-manager's, the operator's) has no eventTime, which
        events.k8s.io/v1 serves as null and the client's EventsV1Event refuses to load."""
        response = self._call(fn, namespace, field_selector=field_selector, _preload_content=False,
                              kind="event", namespace=namespace)
        try:
            body = json.loads(response.data)
        except (TypeError, ValueError):
            raise ApiError(f"the Kubernetes API at {self.host} answered the events list with no JSON") from None
        items = body.get("items") if isinstance(body, dict) else None
        return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []

    def list_core_events(self, namespace: str, object_name: str) -> list[dict]:
        return self._list_raw(self.core.list_namespaced_event, namespace, f"involvedObject.name={object_name}")

    def list_events_v1(self, namespace: str, object_name: str) -> list[dict]:
        return self._list_raw(self.events_v1.list_namespaced_event, namespace, f"regarding.name={object_name}")

    def get_namespace(self, name: str) -> dict:
        return self.to_dict(self._call(self.core.read_namespace, name, kind="namespace", name=name))

    def get_resourcequota(self, namespace: str, name: str) -> dict:
        return self.to_dict(self._call(self.core.read_namespaced_resource_quota, name, namespace,
                                       kind="resourcequota", name=name, namespace=namespace))

    # DevUsers (cluster-scoped) ------------------------------------------------------------
    def get_devuser(self, name: str) -> dict:
        return self._call(self.custom.get_cluster_custom_object, GROUP, VERSION, DEVUSERS, name,
                          kind="devuser", name=name, resource=f"{DEVUSERS}.{GROUP}")

    def list_devusers(self, selector: str | None = None) -> list[dict]:
        result = self._call(self.custom.list_cluster_custom_object, GROUP, VERSION, DEVUSERS,
                            kind="devuser", resource=f"{DEVUSERS}.{GROUP}",
                            **({"label_selector": selector} if selector else {}))
        return list(result.get("items") or [])

    def apply_devuser(self, body: dict, *, force: bool = False, dry_run: bool = False) -> dict:
        """Server-side apply of ``body`` with field manager ``devctl`` (creates or updates)."""
        name = body["metadata"]["name"]
        # The generated client decodes only a 200 answer; an apply that creates answers 201.
        kwargs: dict[str, Any] = {"field_manager": FIELD_MANAGER, "force": force,
                                  "_content_type": "application/apply-patch+yaml",
                                  "_preload_content": False}
        if dry_run:
            kwargs["dry_run"] = "All"
        response = self._call(self.custom.patch_cluster_custom_object, GROUP, VERSION, DEVUSERS, name,
                              body, kind="devuser", name=name, resource=f"{DEVUSERS}.{GROUP}", **kwargs)
        return json.loads(response.data)

    def patch_devuser(self, name: str, patch: dict) -> dict:
        """JSON merge patch (``application/merge-patch+json``)."""
        return self._call(self.custom.patch_cluster_custom_object, GROUP, VERSION, DEVUSERS, name,
                          patch, kind="devuser", name=name, resource=f"{DEVUSERS}.{GROUP}")

    def delete_devuser(self, name: str) -> dict:
        return self._call(self.custom.delete_cluster_custom_object, GROUP, VERSION, DEVUSERS, name,
                          kind="devuser", name=name, resource=f"{DEVUSERS}.{GROUP}")

    # UsageRecords (written by the operator; users read them) --------------------------------
    def list_usagerecords(self, namespace: str | None) -> list[dict]:
        return self._list_namespaced(USAGE_RECORDS, "usagerecord", namespace)

    # Kueue (kueue.x-k8s.io/v1beta2) ----------------------------------------------------------
    def get_localqueue(self, namespace: str, name: str) -> dict:
        return self._call(self.custom.get_namespaced_custom_object, KUEUE_GROUP, KUEUE_VERSION,
                          namespace, "localqueues", name, kind="localqueue", name=name,
                          namespace=namespace, resource=f"localqueues.{KUEUE_GROUP}")

    def get_clusterqueue(self, name: str) -> dict:
        return self._call(self.custom.get_cluster_custom_object, KUEUE_GROUP, KUEUE_VERSION,
                          "clusterqueues", name, kind="clusterqueue", name=name,
                          resource=f"clusterqueues.{KUEUE_GROUP}")

    # identity -----------------------------------------------------------------------------------
    def self_subject_review(self) -> dict | None:
        """``authentication.k8s.io/v1`` SelfSubjectReview's ``status.userInfo``; None when the
        server does not serve it (404)."""
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        try:
            review = self._call(self.authentication.create_self_subject_review, body,
                                kind="selfsubjectreview",
                                resource="selfsubjectreviews.authentication.k8s.io")
        except ApiError as exc:
            if exc.status in (404, 405):
                return None
            raise
        return dict((self.to_dict(review).get("status") or {}).get("userInfo") or {})


# TrainingJobs (devctl/train.py) -------------------------------------------------------------
TRAININGJOBS = "trainingjobs"


def _trainingjob_api(cls):
    """The TrainingJob calls of :class:`Api` (kept together, after the other kinds)."""

    def _tj(self, fn, *args, name=None, namespace=None, **kw):
        return self._call(fn, GROUP, VERSION, *args, kind="trainingjob", name=name, namespace=namespace,
                          resource=f"{TRAININGJOBS}.{GROUP}", **kw)

    def get_trainingjob(self, namespace: str, name: str) -> dict:
        return _tj(self, self.custom.get_namespaced_custom_object, namespace, TRAININGJOBS, name,
                   name=name, namespace=namespace)

    def list_trainingjobs(self, namespace: str | None, selector: str | None = None) -> list[dict]:
        return self._list_namespaced(TRAININGJOBS, "trainingjob", namespace, selector)

    def create_trainingjob(self, namespace: str, body: dict) -> dict:
        return _tj(self, self.custom.create_namespaced_custom_object, namespace, TRAININGJOBS, body,
                   name=body["metadata"]["name"], namespace=namespace)

    def patch_trainingjob(self, namespace: str, name: str, patch: dict) -> dict:
        return _tj(self, self.custom.patch_namespaced_custom_object, namespace, TRAININGJOBS, name, patch,
                   name=name, namespace=namespace)

    def delete_trainingjob(self, namespace: str, name: str) -> dict:
        return _tj(self, self.custom.delete_namespaced_custom_object, namespace, TRAININGJOBS, name,
                   name=name, namespace=namespace)

    def pod_log(self, namespace: str, name: str, follow: bool = False, tail: int | None = None):
        """The log of a pod's first container: a str, or with ``follow`` an iterator of str chunks."""
        kw: dict[str, Any] = {}
        if tail is not None:
            kw["tail_lines"] = tail
        if not follow:
            return self._call(self.core.read_namespaced_pod_log, name, namespace, kind="pod", name=name,
                              namespace=namespace, **kw)
        from kubernetes.client.exceptions import ApiException  # lazy

        try:  # no read timeout: a quiet worker is not an error
            resp = self.core.read_namespaced_pod_log(name, namespace, follow=True, _preload_content=False,
                                                     _request_timeout=(REQUEST_TIMEOUT[0], None), **kw)
        except ApiException as exc:
            raise self._translate(exc, "pod", name, namespace, None) from None
        return (chunk.decode(errors="replace") for chunk in resp.stream(4096))

    for fn in (get_trainingjob, list_trainingjobs, create_trainingjob, patch_trainingjob, delete_trainingjob, pod_log):
        setattr(cls, fn.__name__, fn)
    return cls


Api = _trainingjob_api(Api)


# EphemeralAccelerationJobs (devctl/infer.py) ------------------------------------------------------
EAJS = "ephemeralaccelerationjobs"


def exec_error(exc) -> ApiError:
    """An ApiException of a WebSocket handshake (status 0, the answer in its reason): the
    API's message, one line."""
    import re

    text = str(getattr(exc, "reason", "") or exc)
    found = re.findall(r'"message"\s*:\s*"((?:[^"\\]|\\.)*)"', text)
    status = re.search(r"Handshake status (\d+)", text)
    message = found[-1].encode().decode("unicode_escape") if found else text
    return ApiError(one_line(message), status=int(status.group(1)) if status else None)


def _eaj_api(cls):
    """The EphemeralAccelerationJob calls of :class:`Api` and the core calls devctl infer
    makes (volumes, helper pods, exec)."""

    def _eaj(self, fn, *args, name=None, namespace=None, **kw):
        return self._call(fn, GROUP, VERSION, *args, kind="ephemeralaccelerationjob", name=name, namespace=namespace,
                          resource=f"{EAJS}.{GROUP}", **kw)

    def get_eaj(self, namespace: str, name: str) -> dict:
        return _eaj(self, self.custom.get_namespaced_custom_object, namespace, EAJS, name, name=name, namespace=namespace)

    def list_eajs(self, namespace: str | None, selector: str | None = None) -> list[dict]:
        return self._list_namespaced(EAJS, "ephemeralaccelerationjob", namespace, selector)

    def create_eaj(self, namespace: str, body: dict) -> dict:
        return _eaj(self, self.custom.create_namespaced_custom_object, namespace, EAJS, body,
                    name=body["metadata"]["name"], namespace=namespace)

    def delete_eaj(self, namespace: str, name: str) -> dict:
        return _eaj(self, self.custom.delete_namespaced_custom_object, namespace, EAJS, name, name=name,
                    namespace=namespace)

    def create_pvc(self, namespace: str, body: dict) -> dict:
        return self.to_dict(self._call(self.core.create_namespaced_persistent_volume_claim, namespace, body,
                                       kind="persistentvolumeclaim", name=body["metadata"]["name"], namespace=namespace))

    def patch_pvc(self, namespace: str, name: str, patch: dict) -> dict:
        """A JSON merge patch (None removes a key)."""
        return self.to_dict(self._call(self.core.patch_namespaced_persistent_volume_claim, name, namespace, patch,
                                       kind="persistentvolumeclaim", name=name, namespace=namespace,
                                       _content_type="application/merge-patch+json"))

    def create_pod(self, namespace: str, body: dict) -> dict:
        return self.to_dict(self._call(self.core.create_namespaced_pod, namespace, body, kind="pod",
                                       name=body["metadata"]["name"], namespace=namespace))

    def delete_pod(self, namespace: str, name: str) -> None:
        self._call(self.core.delete_namespaced_pod, name, namespace, kind="pod", name=name, namespace=namespace)

    def exec_stream(self, namespace: str, pod: str, command: list[str], stdin: bool = False):
        """A command in the pod's first container over the API's exec WebSocket: the client's
        WSClient (binary; devctl/transfer.py speaks the channel protocol on its socket)."""
        from kubernetes.client.exceptions import ApiException  # lazy
        from kubernetes.stream import stream

        try:
            return stream(self.core.connect_get_namespaced_pod_exec, pod, namespace, command=command, stdin=stdin,
                          stdout=True, stderr=True, tty=False, _preload_content=False, binary=True)
        except ApiException as exc:
            if exc.status:
                raise self._translate(exc, "pod", pod, namespace, None) from None
            raise exec_error(exc) from None
        except OSError as exc:
            raise ApiError(f"cannot reach the Kubernetes API at {self.host}: {one_line(exc)}") from None

    for fn in (get_eaj, list_eajs, create_eaj, delete_eaj, create_pvc, patch_pvc, create_pod, delete_pod, exec_stream):
        setattr(cls, fn.__name__, fn)
    return cls


Api = _eaj_api(Api)
