"""The handful of built-in defaults and immutability rules kube-apiserver applies
that clients and our controllers observe. Not exhaustive: only what matters to
the workloads torchdev renders (documented in README's kubesim section)."""
from __future__ import annotations

import base64
from typing import Any

from kubesim import errors

Obj = dict[str, Any]


def _pod_spec(spec: Obj) -> None:
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("securityContext", {})
    spec.setdefault("enableServiceLinks", True)
    for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        c.setdefault("resources", {})
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


def _job(obj: Obj, spec: Obj) -> None:
    """The Job strategy's selector and labels (its uid), and restartPolicy's rule (checked
    before the pod template's defaults would set Always)."""
    tmpl = spec.get("template")
    if isinstance(tmpl, dict):
        tspec = tmpl.get("spec") if isinstance(tmpl.get("spec"), dict) else {}
        if tspec.get("restartPolicy") not in ("Never", "OnFailure"):
            raise errors.invalid("Job", obj.get("metadata", {}).get("name", ""), [{
                "field": "spec.template.spec.restartPolicy", "reason": "FieldValueRequired",
                "message": 'Required value: valid values: "OnFailure", "Never"'}], "batch")
    meta = obj.get("metadata") or {}
    uid, name = meta.get("uid"), meta.get("name")
    spec.setdefault("manualSelector", False)
    if uid and not spec["manualSelector"] and isinstance(tmpl, dict):
        spec.setdefault("selector", {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}})
        labels = tmpl.setdefault("metadata", {}).setdefault("labels", {})
        for key, value in (("batch.kubernetes.io/controller-uid", uid), ("batch.kubernetes.io/job-name", name),
                           ("controller-uid", uid), ("job-name", name)):
            labels.setdefault(key, value)
        if not meta.get("labels"):
            meta["labels"] = dict(labels)
    if not spec.get("podFailurePolicy"):
        spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")


def _network_policy(spec: Obj) -> None:
    spec.setdefault("policyTypes", ["Ingress"] + (["Egress"] if spec.get("egress") else []))
    for rule in (spec.get("ingress") or []) + (spec.get("egress") or []):
        for p in (rule.get("ports") or []) if isinstance(rule, dict) else []:
            if isinstance(p, dict):
                p.setdefault("protocol", "TCP")


def _secret_string_data(obj: Obj) -> None:
    """stringData is write-only: merged into data (base64), over data's keys."""
    string_data = obj.pop("stringData", None)
    if isinstance(string_data, dict) and string_data:
        data = obj.get("data") if isinstance(obj.get("data"), dict) else {}
        for k, v in string_data.items():
            data[k] = base64.b64encode(str(v).encode()).decode()
        obj["data"] = data


def apply_defaults(kind: str, api_version: str, obj: Obj) -> None:
    spec = obj.get("spec")
    if kind == "Pod" and isinstance(spec, dict):
        _pod_spec(spec)
        if spec.get("serviceAccountName") or spec.get("serviceAccount"):
            spec.setdefault("serviceAccountName", spec.get("serviceAccount"))
        else:
            spec["serviceAccountName"] = "default"  # the ServiceAccount admission
        spec.setdefault("serviceAccount", spec["serviceAccountName"])
        if not spec.get("priorityClassName"):  # the Priority admission, no global default class
            spec.setdefault("priority", 0)
            spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
        obj.setdefault("status", {}).setdefault("phase", "Pending")
        obj["status"].setdefault("qosClass", "BestEffort")
    elif kind == "NetworkPolicy" and isinstance(spec, dict):
        _network_policy(spec)
    elif kind == "Service" and isinstance(spec, dict):
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        if spec["type"] in ("NodePort", "LoadBalancer"):
            spec.setdefault("externalTrafficPolicy", "Cluster")
        for p in spec.get("ports") or []:
            p.setdefault("protocol", "TCP")
            p.setdefault("targetPort", p.get("port"))
    elif kind == "StatefulSet" and isinstance(spec, dict):
        for vct in spec.get("volumeClaimTemplates") or []:
            if isinstance(vct, dict):
                vct.setdefault("apiVersion", "v1")
                vct.setdefault("kind", "PersistentVolumeClaim")
                if isinstance(vct.get("spec"), dict):
                    vct["spec"].setdefault("volumeMode", "Filesystem")
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
        _job(obj, spec)
        _template(spec)
    elif kind == "PersistentVolumeClaim" and isinstance(spec, dict):
        spec.setdefault("volumeMode", "Filesystem")
        obj.setdefault("status", {}).setdefault("phase", "Pending")
    elif kind == "Namespace":
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        obj.setdefault("status", {}).setdefault("phase", "Active")
        meta = obj.setdefault("metadata", {})
        if meta.get("name"):
            meta["labels"] = {**(meta.get("labels") or {}), "kubernetes.io/metadata.name": meta["name"]}
    elif kind == "Secret":
        obj.setdefault("type", "Opaque")
        _secret_string_data(obj)


