"""default-scheduler: binds pending pods to nodes.

Filters, in the order kube-scheduler runs its plugins (the first failing one gives a
node's reason): NodeUnschedulable, TaintToleration (NoSchedule/NoExecute), NodeAffinity
(nodeSelector + requiredDuringScheduling node affinity), NodeResourcesFit (cpu, memory,
nvidia.com/gpu and every other resource the pod requests, plus the pod count). Pods that
reference a missing PVC or an unbound Immediate-mode PVC wait, like VolumeBinding does.
Among feasible nodes the least allocated wins (ties: by name).

The fit logic is pure functions of dicts (`pod_requests`, `filter_node`, `choose_node`)
so that it can be tested without a server. The controller itself works on a single key:
every relevant change (a pending pod, a pod freeing resources, a node change) enqueues
one scheduling pass over all pending pods, in priority then creation order.
"""
from __future__ import annotations

import logging
from collections import Counter
from decimal import Decimal
from typing import Any, Hashable, Iterable, Mapping

from kubesim.controllers._util import (fmt_time, now, pod_terminal, set_condition,
                                       try_get)
from kubesim.controllers.base import Controller, register
from kubesim.errors import ApiError
from kubesim.quantity import parse_quantity

log = logging.getLogger("kubesim.scheduler")

Obj = dict[str, Any]
SCHEDULER_NAME = "default-scheduler"
ALL = ("", "*")  # the single work-queue key: one pass over every pending pod
PROVISIONING = "provisioning"
ZERO = Decimal(0)


# -- pure fit logic -------------------------------------------------------------------
def container_requests(container: Mapping[str, Any]) -> dict[str, Decimal]:
    """A container's requests; a resource with only a limit requests the limit."""
    res = container.get("resources") or {}
    out = {k: parse_quantity(v) for k, v in (res.get("limits") or {}).items()}
    out.update({k: parse_quantity(v) for k, v in (res.get("requests") or {}).items()})
    return out


def pod_requests(pod: Mapping[str, Any]) -> dict[str, Decimal]:
    """Effective requests: max(sum(containers) (+ sidecars), each init container) + overhead."""
    spec = pod.get("spec") or {}
    total: dict[str, Decimal] = {}
    for c in spec.get("containers") or []:
        for k, v in container_requests(c).items():
            total[k] = total.get(k, ZERO) + v
    sidecars: dict[str, Decimal] = {}
    init_peak: dict[str, Decimal] = {}
    for c in spec.get("initContainers") or []:
        req = container_requests(c)
        if c.get("restartPolicy") == "Always":  # a native sidecar keeps running
            for k, v in req.items():
                sidecars[k] = sidecars.get(k, ZERO) + v
            req = {}
        # an init container runs next to the sidecars started before it
        for k in set(req) | set(sidecars):
            init_peak[k] = max(init_peak.get(k, ZERO), req.get(k, ZERO) + sidecars.get(k, ZERO))
    for k, v in sidecars.items():
        total[k] = total.get(k, ZERO) + v
    for k, v in init_peak.items():
        total[k] = max(total.get(k, ZERO), v)
    for k, v in (spec.get("overhead") or {}).items():
        total[k] = total.get(k, ZERO) + parse_quantity(v)
    return {k: v for k, v in total.items() if v}


_ALLOC_CACHE: dict[tuple, dict[str, Decimal]] = {}


def node_allocatable(node: Mapping[str, Any]) -> dict[str, Decimal]:
    st = node.get("status") or {}
    raw = st.get("allocatable") or st.get("capacity") or {}
    key = tuple(sorted((k, str(v)) for k, v in raw.items()))
    hit = _ALLOC_CACHE.get(key)
    if hit is None:
        if len(_ALLOC_CACHE) > 1024:
            _ALLOC_CACHE.clear()
        hit = _ALLOC_CACHE[key] = {k: parse_quantity(v) for k, v in raw.items()}
    return dict(hit)


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    op = toleration.get("operator") or "Equal"
    key = toleration.get("key") or ""
    if not key:
        return op == "Exists"  # empty key + Exists tolerates everything
    if key != taint.get("key"):
        return False
    if op == "Exists":
        return True
    return (toleration.get("value") or "") == (taint.get("value") or "")


