"""StatefulSet controller.

Pods `<sts>-<ordinal>` (ordinals from spec.ordinals.start, default 0) with the
template's labels plus `apps.kubernetes.io/pod-index`, `statefulset.kubernetes.io/pod-name`
and `controller-revision-hash`; hostname = pod name, subdomain = spec.serviceName.
volumeClaimTemplates become PVCs `<template>-<sts>-<ordinal>`, created before the pod
and never changed afterwards (scale to 0 and back reuses them).
persistentVolumeClaimRetentionPolicy: whenDeleted=Delete puts an ownerReference to the
StatefulSet on the PVCs (the garbage collector removes them with the set), whenScaled=Delete
deletes the PVCs of removed ordinals once their pods are gone.
podManagementPolicy OrderedReady (one at a time, in order, each waiting for its
predecessors to be Running and Ready; scale down from the highest ordinal) or Parallel.
updateStrategy RollingUpdate (highest ordinal first, one at a time, honouring
partition) or OnDelete. A pod create a ResourceQuota refuses (resourcequota.py's quota admission)
records the real Warning Event FailedCreate on the set and is retried. Status follows apps/v1 and satisfies `kubectl rollout status`
and kubernetes.core's statefulset_ready.
"""
from __future__ import annotations

from typing import Any, Hashable

from kubesim.controllers._util import (delete_pod, controller_ref, ignore_not_found,
                                       namespace_terminating, owned_pods, pod_deleting,
                                       pod_from_template, pod_ready, pod_terminal, record_warning,
                                       template_hash, try_get, write_status)
from kubesim.controllers.base import Controller, owner_key, register
from kubesim.errors import ApiError

Obj = dict[str, Any]
REVISION_LABEL = "controller-revision-hash"
POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"


def pvc_name(template: Obj, sts_name: str, ordinal: int) -> str:
    return f"{template['metadata']['name']}-{sts_name}-{ordinal}"


def revision_of(sts: Obj) -> str:
    spec = sts.get("spec") or {}
    collision = (sts.get("status") or {}).get("collisionCount") or 0
    return f"{sts['metadata']['name']}-{template_hash(spec.get('template') or {}, collision)}"


def ordinal_of(sts_name: str, pod_name: str) -> int | None:
    prefix = sts_name + "-"
    if not pod_name.startswith(prefix):
        return None
    tail = pod_name[len(prefix):]
    return int(tail) if tail.isdigit() and (tail == "0" or not tail.startswith("0")) else None


