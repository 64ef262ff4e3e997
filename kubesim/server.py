"""HTTP layer: Kubernetes REST paths, discovery, watch streaming, admin endpoints."""
from __future__ import annotations

import asyncio
import datetime
import json
import logging
import time
from typing import Any

import yaml
from aiohttp import web

from kubesim import errors, podexec, protobuf
from kubesim.apiserver import FIELD_VALIDATION, ApiServer
from kubesim.deletions import ORIGIN, DeletionLog
from kubesim.faults import FaultInjector
from kubesim.metrics import NOOP_WRITE, Metrics
from kubesim.openapi import OpenAPIV3
from kubesim.podexec import VolumeStore
from kubesim.registry import ResourceType

log = logging.getLogger("kubesim.server")

K8S_VERSION_INFO = {
    "major": "1", "minor": "33", "gitVersion": "v1.33.0-kubesim", "gitCommit": "kubesim",
    "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.24",
    "compiler": "gc", "platform": "linux/amd64",
}

VERB_KEY = web.RequestKey("kubesim.verb", str)
RESOURCE_KEY = web.RequestKey("kubesim.resource", str)
DROP_AFTER_KEY = web.RequestKey("kubesim.drop_after", bool)
# Paths served without a token when the server authenticates (kube-apiserver's
# system:public-info-viewer: health and version), and kubesim's own admin endpoints.
PUBLIC_PATHS = ("/healthz", "/readyz", "/livez", "/version", "/kubesim/")

PATCH_TYPES = {
    "application/merge-patch+json": "merge",
    "application/json-patch+json": "json",
    "application/strategic-merge-patch+json": "strategic",
    "application/apply-patch+yaml": "apply",
    "application/apply-patch+json": "apply",
}


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(body=json.dumps(data, separators=(",", ":")).encode(), status=status,
                        content_type="application/json")


def _dropped() -> web.Response:
    """What the middleware returns for a connection it aborted: aiohttp's attempt to send it
    fails quietly (a ConnectionError), where an exception would be logged as a handler error."""
    return web.Response(status=499, text="connection dropped (fault injection)")


def _status_response(exc: errors.ApiError) -> web.Response:
    response = _json(exc.to_status(), exc.code)
    if "retryAfterSeconds" in exc.details:  # as kube-apiserver's 429 (max-in-flight) has it
        response.headers["Retry-After"] = str(exc.details["retryAfterSeconds"])
    return response


# The kinds whose registry answers a DELETE with the object even when it is gone at once
# (ReturnDeletedObject in kube-apiserver's pkg/registry: their OpenAPI DELETE answers the kind);
# every other kind answers a Status.
_RETURN_DELETED = frozenset({
    "pods", "persistentvolumeclaims", "podtemplates", "resourcequotas", "services", "serviceaccounts",
    "persistentvolumes", "namespaces", "storageclasses.storage.k8s.io", "csidrivers.storage.k8s.io",
    "csinodes.storage.k8s.io", "volumeattachments.storage.k8s.io",
    "volumeattributesclasses.storage.k8s.io"})


class Route:
    """A parsed resource path."""

    __slots__ = ("rt", "namespace", "name", "subresource", "group", "version")

    def __init__(self, rt: ResourceType, namespace: str | None, name: str | None,
                 subresource: str | None):
        self.rt, self.namespace, self.name, self.subresource = rt, namespace, name, subresource

    @property
    def resource_label(self) -> str:
        return self.rt.key + (f"/{self.subresource}" if self.subresource else "")


