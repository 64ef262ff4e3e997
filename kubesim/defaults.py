"""The handful of built-in defaults and immutability rules kube-apiserver applies
that clients and our controllers observe. Not exhaustive: only what matters to
the workloads torchdev renders (documented in README's kubesim section)."""
from __future__ import annotations

from typing import Any

from kubesim import errors

Obj = dict[str, Any]


def _pod_spec(spec: Obj) -> None:
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("securityContext", {})
    for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        image = str(c.get("image", ""))
        c.setdefault("imagePullPolicy", "Always" if image.endswith(":latest") or ":" not in
                     image.rsplit("/", 1)[-1] else "IfNotPresent")
        c.setdefault("terminationMessagePath", "/dev/termination-log")
        c.setdefault("terminationMessagePolicy", "File")
        for p in c.get("ports") or []:
            p.setdefault("protocol", "TCP")


def _template(spec: Obj) -> None:
    tmpl = spec.get("template")
    if isinstance(tmpl, dict) and isinstance(tmpl.get("spec"), dict):
        _pod_spec(tmpl["spec"])


def apply_defaults(kind: str, api_version: str, obj: Obj) -> None:
    spec = obj.get("spec")
    if kind == "Pod" and isinstance(spec, dict):
        _pod_spec(spec)
        obj.setdefault("status", {}).setdefault("phase", "Pending")
        obj["status"].setdefault("qosClass", "BestEffort")
    elif kind == "Service" and isinstance(spec, dict):
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        for p in spec.get("ports") or []:
            p.setdefault("protocol", "TCP")
            p.setdefault("targetPort", p.get("port"))
    elif kind == "StatefulSet" and isinstance(spec, dict):
        spec.setdefault("replicas", 1)
        spec.setdefault("podManagementPolicy", "OrderedReady")
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("updateStrategy", {"type": "RollingUpdate",
                                           "rollingUpdate": {"partition": 0}})
        spec.setdefault("persistentVolumeClaimRetentionPolicy",
                        {"whenDeleted": "Retain", "whenScaled": "Retain"})
        _template(spec)
    elif kind == "Deployment" and isinstance(spec, dict):
        spec.setdefault("replicas", 1)
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("progressDeadlineSeconds", 600)
        spec.setdefault("strategy", {"type": "RollingUpdate",
                                     "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}})
        _template(spec)
    elif kind == "Job" and api_version == "batch/v1" and isinstance(spec, dict):
        if "completions" not in spec and "parallelism" not in spec:
            spec["completions"] = 1
        spec.setdefault("parallelism", 1)
        spec.setdefault("backoffLimit", 6)
        spec.setdefault("suspend", False)
        spec.setdefault("completionMode", "NonIndexed")
        _template(spec)
    elif kind == "PersistentVolumeClaim" and isinstance(spec, dict):
        spec.setdefault("volumeMode", "Filesystem")
        obj.setdefault("status", {}).setdefault("phase", "Pending")
    elif kind == "Namespace":
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        obj.setdefault("status", {}).setdefault("phase", "Active")
    elif kind == "Secret":
        obj.setdefault("type", "Opaque")


def _forbid(kind: str, name: str, field: str, message: str) -> errors.ApiError:
    return errors.invalid(kind, name, [{"field": field, "reason": "FieldValueForbidden",
                                        "message": f"Forbidden: {message}"}])


_STS_MUTABLE = {"replicas", "ordinals", "template", "updateStrategy",
                "persistentVolumeClaimRetentionPolicy", "minReadySeconds"}
_POD_MUTABLE = {"activeDeadlineSeconds", "tolerations", "schedulingGates",
                "terminationGracePeriodSeconds"}


def check_immutable(kind: str, old: Obj, new: Obj) -> None:
    name = new["metadata"]["name"]
    o, n = old.get("spec") or {}, new.get("spec") or {}
    if kind == "StatefulSet":
        changed = sorted(k for k in set(o) | set(n) if k not in _STS_MUTABLE and o.get(k) != n.get(k))
        if changed:
            raise _forbid(kind, name, "spec", "updates to statefulset spec for fields other than "
                          "'replicas', 'ordinals', 'template', 'updateStrategy', "
                          "'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are "
                          f"forbidden (changed: {', '.join(changed)})")
    elif kind in ("Deployment", "ReplicaSet", "DaemonSet"):
        if o.get("selector") != n.get("selector"):
            raise _forbid(kind, name, "spec.selector", "field is immutable")
    elif kind == "Job":
        if o.get("selector") != n.get("selector") and o.get("selector"):
            raise _forbid(kind, name, "spec.selector", "field is immutable")
        if o.get("template") != n.get("template") and not o.get("suspend"):
            raise _forbid(kind, name, "spec.template", "field is immutable")
    elif kind == "Pod":
        def strip(spec: Obj) -> Obj:
            s = {k: v for k, v in spec.items() if k not in _POD_MUTABLE and k != "nodeName"}
            s["containers"] = [{k: v for k, v in c.items() if k != "image"}
                               for c in s.get("containers") or []]
            s["initContainers"] = [{k: v for k, v in c.items() if k != "image"}
                                   for c in s.get("initContainers") or []]
            return s
        if strip(o) != strip(n):
            raise _forbid(kind, name, "spec", "pod updates may not change fields other than "
                          "`spec.containers[*].image`, `spec.initContainers[*].image`, "
                          "`spec.activeDeadlineSeconds`, `spec.tolerations` (only additions "
                          "to existing tolerations), `spec.terminationGracePeriodSeconds`, "
                          "`spec.schedulingGates` (only removals)")
        if o.get("nodeName") and o.get("nodeName") != n.get("nodeName"):
            raise _forbid(kind, name, "spec.nodeName", "field is immutable once set")
        if len(n.get("schedulingGates") or []) > len(o.get("schedulingGates") or []):
            raise _forbid(kind, name, "spec.schedulingGates", "only deletion is allowed")
    elif kind == "PersistentVolumeClaim":
        def strip(spec: Obj) -> Obj:
            s = dict(spec)
            s.pop("resources", None)
            if not o.get("volumeName"):
                s.pop("volumeName", None)
            return s
        if strip(o) != strip(n):
            raise _forbid(kind, name, "spec", "spec is immutable after creation except "
                          "resources.requests and volumeAttributesClassName for bound claims")
    elif kind == "Service":
        if o.get("clusterIP") and n.get("clusterIP") and o["clusterIP"] != n["clusterIP"]:
            raise errors.invalid(kind, name, [{"field": "spec.clusterIP",
                                               "reason": "FieldValueInvalid",
                                               "message": "Invalid value: field is immutable"}])
