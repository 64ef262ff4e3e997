"""The API server's semantics, independent of HTTP.

Used by the HTTP layer (server.py) and, in-process, by the simulated
controllers, so that both see exactly the same behaviour: validation,
defaults, resourceVersion/generation bookkeeping, status and scale
subresources, finalizers and deletion propagation.
"""
from __future__ import annotations

import base64
import contextvars
import datetime as _dt
import ipaddress
import json
import random
import string
import uuid
from typing import Any, Callable

from kubesim import defaults, errors
from kubesim.metrics import NOOP_WRITE
from kubesim.registry import Registry, ResourceType
from kubesim.selectors import make_filter
from kubesim.store import Store, Watcher

Obj = dict[str, Any]

# Kinds a PUT creates when the object does not exist (their registry strategies'
# AllowCreateOnUpdate in kube-apiserver); for every other kind, custom resources included, a PUT
# of a missing object is 404: a client's retried update cannot bring back a deleted object.
_CREATE_ON_UPDATE = frozenset({
    "events", "events.events.k8s.io", "endpoints", "limitranges", "leases.coordination.k8s.io",
    "roles.rbac.authorization.k8s.io", "rolebindings.rbac.authorization.k8s.io",
    "clusterroles.rbac.authorization.k8s.io", "clusterrolebindings.rbac.authorization.k8s.io"})
_CRD_KEY = "customresourcedefinitions.apiextensions.k8s.io"
# kube-apiserver's finalizer of a CRD being deleted while custom resources of it remain.
CRD_CLEANUP_FINALIZER = "customresourcecleanup.apiextensions.k8s.io"

# The request's ?fieldValidation= (Strict, Warn, Ignore); the HTTP layer sets it per request.
FIELD_VALIDATION: contextvars.ContextVar[str] = contextvars.ContextVar("field_validation",
                                                                      default="Ignore")
_SERVICE_CIDR = ipaddress.ip_network("10.96.0.0/12")


def now_rfc3339() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def deepcopy(obj: Any) -> Any:
    # json round trip is faster than copy.deepcopy for plain JSON data
    return json.loads(json.dumps(obj))


def _strip_volatile(obj: Obj) -> Obj:
    o = dict(obj)
    meta = dict(o.get("metadata") or {})
    for k in ("resourceVersion", "managedFields", "generation"):
        meta.pop(k, None)
    o["metadata"] = meta
    return o


def _managed_sans_time(obj: Obj) -> list[Obj]:
    return [{k: v for k, v in e.items() if k != "time"} if isinstance(e, dict) else e
            for e in obj["metadata"].get("managedFields") or []]


def _field_manager_required(rt: ResourceType) -> errors.ApiError:
    return errors.invalid(rt.kind, "", [{"field": "fieldManager", "reason": "FieldValueRequired",
                                         "message": "Required value: is required for apply patch"}],
                          rt.group)


def _body_spec(obj: Obj) -> Obj:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


def _external(spec: Obj) -> bool:
    return spec.get("type") in ("NodePort", "LoadBalancer")


def _drop_type_dependent_fields(old: Obj, new: Obj) -> None:
    """kube-apiserver's dropTypeDependentFields (pkg/registry/core/service/strategy.go) for an
    update that changes a Service's type: the fields the old type had and the new one has no
    use for are cleared when the update left them as they were (an apply that stops setting
    the type keeps the allocated nodePorts, which the new type would refuse): the nodePorts
    (the new type is neither NodePort nor LoadBalancer), healthCheckNodePort (not a
    LoadBalancer with externalTrafficPolicy Local), externalTrafficPolicy (not externally
    accessible); and status.loadBalancer of anything but a LoadBalancer."""
    ospec, nspec = old.get("spec") or {}, new.get("spec") or {}
    if _external(ospec) and not _external(nspec):
        same = [p.get("nodePort") for p in ospec.get("ports") or []] == \
            [p.get("nodePort") for p in nspec.get("ports") or []]
        if same:
            for p in nspec.get("ports") or []:
                p.pop("nodePort", None)
        if nspec.get("externalTrafficPolicy") == ospec.get("externalTrafficPolicy"):
            nspec.pop("externalTrafficPolicy", None)
    hc_old = ospec.get("type") == "LoadBalancer" and ospec.get("externalTrafficPolicy") == "Local"
    hc_new = nspec.get("type") == "LoadBalancer" and nspec.get("externalTrafficPolicy") == "Local"
    if hc_old and not hc_new and nspec.get("healthCheckNodePort") == ospec.get("healthCheckNodePort"):
        nspec.pop("healthCheckNodePort", None)
    if nspec.get("type") != "LoadBalancer" and isinstance(new.get("status"), dict) \
            and (new["status"].get("loadBalancer") or {}):
        new["status"]["loadBalancer"] = {}


