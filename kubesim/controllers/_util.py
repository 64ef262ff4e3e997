"""Helpers shared by the built-in controllers (not a controller itself)."""
from __future__ import annotations

import copy
import hashlib
import json
import random
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping

from kubesim.errors import ApiError
from kubeselect import LabelSelector

Obj = dict[str, Any]

# k8s.io/apimachinery/pkg/util/rand: no vowels, no confusable characters
_ALPHANUMS = "bcdfghjklmnpqrstvwxz2456789"


def now(cluster: Any) -> datetime:
    fn = getattr(cluster, "now", None)
    if callable(fn):
        t = fn()
        if isinstance(t, datetime):
            return t if t.tzinfo else t.replace(tzinfo=timezone.utc)
    return datetime.now(timezone.utc)


def fmt_time(t: datetime) -> str:
    return t.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(s: str | None) -> datetime | None:
    if not s:
        return None
    try:
        return datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        return None


def rand_suffix(n: int = 5) -> str:
    return "".join(random.choice(_ALPHANUMS) for _ in range(n))


def safe_encode(data: bytes, n: int = 10) -> str:
    h = int.from_bytes(hashlib.sha256(data).digest()[:8], "big")
    out = []
    for _ in range(n):
        h, r = divmod(h, len(_ALPHANUMS))
        out.append(_ALPHANUMS[r])
    return "".join(out)


def template_hash(template: Any, collision_count: int = 0) -> str:
    """A stable 10-character hash of a pod template (pod-template-hash, revision hashes)."""
    data = json.dumps(template, sort_keys=True, separators=(",", ":")).encode()
    if collision_count:
        data += str(collision_count).encode()
    return safe_encode(data)


def try_get(api: Any, resource: str, namespace: str | None, name: str) -> Obj | None:
    try:
        return api.get(resource, namespace, name)
    except ApiError as exc:
        if exc.code == 404:
            return None
        raise


def delete_pod(api, pod: Obj) -> None:
    """Delete this very pod (uid precondition); gone already or replaced meanwhile is fine."""
    try:
        api.delete("pods", pod["metadata"].get("namespace"), pod["metadata"]["name"],
                   preconditions={"uid": pod["metadata"]["uid"]})
    except ApiError as exc:
        if exc.code not in (404, 409):
            raise


def ignore_not_found(fn, *args, **kwargs) -> Any:
    try:
        return fn(*args, **kwargs)
    except ApiError as exc:
        if exc.code == 404:
            return None
        raise


def controller_ref(owner: Obj, api_version: str, kind: str) -> Obj:
    return {"apiVersion": api_version, "kind": kind, "name": owner["metadata"]["name"],
            "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}


def controlled_by(obj: Obj, uid: str) -> bool:
    return any(r.get("uid") == uid and r.get("controller")
               for r in obj.get("metadata", {}).get("ownerReferences") or [])


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str] | None) -> bool:
    """metav1.LabelSelector semantics. None matches nothing; {} matches everything."""
    if selector is None:
        return False
    return LabelSelector.from_dict(selector).matches(labels)


def get_condition(obj: Obj, type_: str) -> Obj | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return c
    return None


def condition_true(obj: Obj, type_: str) -> bool:
    c = get_condition(obj, type_)
    return bool(c and c.get("status") == "True")


def set_condition(conditions: list[Obj] | None, type_: str, status: str, reason: str = "",
                  message: str = "", when: str = "", probe: bool = False,
                  update_time: bool = False) -> list[Obj]:
    """A new conditions list with `type_` set; transition time kept when status is unchanged."""
    out = [dict(c) for c in conditions or []]
    for c in out:
        if c.get("type") == type_:
            if c.get("status") != status:
                c["lastTransitionTime"] = when
                if update_time:
                    c["lastUpdateTime"] = when
            elif update_time and (c.get("reason") != reason or c.get("message") != message):
                c["lastUpdateTime"] = when
            c["status"] = status
            _set_or_drop(c, "reason", reason)
            _set_or_drop(c, "message", message)
            return out
    c = {"type": type_, "status": status}
    if probe:
        c["lastProbeTime"] = None
    if update_time:
        c["lastUpdateTime"] = when
    c["lastTransitionTime"] = when
    _set_or_drop(c, "reason", reason)
    _set_or_drop(c, "message", message)
    out.append(c)
    return out


def _set_or_drop(d: Obj, k: str, v: str) -> None:
    if v:
        d[k] = v
    else:
        d.pop(k, None)