def node_taints(node: Mapping[str, Any]) -> list[Obj]:
    taints = list((node.get("spec") or {}).get("taints") or [])
    ready = next((c for c in (node.get("status") or {}).get("conditions") or []
                  if c.get("type") == "Ready"), None)
    if ready is not None and ready.get("status") != "True" and not any(
            t.get("key") in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
            for t in taints):
        key = "node.kubernetes.io/not-ready" if ready.get("status") == "False" \
            else "node.kubernetes.io/unreachable"
        taints.append({"key": key, "effect": "NoSchedule"})
    return taints


def untolerated_taint(node: Mapping[str, Any], tolerations: Iterable[Mapping[str, Any]]
                      ) -> Obj | None:
    tols = list(tolerations or [])
    for taint in node_taints(node):
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(tolerates(t, taint) for t in tols):
            return taint
    return None


def _match_expression(expr: Mapping[str, Any], value: str | None, present: bool) -> bool:
    op = expr.get("operator")
    values = [str(v) for v in expr.get("values") or []]
    if op == "In":
        return present and value in values
    if op == "NotIn":
        return not present or value not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt"):
        if not present or len(values) != 1:
            return False
        try:
            a, b = int(value or ""), int(values[0])
        except ValueError:
            return False
        return a > b if op == "Gt" else a < b
    return False