def _forbid(kind: str, name: str, field: str, message: str) -> errors.ApiError:
    return errors.invalid(kind, name, [{"field": field, "reason": "FieldValueForbidden",
                                        "message": f"Forbidden: {message}"}])


_STS_MUTABLE = {"replicas", "ordinals", "template", "updateStrategy",
                "persistentVolumeClaimRetentionPolicy", "minReadySeconds"}
_POD_MUTABLE = {"activeDeadlineSeconds", "tolerations", "schedulingGates",
                "terminationGracePeriodSeconds"}


# What a suspended Job that never started may change in its template (kube-apiserver's
# mutable scheduling directives, used by Kueue).
_JOB_SCHEDULING = {"nodeSelector", "affinity", "tolerations", "schedulingGates"}


def _job_template_fixed(job: Obj, suspended_unstarted: bool) -> Any:
    tmpl = (job.get("spec") or {}).get("template") or {}
    if not suspended_unstarted:
        return tmpl
    meta = {k: v for k, v in (tmpl.get("metadata") or {}).items() if k not in ("labels", "annotations")}
    spec = {k: v for k, v in (tmpl.get("spec") or {}).items() if k not in _JOB_SCHEDULING}
    return {**tmpl, "metadata": meta, "spec": spec}


def check_immutable(kind: str, old: Obj, new: Obj) -> None:
    name = new["metadata"]["name"]
    o, n = old.get("spec") or {}, new.get("spec") or {}
    if kind in ("Secret", "ConfigMap") and old.get("immutable"):
        if not new.get("immutable"):
            raise _forbid(kind, name, "immutable", "field is immutable when `immutable` is set")
        for field in ("data", "binaryData") if kind == "ConfigMap" else ("data",):
            if (old.get(field) or {}) != (new.get(field) or {}):
                raise _forbid(kind, name, field, "field is immutable when `immutable` is set")
    elif kind in ("RoleBinding", "ClusterRoleBinding") and old.get("roleRef") != new.get("roleRef"):
        raise errors.invalid(kind, name, [{"field": "roleRef", "reason": "FieldValueInvalid",
                                           "message": "Invalid value: cannot change roleRef"}],
                             "rbac.authorization.k8s.io")
    elif kind == "StatefulSet":
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
        loose = bool(o.get("suspend")) and not (old.get("status") or {}).get("startTime")
        if _job_template_fixed(old, loose) != _job_template_fixed(new, loose):
            raise errors.invalid(kind, name, [{"field": "spec.template", "reason": "FieldValueInvalid",
                                               "message": "Invalid value: field is immutable"}], "batch")
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
        # ValidatePersistentVolumeClaimUpdate: only a bound claim's storage request may change
        # (an unbound one's is immutable as the rest); the volume name may be set once.
        bound = (old.get("status") or {}).get("phase") == "Bound"

        def strip(spec: Obj) -> Obj:
            s = dict(spec)
            if bound:
                requests = dict((s.get("resources") or {}).get("requests") or {})
                requests.pop("storage", None)
                s["resources"] = dict(s.get("resources") or {}, requests=requests)
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