class KubeSimServer:
    def __init__(self, api: ApiServer, metrics: Metrics | None = None,
                 faults: FaultInjector | None = None, deletions: DeletionLog | None = None,
                 tokens: Any = None):
        self.api = api
        self.metrics = metrics or Metrics()
        self.faults = faults or FaultInjector()
        self.deletions = deletions or DeletionLog()
        # bearer tokens accepted; None: no authentication (every request is admin)
        self.tokens: set[str] | None = set(tokens) if tokens is not None else None
        # each open watch's task and request (close_watches cuts their connections)
        self._watch_tasks: dict[asyncio.Task, web.Request] = {}
        self.openapi = OpenAPIV3(api.registry, api.crd)
        # the files of the simulated volumes, for pods/exec (podexec.py)
        self.volumes = VolumeStore(api)
        # group -> provider of an aggregated API (kube-aggregator's APIService): served
        # by the provider, listed in discovery while provider.enabled()
        self.aggregated: dict[str, Any] = {}
        self.app = web.Application(client_max_size=64 * 1024 * 1024,
                                   middlewares=[self._middleware])
        r = self.app.router
        r.add_get("/version", self.version)
        r.add_get("/version/", self.version)  # the official client asks for /version/
        r.add_get("/healthz", self.ok)
        r.add_get("/readyz", self.ok)
        r.add_get("/livez", self.ok)
        r.add_get("/api", self.core_versions)
        r.add_get("/api/", self.core_versions)  # the official client asks with a slash
        r.add_get("/apis", self.api_groups)
        r.add_get("/apis/", self.api_groups)
        r.add_get("/apis/{group}/", self.group_versions)
        r.add_get("/api/{version}/", self.core_resources)
        r.add_get("/apis/{group}/{version}/", self.group_resources)
        r.add_get("/kubesim/metrics", self.get_metrics)
        r.add_post("/kubesim/metrics/reset", self.reset_metrics)
        r.add_get("/kubesim/requests", self.get_requests)
        r.add_post("/kubesim/faults", self.add_fault)
        r.add_get("/kubesim/faults", self.list_faults)
        r.add_delete("/kubesim/faults", self.clear_faults)
        r.add_get("/kubesim/deletions", self.get_deletions)
        r.add_post("/kubesim/watches/close", self.close_watches_endpoint)
        r.add_post("/kubesim/compact", self.compact)
        r.add_get("/openapi/v3", self.openapi_v3_root)
        r.add_get("/openapi/v3/{gv:.+}", self.openapi_v3_gv)
        r.add_route("*", "/api/{version}", self.core_resources)
        r.add_route("*", "/api/{version}/{tail:.*}", self.dispatch)
        r.add_get("/apis/{group}", self.group_versions)
        r.add_route("*", "/apis/{group}/{version}", self.group_resources)
        r.add_route("*", "/apis/{group}/{version}/{tail:.*}", self.dispatch)
        r.add_route("*", "/{tail:.*}", self.not_found)

    # -- middleware: metrics, faults, error mapping ------------------------------
    @web.middleware
    async def _middleware(self, request: web.Request, handler):
        start = time.perf_counter()
        request[VERB_KEY] = request.method.lower()
        request[RESOURCE_KEY] = ""
        request[DROP_AFTER_KEY] = False
        NOOP_WRITE.set(False)
        ORIGIN.set({"via": "request", "verb": request.method.lower(), "path": request.path,
                    "user_agent": request.headers.get("User-Agent", "")})
        try:
            self._authenticate(request)
            response = await handler(request)
        except errors.ApiError as exc:
            response = _status_response(exc)
        except web.HTTPException as exc:
            response = exc
        except ConnectionResetError:  # dropped (fault injection) or gone: counted as code 0
            self._record(request, 0, start)
            return _dropped()  # nothing reaches the client: its connection is closed
        except Exception as exc:  # never crash: report a 500 Status
            log.exception("internal error on %s %s", request.method, request.path)
            response = _status_response(errors.ApiError(500, f"internal error: {exc}"))
        if request[DROP_AFTER_KEY] and not getattr(response, "prepared", False):
            # served (the write happened), then the connection is lost: no answer
            self._record(request, 0, start)
            if request.transport is not None:
                request.transport.abort()
            return _dropped()
        if not request.path.startswith("/kubesim/"):
            self._record(request, getattr(response, "status", 0), start)
        return response

    def _authenticate(self, request: web.Request) -> None:
        """With tokens: a request without one of them is 401, as kube-apiserver answers an
        unknown or expired bearer token."""
        if self.tokens is None or request.path.startswith(PUBLIC_PATHS):
            return
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or token.strip() not in self.tokens:
            raise errors.ApiError(401, "Unauthorized", "Unauthorized")

    def _record(self, request: web.Request, code: int, start: float) -> None:
        self.metrics.record(request[VERB_KEY], request[RESOURCE_KEY], code, request.path,
                            (time.perf_counter() - start) * 1000.0,
                            request.headers.get("User-Agent", ""),
                            request.content_type if request.body_exists else "",
                            NOOP_WRITE.get())

    async def _apply_faults(self, request: web.Request, verb: str, resource: str) -> None:
        action = self.faults.check(verb, resource)
        if action is None:
            return
        if action.latency_ms:
            await asyncio.sleep(action.latency_ms / 1000.0)
        if action.code == "drop-after" and verb != "watch":
            request[DROP_AFTER_KEY] = True
            return
        if action.code in ("drop", "drop-after"):
            if request.transport is not None:
                request.transport.abort()
            raise ConnectionResetError("kubesim: connection dropped by fault injection")
        if action.code:
            raise self._injected_error(int(action.code), verb, resource)

    @staticmethod
    def _injected_error(code: int, verb: str, resource: str) -> errors.ApiError:
        """An injected answer, worded as kube-apiserver words it."""
        plural, _, group = resource.split("/")[0].partition(".")
        msg = {401: "Unauthorized",
               403: f'{plural}{"." + group if group else ""} is forbidden: User "kubesim-user" '
                    f'cannot {verb} resource "{plural}" in API group "{group}" (injected fault)',
               404: "the server could not find the requested resource (injected fault)",
               409: "Operation cannot be fulfilled: the object has been modified "
                    "(injected fault)",
               429: "Too many requests, please try again later (injected fault)",
               500: "Internal error (injected fault)"}.get(code, "injected fault")
        exc = errors.ApiError(code, msg)
        if code == 429:
            exc.details["retryAfterSeconds"] = 1
        return exc

    # -- plain endpoints ------------------------------------------------------
    async def ok(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def version(self, request: web.Request) -> web.Response:
        return _json(K8S_VERSION_INFO)

    async def not_found(self, request: web.Request) -> web.Response:
        raise errors.ApiError(404, "the server could not find the requested resource", "NotFound")

    async def core_versions(self, request: web.Request) -> web.Response:
        host = request.host.split(":")[0]
        return _json({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": f"{host}:{request.url.port}"}]})

    # -- aggregated APIs (e.g. Kueue's visibility.kueue.x-k8s.io) ------------------------
    def add_aggregated(self, provider: Any) -> None:
        """Serve an API group from `provider` instead of the registry, like an APIService.

        The provider has `group`, `versions` (preferred first), `enabled()` (listed in
        discovery and served only while true), `resources(version)` (APIResource entries)
        and `get(version, namespace, segments, query)` returning the response body or
        raising ApiError; only GET is served."""
        self.aggregated[provider.group] = provider

    def _aggregated(self, group: str) -> Any:
        provider = self.aggregated.get(group)
        return provider if provider is not None and provider.enabled() else None

    def _groups(self) -> dict[str, list[str]]:
        groups = self.api.registry.groups()
        for group in self.aggregated:
            if self._aggregated(group):
                groups[group] = list(self.aggregated[group].versions)
        return groups

    async def _dispatch_aggregated(self, request: web.Request, provider: Any) -> web.Response:
        version = request.match_info["version"]
        if version not in provider.versions:
            raise errors.ApiError(404, "the server could not find the requested resource",
                                  "NotFound")
        segs = [s for s in request.match_info.get("tail", "").split("/") if s]
        namespace = None
        if len(segs) >= 2 and segs[0] == "namespaces":
            namespace, segs = segs[1], segs[2:]
        request[VERB_KEY] = "get" if request.method == "GET" else request.method.lower()
        request[RESOURCE_KEY] = "/".join(segs[:1] + segs[2:3])
        await self._apply_faults(request, request[VERB_KEY], request[RESOURCE_KEY])
        if request.method != "GET":
            raise errors.ApiError(405, "the server does not allow this method on the "
                                  "requested resource", "MethodNotAllowed")
        return _json(provider.get(version, namespace, segs, request.query))

    def _group_obj(self, group: str, versions: list[str]) -> dict[str, Any]:
        vs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        return {"name": group, "versions": vs, "preferredVersion": vs[0]}

    async def api_groups(self, request: web.Request) -> web.Response:
        groups = [self._group_obj(g, vs) for g, vs in sorted(self._groups().items()) if g]
        return _json({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})

    async def group_versions(self, request: web.Request) -> web.Response:
        group = request.match_info["group"]
        versions = self._groups().get(group)
        if not versions:
            raise errors.ApiError(404, "the server could not find the requested resource",
                                  "NotFound")
        return _json({"kind": "APIGroup", "apiVersion": "v1", **self._group_obj(group, versions)})

    def _resource_list(self, group: str, version: str) -> dict[str, Any]:
        provider = self._aggregated(group)
        if provider is not None and version in provider.versions:
            return {"kind": "APIResourceList", "apiVersion": "v1",
                    "groupVersion": f"{group}/{version}", "resources": provider.resources(version)}
        types = self.api.registry.resources_in(group, version)
        if not types:
            raise errors.ApiError(404, "the server could not find the requested resource",
                                  "NotFound")
        resources = []
        for rt in sorted(types, key=lambda t: t.plural):
            resources.append(rt.api_resource())
            for sub in sorted(rt.subresources):
                entry = {"name": f"{rt.plural}/{sub}", "singularName": "", "namespaced": rt.namespaced,
                         "kind": rt.kind if sub == "status" else "Scale",
                         "verbs": ["get", "patch", "update"]}
                if sub == "scale":
                    entry["group"], entry["version"] = "autoscaling", "v1"
                resources.append(entry)
            if rt.key == "pods":
                resources.append({"name": "pods/binding", "singularName": "", "namespaced": True,
                                  "kind": "Binding", "verbs": ["create"]})
                resources.append({"name": "pods/eviction", "singularName": "", "namespaced": True,
                                  "group": "policy", "version": "v1", "kind": "Eviction",
                                  "verbs": ["create"]})
                for sub in ("log", "exec", "portforward"):
                    resources.append({"name": f"pods/{sub}", "singularName": "", "namespaced": True,
                                      "kind": "Pod" if sub == "log" else "PodExecOptions",
                                      "verbs": ["get", "create"]})
            if rt.key == "namespaces":
                resources.append({"name": "namespaces/finalize", "singularName": "",
                                  "namespaced": False, "kind": "Namespace", "verbs": ["update"]})
        gv = f"{group}/{version}" if group else version
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv,
                "resources": resources}

    async def core_resources(self, request: web.Request) -> web.Response:
        return _json(self._resource_list("", request.match_info["version"]))

    async def group_resources(self, request: web.Request) -> web.Response:
        return _json(self._resource_list(request.match_info["group"], request.match_info["version"]))

    # -- OpenAPI v3 (openapi.py: what kubectl apply and explain read) ------------------------
    async def openapi_v3_root(self, request: web.Request) -> web.Response:
        return _json(self.openapi.root())

    async def openapi_v3_gv(self, request: web.Request) -> web.Response:
        """One group-version's document. Like kube-openapi's handler: a stale `hash` is
        redirected to the current one, a current one makes the answer cacheable for good."""
        path = request.match_info["gv"].strip("/")
        found = self.openapi.documents().get(path)
        if found is None:
            raise errors.ApiError(404, "the server could not find the requested resource",
                                  "NotFound")
        data, digest = found
        wanted = request.query.get("hash")
        if wanted and wanted != digest:
            return web.Response(status=301,
                                headers={"Location": f"/openapi/v3/{path}?hash={digest}"})
        headers = {"ETag": f'"{digest}"', "Vary": "Accept"}
        if wanted:
            expires = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=365)
            headers.update({"Cache-Control": "public, immutable",
                            "Expires": expires.strftime("%a, %d %b %Y %H:%M:%S GMT")})
        return web.Response(body=data, content_type="application/json", headers=headers)

    # -- admin endpoints -----------------------------------------------------------
    async def get_metrics(self, request: web.Request) -> web.Response:
        return _json(self.metrics.snapshot())

    async def reset_metrics(self, request: web.Request) -> web.Response:
        self.metrics.reset()
        return _json({"reset": True})

    async def get_requests(self, request: web.Request) -> web.Response:
        limit = int(request.query.get("limit", "1000"))
        return _json({"requests": self.metrics.recent(limit)})

    async def add_fault(self, request: web.Request) -> web.Response:
        try:
            spec = await request.json()
            rule = self.faults.add(**spec)
        except (TypeError, ValueError, json.JSONDecodeError) as exc:
            raise errors.bad_request(f"invalid fault rule: {exc}") from None
        return _json(rule.describe(), 201)

    async def list_faults(self, request: web.Request) -> web.Response:
        return _json({"faults": [r.describe() for r in self.faults.rules]})

    async def clear_faults(self, request: web.Request) -> web.Response:
        self.faults.clear()
        return _json({"cleared": True})

    async def get_deletions(self, request: web.Request) -> web.Response:
        return _json({"deletions": self.deletions.records(request.query.get("resource"))})

    async def close_watches_endpoint(self, request: web.Request) -> web.Response:
        """End every open watch as the server ends one at its timeout (clients resume)."""
        return _json({"closed": self.end_watches()})

    async def compact(self, request: web.Request) -> web.Response:
        """Forget the event history (etcd compaction): a watch resumed from an older
        resourceVersion gets 410 Gone and must list again."""
        return _json({"compactedResourceVersion": str(self.api.store.compact())})

    # -- resource dispatch -----------------------------------------------------------
    def _route(self, request: web.Request) -> Route:
        group = request.match_info.get("group", "")
        version = request.match_info["version"]
        segs = [s for s in request.match_info.get("tail", "").split("/") if s]
        namespace = None
        if len(segs) >= 3 and segs[0] == "namespaces" and segs[2] not in ("status", "finalize"):
            namespace = segs[1]
            segs = segs[2:]
        if not segs or len(segs) > 3:
            raise errors.ApiError(404, "the server could not find the requested resource",
                                  "NotFound")
        rt = self.api.registry.lookup(group, version, segs[0])
        if rt is None:
            gv = f"{group}/{version}" if group else version
            raise errors.ApiError(404, f"the server could not find the requested resource "
                                  f"(no resource \"{segs[0]}\" in {gv})", "NotFound",
                                  {"kind": segs[0], "group": group})
        if namespace is not None and not rt.namespaced:
            raise errors.ApiError(404, f"the server could not find the requested resource "
                                  f"({rt.key} is cluster-scoped)", "NotFound")
        name = segs[1] if len(segs) >= 2 else None
        sub = segs[2] if len(segs) == 3 else None
        return Route(rt, namespace, name, sub)

    async def _body(self, request: web.Request, route: Route) -> Any:
        """The decoded request body (None when empty): JSON, YAML, or protobuf for the built-in
        kinds kubesim.protobuf knows (client-go's typed clients send protobuf)."""
        raw = await request.read()
        if not raw:
            return None
        ctype = request.content_type
        if ctype == protobuf.MEDIA_TYPE and not route.rt.crd:
            kind = "DeleteOptions" if request.method == "DELETE" else route.rt.kind
            return protobuf.decode(raw, route.rt.api_version, kind)
        if "protobuf" in ctype or "cbor" in ctype:
            # like kube-apiserver for custom resources (JSON and YAML only) and for CBOR
            # (served only behind a feature gate that is off by default)
            raise errors.ApiError(415, f"the body of the request was in an unknown format "
                                  f"({ctype}) - accepted media types include: application/json, "
                                  f"application/yaml", "UnsupportedMediaType")
        try:
            if "yaml" in ctype:
                return yaml.safe_load(raw)
            return json.loads(raw)
        except (json.JSONDecodeError, yaml.YAMLError, UnicodeDecodeError) as exc:
            first = str(exc).splitlines()[0]
            raise errors.bad_request(f"couldn't get version/kind; json parse error: {first}") \
                from None

    @staticmethod
    def _dry_run(request: web.Request) -> bool:
        values = request.query.getall("dryRun", [])
        for value in values:
            if value != "All":  # as kube-apiserver: the only dry-run stage there is
                raise errors.invalid("", "", [{"field": "dryRun", "reason": "FieldValueNotSupported",
                                               "message": f'Unsupported value: ["{value}"]: supported '
                                                          'values: "All"'}])
        return "All" in values

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        provider = self._aggregated(request.match_info.get("group", ""))
        if provider is not None:
            return await self._dispatch_aggregated(request, provider)
        route = self._route(request)
        q = request.query
        method = request.method
        watch = q.get("watch") in ("true", "1")
        if method == "GET":
            verb = "watch" if watch else ("get" if route.name else "list")
        else:
            verb = {"POST": "create", "PUT": "update", "PATCH": "patch",
                    "DELETE": "delete" if route.name else "deletecollection"}.get(method, method)
        request[VERB_KEY] = verb
        request[RESOURCE_KEY] = route.resource_label
        await self._apply_faults(request, verb, route.resource_label)
        api, rt = self.api, route.rt
        ns = route.namespace
        if rt.namespaced and ns is None and method not in ("GET",):
            if not (method == "POST" and route.name is None):
                raise errors.ApiError(404, "the server could not find the requested resource",
                                      "NotFound")
        if rt.key == "pods" and route.subresource == "exec" and route.name and method in ("GET", "POST"):
            return await podexec.serve(request, api, self.volumes, ns or "", route.name)
        if route.subresource and route.subresource not in rt.subresources and not (
                rt.key == "pods" and route.subresource in ("binding", "eviction", "log")) and not (
                rt.key == "namespaces" and route.subresource == "finalize"):
            raise errors.ApiError(404, f"the server could not find the requested resource "
                                  f"({rt.key}/{route.subresource})", "NotFound")

        if method == "GET":
            if watch:
                fs = q.get("fieldSelector")
                if route.name:
                    fs = ",".join(filter(None, [fs, f"metadata.name={route.name}"]))
                initial_events = q.get("sendInitialEvents") == "true"
                rv = None if initial_events else q.get("resourceVersion")
                return await self._watch(request, rt, ns, q.get("labelSelector"), fs, rv,
                                         q.get("timeoutSeconds"), initial_events)
            if route.name is None:
                limit = int(q["limit"]) if q.get("limit", "").isdigit() else None
                result = api.list(rt, ns, q.get("labelSelector"), q.get("fieldSelector"), limit,
                                  q.get("continue"), copy_=False)
                if "as=Table" in request.headers.get("Accept", ""):
                    return _json(self._table(rt, result["items"], result["metadata"]))
                return _json(result)
            if route.subresource == "scale":
                return _json(api.get_scale(rt, ns or "", route.name))
            if route.subresource == "log":
                return web.Response(text=self._pod_log(ns or "", route.name))
            obj = api.get(rt, ns, route.name, copy_=False)
            if "as=Table" in request.headers.get("Accept", ""):
                return _json(self._table(rt, [obj], {"resourceVersion": obj["metadata"]["resourceVersion"]}))
            return _json(obj)

        body = await self._body(request, route)
        # as kube-apiserver: a write without fieldManager is managed by its user agent's name
        agent = request.headers.get("User-Agent", "").split("/")[0][:128] or None
        field_manager = q.get("fieldManager")
        FIELD_VALIDATION.set(q.get("fieldValidation") or "Ignore")
        if method == "POST":
            if route.name and not route.subresource:
                raise errors.ApiError(405, "the server does not allow this method on the "
                                      "requested resource", "MethodNotAllowed")
            if route.subresource:
                return _json(api.create(rt, body, ns, dry_run=self._dry_run(request),
                                        subresource=route.subresource), 201)
            if body is None:
                raise errors.bad_request("the body of the request was empty")
            return _json(api.create(rt, body, ns, dry_run=self._dry_run(request),
                                    field_manager=field_manager or agent), 201)
        if method == "PUT":
            if not route.name:
                raise errors.ApiError(405, "the server does not allow this method on the "
                                      "requested resource", "MethodNotAllowed")
            if body is None:
                raise errors.bad_request("the body of the request was empty")
            if not isinstance(body, dict):
                raise errors.bad_request("the body of the request must be a JSON object")
            created = api.store.get(rt.key, ns or "", route.name) is None
            if rt.crd and not created and route.subresource != "scale" and \
                    not (body.get("metadata") or {}).get("resourceVersion"):
                # a custom resource's strategy allows no unconditional update
                raise errors.invalid(rt.kind, route.name, [{
                    "field": "metadata.resourceVersion", "reason": "FieldValueInvalid",
                    "message": "Invalid value: 0: must be specified for an update"}], rt.group)
            obj = api.update(rt, body, ns, route.subresource, self._dry_run(request),
                             field_manager or agent, name=route.name)
            return _json(obj, 201 if created and not route.subresource else 200)
        if method == "PATCH":
            if not route.name:
                raise errors.ApiError(405, "the server does not allow this method on the "
                                      "requested resource", "MethodNotAllowed")
            ptype = PATCH_TYPES.get(request.content_type)
            if ptype is None:
                raise errors.ApiError(415, f"the body of the request was in an unknown format - "
                                      f"accepted media types include: {', '.join(PATCH_TYPES)}",
                                      "UnsupportedMediaType")
            if body is None:
                raise errors.bad_request("the body of the request was empty")
            force = q.get("force") in ("true", "1")
            existed = api.store.get(rt.key, ns or "", route.name) is not None
            obj = api.patch(rt, ns, route.name, body, ptype, route.subresource,
                            field_manager if ptype == "apply" else field_manager or agent,
                            force, self._dry_run(request))
            return _json(obj, 201 if (ptype == "apply" and not existed) else 200)
        if method == "DELETE":
            opts = body if isinstance(body, dict) else {}
            propagation = q.get("propagationPolicy") or opts.get("propagationPolicy")
            if opts.get("orphanDependents") is True and not propagation:
                propagation = "Orphan"
            dry = self._dry_run(request) or "All" in (opts.get("dryRun") or [])
            if route.name is None:
                return _json(api.delete_collection(rt, ns, q.get("labelSelector"),
                                                   q.get("fieldSelector"), propagation, dry))
            obj = api.delete(rt, ns, route.name, propagation, opts.get("preconditions"), dry)
            if rt.key in _RETURN_DELETED or obj["metadata"].get("deletionTimestamp"):
                return _json(obj, 200)
            # deleted at once: kube-apiserver answers a Status (unless its registry returns the object)
            details = {"name": route.name, "kind": rt.plural, "uid": obj["metadata"].get("uid")}
            if rt.group:
                details["group"] = rt.group
            return _json({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                          "details": details}, 200)
        raise errors.ApiError(405, "the server does not allow this method on the requested "
                              "resource", "MethodNotAllowed")

    def _pod_log(self, namespace: str, name: str) -> str:
        pod = self.api.get("pods", namespace, name, copy_=False)
        return (pod.get("metadata", {}).get("annotations") or {}).get("kubesim.io/log", "")

    # -- tables (kubectl get) ----------------------------------------------------------
    def _table(self, rt: ResourceType, items: list[dict], meta: dict) -> dict[str, Any]:
        from kubesim.tables import table_for

        return table_for(rt, items, meta)

    # -- watch -------------------------------------------------------------------
    async def _watch(self, request: web.Request, rt: ResourceType, ns: str | None,
                     label_selector: str | None, field_selector: str | None,
                     resource_version: str | None, timeout: str | None,
                     initial_events_end: bool = False) -> web.StreamResponse:
        """Stream watch events. With `sendInitialEvents=true` (client-go's WatchList, used by
        `kubectl wait`) the current objects come first, then a BOOKMARK annotated
        `k8s.io/initial-events-end` that tells the client the initial list is complete."""
        watcher, initial = self.api.watch(rt, ns, label_selector, field_selector, resource_version)
        list_rv = str(self.api.store.rv)
        resp = web.StreamResponse(status=200)
        resp.content_type = "application/json"
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        deadline = None
        if timeout and timeout.isdigit():
            deadline = asyncio.get_running_loop().time() + int(timeout)
        api_version = rt.api_version

        def encode(event_type: str, obj: dict) -> bytes:
            if obj.get("apiVersion") != api_version:
                obj = dict(obj, apiVersion=api_version)
            return (json.dumps({"type": event_type, "object": obj}, separators=(",", ":"))
                    + "\n").encode()

        task = asyncio.current_task()
        if task:
            self._watch_tasks[task] = request
        try:
            for et, obj in initial:
                await resp.write(encode(et, obj))
            if initial_events_end:
                await resp.write(encode("BOOKMARK", {
                    "kind": rt.kind, "apiVersion": api_version,
                    "metadata": {"resourceVersion": list_rv,
                                 "annotations": {"k8s.io/initial-events-end": "true"}}}))
            while True:
                wait = None
                if deadline is not None:
                    wait = deadline - asyncio.get_running_loop().time()
                    if wait <= 0:
                        break
                try:
                    item = await asyncio.wait_for(watcher.queue.get(), wait)
                except asyncio.TimeoutError:
                    break
                if item is None:  # closed (resource removed or shutdown)
                    break
                await resp.write(encode(*item))
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.api.stop_watch(watcher)
            if task:
                self._watch_tasks.pop(task, None)
        try:
            await resp.write_eof()
        except (ConnectionResetError, RuntimeError):
            pass
        return resp

    def end_watches(self) -> int:
        """End every open watch stream cleanly (the chunked response ends, like a server-side
        timeout); the number ended."""
        n = len(self._watch_tasks)
        self.api.store.close_watchers()
        return n

    async def close_watches(self) -> None:
        """Cut every open watch's connection, as a crashing API server does: the client
        sees a broken stream, never a clean end (which would read as a timeout)."""
        for task, request in list(self._watch_tasks.items()):
            if request.transport is not None:
                request.transport.abort()
            task.cancel()
        self.api.store.close_watchers()