def match_node_selector_term(term: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    exprs = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not exprs and not fields:
        return False  # an empty term matches no objects
    labels = (node.get("metadata") or {}).get("labels") or {}
    for e in exprs:
        key = e.get("key")
        if not _match_expression(e, labels.get(key), key in labels):
            return False
    for e in fields:
        if e.get("key") != "metadata.name":
            return False
        if not _match_expression(e, node["metadata"]["name"], True):
            return False
    return True


def matches_node_affinity(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    for k, v in (spec.get("nodeSelector") or {}).items():
        if labels.get(k) != v:
            return False
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if required is not None:
        terms = required.get("nodeSelectorTerms") or []
        if not any(match_node_selector_term(t, node) for t in terms):
            return False
    return True


def filter_node(pod: Mapping[str, Any], node: Mapping[str, Any],
                requests: Mapping[str, Decimal], used: Mapping[str, Decimal],
                pods_on_node: int) -> list[str]:
    """Why `pod` does not fit on `node` (kube-scheduler's reason strings); [] when it fits."""
    spec = pod.get("spec") or {}
    tolerations = spec.get("tolerations") or []
    nspec = node.get("spec") or {}
    if nspec.get("unschedulable") and not any(
            tolerates(t, {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
            for t in tolerations):
        return ["node(s) were unschedulable"]
    taint = untolerated_taint(node, tolerations)
    if taint is not None:
        return [f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value', '')}}}"]
    if not matches_node_affinity(pod, node):
        return ["node(s) didn't match Pod's node affinity/selector"]
    alloc = node_allocatable(node)
    reasons = []
    max_pods = alloc.get("pods")
    if max_pods is not None and pods_on_node + 1 > max_pods:
        reasons.append("Too many pods")
    for res, amount in sorted(requests.items()):
        if res == "pods" or not amount:
            continue
        free = alloc.get(res, ZERO) - used.get(res, ZERO)
        if amount > free:
            reasons.append(f"Insufficient {res}")
    return reasons


def unschedulable_message(total: int, reasons: Counter) -> str:
    if total == 0:
        return "no nodes available to schedule pods"
    parts = sorted(f"{n} {r}" for r, n in reasons.items())
    return f"0/{total} nodes are available: {', '.join(parts)}."


# kube-scheduler scores pods without requests as if they asked for this much
NONZERO_DEFAULTS = {"cpu": Decimal("0.1"), "memory": Decimal(200 * 2 ** 20)}


def nonzero_requests(requests: Mapping[str, Decimal]) -> dict[str, Decimal]:
    out = dict(requests)
    for k, v in NONZERO_DEFAULTS.items():
        if not out.get(k):
            out[k] = v
    return out


def node_score(node: Mapping[str, Any], requests: Mapping[str, Decimal],
               used: Mapping[str, Decimal]) -> Decimal:
    """LeastAllocated over cpu and memory (higher is better); `requests` and `used` are the
    non-zero (scoring) amounts."""
    requests = nonzero_requests(requests)
    alloc = node_allocatable(node)
    score, n = ZERO, 0
    for res in ("cpu", "memory"):
        cap = alloc.get(res, ZERO)
        if cap <= 0:
            continue
        score += (cap - used.get(res, ZERO) - requests.get(res, ZERO)) / cap
        n += 1
    return score / n if n else ZERO


class NodeUsage:
    """Requests already bound to each node."""

    def __init__(self) -> None:
        self.used: dict[str, dict[str, Decimal]] = {}
        self.scored: dict[str, dict[str, Decimal]] = {}  # with NONZERO_DEFAULTS, for scoring
        self.pods: Counter = Counter()

    def add(self, node_name: str, requests: Mapping[str, Decimal]) -> None:
        u = self.used.setdefault(node_name, {})
        for k, v in requests.items():
            u[k] = u.get(k, ZERO) + v
        s = self.scored.setdefault(node_name, {})
        for k, v in nonzero_requests(requests).items():
            s[k] = s.get(k, ZERO) + v
        self.pods[node_name] += 1

    def remove(self, node_name: str, requests: Mapping[str, Decimal]) -> None:
        u = self.used.get(node_name, {})
        for k, v in requests.items():
            u[k] = u.get(k, ZERO) - v
        s = self.scored.get(node_name, {})
        for k, v in nonzero_requests(requests).items():
            s[k] = s.get(k, ZERO) - v
        self.pods[node_name] -= 1

    @classmethod
    def from_pods(cls, pods: Iterable[Mapping[str, Any]]) -> "NodeUsage":
        usage = cls()
        for p in pods:
            node = (p.get("spec") or {}).get("nodeName")
            if node and not pod_terminal(p):  # type: ignore[arg-type]
                try:
                    usage.add(node, pod_requests(p))
                except ValueError:
                    usage.add(node, {})
        return usage


def choose_node(pod: Mapping[str, Any], nodes: list[Mapping[str, Any]],
                usage: NodeUsage) -> tuple[str | None, str]:
    """(node name, "") when the pod fits somewhere, else (None, the FailedScheduling message)."""
    try:
        requests = pod_requests(pod)
    except ValueError as exc:
        return None, f"invalid resource requests: {exc}"
    reasons: Counter = Counter()
    best: tuple[Decimal, str] | None = None
    for node in nodes:
        name = node["metadata"]["name"]
        used = usage.used.get(name, {})
        why = filter_node(pod, node, requests, used, usage.pods[name])
        if why:
            reasons.update(why)
            continue
        score = node_score(node, requests, usage.scored.get(name, {}))
        if best is None or score > best[0] or (score == best[0] and name < best[1]):
            best = (score, name)
    if best is not None:
        return best[1], ""
    return None, unschedulable_message(len(nodes), reasons)


def try_get_nocopy(api: Any, resource: str, namespace: str, name: str) -> Obj | None:
    """A read-only view of a stored object (no deep copy); None when absent."""
    try:
        return api.get(resource, namespace, name, copy_=False)
    except TypeError:  # an ApiServer without copy_
        return try_get(api, resource, namespace, name)
    except ApiError as exc:
        if exc.code == 404:
            return None
        raise


def needs_scheduling(pod: Mapping[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    return (not spec.get("nodeName")
            and (spec.get("schedulerName") or SCHEDULER_NAME) == SCHEDULER_NAME
            and not pod_terminal(pod)  # type: ignore[arg-type]
            and not (pod.get("metadata") or {}).get("deletionTimestamp"))


# -- the controller --------------------------------------------------------------------
@register
class Scheduler(Controller):
    name = "scheduler"
    watches = ("pods", "nodes", "persistentvolumeclaims", "priorityclasses.scheduling.k8s.io")

    def __init__(self, cluster: Any):
        super().__init__(cluster)
        # a scheduler cache kept from the event stream: what is bound where, what waits
        self.usage = NodeUsage()
        self.bound: dict[str, tuple[str, dict[str, Decimal]]] = {}  # pod uid -> (node, requests)
        self.pending: dict[str, tuple[str, str]] = {}               # pod uid -> (ns, name)

    def _track(self, pod: Obj, deleted: bool = False) -> bool:
        """Update the cache with a pod's new state; True when a scheduling pass is due."""
        meta = pod.get("metadata") or {}
        uid = meta.get("uid", "")
        node = (pod.get("spec") or {}).get("nodeName")
        due = False
        if not deleted and needs_scheduling(pod):
            due = uid not in self.pending
            self.pending[uid] = (meta.get("namespace", ""), meta.get("name", ""))
        elif self.pending.pop(uid, None) is not None:
            due = deleted  # a pending pod went away: nothing to do, but harmless to look
        holds = not deleted and bool(node) and not pod_terminal(pod)
        prev = self.bound.get(uid)
        if holds and (prev is None or prev[0] != node):
            if prev is not None:
                self.usage.remove(*prev)
            try:
                req = pod_requests(pod)
            except ValueError:
                req = {}
            self.bound[uid] = (node, req)  # type: ignore[assignment]
            self.usage.add(node, req)  # type: ignore[arg-type]
        elif not holds and prev is not None:
            del self.bound[uid]
            self.usage.remove(*prev)
            due = True  # resources freed
        return due

    def initial_keys(self) -> Iterable[Hashable]:
        self.usage, self.bound, self.pending = NodeUsage(), {}, {}
        for pod in self.api.list("pods", copy_=False)["items"]:
            self._track(pod)
        return [ALL]

    def keys_for(self, resource: str, obj: Obj) -> Iterable[Hashable]:
        return [ALL]

    def on_event(self, event_type: str, resource: str, obj: Obj, old: Obj | None) -> None:
        if resource not in self.watches:
            return
        if resource == "pods":
            due = self._track(obj, deleted=event_type == "DELETED")
            if not due and event_type == "MODIFIED" and old is not None and \
                    (obj["metadata"].get("uid") in self.pending):
                # a pending pod changed: gates removed, tolerations added... (our own
                # condition writes change neither spec nor labels)
                due = (old.get("spec") != obj.get("spec")
                       or (old.get("metadata") or {}).get("labels")
                       != (obj.get("metadata") or {}).get("labels"))
            if not due:
                return
        elif resource == "nodes" and event_type == "MODIFIED" and old is not None:
            if (old.get("spec") == obj.get("spec")
                    and (old.get("metadata") or {}).get("labels")
                    == (obj.get("metadata") or {}).get("labels")
                    and (old.get("status") or {}).get("allocatable")
                    == (obj.get("status") or {}).get("allocatable")
                    and _ready(old) == _ready(obj)):
                return
        elif not self.pending:
            return  # claims and priority classes only matter to waiting pods
        self.enqueue(ALL)

    async def reconcile(self, key: Hashable) -> float | None:
        pending = []
        for uid, (ns, name) in list(self.pending.items()):
            pod = try_get_nocopy(self.api, "pods", ns, name)
            if pod is None or pod["metadata"].get("uid") != uid or not needs_scheduling(pod):
                self.pending.pop(uid, None)
                continue
            pending.append(pod)
        if not pending:
            return None
        nodes = self.api.list("nodes", copy_=False)["items"]
        priorities = self._priorities()
        pending.sort(key=lambda p: (-self._priority(p, priorities),
                                    p["metadata"].get("creationTimestamp", ""),
                                    p["metadata"].get("namespace", ""), p["metadata"]["name"]))
        retry = None
        for pod in pending:
            if (pod.get("spec") or {}).get("schedulingGates"):
                self._mark(pod, "False", "SchedulingGated",
                           "Scheduling is blocked due to non-empty scheduling gates")
                continue
            blocked = self._volume_problem(pod)
            if blocked == PROVISIONING:
                continue  # the claim's class exists: it binds in a moment (PVC events requeue)
            if blocked:
                self._mark(pod, "False", "Unschedulable",
                           f"0/{len(nodes)} nodes are available: {blocked}." if nodes
                           else "no nodes available to schedule pods")
                continue
            node, message = choose_node(pod, nodes, self.usage)
            if node is None:
                self._mark(pod, "False", "Unschedulable", message)
                continue
            try:
                self._bind(pod, node)  # the pod's MODIFIED event updates self.usage
            except ApiError as exc:
                if exc.code in (404, 409):  # gone, or already bound by someone else
                    retry = 0.1
                    continue
                raise
        return retry

    # -- helpers -------------------------------------------------------------------
    def _priorities(self) -> dict[str, int]:
        try:
            return {pc["metadata"]["name"]: int(pc.get("value", 0))
                    for pc in self.api.list("priorityclasses.scheduling.k8s.io")["items"]}
        except ApiError:
            return {}

    @staticmethod
    def _priority(pod: Obj, classes: Mapping[str, int]) -> int:
        spec = pod.get("spec") or {}
        if isinstance(spec.get("priority"), int):
            return spec["priority"]
        return classes.get(spec.get("priorityClassName") or "", 0)

    def _volume_problem(self, pod: Obj) -> str | None:
        ns = pod["metadata"].get("namespace", "")
        for vol in (pod.get("spec") or {}).get("volumes") or []:
            claim = (vol.get("persistentVolumeClaim") or {}).get("claimName")
            if not claim:
                continue
            pvc = try_get(self.api, "persistentvolumeclaims", ns, claim)
            if pvc is None:
                return f'persistentvolumeclaim "{claim}" not found'
            if pvc["metadata"].get("deletionTimestamp"):
                return f'persistentvolumeclaim "{claim}" is being deleted'
            if (pvc.get("status") or {}).get("phase") == "Bound" or \
                    (pvc.get("spec") or {}).get("volumeName"):
                continue
            sc = self._storage_class(pvc)
            if (sc or {}).get("volumeBindingMode") == "WaitForFirstConsumer":
                continue  # provisioned once the pod is scheduled
            if sc is not None and (pvc.get("spec") or {}).get("storageClassName") != "" and \
                    self.cluster_has("pvc"):
                return PROVISIONING
            return "pod has unbound immediate PersistentVolumeClaims"
        return None

    def _storage_class(self, pvc: Obj) -> Obj | None:
        from kubesim.controllers.pvc import storage_class_for

        return storage_class_for(self.api, pvc)

    def cluster_has(self, controller: str) -> bool:
        """Whether another controller runs (a disabled pvc controller binds nothing)."""
        manager = getattr(self.cluster, "manager", None)
        if manager is None or not hasattr(manager, "get"):
            return True
        return manager.get(controller) is not None

    def _bind(self, pod: Obj, node: str) -> None:
        meta = pod["metadata"]
        binding = {"apiVersion": "v1", "kind": "Binding",
                   "metadata": {"name": meta["name"], "namespace": meta.get("namespace"),
                                "uid": meta.get("uid")},
                   "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        self.api.create("pods", binding, namespace=meta.get("namespace"), subresource="binding")
        fresh = try_get(self.api, "pods", meta.get("namespace"), meta["name"])
        if fresh is not None:
            self._mark(fresh, "True", "", "")
        self._event(pod, "Normal", "Scheduled",
                    f"Successfully assigned {meta.get('namespace')}/{meta['name']} to {node}")

    def _mark(self, pod: Obj, status: str, reason: str, message: str) -> None:
        st = dict(pod.get("status") or {})
        old = next((c for c in st.get("conditions") or [] if c.get("type") == "PodScheduled"), None)
        if old and old.get("status") == status and old.get("reason", "") == reason and \
                old.get("message", "") == message:
            return
        st["conditions"] = set_condition(st.get("conditions"), "PodScheduled", status, reason,
                                         message, fmt_time(now(self.cluster)), probe=True)
        st.setdefault("phase", "Pending")
        new = dict(pod)
        new["status"] = st
        try:
            self.api.update("pods", new, namespace=pod["metadata"].get("namespace"),
                            subresource="status")
        except ApiError as exc:
            if exc.code not in (404, 409):
                raise
            return
        if status == "False" and reason == "Unschedulable":
            self._event(pod, "Warning", "FailedScheduling", message)

    def _event(self, pod: Obj, type_: str, reason: str, message: str) -> None:
        meta = pod["metadata"]
        ts = fmt_time(now(self.cluster))
        ev = {"apiVersion": "v1", "kind": "Event",
              "metadata": {"generateName": f"{meta['name']}.", "namespace": meta.get("namespace")},
              "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                                 "namespace": meta.get("namespace"), "uid": meta.get("uid")},
              "reason": reason, "message": message, "type": type_,
              "source": {"component": SCHEDULER_NAME}, "reportingComponent": SCHEDULER_NAME,
              "firstTimestamp": ts, "lastTimestamp": ts, "count": 1}
        try:
            self.api.create("events", ev, namespace=meta.get("namespace"))
        except (ApiError, Exception):  # events are best effort
            log.debug("event for %s/%s not recorded", meta.get("namespace"), meta["name"])


def _ready(node: Obj) -> str | None:
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return c.get("status")
    return None
