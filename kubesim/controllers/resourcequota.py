"""ResourceQuota controller (kube-controller-manager's, in part): a quota's status.hard follows its
spec.hard, as the real controller writes it (kube-apiserver refuses what a quota counts, "status
unknown for quota", until it has). kubesim counts no usage (status.used stays absent) and enforces
no quota: kubesim/DESIGN.md, "Found by the real control plane"."""
from __future__ import annotations

from typing import Any, Hashable

from kubesim.controllers._util import try_get
from kubesim.controllers.base import Controller, register
from kubesim.errors import ApiError

Obj = dict[str, Any]


@register
class ResourceQuotaController(Controller):
    name = "resourcequota"
    watches = ("resourcequotas",)

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
