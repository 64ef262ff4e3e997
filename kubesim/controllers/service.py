"""Service controller: load balancers and endpoints.

The apiserver allocates clusterIP(s) and nodePorts at create time; this controller
fills them in only if a Service somehow lacks them (e.g. created with validation
off), gives LoadBalancer Services `status.loadBalancer.ingress[0].hostname`
`<name>-<namespace>.elb.kubesim.local` (field manager cloud-controller-manager; the apiserver
clears it, and the nodePorts it allocated, when the type changes away), and keeps an Endpoints object and an
EndpointSlice per selector Service in sync with the matching pods that have an IP
(ready ones as addresses, the others as notReadyAddresses, all of them as addresses
with publishNotReadyAddresses). Named targetPorts are resolved per pod.
"""
from __future__ import annotations

from typing import Any, Hashable, Iterable

from kubesim.controllers._util import (controller_ref, ignore_not_found, list_readonly,
                                       pod_deleting,
                                       pod_ready, pod_terminal, safe_encode, try_get)
from kubesim.controllers.base import Controller, register
from kubesim.errors import ApiError

Obj = dict[str, Any]
SLICE_RESOURCE = "endpointslices.discovery.k8s.io"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
MANAGED_BY = "endpointslice-controller.k8s.io"


def selects(service: Obj, pod: Obj) -> bool:
    sel = (service.get("spec") or {}).get("selector") or {}
    if not sel:
        return False
    labels = pod["metadata"].get("labels") or {}
    return all(labels.get(k) == v for k, v in sel.items())


def resolve_port(svc_port: Obj, pod: Obj) -> int | None:
    target = svc_port.get("targetPort", svc_port.get("port"))
    if isinstance(target, int):
        return target
    if isinstance(target, str) and target.isdigit():
        return int(target)
    for c in (pod.get("spec") or {}).get("containers") or []:
        for p in c.get("ports") or []:
            if p.get("name") == target and p.get("protocol", "TCP") == svc_port.get("protocol", "TCP"):
                return p.get("containerPort")
    return None


def endpoint_subsets(service: Obj, pods: Iterable[Obj]) -> list[Obj]:
    """v1 Endpoints subsets: pods grouped by their resolved port set."""
    spec = service.get("spec") or {}
    publish_all = bool(spec.get("publishNotReadyAddresses"))
    groups: dict[tuple, Obj] = {}
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        ip = (pod.get("status") or {}).get("podIP")
        if not ip or pod_terminal(pod) or (pod_deleting(pod) and not publish_all):
            continue
        ports = []
        for sp in spec.get("ports") or []:
            port = resolve_port(sp, pod)
            if port is None:
                continue
            entry = {"port": port, "protocol": sp.get("protocol", "TCP")}
            if sp.get("name"):
                entry["name"] = sp["name"]
            if sp.get("appProtocol"):
                entry["appProtocol"] = sp["appProtocol"]
            ports.append(entry)
        if spec.get("ports") and not ports:
            continue
        key = tuple(sorted((p.get("name", ""), p["port"], p["protocol"]) for p in ports))
        addr: Obj = {"ip": ip, "targetRef": {"kind": "Pod", "name": pod["metadata"]["name"],
                                             "namespace": pod["metadata"]["namespace"],
                                             "uid": pod["metadata"]["uid"]}}
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            addr["nodeName"] = node
        pspec = pod.get("spec") or {}
        if pspec.get("hostname") and pspec.get("subdomain") == service["metadata"]["name"]:
            addr["hostname"] = pspec["hostname"]
        group = groups.setdefault(key, {"ports": ports})
        which = "addresses" if publish_all or pod_ready(pod) else "notReadyAddresses"
        group.setdefault(which, []).append(addr)
    return [g for _, g in sorted(groups.items())]