# -- pods ------------------------------------------------------------------------
def pod_terminal(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def pod_deleting(pod: Obj) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


def pod_active(pod: Obj) -> bool:
    return not pod_terminal(pod) and not pod_deleting(pod)


def pod_ready(pod: Obj) -> bool:
    st = pod.get("status") or {}
    return st.get("phase") == "Running" and condition_true(pod, "Ready")


def namespace_terminating(api: Any, namespace: str) -> bool:
    ns = try_get(api, "namespaces", None, namespace)
    return ns is None or bool(ns["metadata"].get("deletionTimestamp"))


def annotation(obj: Obj, key: str) -> str | None:
    return (obj.get("metadata", {}).get("annotations") or {}).get(key)


def pod_from_template(template: Obj | None, name: str, namespace: str,
                      extra_labels: Mapping[str, str] | None = None,
                      owner_ref: Obj | None = None,
                      extra_annotations: Mapping[str, str] | None = None) -> Obj:
    template = copy.deepcopy(template or {})
    tmeta = template.get("metadata") or {}
    labels = dict(tmeta.get("labels") or {})
    labels.update(extra_labels or {})
    annotations = dict(tmeta.get("annotations") or {})
    annotations.update(extra_annotations or {})
    meta: Obj = {"name": name, "namespace": namespace, "labels": labels}
    if annotations:
        meta["annotations"] = annotations
    if tmeta.get("finalizers"):
        meta["finalizers"] = list(tmeta["finalizers"])
    if owner_ref:
        meta["ownerReferences"] = [owner_ref]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": template.get("spec") or {"containers": []}}


def list_readonly(api: Any, resource: str, namespace: str | None = None, **kw: Any) -> list[Obj]:
    """Items of a list without the deep copy: the caller must not mutate them (the store
    never mutates stored objects in place, so they stay valid snapshots)."""
    try:
        return api.list(resource, namespace, copy_=False, **kw)["items"]
    except TypeError:
        return api.list(resource, namespace, **kw)["items"]


def owned_pods(api: Any, namespace: str, owner_uid: str) -> list[Obj]:
    """Pods controlled by owner_uid (read-only snapshots)."""
    return [p for p in list_readonly(api, "pods", namespace) if controlled_by(p, owner_uid)]


def write_status(api: Any, resource: str, obj: Obj, status: Obj, field_manager: str | None = None) -> Obj | None:
    """PUT the status subresource when it differs; None on 404/409 (retry later).
    ``field_manager``: record the write in managedFields as kube-apiserver does (an Update entry
    of the status subresource whose fields change when status fields appear or go)."""
    if obj.get("status") == status:
        return obj
    new = dict(obj)
    new["status"] = status
    try:
        return api.update(resource, new, namespace=obj["metadata"].get("namespace"),
                          subresource="status", field_manager=field_manager)
    except ApiError as exc:
        if exc.code in (404, 409):
            return None
        raise


def names(objs: Iterable[Obj]) -> list[str]:
    return [o["metadata"]["name"] for o in objs]


# kube-controller-manager's event recorder (client-go tools/record EventCorrelator): up to this
# many Events of one object with the same source, type and reason but different messages, then
# one "(combined from similar events): ..." Event whose count rises.
_SIMILAR_EVENTS = 10


def record_warning(api: Any, cluster: Any, obj: Obj, api_version: str, component: str, reason: str,
                   message: str) -> None:
    """A Warning Event about ``obj`` as a controller's event recorder writes it: the same message
    again raises count and lastTimestamp; past _SIMILAR_EVENTS different messages (a Job's pods
    have random names), one aggregate Event carries the newest message.  Best effort."""
    meta = obj["metadata"]
    ns = meta["namespace"]
    try:
        similar = [e for e in api.list("events", ns, field_selector=f"involvedObject.name={meta['name']},"
                                                                    f"reason={reason}")["items"]
                   if (e.get("involvedObject") or {}).get("uid") == meta["uid"]
                   and (e.get("source") or {}).get("component") == component]
        name = f"{meta['name']}.{template_hash([meta['uid'], message])}"
        if not any(e["metadata"]["name"] == name for e in similar) and len(similar) >= _SIMILAR_EVENTS:
            name = f"{meta['name']}.{template_hash([meta['uid'], component, reason])}"
            message = f"(combined from similar events): {message}"
        ts = fmt_time(now(cluster))
        old = next((e for e in similar if e["metadata"]["name"] == name), None)
        if old is not None:
            api.update("events", dict(old, count=int(old.get("count") or 1) + 1, lastTimestamp=ts, message=message),
                       namespace=ns)
            return
        api.create("events", {
            "apiVersion": "v1", "kind": "Event", "metadata": {"name": name, "namespace": ns},
            "involvedObject": {"apiVersion": api_version, "kind": obj["kind"], "name": meta["name"],
                               "namespace": ns, "uid": meta["uid"], "resourceVersion": meta.get("resourceVersion")},
            "reason": reason, "message": message, "type": "Warning",
            "source": {"component": component}, "reportingComponent": component,
            "firstTimestamp": ts, "lastTimestamp": ts, "count": 1}, namespace=ns)
    except ApiError:  # events are best effort
        pass
