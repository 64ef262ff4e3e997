"""PersistentVolume controller + a CSI provisioner for every StorageClass.

A Pending claim whose class exists (spec.storageClassName, or the default class -
annotation storageclass.kubernetes.io/is-default-class: "true" - when the field is
absent) gets a PV `pvc-<claim uid>` (capacity = request, access modes, claimRef, class,
csi.driver = the class provisioner, reclaim policy from the class, default Delete) and
is bound: spec.volumeName, status.phase Bound, capacity, accessModes. Without a class
(or with storageClassName "" and no matching Available PV) it stays Pending and binds
when the class appears. volumeBindingMode WaitForFirstConsumer: provisioned once a pod
using the claim is scheduled (the PV gets that node's hostname affinity). Pre-created
PVs (static provisioning) are bound when they fit. When a claim goes away its PV is
deleted (reclaim policy Delete) or Released (Retain). Expansion: a bound claim whose
request grows gets the new capacity (the API server lets a request grow only when the class
has allowVolumeExpansion: ApiServer._admit_claim_resize).
"""
from __future__ import annotations

from typing import Any, Hashable

from kubesim.controllers._util import ignore_not_found, try_get
from kubesim.controllers.base import Controller, register
from kubesim.errors import ApiError
from kubesim.quantity import parse_quantity

Obj = dict[str, Any]
SC = "storageclasses.storage.k8s.io"
DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"
SELECTED_NODE = "volume.kubernetes.io/selected-node"


def default_storage_class(api: Any) -> Obj | None:
    try:
        classes = api.list(SC)["items"]
    except ApiError:
        return None
    defaults = [c for c in classes
                if (c["metadata"].get("annotations") or {}).get(DEFAULT_CLASS_ANNOTATION) == "true"]
    if not defaults:
        return None
    # like the DefaultStorageClass admission plugin: the newest default wins
    defaults.sort(key=lambda c: (c["metadata"].get("creationTimestamp", ""), c["metadata"]["name"]))
    return defaults[-1]


def storage_class_for(api: Any, pvc: Obj) -> Obj | None:
    """The claim's StorageClass object (None: no class, or it does not exist)."""
    spec = pvc.get("spec") or {}
    name = spec.get("storageClassName")
    if name is None:
        pv_name = spec.get("volumeName")
        if pv_name:
            pv = try_get(api, "persistentvolumes", None, pv_name)
            name = ((pv or {}).get("spec") or {}).get("storageClassName")
        if not name:
            return default_storage_class(api)
    if not name:
        return None
    return try_get(api, SC, None, name)


def _request(pvc: Obj) -> str | None:
    return (((pvc.get("spec") or {}).get("resources") or {}).get("requests") or {}).get("storage")


