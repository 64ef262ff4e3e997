"""Deployment controller (simplified: pods are owned by the Deployment directly).

Pods are named `<deployment>-<pod-template-hash>-<rand5>` and labelled
`pod-template-hash`, so `kubectl get pods` looks like the real thing, but no
ReplicaSet objects are created. Strategies: Recreate (old pods go first) and
RollingUpdate (maxSurge / maxUnavailable honoured). Failed pods are replaced.
Status carries replicas / updated / ready / available / unavailable counts and
the Available and Progressing conditions, which is what `kubectl rollout status`,
`kubectl wait --for=condition=Available` and kubernetes.core's `wait: true` read.
"""
from __future__ import annotations

import math
from typing import Any, Hashable

from kubesim.controllers._util import (delete_pod, controller_ref, fmt_time, get_condition, now,
                                       namespace_terminating, owned_pods, pod_active,
                                       pod_deleting, pod_from_template, pod_ready, pod_terminal,
                                       rand_suffix, selector_matches, set_condition,
                                       template_hash, try_get, write_status)
from kubesim.controllers.base import Controller, register
from kubesim.errors import ApiError

Obj = dict[str, Any]


def resolve_int_or_percent(value: Any, total: int, round_up: bool) -> int:
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    s = str(value)
    if s.endswith("%"):
        frac = float(s[:-1]) * total / 100.0
        return math.ceil(frac) if round_up else math.floor(frac)
    return int(s)


def surge_and_unavailable(spec: Obj) -> tuple[int, int]:
    replicas = spec.get("replicas", 1)
    ru = ((spec.get("strategy") or {}).get("rollingUpdate") or {})
    surge = resolve_int_or_percent(ru.get("maxSurge", "25%"), replicas, True)
    unavailable = resolve_int_or_percent(ru.get("maxUnavailable", "25%"), replicas, False)
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, unavailable