@register
class ServiceController(Controller):
    name = "service"
    watches = ("services", "pods", "endpoints")

    def keys_for(self, resource: str, obj: Obj):
        meta = obj["metadata"]
        ns = meta.get("namespace", "")
        if resource in ("services", "endpoints"):
            return [(ns, meta["name"])]
        return []

    def on_event(self, event_type: str, resource: str, obj: Obj, old: Obj | None) -> None:
        if resource != "pods":
            return super().on_event(event_type, resource, obj, old)
        if old is not None and event_type == "MODIFIED" and not self._endpoint_change(old, obj):
            return
        ns = obj["metadata"].get("namespace", "")
        try:
            services = list_readonly(self.api, "services", ns)
        except ApiError:
            return
        for svc in services:
            if selects(svc, obj) or (old is not None and selects(svc, old)):
                self.enqueue((ns, svc["metadata"]["name"]))

    @staticmethod
    def _endpoint_change(old: Obj, new: Obj) -> bool:
        def view(p: Obj) -> tuple:
            st = p.get("status") or {}
            return (p["metadata"].get("labels"), st.get("podIP"), pod_ready(p), pod_terminal(p),
                    pod_deleting(p), (p.get("spec") or {}).get("nodeName"))
        return view(old) != view(new)

    async def reconcile(self, key: Hashable) -> float | None:
        ns, name = key  # type: ignore[misc]
        svc = try_get(self.api, "services", ns, name)
        if svc is None:
            ep = try_get(self.api, "endpoints", ns, name)
            if ep is not None and (ep["metadata"].get("labels") or {}).get(
                    "endpoints.kubernetes.io/managed-by") == "endpoint-controller":
                ignore_not_found(self.api.delete, "endpoints", ns, name)
            return None
        if svc["metadata"].get("deletionTimestamp"):
            return None
        svc = self._ensure_allocations(svc)
        self._load_balancer(svc)
        spec = svc.get("spec") or {}
        if not spec.get("selector") or spec.get("type") == "ExternalName":
            return None  # endpoints of selector-less services are the user's
        pods = [p for p in list_readonly(self.api, "pods", ns) if selects(svc, p)]
        subsets = endpoint_subsets(svc, pods)
        self._write_endpoints(svc, subsets)
        self._write_slice(svc, pods)
        return None

    # -- spec allocations (normally done by the apiserver) ------------------------------
    def _ensure_allocations(self, svc: Obj) -> Obj:
        spec = svc.get("spec") or {}
        if spec.get("type") == "ExternalName":
            return svc
        need_ip = not spec.get("clusterIP")
        need_ports = spec.get("type") in ("NodePort", "LoadBalancer") and any(
            not p.get("nodePort") for p in spec.get("ports") or [])
        if not need_ip and not need_ports:
            return svc
        new = dict(svc)
        new["spec"] = dict(spec)
        if need_ip:
            alloc = getattr(self.api, "allocate_cluster_ip", None)
            ip = alloc() if callable(alloc) else self._free_ip()
            new["spec"]["clusterIP"] = ip
            new["spec"]["clusterIPs"] = [ip]
        if need_ports:
            used = {p.get("nodePort") for s in self.api.list("services")["items"]
                    for p in (s.get("spec") or {}).get("ports") or []}
            port = 30000
            ports = []
            for p in spec.get("ports") or []:
                p = dict(p)
                if not p.get("nodePort"):
                    while port in used and port <= 32767:
                        port += 1
                    p["nodePort"] = port
                    used.add(port)
                ports.append(p)
            new["spec"]["ports"] = ports
        try:
            return self.api.update("services", new, namespace=svc["metadata"]["namespace"])
        except ApiError:
            return svc

    def _free_ip(self) -> str:
        used = {(s.get("spec") or {}).get("clusterIP") for s in self.api.list("services")["items"]}
        for n in range(11, 254 * 256):
            ip = f"10.96.{n // 256}.{n % 256}"
            if n % 256 not in (0, 255) and ip not in used:
                return ip
        raise RuntimeError("service IP range exhausted")

    def _load_balancer(self, svc: Obj) -> None:
        spec = svc.get("spec") or {}
        if spec.get("type") != "LoadBalancer":
            return
        meta = svc["metadata"]
        ingress = [{"hostname": f"{meta['name']}-{meta['namespace']}.elb.kubesim.local"}]
        status = dict(svc.get("status") or {})
        if (status.get("loadBalancer") or {}).get("ingress") == ingress:
            return
        status["loadBalancer"] = {"ingress": ingress}
        new = dict(svc)
        new["status"] = status
        try:
            # Under the cloud controller's manager, as in a cluster: the managedFields change is
            # what lets an operator's dependent predicate see the address arrive.
            self.api.update("services", new, namespace=meta["namespace"], subresource="status",
                            field_manager="cloud-controller-manager")
        except ApiError as exc:
            if exc.code not in (404, 409):
                raise

    # -- endpoints ---------------------------------------------------------------------------
    def _write_endpoints(self, svc: Obj, subsets: list[Obj]) -> None:
        meta = svc["metadata"]
        ns, name = meta["namespace"], meta["name"]
        labels = dict(meta.get("labels") or {})
        labels["endpoints.kubernetes.io/managed-by"] = "endpoint-controller"
        if (svc.get("spec") or {}).get("clusterIP") == "None":
            labels["service.kubernetes.io/headless"] = ""
        ep = try_get(self.api, "endpoints", ns, name)
        if ep is None:
            obj: Obj = {"apiVersion": "v1", "kind": "Endpoints",
                        "metadata": {"name": name, "namespace": ns, "labels": labels}}
            if subsets:
                obj["subsets"] = subsets
            try:
                self.api.create("endpoints", obj, namespace=ns)
            except ApiError as exc:
                if exc.code not in (403, 409):
                    raise
            return
        if (ep.get("subsets") or []) == subsets and (ep["metadata"].get("labels") or {}) == labels:
            return
        ep = dict(ep)
        ep["metadata"] = dict(ep["metadata"], labels=labels)
        if subsets:
            ep["subsets"] = subsets
        else:
            ep.pop("subsets", None)
        try:
            self.api.update("endpoints", ep, namespace=ns)
        except ApiError as exc:
            if exc.code not in (404, 409):
                raise

    def _write_slice(self, svc: Obj, pods: list[Obj]) -> None:
        if self.api.registry.find(SLICE_RESOURCE) is None:
            return
        meta = svc["metadata"]
        ns, name = meta["namespace"], meta["name"]
        spec = svc.get("spec") or {}
        publish_all = bool(spec.get("publishNotReadyAddresses"))
        endpoints = []
        slice_ports: list[Obj] | None = None
        for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
            ip = (pod.get("status") or {}).get("podIP")
            if not ip or pod_terminal(pod):
                continue
            ports = []
            for sp in spec.get("ports") or []:
                port = resolve_port(sp, pod)
                if port is not None:
                    entry = {"name": sp.get("name", ""), "port": port,
                             "protocol": sp.get("protocol", "TCP")}
                    if sp.get("appProtocol"):
                        entry["appProtocol"] = sp["appProtocol"]
                    ports.append(entry)
            if slice_ports is None:
                slice_ports = ports
            ready = pod_ready(pod) and not pod_deleting(pod)
            ep: Obj = {"addresses": [ip],
                       "conditions": {"ready": ready or (publish_all and not pod_deleting(pod)),
                                      "serving": pod_ready(pod),
                                      "terminating": pod_deleting(pod)},
                       "targetRef": {"kind": "Pod", "name": pod["metadata"]["name"],
                                     "namespace": ns, "uid": pod["metadata"]["uid"]}}
            node = (pod.get("spec") or {}).get("nodeName")
            if node:
                ep["nodeName"] = node
            pspec = pod.get("spec") or {}
            if pspec.get("hostname") and pspec.get("subdomain") == name:
                ep["hostname"] = pspec["hostname"]
            endpoints.append(ep)
        if slice_ports is None:
            slice_ports = [{"name": sp.get("name", ""), "port": sp.get("targetPort")
                            if isinstance(sp.get("targetPort"), int) else sp.get("port"),
                            "protocol": sp.get("protocol", "TCP")}
                           for sp in spec.get("ports") or []]
        slice_name = f"{name}-{safe_encode(meta['uid'].encode(), 5)}"
        labels = dict(meta.get("labels") or {})
        labels.update({SERVICE_NAME_LABEL: name,
                       "endpointslice.kubernetes.io/managed-by": MANAGED_BY})
        if spec.get("clusterIP") == "None":
            labels["service.kubernetes.io/headless"] = ""
        body: Obj = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                     "metadata": {"name": slice_name, "namespace": ns, "labels": labels,
                                  "ownerReferences": [controller_ref(svc, "v1", "Service")]},
                     "addressType": "IPv4", "endpoints": endpoints, "ports": slice_ports}
        current = try_get(self.api, SLICE_RESOURCE, ns, slice_name)
        try:
            if current is None:
                self.api.create(SLICE_RESOURCE, body, namespace=ns)
            elif any(current.get(k) != body[k] for k in ("endpoints", "ports", "addressType")) or \
                    current["metadata"].get("labels") != labels:
                body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                self.api.update(SLICE_RESOURCE, body, namespace=ns)
        except ApiError as exc:
            if exc.code not in (403, 404, 409, 422):
                raise