class ApiServer:
    def __init__(self, registry: Registry | None = None, store: Store | None = None,
                 validate: bool = True):
        self.registry = registry or Registry()
        self.store = store or Store()
        self.validate = validate
        self._crd_models: dict[str, Any] = {}
        self._next_ip = 10
        self._used_ips: set[str] = set()
        # admission mutators (think mutating webhooks): fn(rt, obj) may change a new object in
        # create(), after defaulting and before validation
        self.mutators: list[Callable[[ResourceType, Obj], None]] = []
        # validating admission of updates (think validating webhooks): fn(rt, old, new) may
        # raise ApiError to refuse a PUT or PATCH of an object (not of a subresource)
        self.update_validators: list[Callable[[ResourceType, Obj, Obj], None]] = []

    # -- helpers -----------------------------------------------------------
    def resource(self, name: str | ResourceType) -> ResourceType:
        if isinstance(name, ResourceType):
            return name
        rt = self.registry.find(name)
        if rt is None:
            raise errors.ApiError(404, f'the server could not find the requested resource ({name})',
                                  "NotFound")
        return rt

    def _storage_key(self, rt: ResourceType) -> str:
        return rt.key

    def add_mutator(self, fn: Callable[[ResourceType, Obj], None]) -> None:
        self.mutators.append(fn)

    def add_update_validator(self, fn: Callable[[ResourceType, Obj, Obj], None]) -> None:
        self.update_validators.append(fn)

    def subscribe(self, callback: Callable[[str, str, Obj, Obj | None], None]) -> None:
        self.store.subscribe(callback)

    def _require_namespace(self, rt: ResourceType, namespace: str | None, creating: bool) -> str:
        if not rt.namespaced:
            return ""
        if not namespace:
            raise errors.bad_request(f"the namespace of the object must be set for {rt.key}")
        if creating:
            ns = self.store.get("namespaces", "", namespace)
            if ns is None:
                raise errors.ApiError(404, f'namespaces "{namespace}" not found', "NotFound",
                                      {"name": namespace, "kind": "namespaces"})
            if ns["metadata"].get("deletionTimestamp"):
                # as kube-apiserver's NamespaceLifecycle admission: the cause names it
                raise errors.ApiError(403, f'{rt.plural} "" is forbidden: unable to create new '
                                      f'content in namespace {namespace} because it is being '
                                      'terminated', "Forbidden", {"kind": rt.plural},
                                      causes=[{"reason": "NamespaceTerminating", "field": "metadata.namespace",
                                               "message": f"namespace {namespace} is being terminated"}])
        return namespace

    def _check_type(self, rt: ResourceType, obj: Any) -> None:
        if not isinstance(obj, dict):
            raise errors.bad_request("the body of the request must be a JSON object")
        av, kind = obj.get("apiVersion"), obj.get("kind")
        if av is None or kind is None:
            raise errors.bad_request("Object 'Kind' is missing in the body" if kind is None
                                     else "Object 'apiVersion' is missing in the body")
        if av != rt.api_version:
            raise errors.bad_request(f"the API version in the data ({av}) does not match the "
                                     f"expected API version ({rt.api_version})")
        if kind != rt.kind:
            raise errors.bad_request(f"the kind in the data ({kind}) does not match the expected "
                                     f"kind ({rt.kind})")
        if not isinstance(obj.get("metadata", {}), dict):
            raise errors.bad_request("metadata must be an object")

    def crd(self, name: str) -> Obj | None:
        """The stored CustomResourceDefinition `name` (not a copy: read only), or None."""
        return self.store.get(_CRD_KEY, "", name)

    def crd_model(self, rt: ResourceType) -> Any:
        from kubesim import validation

        model = self._crd_models.get(rt.crd or "")
        if model is None:
            crd = self.store.get(_CRD_KEY, "", rt.crd or "")
            model = validation.CRDModel(crd)
            self._crd_models[rt.crd or ""] = model
        return model.version(rt.version)

    def _admit(self, rt: ResourceType, obj: Obj, old: Obj | None, subresource: str | None) -> Obj:
        """Validation (and, for custom resources, pruning and defaulting)."""
        from kubesim import validation

        validation.validate_metadata(obj, rt.namespaced, rt.kind, rt.key, rt.group)
        if not self.validate:
            return obj
        if rt.crd:
            return self.crd_model(rt).admit(obj, old, subresource=subresource,
                                            field_validation=FIELD_VALIDATION.get())
        if rt.key == _CRD_KEY:
            validation.validate_crd(obj)
        validation.validate_builtin(obj, strict=FIELD_VALIDATION.get() == "Strict")
        validation.validate_builtin_semantics(obj)
        return obj

    def _generate_name(self, prefix: str) -> str:
        return prefix + "".join(random.choices(string.ascii_lowercase + string.digits, k=5))

    def allocate_cluster_ip(self) -> str:
        while True:
            self._next_ip += 1
            ip = str(_SERVICE_CIDR.network_address + self._next_ip)
            if ip not in self._used_ips:
                self._used_ips.add(ip)
                return ip

    def _list_key(self, rt: ResourceType) -> str:
        return rt.key

    # -- reads -------------------------------------------------------------
    def get(self, resource: str | ResourceType, namespace: str | None, name: str,
            copy_: bool = True) -> Obj:
        rt = self.resource(resource)
        obj = self.store.get(rt.key, namespace or "" if rt.namespaced else "", name)
        if obj is None:
            raise errors.not_found(rt.key if rt.group else rt.plural, name)
        return deepcopy(obj) if copy_ else obj

    def list(self, resource: str | ResourceType, namespace: str | None = None,
             label_selector: str | None = None, field_selector: str | None = None,
             limit: int | None = None, continue_: str | None = None,
             copy_: bool = True) -> Obj:
        rt = self.resource(resource)
        match = make_filter(label_selector, field_selector, rt.kind)
        ns = namespace if rt.namespaced else None
        items = self.store.items(rt.key, ns)
        if match is not None:
            items = (o for o in items if match(o))
        items = sorted(items, key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
        list_rv = str(self.store.rv)
        start = 0
        if continue_:
            try:
                token = json.loads(base64.urlsafe_b64decode(continue_.encode()).decode())
                start, list_rv = int(token["start"]), str(token["rv"])
            except Exception:
                raise errors.bad_request("continue key is not valid") from None
        meta: Obj = {"resourceVersion": list_rv}
        if limit and limit > 0:
            page = items[start:start + limit]
            rest = len(items) - (start + len(page))
            if rest > 0:
                meta["continue"] = base64.urlsafe_b64encode(json.dumps(
                    {"start": start + len(page), "rv": list_rv}).encode()).decode()
                if match is None:  # as kube-apiserver: no count of what a selector would keep
                    meta["remainingItemCount"] = rest
            items = page
        elif start:
            items = items[start:]
        out_items = [self._with_type(rt, o) for o in items]
        result = {"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": meta,
                  "items": out_items}
        return deepcopy(result) if copy_ else result

    def _with_type(self, rt: ResourceType, obj: Obj) -> Obj:
        if obj.get("apiVersion") == rt.api_version:
            return obj
        o = dict(obj)  # a CR read through a non-storage version
        o["apiVersion"] = rt.api_version
        return o

    # -- create --------------------------------------------------------------
    def create(self, resource: str | ResourceType, obj: Obj, namespace: str | None = None,
               dry_run: bool = False, field_manager: str | None = None,
               subresource: str | None = None) -> Obj:
        rt = self.resource(resource)
        if subresource == "binding" and rt.key == "pods":
            return self._bind(namespace or "", obj)
        if subresource == "eviction" and rt.key == "pods":
            name = (obj.get("metadata") or {}).get("name", "")
            return self.delete(rt, namespace, name)
        if subresource:
            raise errors.ApiError(405, f"create is not supported on {rt.key}/{subresource}",
                                  "MethodNotAllowed")
        self._check_type(rt, obj)
        if rt.crd and (self.crd(rt.crd) or {}).get("metadata", {}).get("deletionTimestamp"):
            raise errors.ApiError(405, "create not allowed while custom resource definition is "
                                  "terminating", "MethodNotAllowed")
        obj = deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        body_ns = meta.get("namespace")
        if rt.namespaced:
            namespace = namespace or body_ns
            if body_ns and namespace and body_ns != namespace:
                raise errors.bad_request("the namespace of the provided object does not match "
                                         "the namespace sent on the request")
        ns = self._require_namespace(rt, namespace, creating=True)
        if not meta.get("name"):
            if meta.get("generateName"):
                for _ in range(10):
                    meta["name"] = self._generate_name(meta["generateName"])
                    if self.store.get(rt.key, ns, meta["name"]) is None:
                        break
            else:
                raise errors.invalid(rt.kind, "", [{"field": "metadata.name",
                                                    "reason": "FieldValueRequired",
                                                    "message": "Required value: name or "
                                                               "generateName is required"}],
                                     rt.group)
        if rt.namespaced:
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)
        if self.store.get(rt.key, ns, meta["name"]) is not None:
            raise errors.already_exists(rt.key if rt.group else rt.plural, meta["name"])
        for k in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(k, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_rfc3339()
        meta["generation"] = 1
        if "status" in rt.subresources and rt.kind not in ("Pod", "PersistentVolumeClaim",
                                                          "Namespace", "Node"):
            obj.pop("status", None)
        if not rt.crd:
            defaults.apply_defaults(rt.kind, rt.api_version, obj)
        if rt.key == "persistentvolumeclaims":
            self._default_storage_class(obj)
        if rt.kind == "Service" and rt.group == "":
            self._allocate_service(obj)
        for mutate in self.mutators:
            mutate(rt, obj)
        obj = self._admit(rt, obj, None, None)
        if field_manager:
            obj = self._track_update(rt, None, obj, field_manager, None)
        if rt.key == _CRD_KEY:
            self._crd_created(obj)
        if dry_run:
            return obj
        obj["metadata"]["resourceVersion"] = str(self.store.next_rv())
        self.store.put(rt.key, obj, None)
        if rt.key == _CRD_KEY:
            self._crd_established(obj)
            obj = self.store.get(rt.key, "", obj["metadata"]["name"]) or obj
        return deepcopy(obj)

    def _default_storage_class(self, claim: Obj) -> None:
        """kube-apiserver's DefaultStorageClass admission: a claim that names no class (the
        field absent; "" asks for none) gets the default one, the newest when several are."""
        spec = claim.get("spec")
        if not isinstance(spec, dict) or "storageClassName" in spec:
            return
        marked = [sc for sc in self.store.items("storageclasses.storage.k8s.io")
                  if (sc["metadata"].get("annotations") or {}).get(
                      "storageclass.kubernetes.io/is-default-class") == "true"]
        if marked:
            newest = max(marked, key=lambda sc: (sc["metadata"].get("creationTimestamp", ""), sc["metadata"]["name"]))
            spec["storageClassName"] = newest["metadata"]["name"]

    def _admit_claim_resize(self, old: Obj, new: Obj) -> None:
        """kube-apiserver's PersistentVolumeClaimResize admission (on by default): a bound
        claim's storage request may only grow when it names a class (the same before and
        after) whose allowVolumeExpansion is true; else 403 with the plugin's words."""
        from kubesim.quantity import parse_quantity

        def request(claim: Obj) -> Any:
            return (((claim.get("spec") or {}).get("resources") or {}).get("requests") or {}).get("storage")

        def class_of(claim: Obj) -> str:
            beta = (claim["metadata"].get("annotations") or {}).get("volume.beta.kubernetes.io/storage-class")
            return beta if beta is not None else (claim.get("spec") or {}).get("storageClassName") or ""

        try:
            grows = parse_quantity(str(request(new) or "0")) > parse_quantity(str(request(old) or "0"))
        except ValueError:
            return
        if not grows:
            return
        name = old["metadata"]["name"]
        # (An unbound claim's request never gets here: validation refused it, 422.)
        sc_name = class_of(new)
        sc = self.store.get("storageclasses.storage.k8s.io", "", sc_name) if sc_name == class_of(old) else None
        if not sc_name or not (sc or {}).get("allowVolumeExpansion"):
            raise errors.ApiError(403, f'persistentvolumeclaims "{name}" is forbidden: only dynamically '
                                  'provisioned pvc can be resized and the storageclass that provisions the pvc '
                                  'must support resize', "Forbidden", {"name": name, "kind": "persistentvolumeclaims"})

    def _allocate_service(self, obj: Obj) -> None:
        spec = obj.setdefault("spec", {})
        if spec.get("type", "ClusterIP") != "ExternalName" and not spec.get("clusterIP"):
            spec["clusterIP"] = self.allocate_cluster_ip()
        if spec.get("clusterIP") and not spec.get("clusterIPs"):
            spec["clusterIPs"] = [spec["clusterIP"]]
        if spec.get("clusterIP") and spec["clusterIP"] != "None":
            self._used_ips.add(spec["clusterIP"])
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        spec.setdefault("internalTrafficPolicy", "Cluster")
        if spec.get("type") in ("NodePort", "LoadBalancer"):
            used = {p.get("nodePort") for o in self.store.items("services")
                    for p in (o.get("spec", {}).get("ports") or [])}
            port = 30000
            for p in spec.get("ports") or []:
                if not p.get("nodePort"):
                    while port in used:
                        port += 1
                    p["nodePort"] = port
                    used.add(port)

    def _track_update(self, rt: ResourceType, old: Obj | None, new: Obj, manager: str,
                      subresource: str | None) -> Obj:
        """The fields a create or update sets, owned by its manager (operation Update), as
        kube-apiserver tracks them: a later apply that changes them conflicts."""
        from kubesim import patching

        return patching.update_managed_fields(old, new, manager, rt.api_version, now_rfc3339(),
                                              kind=rt.kind, subresource=subresource,
                                              **self._apply_kwargs(rt))

    def _bind(self, namespace: str, binding: Obj) -> Obj:
        name = (binding.get("metadata") or {}).get("name", "")
        target = (binding.get("target") or {}).get("name")
        pod = self.get("pods", namespace, name)
        if not target:
            raise errors.invalid("Binding", name, [{"field": "target.name",
                                                    "reason": "FieldValueRequired",
                                                    "message": "Required value"}])
        if pod["spec"].get("nodeName"):
            raise errors.conflict("pods", name, f"pod {name} is already assigned to node "
                                  f"\"{pod['spec']['nodeName']}\"")
        old = self.store.get("pods", namespace, name)
        pod["spec"]["nodeName"] = target
        pod["metadata"]["resourceVersion"] = str(self.store.next_rv())
        self.store.put("pods", pod, old)
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "code": 201}

    # -- update -------------------------------------------------------------
    def update(self, resource: str | ResourceType, obj: Obj, namespace: str | None = None,
               subresource: str | None = None, dry_run: bool = False,
               field_manager: str | None = None, name: str | None = None) -> Obj:
        rt = self.resource(resource)
        if subresource == "scale":
            return self._update_scale(rt, namespace, name or obj["metadata"]["name"], obj, dry_run)
        if subresource and subresource not in rt.subresources and not (
                subresource == "finalize" and rt.kind == "Namespace"):
            raise errors.ApiError(404, f"the server could not find the requested resource "
                                  f"({rt.key}/{subresource})", "NotFound")
        self._check_type(rt, obj)
        meta = obj.get("metadata") or {}
        name = name or meta.get("name")
        if meta.get("name") and name != meta.get("name"):
            raise errors.bad_request("the name of the object does not match the name on the URL")
        ns = self._require_namespace(rt, namespace or meta.get("namespace"), creating=False)
        if rt.namespaced and meta.get("namespace") and meta["namespace"] != ns:
            raise errors.bad_request("the namespace of the provided object does not match "
                                     "the namespace sent on the request")
        old = self.store.get(rt.key, ns, name or "")
        if old is None:
            if subresource or rt.key not in _CREATE_ON_UPDATE:
                raise errors.not_found(rt.key if rt.group else rt.plural, name or "")
            if meta.get("resourceVersion"):  # a precondition on an object that is not there
                raise errors.conflict(rt.key if rt.group else rt.plural, name or "",
                                      "the object has been modified; please apply your changes to "
                                      "the latest version and try again")
            return self.create(rt, obj, ns, dry_run=dry_run, field_manager=field_manager)
        return self._write(rt, old, deepcopy(obj), subresource, dry_run, field_manager)

    def _write(self, rt: ResourceType, old: Obj, new: Obj, subresource: str | None,
               dry_run: bool, field_manager: str | None, operation: str = "Update") -> Obj:
        """Common path of PUT and PATCH: merge with old per subresource rules, validate, store."""
        name = old["metadata"]["name"]
        want_rv = (new.get("metadata") or {}).get("resourceVersion")
        if want_rv and want_rv != old["metadata"]["resourceVersion"]:
            raise errors.conflict(rt.key if rt.group else rt.plural, name,
                                  "the object has been modified; please apply your changes to "
                                  "the latest version and try again")
        new_uid = (new.get("metadata") or {}).get("uid")
        if new_uid and new_uid != old["metadata"]["uid"]:
            raise errors.conflict(rt.key if rt.group else rt.plural, name,
                                  f"Precondition failed: UID in precondition: {new_uid}, "
                                  f"UID in object meta: {old['metadata']['uid']}")
        if subresource == "status":
            merged = deepcopy(old)
            if "status" in new:
                merged["status"] = new["status"]
            else:
                merged.pop("status", None)
            if operation == "Apply" and "managedFields" in (new.get("metadata") or {}):
                merged["metadata"]["managedFields"] = new["metadata"]["managedFields"]
            new = merged
        elif subresource == "finalize":
            merged = deepcopy(old)
            merged.setdefault("spec", {})["finalizers"] = (new.get("spec") or {}).get("finalizers") or []
            new = merged
        else:
            if "status" in rt.subresources:
                if "status" in old:
                    new["status"] = deepcopy(old["status"])
                else:
                    new.pop("status", None)
            nm = new.setdefault("metadata", {})
            # system fields are kept from the stored object
            for k in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
                      "generation", "namespace", "name"):
                if k in old["metadata"]:
                    nm[k] = old["metadata"][k]
                else:
                    nm.pop(k, None)
            if "managedFields" not in nm and "managedFields" in old["metadata"]:
                nm["managedFields"] = old["metadata"]["managedFields"]
            if old["metadata"].get("deletionTimestamp"):
                added = set(nm.get("finalizers") or []) - set(old["metadata"].get("finalizers") or [])
                if added:
                    raise errors.invalid(rt.kind, name, [{
                        "field": "metadata.finalizers", "reason": "FieldValueForbidden",
                        "message": "Forbidden: no new finalizers can be added if the object is "
                                   "being deleted, found new finalizers " + json.dumps(sorted(added))}],
                        rt.group)
            if not rt.crd:
                defaults.apply_defaults(rt.kind, rt.api_version, new)
                defaults.check_immutable(rt.kind, old, new)
            if rt.kind == "Service" and rt.group == "":
                ospec, nspec = old.get("spec") or {}, new.setdefault("spec", {})
                for k in ("clusterIP", "clusterIPs"):
                    if k in ospec and not nspec.get(k):
                        nspec[k] = ospec[k]
                _drop_type_dependent_fields(old, new)
                self._allocate_service(new)
        new["apiVersion"], new["kind"] = old["apiVersion"], old["kind"]
        new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        new = self._admit(rt, new, old, subresource)
        if rt.key == "persistentvolumeclaims" and subresource is None and self.validate:
            self._admit_claim_resize(old, new)
        if subresource is None and self.validate:
            for validate in self.update_validators:
                validate(rt, old, new)
        if field_manager and operation == "Update":
            new = self._track_update(rt, old, new, field_manager,
                                     subresource if subresource == "status" else None)
            if _strip_volatile(new) == _strip_volatile(old):
                new["metadata"]["managedFields"] = old["metadata"].get("managedFields")
                if new["metadata"]["managedFields"] is None:
                    new["metadata"].pop("managedFields")
        # generation: bumped when the spec (everything but metadata and status) changes
        if _body_spec(new) != _body_spec(old):
            new["metadata"]["generation"] = old["metadata"].get("generation", 1) + 1
        if _strip_volatile(new) == _strip_volatile(old) and \
                _managed_sans_time(new) == _managed_sans_time(old):
            # no-op: no new resourceVersion, no event (like kube-apiserver, a manager's
            # timestamp only moves when the object changes)
            NOOP_WRITE.set(True)
            return deepcopy(old)
        if dry_run:
            return new
        if old["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers") \
                and not (rt.kind == "Namespace" and (new.get("spec") or {}).get("finalizers")):
            new["metadata"]["resourceVersion"] = str(self.store.next_rv())
            self._remove(rt, new)
            return deepcopy(new)
        new["metadata"]["resourceVersion"] = str(self.store.next_rv())
        self.store.put(rt.key, new, old)
        if rt.key == _CRD_KEY:
            self._crd_created(new)
            self.registry.add_crd(new)
        return deepcopy(new)

    # -- scale subresource ------------------------------------------------------
    def _scale_of(self, rt: ResourceType, obj: Obj) -> Obj:
        sel = (obj.get("spec") or {}).get("selector") or {}
        sel_str = ",".join(f"{k}={v}" for k, v in (sel.get("matchLabels") or {}).items())
        return {
            "kind": "Scale", "apiVersion": "autoscaling/v1",
            "metadata": {"name": obj["metadata"]["name"], "namespace": obj["metadata"]["namespace"],
                         "uid": obj["metadata"]["uid"],
                         "resourceVersion": obj["metadata"]["resourceVersion"],
                         "creationTimestamp": obj["metadata"]["creationTimestamp"]},
            "spec": {"replicas": (obj.get("spec") or {}).get("replicas", 1)},
            "status": {"replicas": (obj.get("status") or {}).get("replicas", 0),
                       "selector": sel_str},
        }

    def get_scale(self, resource: str | ResourceType, namespace: str, name: str) -> Obj:
        rt = self.resource(resource)
        if "scale" not in rt.subresources:
            raise errors.ApiError(404, f"the server could not find the requested resource "
                                  f"({rt.key}/scale)", "NotFound")
        return self._scale_of(rt, self.get(rt, namespace, name, copy_=False))

    def _update_scale(self, rt: ResourceType, namespace: str | None, name: str, scale: Obj,
                      dry_run: bool) -> Obj:
        if "scale" not in rt.subresources:
            raise errors.ApiError(404, f"the server could not find the requested resource "
                                  f"({rt.key}/scale)", "NotFound")
        current = self.get(rt, namespace, name)
        replicas = (scale.get("spec") or {}).get("replicas")
        if not isinstance(replicas, int) or replicas < 0:
            raise errors.invalid("Scale", name, [{"field": "spec.replicas",
                                                  "reason": "FieldValueInvalid",
                                                  "message": f"Invalid value: {replicas!r}: must be "
                                                             "greater than or equal to 0"}],
                                 "autoscaling")
        want_rv = (scale.get("metadata") or {}).get("resourceVersion")
        if want_rv:
            current["metadata"]["resourceVersion"] = want_rv
        else:
            current["metadata"].pop("resourceVersion", None)
        current["spec"]["replicas"] = replicas
        obj = self._write(rt, self.store.get(rt.key, namespace or "", name), current, None,
                          dry_run, None)
        return self._scale_of(rt, obj)

    # -- patch ---------------------------------------------------------------
    def patch(self, resource: str | ResourceType, namespace: str | None, name: str, body: Any,
              patch_type: str = "merge", subresource: str | None = None,
              field_manager: str | None = None, force: bool = False, dry_run: bool = False) -> Obj:
        from kubesim import patching

        rt = self.resource(resource)
        ns = namespace if rt.namespaced else ""
        if rt.namespaced:
            self._require_namespace(rt, ns, creating=False)
        old = self.store.get(rt.key, ns or "", name)
        if subresource == "scale":
            base = self.get_scale(rt, ns or "", name)
        elif old is None:
            if patch_type == "apply" and not subresource:
                if not isinstance(body, dict):
                    raise errors.bad_request("apply patch must be an object")
                self._check_type(rt, body)
                if (body.get("metadata") or {}).get("name") not in (None, name):
                    raise errors.bad_request("the name of the object does not match the name "
                                             "on the URL")
                if not field_manager:
                    raise _field_manager_required(rt)
                applied = patching.server_side_apply(None, body, field_manager, force,
                                                     rt.api_version, rt.kind, now_rfc3339(),
                                                     **self._apply_kwargs(rt))
                applied.setdefault("metadata", {})["name"] = name
                return self.create(rt, applied, ns, dry_run=dry_run)
            raise errors.not_found(rt.key if rt.group else rt.plural, name)
        else:
            base = deepcopy(old)
        try:
            if patch_type == "merge":
                if not isinstance(body, dict):
                    raise errors.bad_request("merge patch must be a JSON object")
                new = patching.merge_patch(base, body)
            elif patch_type == "json":
                if not isinstance(body, list):
                    raise errors.bad_request("json patch must be a JSON array of operations")
                new = patching.json_patch(base, body)
            elif patch_type == "strategic":
                if rt.crd:
                    raise errors.ApiError(415, "strategic merge patch is not supported for custom "
                                          "resources; use a JSON merge patch or server-side apply",
                                          "UnsupportedMediaType")
                if not isinstance(body, dict):
                    raise errors.bad_request("strategic merge patch must be a JSON object")
                api_version = "autoscaling/v1" if subresource == "scale" else rt.api_version
                kind = "Scale" if subresource == "scale" else rt.kind
                new = patching.strategic_merge_patch(base, body, api_version, kind)
            elif patch_type == "apply":
                if not field_manager:
                    raise _field_manager_required(rt)
                if not isinstance(body, dict):
                    raise errors.bad_request("apply patch must be an object")
                if subresource != "status":
                    self._check_type(rt, body)
                new = patching.server_side_apply(base, body, field_manager, force, rt.api_version,
                                                 rt.kind, now_rfc3339(), conflict_with_updates=True,
                                                 subresource=subresource if subresource == "status" else None,
                                                 **self._apply_kwargs(rt))
            else:
                raise errors.ApiError(415, f"unsupported patch type {patch_type}",
                                      "UnsupportedMediaType")
        except patching.PatchError as exc:
            code = getattr(exc, "code", 422)
            if isinstance(exc, patching.ConflictError):  # each conflict a cause naming its field
                raise errors.ApiError(code, str(exc), "Conflict",
                                      {"name": name, "kind": rt.key if rt.group else rt.plural},
                                      causes=exc.causes) from None
            raise errors.ApiError(code, str(exc), errors.REASONS.get(code, "Invalid")) from None
        if not isinstance(new, dict):
            raise errors.ApiError(422, "the patch produced an object that is not a JSON object",
                                  "Invalid")
        if subresource == "scale":
            return self._update_scale(rt, ns, name, new, dry_run)
        # a patch carries the stored resourceVersion unless it explicitly sets one
        bm = body.get("metadata") if isinstance(body, dict) else None
        if not (isinstance(bm, dict) and bm.get("resourceVersion")) and patch_type != "json":
            new.setdefault("metadata", {})["resourceVersion"] = old["metadata"]["resourceVersion"]
        if patch_type == "json":
            new.setdefault("metadata", {})
            if new["metadata"].get("resourceVersion") is None:
                new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        return self._write(rt, old, new, subresource, dry_run, field_manager,
                           "Apply" if patch_type == "apply" else "Update")

    def _apply_kwargs(self, rt: ResourceType) -> dict[str, Any]:
        if not rt.crd:
            return {}
        try:
            model = self.crd_model(rt)
        except Exception:
            return {}
        list_keys = getattr(model, "list_keys", None)
        return {"list_keys": list_keys} if list_keys else {}

    # -- delete ----------------------------------------------------------------
    def delete(self, resource: str | ResourceType, namespace: str | None, name: str,
               propagation_policy: str | None = None, preconditions: Obj | None = None,
               dry_run: bool = False, grace_period_seconds: int | None = None) -> Obj:
        rt = self.resource(resource)
        ns = namespace if rt.namespaced else ""
        old = self.store.get(rt.key, ns or "", name)
        if old is None:
            raise errors.not_found(rt.key if rt.group else rt.plural, name)
        pre = preconditions or {}
        if pre.get("uid") and pre["uid"] != old["metadata"]["uid"]:
            raise errors.conflict(rt.key if rt.group else rt.plural, name,
                                  f"Precondition failed: UID in precondition: {pre['uid']}, "
                                  f"UID in object meta: {old['metadata']['uid']}")
        if pre.get("resourceVersion") and pre["resourceVersion"] != old["metadata"]["resourceVersion"]:
            raise errors.conflict(rt.key if rt.group else rt.plural, name,
                                  "Precondition failed: ResourceVersion in precondition: "
                                  f"{pre['resourceVersion']}, ResourceVersion in object meta: "
                                  f"{old['metadata']['resourceVersion']}")
        if propagation_policy not in (None, "Background", "Foreground", "Orphan"):
            raise errors.bad_request(f"unsupported propagationPolicy: {propagation_policy}")
        if dry_run:
            return deepcopy(old)
        finalizers = list(old["metadata"].get("finalizers") or [])
        if propagation_policy == "Foreground" and "foregroundDeletion" not in finalizers:
            finalizers.append("foregroundDeletion")
        if propagation_policy == "Orphan" and "orphan" not in finalizers:
            finalizers.append("orphan")
        if rt.key == _CRD_KEY:
            return self._delete_crd(old)
        is_ns = rt.key == "namespaces"
        if finalizers or is_ns:
            if old["metadata"].get("deletionTimestamp"):
                return deepcopy(old)  # already being deleted
            new = deepcopy(old)
            new["metadata"]["deletionTimestamp"] = now_rfc3339()
            new["metadata"]["deletionGracePeriodSeconds"] = 0
            if new["metadata"].get("generation"):  # as kube-apiserver's BeforeDelete
                new["metadata"]["generation"] += 1
            new["metadata"]["finalizers"] = finalizers
            if not finalizers:
                new["metadata"].pop("finalizers")
            if is_ns:
                new.setdefault("status", {})["phase"] = "Terminating"
            new["metadata"]["resourceVersion"] = str(self.store.next_rv())
            self.store.put(rt.key, new, old)
            return deepcopy(new)
        final = deepcopy(old)
        final["metadata"]["resourceVersion"] = str(self.store.next_rv())
        self._remove(rt, final)
        return final

    def _remove(self, rt: ResourceType, final: Obj) -> None:
        if rt.key == _CRD_KEY:
            self._unregister_crd(final["metadata"]["name"])
        self.store.remove(rt.key, final)
        if rt.kind == "Service" and rt.group == "":
            self._used_ips.discard((final.get("spec") or {}).get("clusterIP", ""))
        if rt.crd:
            self._crd_instance_gone(rt.crd)

    def delete_collection(self, resource: str | ResourceType, namespace: str | None,
                          label_selector: str | None = None, field_selector: str | None = None,
                          propagation_policy: str | None = None, dry_run: bool = False) -> Obj:
        rt = self.resource(resource)
        listed = self.list(rt, namespace, label_selector, field_selector, copy_=False)
        deleted = []
        for o in listed["items"]:
            try:
                deleted.append(self.delete(rt, o["metadata"].get("namespace"), o["metadata"]["name"],
                                           propagation_policy, dry_run=dry_run))
            except errors.ApiError as exc:
                if exc.code != 404:
                    raise
        return {"kind": rt.list_kind, "apiVersion": rt.api_version,
                "metadata": {"resourceVersion": str(self.store.rv)}, "items": deleted}

    # -- CRDs --------------------------------------------------------------------
    def _crd_created(self, crd: Obj) -> None:
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        expected = f"{names.get('plural')}.{spec.get('group')}"
        if crd["metadata"]["name"] != expected:
            raise errors.invalid("CustomResourceDefinition", crd["metadata"]["name"], [{
                "field": "metadata.name", "reason": "FieldValueInvalid",
                "message": f'Invalid value: "{crd["metadata"]["name"]}": must be spec.names.plural+'
                           f'"."+spec.group'}], "apiextensions.k8s.io")
        self._crd_models.pop(crd["metadata"]["name"], None)

    def _crd_established(self, crd: Obj) -> None:
        self.registry.add_crd(crd)
        old = self.store.get(_CRD_KEY, "", crd["metadata"]["name"])
        new = deepcopy(old)
        t = now_rfc3339()
        names = new["spec"]["names"]
        new["status"] = {
            "acceptedNames": {k: names[k] for k in ("plural", "singular", "kind", "listKind",
                                                     "shortNames", "categories") if k in names},
            "conditions": [
                {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
                 "message": "no conflicts found", "lastTransitionTime": t},
                {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                 "message": "the initial names have been accepted", "lastTransitionTime": t},
            ],
            "storedVersions": [v["name"] for v in new["spec"]["versions"] if v.get("storage")],
        }
        new["metadata"]["resourceVersion"] = str(self.store.next_rv())
        self.store.put(_CRD_KEY, new, old)

    def _crd_keys(self, name: str) -> set[str]:
        return {rt.key for rt in self.registry.all() if rt.crd == name}

    def _delete_crd(self, crd: Obj) -> Obj:
        """kube-apiserver's CRD deletion: with custom resources left (or other finalizers) the
        CRD is marked (deletionTimestamp, the finalizer customresourcecleanup.apiextensions.k8s.io,
        condition Terminating) and every instance is deleted, each honouring its own finalizers;
        creating instances is refused meanwhile. The CRD goes when the last instance has gone
        (_crd_instance_gone) and no other finalizer holds it."""
        name = crd["metadata"]["name"]
        if crd["metadata"].get("deletionTimestamp"):
            return deepcopy(crd)
        keys = self._crd_keys(name)
        if not crd["metadata"].get("finalizers") and not any(self.store.count(k) for k in keys):
            final = deepcopy(crd)
            final["metadata"]["resourceVersion"] = str(self.store.next_rv())
            self._remove(self.resource(_CRD_KEY), final)
            return final
        new = deepcopy(crd)
        meta = new["metadata"]
        meta["deletionTimestamp"] = now_rfc3339()
        meta["deletionGracePeriodSeconds"] = 0
        meta["finalizers"] = [f for f in meta.get("finalizers") or [] if f != CRD_CLEANUP_FINALIZER] \
            + [CRD_CLEANUP_FINALIZER]
        self._set_crd_terminating(new, "True", "InstanceDeletionInProgress",
                                  "CustomResource deletion is in progress")
        meta["resourceVersion"] = str(self.store.next_rv())
        self.store.put(_CRD_KEY, new, crd)
        for key in keys:
            rt = self.resource(key)
            for obj in list(self.store.items(key)):
                try:
                    self.delete(rt, obj["metadata"].get("namespace"), obj["metadata"]["name"])
                except errors.ApiError as exc:
                    if exc.code != 404:
                        raise
        self._crd_instance_gone(name)  # none left (none had finalizers): the CRD goes now
        return deepcopy(self.crd(name) or new)

    @staticmethod
    def _set_crd_terminating(crd: Obj, status: str, reason: str, message: str) -> None:
        conditions = [c for c in (crd.setdefault("status", {}).get("conditions") or [])
                      if c.get("type") != "Terminating"]
        conditions.append({"type": "Terminating", "status": status, "reason": reason,
                           "message": message, "lastTransitionTime": now_rfc3339()})
        crd["status"]["conditions"] = conditions

    def _crd_instance_gone(self, name: str) -> None:
        """A custom resource of CRD ``name`` went: a terminating CRD with none left loses its
        cleanup finalizer, and goes unless another finalizer holds it."""
        crd = self.crd(name)
        if crd is None or not crd["metadata"].get("deletionTimestamp") \
                or CRD_CLEANUP_FINALIZER not in (crd["metadata"].get("finalizers") or []) \
                or any(self.store.count(k) for k in self._crd_keys(name)):
            return
        new = deepcopy(crd)
        new["metadata"]["finalizers"] = [f for f in crd["metadata"]["finalizers"] if f != CRD_CLEANUP_FINALIZER]
        self._set_crd_terminating(new, "False", "InstanceDeletionCompleted", "removed all instances")
        new["metadata"]["resourceVersion"] = str(self.store.next_rv())
        if new["metadata"]["finalizers"]:
            self.store.put(_CRD_KEY, new, crd)
        else:
            new["metadata"].pop("finalizers")
            self._remove(self.resource(_CRD_KEY), new)

    def _unregister_crd(self, name: str) -> None:
        """The CRD ``name`` goes: its types stop being served; instances still stored (the
        cleanup finalizer removed by hand, as on kube-apiserver) go with it."""
        types = self.registry.remove_crd(name)
        for key in {rt.key for rt in types}:
            for obj in self.store.drop_resource(key):
                final = deepcopy(obj)
                final["metadata"]["resourceVersion"] = str(self.store.next_rv())
                self.store._emit("DELETED", key, final, None)
            self.store.close_watchers(key)
        self._crd_models.pop(name, None)

    # -- watch ---------------------------------------------------------------------
    def watch(self, resource: str | ResourceType, namespace: str | None = None,
              label_selector: str | None = None, field_selector: str | None = None,
              resource_version: str | None = None) -> tuple[Watcher, list[tuple[str, Obj]]]:
        """Register a watcher. Returns it with the events to send first.

        resourceVersion unset or "0": synthetic ADDED events for the current state.
        A specific rv: every change after it, or 410 Gone when it is too old."""
        rt = self.resource(resource)
        match = make_filter(label_selector, field_selector, rt.kind)
        ns = namespace if rt.namespaced else None
        watcher = Watcher(rt.key, ns, match)
        initial: list[tuple[str, Obj]] = []
        if resource_version in (None, "", "0"):
            for o in self.store.items(rt.key, ns):
                if match is None or match(o):
                    initial.append(("ADDED", o))
        else:
            try:
                rv = int(resource_version)
            except ValueError:
                raise errors.bad_request(f"invalid resource version: {resource_version}") from None
            history = self.store.history_since(rt.key, rv)
            if history is None:
                raise errors.ApiError(410, f"too old resource version: {rv} "
                                      f"({self.store.compacted_rv + 1})", "Expired")
            probe = Watcher(rt.key, ns, match)
            for et, o, old in history:
                probe.offer(et, o, old, 0)
            while not probe.queue.empty():
                initial.append(probe.queue.get_nowait())
        self.store.add_watcher(watcher)
        if rt.key != "customresourcedefinitions.apiextensions.k8s.io":
            watcher.api_version = rt.api_version  # type: ignore[attr-defined]
        return watcher, [(et, self._with_type(rt, o)) for et, o in initial]

    def stop_watch(self, watcher: Watcher) -> None:
        self.store.remove_watcher(watcher)