@register
class DeploymentController(Controller):
    name = "deployment"
    watches = ("deployments.apps", "pods")

    async def reconcile(self, key: Hashable) -> float | None:
        ns, name = key  # type: ignore[misc]
        d = try_get(self.api, "deployments.apps", ns, name)
        if d is None or d["metadata"].get("deletionTimestamp"):
            return None
        spec = d.get("spec") or {}
        replicas = spec.get("replicas", 1)
        uid = d["metadata"]["uid"]
        selector = spec.get("selector")
        template = spec.get("template") or {}
        collision = (d.get("status") or {}).get("collisionCount") or 0
        hash_ = template_hash(template, collision)
        pods = [p for p in owned_pods(self.api, ns, uid)
                if selector_matches(selector, p["metadata"].get("labels"))]
        # failed/succeeded pods of a Deployment are replaced
        for p in pods:
            if pod_terminal(p) and not pod_deleting(p):
                delete_pod(self.api, p)
        live = [p for p in pods if pod_active(p)]
        new = [p for p in live if (p["metadata"].get("labels") or {}).get("pod-template-hash") == hash_]
        old = [p for p in live if p not in new]
        terminating_old = [p for p in pods if pod_deleting(p)]
        requeue: float | None = None
        create_error = ""
        if not selector_matches(selector, (template.get("metadata") or {}).get("labels")):
            # the apiserver rejects this; without validation it would create pods forever
            create_error = "`selector` does not match template `labels`"
        elif not spec.get("paused") and not namespace_terminating(self.api, ns):
            strategy = (spec.get("strategy") or {}).get("type", "RollingUpdate")
            to_create = 0
            if strategy == "Recreate":
                if old:
                    for p in old:
                        delete_pod(self.api, p)
                    old = []
                elif not terminating_old:
                    to_create = replicas - len(new)
            else:
                surge, max_unavailable = surge_and_unavailable(spec)
                if len(new) < replicas:
                    room = replicas + surge - len(new) - len(old)
                    to_create = max(0, min(replicas - len(new), room))
                # scale old pods down as far as availability allows (k8s' maxScaledDown)
                min_available = replicas - max_unavailable
                new_unavailable = sum(1 for p in new if not pod_ready(p))
                budget = len(new) + len(old) - min_available - new_unavailable
                for p in sorted(old, key=_deletion_order):
                    if budget <= 0:
                        break
                    delete_pod(self.api, p)
                    old.remove(p)
                    budget -= 1
            if len(new) > replicas:
                for p in sorted(new, key=_deletion_order)[:len(new) - replicas]:
                    delete_pod(self.api, p)
                    new.remove(p)
            for _ in range(max(to_create, 0)):
                pod_name = f"{name}-{hash_}-{rand_suffix()}"
                pod = pod_from_template(template, pod_name, ns, {"pod-template-hash": hash_},
                                        controller_ref(d, "apps/v1", "Deployment"))
                try:
                    created = self.api.create("pods", pod, namespace=ns)
                    new.append(created)
                except ApiError as exc:
                    if exc.code == 409:
                        requeue = 0.05
                        continue
                    create_error = exc.message
                    requeue = 1.0
                    break
        if not self._update_status(d, hash_, new, old, create_error):
            return 0.05
        return requeue

    def _update_status(self, d: Obj, hash_: str, new: list[Obj], old: list[Obj],
                       create_error: str) -> bool:
        spec = d.get("spec") or {}
        replicas = spec.get("replicas", 1)
        pods = new + old
        ready = sum(1 for p in pods if pod_ready(p))
        available = ready
        updated = len(new)
        _, max_unavailable = surge_and_unavailable(spec)
        when = fmt_time(now(self.cluster))
        st = dict(d.get("status") or {})
        conds = st.get("conditions")
        rs_name = f"{d['metadata']['name']}-{hash_}"
        if available >= replicas - max_unavailable:
            conds = set_condition(conds, "Available", "True", "MinimumReplicasAvailable",
                                  "Deployment has minimum availability.", when, update_time=True)
        else:
            conds = set_condition(conds, "Available", "False", "MinimumReplicasUnavailable",
                                  "Deployment does not have minimum availability.", when,
                                  update_time=True)
        complete = updated == replicas and len(pods) == replicas and available == replicas
        if create_error:
            conds = set_condition(conds, "ReplicaFailure", "True", "FailedCreate", create_error,
                                  when, update_time=True)
        elif get_condition(d, "ReplicaFailure"):
            conds = [c for c in conds if c.get("type") != "ReplicaFailure"]
        if spec.get("paused"):
            conds = set_condition(conds, "Progressing", "Unknown", "DeploymentPaused",
                                  "Deployment is paused", when, update_time=True)
        elif complete:
            conds = set_condition(conds, "Progressing", "True", "NewReplicaSetAvailable",
                                  f'ReplicaSet "{rs_name}" has successfully progressed.', when,
                                  update_time=True)
        else:
            conds = set_condition(conds, "Progressing", "True", "ReplicaSetUpdated",
                                  f'ReplicaSet "{rs_name}" is progressing.', when,
                                  update_time=True)
        order = {"Available": 0, "Progressing": 1, "ReplicaFailure": 2}
        conds.sort(key=lambda c: order.get(c.get("type"), 3))
        st.update({
            "observedGeneration": d["metadata"].get("generation", 1),
            "replicas": len(pods),
            "updatedReplicas": updated,
            "readyReplicas": ready,
            "availableReplicas": available,
            "conditions": conds,
        })
        unavailable = max(replicas - available, 0)
        if unavailable:
            st["unavailableReplicas"] = unavailable
        else:
            st.pop("unavailableReplicas", None)
        # like the real API (omitempty), zero counts are left out
        for k in ("replicas", "updatedReplicas", "readyReplicas", "availableReplicas"):
            if not st[k]:
                st.pop(k)
        return write_status(self.api, "deployments.apps", d, st) is not None


def _deletion_order(pod: Obj) -> tuple:
    """Delete unscheduled, then not-running, then not-ready, then the newest first."""
    st = pod.get("status") or {}
    return (bool((pod.get("spec") or {}).get("nodeName")), st.get("phase") == "Running",
            pod_ready(pod), _neg(pod["metadata"].get("creationTimestamp", "")))


def _neg(s: str) -> tuple:
    return tuple(-ord(ch) for ch in s)