@register
class StatefulSetController(Controller):
    name = "statefulset"
    watches = ("statefulsets.apps", "pods", "persistentvolumeclaims")

    def keys_for(self, resource: str, obj: Obj):
        if resource == "persistentvolumeclaims":
            key = owner_key(obj, "StatefulSet")
            return [key] if key else []
        return super().keys_for(resource, obj)

    async def reconcile(self, key: Hashable) -> float | None:
        ns, name = key  # type: ignore[misc]
        sts = try_get(self.api, "statefulsets.apps", ns, name)
        if sts is None or sts["metadata"].get("deletionTimestamp"):
            self._refusals.pop(key, None)
            return None
        spec = sts.get("spec") or {}
        replicas = spec.get("replicas", 1)
        start = ((spec.get("ordinals") or {}).get("start")) or 0
        parallel = spec.get("podManagementPolicy") == "Parallel"
        strategy = spec.get("updateStrategy") or {}
        rolling = strategy.get("type", "RollingUpdate") == "RollingUpdate"
        partition = ((strategy.get("rollingUpdate") or {}).get("partition")) or 0
        retention = spec.get("persistentVolumeClaimRetentionPolicy") or {}
        update_rev = revision_of(sts)
        status = sts.get("status") or {}
        current_rev = status.get("currentRevision") or update_rev

        pods: dict[int, Obj] = {}
        for p in owned_pods(self.api, ns, sts["metadata"]["uid"]):
            o = ordinal_of(name, p["metadata"]["name"])
            if o is not None:
                pods[o] = p
        wanted = range(start, start + replicas)
        stopping = namespace_terminating(self.api, ns)

        # replace failed and succeeded pods (a StatefulSet's pods always run)
        for o, p in list(pods.items()):
            if pod_terminal(p) and not pod_deleting(p):
                delete_pod(self.api, p)

        requeue = None
        if not stopping:
            self._sync_claim_owners(sts, ns, wanted)
            for o in wanted:
                p = pods.get(o)
                if p is not None:
                    if not parallel and not (pod_ready(p) and not pod_deleting(p)):
                        break  # OrderedReady: wait for this one before the next
                    continue
                try:
                    self._create_claims(sts, o)
                    # quota admission (resourcequota.py) may refuse it: 403
                    created = self.api.create("pods", self._new_pod(sts, o, update_rev), namespace=ns)
                    pods[o] = created
                    self._refusals.pop(key, None)
                except ApiError as exc:
                    if exc.code == 409:  # the old pod is still going away
                        requeue = 0.05
                    elif exc.code == 403 and "exceeded quota: " in exc.message:
                        # kube-controller-manager: a Warning Event on the set, then its rate-limited
                        # retries (here 0.5 s doubling to 4 s: a raised quota is seen soon)
                        self._failed_create(sts, f"{sts['metadata']['name']}-{o}", exc.message)
                        tries = self._refusals[key] = self._refusals.get(key, 0) + 1
                        requeue = min(0.5 * 2 ** (tries - 1), 4.0)
                    elif exc.code != 403:
                        requeue = 1.0
                    break
                if not parallel:
                    break

            # scale down: ordinals outside the wanted range
            condemned = sorted((o for o in pods if o not in wanted), reverse=True)
            if condemned:
                if parallel:
                    for o in condemned:
                        if not pod_deleting(pods[o]):
                            delete_pod(self.api, pods[o])
                elif not any(pod_deleting(pods[o]) for o in condemned):
                    delete_pod(self.api, pods[condemned[0]])  # OrderedReady: highest first
            if retention.get("whenScaled") == "Delete":
                self._delete_scaled_claims(sts, ns, wanted, pods)

            # rolling update: highest ordinal first, one at a time
            if rolling and not condemned:
                all_there = all(o in pods and pod_ready(pods[o]) and not pod_deleting(pods[o])
                                for o in wanted)
                if all_there or parallel:
                    for o in sorted(wanted, reverse=True):
                        if o < partition:
                            break
                        p = pods.get(o)
                        if p is None or pod_deleting(p):
                            break
                        if _revision(p) != update_rev:
                            delete_pod(self.api, p)
                            break

        if not self._update_status(sts, pods, wanted, update_rev, current_rev):
            return 0.05
        return requeue

    def __init__(self, cluster):
        super().__init__(cluster)
        self._refusals: dict[Hashable, int] = {}  # key -> pod creates refused in a row

    def _failed_create(self, sts: Obj, pod_name: str, error: str) -> None:
        """The Event kube-controller-manager's StatefulSet controller records when a pod create
        fails (stateful_pod_control.go recordPodEvent), aggregated as its event recorder does:
        the same message again raises count and lastTimestamp."""
        message = f"create Pod {pod_name} in StatefulSet {sts['metadata']['name']} failed error: {error}"
        record_warning(self.api, self.cluster, sts, "apps/v1", "statefulset-controller", "FailedCreate", message)

    # -- pods and claims ------------------------------------------------------------
    def _new_pod(self, sts: Obj, ordinal: int, revision: str) -> Obj:
        spec = sts.get("spec") or {}
        name = sts["metadata"]["name"]
        pod_name = f"{name}-{ordinal}"
        pod = pod_from_template(spec.get("template"), pod_name, sts["metadata"]["namespace"],
                                {REVISION_LABEL: revision, POD_NAME_LABEL: pod_name,
                                 POD_INDEX_LABEL: str(ordinal)},
                                controller_ref(sts, "apps/v1", "StatefulSet"))
        pspec = pod["spec"]
        pspec["hostname"] = pod_name
        if spec.get("serviceName"):
            pspec["subdomain"] = spec["serviceName"]
        templates = spec.get("volumeClaimTemplates") or []
        if templates:
            vols = [v for v in pspec.get("volumes") or []
                    if v.get("name") not in {t["metadata"]["name"] for t in templates}]
            for t in templates:
                vols.append({"name": t["metadata"]["name"],
                             "persistentVolumeClaim": {"claimName": pvc_name(t, name, ordinal)}})
            pspec["volumes"] = vols
        return pod

    def _claim(self, sts: Obj, template: Obj, ordinal: int) -> Obj:
        spec = sts.get("spec") or {}
        labels = dict((template.get("metadata") or {}).get("labels") or {})
        labels.update(((spec.get("selector") or {}).get("matchLabels")) or {})
        meta: Obj = {"name": pvc_name(template, sts["metadata"]["name"], ordinal),
                     "namespace": sts["metadata"]["namespace"], "labels": labels}
        ann = (template.get("metadata") or {}).get("annotations")
        if ann:
            meta["annotations"] = dict(ann)
        retention = spec.get("persistentVolumeClaimRetentionPolicy") or {}
        if retention.get("whenDeleted") == "Delete":
            meta["ownerReferences"] = [controller_ref(sts, "apps/v1", "StatefulSet")]
        return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta,
                "spec": dict(template.get("spec") or {})}

    def _create_claims(self, sts: Obj, ordinal: int) -> None:
        ns = sts["metadata"]["namespace"]
        for t in (sts.get("spec") or {}).get("volumeClaimTemplates") or []:
            name = pvc_name(t, sts["metadata"]["name"], ordinal)
            if try_get(self.api, "persistentvolumeclaims", ns, name) is not None:
                continue
            try:
                self.api.create("persistentvolumeclaims", self._claim(sts, t, ordinal),
                                namespace=ns)
            except ApiError as exc:
                if exc.code != 409:
                    raise

    def _sync_claim_owners(self, sts: Obj, ns: str, wanted: range) -> None:
        """whenDeleted: Delete <-> an ownerReference to the set on each claim."""
        spec = sts.get("spec") or {}
        templates = spec.get("volumeClaimTemplates") or []
        if not templates:
            return
        want_ref = (spec.get("persistentVolumeClaimRetentionPolicy") or {}).get(
            "whenDeleted") == "Delete"
        uid = sts["metadata"]["uid"]
        for o in wanted:
            for t in templates:
                pvc = try_get(self.api, "persistentvolumeclaims", ns,
                              pvc_name(t, sts["metadata"]["name"], o))
                if pvc is None:
                    continue
                refs = pvc["metadata"].get("ownerReferences") or []
                has = any(r.get("uid") == uid for r in refs)
                if has == want_ref:
                    continue
                if want_ref:
                    refs = refs + [controller_ref(sts, "apps/v1", "StatefulSet")]
                else:
                    refs = [r for r in refs if r.get("uid") != uid]
                try:
                    self.api.patch("persistentvolumeclaims", ns, pvc["metadata"]["name"],
                                   {"metadata": {"ownerReferences": refs or None,
                                                 "resourceVersion":
                                                     pvc["metadata"]["resourceVersion"]}})
                except ApiError as exc:
                    if exc.code not in (404, 409):
                        raise

    def _delete_scaled_claims(self, sts: Obj, ns: str, wanted: range, pods: dict[int, Obj]) -> None:
        templates = (sts.get("spec") or {}).get("volumeClaimTemplates") or []
        if not templates:
            return
        name = sts["metadata"]["name"]
        prefixes = [f"{t['metadata']['name']}-{name}-" for t in templates]
        for pvc in self.api.list("persistentvolumeclaims", ns)["items"]:
            pname = pvc["metadata"]["name"]
            for prefix in prefixes:
                tail = pname[len(prefix):] if pname.startswith(prefix) else ""
                if not tail.isdigit():
                    continue
                o = int(tail)
                if o in wanted or o in pods or pvc["metadata"].get("deletionTimestamp"):
                    continue
                # only claims this set made for the selector's pods
                sel = ((sts.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
                labels = pvc["metadata"].get("labels") or {}
                if any(labels.get(k) != v for k, v in sel.items()):
                    continue
                ignore_not_found(self.api.delete, "persistentvolumeclaims", ns, pname)

    # -- status ----------------------------------------------------------------------
    def _update_status(self, sts: Obj, pods: dict[int, Obj], wanted: range, update_rev: str,
                       current_rev: str) -> bool:
        live = {o: p for o, p in pods.items() if not pod_deleting(p) and not pod_terminal(p)}
        ready = sum(1 for p in live.values() if pod_ready(p))
        updated = sum(1 for p in live.values() if _revision(p) == update_rev)
        current = sum(1 for p in live.values() if _revision(p) == current_rev)
        replicas = (sts.get("spec") or {}).get("replicas", 1)
        # the rollout is complete once every wanted pod runs the update revision
        if all(o in live and _revision(live[o]) == update_rev for o in wanted) and \
                len(live) == replicas:
            current_rev, current = update_rev, updated
        st = dict(sts.get("status") or {})
        st.update({
            "observedGeneration": sts["metadata"].get("generation", 1),
            "replicas": len(live),
            "readyReplicas": ready,
            "currentReplicas": current,
            "updatedReplicas": updated,
            "availableReplicas": ready,
            "currentRevision": current_rev,
            "updateRevision": update_rev,
            "collisionCount": st.get("collisionCount") or 0,
        })
        # apps/v1 StatefulSetStatus: readyReplicas, currentReplicas and updatedReplicas are
        # omitempty int32s, so a real server stores no 0 for them (collisionCount, a pointer, keeps 0); with the write
        # recorded under kube-controller-manager's name, a field that appears or goes changes its
        # managedFields entry, which ansible-operator's DependentPredicate passes on to the owner
        # (a status value alone it does not): the pods of a DevServer stopped by Kueue reach it.
        for key in ("readyReplicas", "currentReplicas", "updatedReplicas"):
            if not st.get(key):
                st.pop(key, None)
        return write_status(self.api, "statefulsets.apps", sts, st, field_manager="kube-controller-manager") is not None


def _revision(pod: Obj) -> str | None:
    return (pod["metadata"].get("labels") or {}).get(REVISION_LABEL)