@register
class PersistentVolumeController(Controller):
    name = "pvc"
    watches = ("persistentvolumeclaims", SC, "persistentvolumes", "pods")

    def keys_for(self, resource: str, obj: Obj):
        meta = obj["metadata"]
        if resource == "persistentvolumeclaims":
            return [(meta.get("namespace", ""), meta["name"])]
        if resource == "pods":
            spec = obj.get("spec") or {}
            if not spec.get("nodeName"):
                return []
            ns = meta.get("namespace", "")
            return [(ns, v["persistentVolumeClaim"]["claimName"]) for v in spec.get("volumes") or []
                    if (v.get("persistentVolumeClaim") or {}).get("claimName")]
        if resource == "persistentvolumes":
            ref = (obj.get("spec") or {}).get("claimRef") or {}
            if ref.get("name"):
                return [(ref.get("namespace", ""), ref["name"])]
            return self._pending_keys()  # a new Available PV may fit a pending claim
        if resource == SC:
            return self._pending_keys()
        return []

    def _pending_keys(self) -> list[tuple[str, str]]:
        try:
            items = self.api.list("persistentvolumeclaims")["items"]
        except ApiError:
            return []
        return [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in items
                if (p.get("status") or {}).get("phase") != "Bound"]

    async def reconcile(self, key: Hashable) -> float | None:
        ns, name = key  # type: ignore[misc]
        pvc = try_get(self.api, "persistentvolumeclaims", ns, name)
        if pvc is None:
            self._reclaim(ns, name, None)
            return None
        if pvc["metadata"].get("deletionTimestamp"):
            return None
        self._reclaim(ns, name, pvc["metadata"]["uid"])
        spec = pvc.get("spec") or {}
        phase = (pvc.get("status") or {}).get("phase")
        if spec.get("volumeName"):
            pv = try_get(self.api, "persistentvolumes", None, spec["volumeName"])
            if pv is None:
                if phase == "Bound":
                    self._set_pvc_status(pvc, {**(pvc.get("status") or {}), "phase": "Lost"})
                return None
            self._complete_binding(pvc, pv)
            return None
        sc_name = spec.get("storageClassName")
        sc = storage_class_for(self.api, pvc)
        pv = self._find_static(pvc, sc_name if sc_name is not None else (sc or {}).get(
            "metadata", {}).get("name", ""))
        if pv is None:
            if sc is None or sc_name == "":
                self._set_pvc_status(pvc, {**(pvc.get("status") or {}), "phase": "Pending"})
                return None
            node = None
            if sc.get("volumeBindingMode") == "WaitForFirstConsumer":
                node = self._consumer_node(pvc)
                if node is None:
                    self._set_pvc_status(pvc, {**(pvc.get("status") or {}), "phase": "Pending"})
                    return None
            pv = self._provision(pvc, sc, node)
            if pv is None:
                return 0.1
        self._bind(pvc, pv)
        return None

    # -- provisioning and binding ----------------------------------------------------
    def _find_static(self, pvc: Obj, sc_name: str) -> Obj | None:
        try:
            want = parse_quantity(_request(pvc) or "0")
        except ValueError:
            return None
        modes = set((pvc.get("spec") or {}).get("accessModes") or [])
        uid = pvc["metadata"]["uid"]
        best = None
        for pv in self.api.list("persistentvolumes")["items"]:
            pspec = pv.get("spec") or {}
            ref = pspec.get("claimRef")
            if ref and not (ref.get("uid") in (None, uid) and ref.get("name") == pvc["metadata"]["name"]
                            and ref.get("namespace") == pvc["metadata"]["namespace"]):
                continue
            if (pv.get("status") or {}).get("phase") not in (None, "Available", "Pending") and not ref:
                continue
            if (pspec.get("storageClassName") or "") != (sc_name or ""):
                continue
            if not modes <= set(pspec.get("accessModes") or []):
                continue
            try:
                cap = parse_quantity((pspec.get("capacity") or {}).get("storage", "0"))
            except ValueError:
                continue
            if cap < want:
                continue
            if ref:  # pre-bound to this claim
                return pv
            if best is None or cap < best[0]:
                best = (cap, pv)
        return best[1] if best else None

    def _consumer_node(self, pvc: Obj) -> str | None:
        ann = (pvc["metadata"].get("annotations") or {}).get(SELECTED_NODE)
        if ann:
            return ann
        ns, name = pvc["metadata"]["namespace"], pvc["metadata"]["name"]
        for pod in self.api.list("pods", ns)["items"]:
            spec = pod.get("spec") or {}
            if spec.get("nodeName") and any(
                    (v.get("persistentVolumeClaim") or {}).get("claimName") == name
                    for v in spec.get("volumes") or []):
                return spec["nodeName"]
        return None

    def _provision(self, pvc: Obj, sc: Obj, node: str | None) -> Obj | None:
        meta, spec = pvc["metadata"], pvc.get("spec") or {}
        pv_name = f"pvc-{meta['uid']}"
        existing = try_get(self.api, "persistentvolumes", None, pv_name)
        if existing is not None:
            return existing
        provisioner = sc.get("provisioner") or "kubesim.io/hostpath"
        pv: Obj = {
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": pv_name,
                         "annotations": {"pv.kubernetes.io/provisioned-by": provisioner,
                                         "volume.kubernetes.io/provisioner-deletion-secret-name": "",
                                         "volume.kubernetes.io/provisioner-deletion-secret-namespace": ""}},
            "spec": {
                "capacity": {"storage": _request(pvc) or "1Gi"},
                "accessModes": list(spec.get("accessModes") or ["ReadWriteOnce"]),
                "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                             "namespace": meta["namespace"], "name": meta["name"],
                             "uid": meta["uid"], "resourceVersion": meta["resourceVersion"]},
                "persistentVolumeReclaimPolicy": sc.get("reclaimPolicy") or "Delete",
                "storageClassName": sc["metadata"]["name"],
                "volumeMode": spec.get("volumeMode") or "Filesystem",
                "csi": {"driver": provisioner, "volumeHandle": f"vol-{meta['uid'].replace('-', '')[:17]}",
                        "fsType": (sc.get("parameters") or {}).get("csi.storage.k8s.io/fstype", "ext4"),
                        "volumeAttributes": {"storage.kubernetes.io/csiProvisionerIdentity":
                                             f"kubesim-{provisioner}"}},
            },
        }
        if sc.get("mountOptions"):
            pv["spec"]["mountOptions"] = list(sc["mountOptions"])
        if node:
            pv["spec"]["nodeAffinity"] = {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}
        try:
            created = self.api.create("persistentvolumes", pv)
        except ApiError as exc:
            if exc.code == 409:
                return try_get(self.api, "persistentvolumes", None, pv_name)
            raise
        return created

    def _bind(self, pvc: Obj, pv: Obj) -> None:
        meta = pvc["metadata"]
        pspec = pv.get("spec") or {}
        ref = pspec.get("claimRef") or {}
        if ref.get("uid") != meta["uid"]:
            new_pv = dict(pv)
            new_pv["spec"] = dict(pspec, claimRef={
                "apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": meta["namespace"],
                "name": meta["name"], "uid": meta["uid"], "resourceVersion": meta["resourceVersion"]})
            try:
                pv = self.api.update("persistentvolumes", new_pv)
            except ApiError as exc:
                if exc.code in (404, 409):
                    return
                raise
        new = dict(pvc)
        new["metadata"] = dict(meta)
        ann = dict(meta.get("annotations") or {})
        ann.setdefault("pv.kubernetes.io/bind-completed", "yes")
        if pspec.get("csi") and (pv["metadata"].get("annotations") or {}).get(
                "pv.kubernetes.io/provisioned-by"):
            ann.setdefault("pv.kubernetes.io/bound-by-controller", "yes")
            prov = pv["metadata"]["annotations"]["pv.kubernetes.io/provisioned-by"]
            ann.setdefault("volume.beta.kubernetes.io/storage-provisioner", prov)
            ann.setdefault("volume.kubernetes.io/storage-provisioner", prov)
        new["metadata"]["annotations"] = ann
        new["spec"] = dict(pvc.get("spec") or {}, volumeName=pv["metadata"]["name"])
        try:
            pvc = self.api.update("persistentvolumeclaims", new, namespace=meta["namespace"])
        except ApiError as exc:
            if exc.code in (404, 409):
                return
            raise
        self._complete_binding(pvc, pv)

    def _complete_binding(self, pvc: Obj, pv: Obj) -> None:
        """PV phase Bound; claim status Bound with capacity (expanded when allowed)."""
        pspec = pv.get("spec") or {}
        if (pv.get("status") or {}).get("phase") != "Bound":
            self._set_status("persistentvolumes", pv, {"phase": "Bound"})
        capacity = dict(pspec.get("capacity") or {})
        req = _request(pvc)
        if req is not None:
            try:
                grow = parse_quantity(req) > parse_quantity(capacity.get("storage", "0"))
            except ValueError:
                grow = False
            if grow:
                sc = storage_class_for(self.api, pvc)
                if sc and sc.get("allowVolumeExpansion"):
                    capacity["storage"] = req
                    new_pv = dict(pv)
                    new_pv["spec"] = dict(pspec, capacity=capacity)
                    try:
                        self.api.update("persistentvolumes", new_pv)
                    except ApiError as exc:
                        if exc.code not in (404, 409):
                            raise
        status = dict(pvc.get("status") or {})
        status.update({"phase": "Bound", "capacity": capacity,
                       "accessModes": list(pspec.get("accessModes") or [])})
        self._set_pvc_status(pvc, status)

    def _reclaim(self, ns: str, name: str, current_uid: str | None) -> None:
        """PVs whose claim (ns/name, another uid) is gone: Delete or Release them."""
        for pv in self.api.list("persistentvolumes")["items"]:
            ref = (pv.get("spec") or {}).get("claimRef") or {}
            if ref.get("namespace") != ns or ref.get("name") != name:
                continue
            if current_uid is not None and ref.get("uid") in (None, current_uid):
                continue
            policy = (pv.get("spec") or {}).get("persistentVolumeReclaimPolicy") or "Retain"
            if policy == "Delete":
                self._delete_pv(pv)
            elif (pv.get("status") or {}).get("phase") != "Released":
                self._set_status("persistentvolumes", pv, {"phase": "Released"})

    def _delete_pv(self, pv: Obj) -> None:
        ignore_not_found(self.api.delete, "persistentvolumes", None, pv["metadata"]["name"])

    def _set_pvc_status(self, pvc: Obj, status: Obj) -> None:
        self._set_status("persistentvolumeclaims", pvc, status)

    def _set_status(self, resource: str, obj: Obj, status: Obj) -> None:
        if obj.get("status") == status:
            return
        new = dict(obj)
        new["status"] = status
        try:
            self.api.update(resource, new, namespace=obj["metadata"].get("namespace"),
                            subresource="status")
        except ApiError as exc:
            if exc.code not in (404, 409):
                raise
