"""ResourceQuota controller (kube-controller-manager's, in part): a quota's status.hard follows its
spec.hard, as the real controller writes it (kube-apiserver refuses what a quota counts, "status
unknown for quota", until it has). kubesim writes no status.used.

`pod_quota_refusal` is kube-apiserver's quota admission for pod creates (the API's, a server-side
apply that creates, the StatefulSet and Job controllers'), and nothing else: `pods`,
`requests.cpu`, `requests.memory` and `requests.nvidia.com/gpu` of quotas without scopes, counted
over the namespace's pods that are not Succeeded or Failed, a refusal answered 403 with the real
message (the controller registers it with the API server). Every other create is admitted:
kubesim/DESIGN.md, "Found by the real control plane"."""
from __future__ import annotations

from typing import Any, Hashable

from kubesim.controllers._util import try_get
from kubesim.controllers.base import Controller, register
from kubesim.controllers.scheduler import pod_requests
from kubesim.errors import ApiError
from kubesim.quantity import format_quantity, parse_quantity

Obj = dict[str, Any]


@register
class ResourceQuotaController(Controller):
    name = "resourcequota"
    watches = ("resourcequotas",)

    def __init__(self, cluster: Any):
        super().__init__(cluster)
        self.api.add_mutator(self._admit_pod)

    def _admit_pod(self, rt: Any, pod: Obj) -> None:
        """Quota admission of a new pod: 403 'pods "x" is forbidden: exceeded quota: ...'."""
        if rt.key != "pods":
            return
        meta = pod.get("metadata") or {}
        refusal = pod_quota_refusal(self.api, meta.get("namespace") or "", pod)
        if refusal:
            raise ApiError(403, f'pods "{meta.get("name", "")}" is forbidden: {refusal}', "Forbidden",
                           {"name": meta.get("name", ""), "kind": "pods"})

    def keys_for(self, resource: str, obj: Obj):
        meta = obj["metadata"]
        return [(meta.get("namespace", ""), meta["name"])]

    async def reconcile(self, key: Hashable) -> float | None:
        namespace, name = key  # type: ignore[misc]
        quota = try_get(self.api, "resourcequotas", namespace, name)
        if quota is None or quota["metadata"].get("deletionTimestamp"):
            return None
        hard = dict((quota.get("spec") or {}).get("hard") or {})
        status = dict(quota.get("status") or {})
        if status.get("hard") == hard:
            return None
        new = dict(quota, status=dict(status, hard=hard))
        try:
            self.api.update("resourcequotas", new, subresource="status", namespace=namespace)
        except ApiError as exc:
            if exc.code not in (404, 409):
                raise
        return None


# The quota resources pod_quota_refusal enforces -> the pod request each counts (None: the pod).
ENFORCED = {"pods": None, "requests.cpu": "cpu", "requests.memory": "memory",
            "requests.nvidia.com/gpu": "nvidia.com/gpu"}


def _usage(pod: Obj) -> dict[str, Any]:
    requests = pod_requests(pod)
    return {key: (1 if resource is None else requests.get(resource, 0)) for key, resource in ENFORCED.items()}


def _pretty(values: dict[str, Any]) -> str:
    """kube-apiserver's prettyPrint of a ResourceList: sorted name=quantity, comma-separated."""
    return ",".join("%s=%s" % (k, format_quantity(v, k.rpartition(".")[2])) for k, v in sorted(values.items()))


def pod_quota_refusal(api: Any, namespace: str, pod: Obj) -> str | None:
    """"exceeded quota: <name>, requested: ..., used: ..., limited: ..." when creating ``pod`` would
    take a quota of ``namespace`` past a hard limit of ENFORCED (the first such quota, by name, as
    kube-apiserver checks them), else None."""
    quotas = sorted(api.list("resourcequotas", namespace)["items"], key=lambda q: q["metadata"]["name"])
    wanted = _usage(pod)
    used: dict[str, Any] | None = None
    for quota in quotas:
        spec = quota.get("spec") or {}
        if spec.get("scopes") or spec.get("scopeSelector"):
            continue
        hard = {k: parse_quantity(v) for k, v in (spec.get("hard") or {}).items() if k in ENFORCED}
        if not hard:
            continue
        if used is None:
            used = dict.fromkeys(ENFORCED, 0)
            for other in api.list("pods", namespace)["items"]:
                if (other.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                    continue
                for key, amount in _usage(other).items():
                    used[key] += amount
        exceeded = sorted(k for k, limit in hard.items() if wanted[k] and used[k] + wanted[k] > limit)
        if exceeded:
            return "exceeded quota: %s, requested: %s, used: %s, limited: %s" % (
                quota["metadata"]["name"], _pretty({k: wanted[k] for k in exceeded}),
                _pretty({k: used[k] for k in exceeded}), _pretty({k: hard[k] for k in exceeded}))
    return None
