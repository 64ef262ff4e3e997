"""The data-safety invariant (issue 17, item 5): no PersistentVolumeClaim holding user data is
ever deleted unless the user asked for it.

It reads kubesim's deletion log (kubesim/deletions.py: every object removed, who asked for
its deletion -- an HTTP request with its user agent, a simulated controller such as the
garbage collector or the namespace controller, or an in-process call -- and its final
state), so it sees deletions by any path: a DELETE from the operator, an ownerReference the
garbage collector followed, a namespace that took its volumes with it.

User data, by the claim's name and labels (the roles' templates):

* ``home``: ``home-<server>-<i>``, labelled ``torchdev.io/devserver`` (the StatefulSet's
  volumeClaimTemplate);
* ``shared``: ``<user>-shared-efs``, labelled ``torchdev.io/user`` (the DevUser's);
* ``artifacts``: ``artifacts-<job>``, labelled ``torchdev.io/ephemeralaccelerationjob``;
* ``checkpoints``: labelled ``torchdev.io/trainingjob`` (a TrainingJob's own claim).

The user asked, when the deletion was requested

* by the user: an in-process call of the test, or an HTTP request from devctl or kubectl
  (``devctl delete --purge``, ``devctl infer cleanup``, ``kubectl delete pvc``);
* through a namespace the user deleted, or one the operator deleted for a DevUser whose
  ``deletionPolicy`` was ``Delete`` (``devctl admin offboard --delete-data``);
* by the garbage collector for a home claim of a DevServer deleted with
  ``homeRetentionPolicy: Delete``, or for the artifacts of an EphemeralAccelerationJob the
  user deleted;
* by the operator for artifacts whose TTL had passed (the job's ``status.artifactsExpireAt``).

Anything else is a violation: e.g. the operator deleting a home claim, the garbage
collector taking a home claim of a server deleted with ``Retain`` (an ownerReference that
should not be there), a shared volume going with anything but its namespace.

Usage (tests/reliability/conftest.py checks it after every module, tests/_cluster.py after every
end-to-end module)::

    safety = DataSafety(sim)
    ...
    assert safety.violations() == []
"""
from __future__ import annotations

import datetime as dt
from typing import Any

PVC = "persistentvolumeclaims"
DEVSERVER_LABEL = "torchdev.io/devserver"
USER_LABEL = "torchdev.io/user"
EAJ_LABEL = "torchdev.io/ephemeralaccelerationjob"
TRAININGJOB_LABEL = "torchdev.io/trainingjob"
SHARED_SUFFIX = "-shared-efs"
# user agents of the user's own clients (devctl sets devctl/<version>, kubectl kubectl/<version>)
USER_AGENTS = ("devctl/", "kubectl/")
# the expiry is written in whole seconds: a deletion this early is still on time
EXPIRY_SLACK_S = 1.0


def data_class(pvc: dict[str, Any]) -> str | None:
    """home, shared, artifacts, checkpoints, or None for a claim that holds no user data."""
    meta = pvc.get("metadata") or {}
    name, labels = meta.get("name") or "", meta.get("labels") or {}
    if name.startswith("home-") and DEVSERVER_LABEL in labels:
        return "home"
    if name.endswith(SHARED_SUFFIX) and USER_LABEL in labels:
        return "shared"
    if name.startswith("artifacts-") and EAJ_LABEL in labels:
        return "artifacts"
    if TRAININGJOB_LABEL in labels:
        return "checkpoints"
    return None


def by_user(origin: dict[str, str], agents: tuple[str, ...] = USER_AGENTS) -> bool:
    return origin.get("via") == "direct" or (
        origin.get("via") == "request" and origin.get("user_agent", "").startswith(agents))


def _time(text: str | None) -> float | None:
    if not text:
        return None
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class DataSafety:
    def __init__(self, sim, user_agents: tuple[str, ...] = ()):
        """``user_agents``: more user agents that act for the user (a test's own client)."""
        self.sim = sim
        self.agents = USER_AGENTS + tuple(user_agents)

    # -- what was deleted ----------------------------------------------------------------------
    def deleted_volumes(self) -> list[dict[str, Any]]:
        """The claims holding user data that were removed, each with ``class`` and ``why``
        (the consent found) or ``violation`` (why none was)."""
        removed = self.sim.deletions(PVC)
        requests = self.sim.deletion_requests()
        out = []
        for rec in removed:
            cls = data_class(rec["object"])
            if cls is None:
                continue
            why = self._consent(rec, cls, requests)
            entry = {"class": cls, "namespace": rec["namespace"], "name": rec["name"],
                     "requested_by": rec["requested_by"], "time": rec["requested_at"]}
            entry["why" if why.startswith("ok:") else "violation"] = why.removeprefix("ok: ")
            out.append(entry)
        return out

    def violations(self) -> list[str]:
        return [f"{v['class']} volume {v['namespace']}/{v['name']} deleted by "
                f"{_describe(v['requested_by'])}: {v['violation']}"
                for v in self.deleted_volumes() if "violation" in v]

    def summary(self) -> dict[str, Any]:
        """Figures: deleted user-data claims by class and consent, and the violations."""
        vols = self.deleted_volumes()
        kinds: dict[str, int] = {}
        for v in vols:
            key = f"{v['class']}: {v.get('why') or 'VIOLATION'}"
            kinds[key] = kinds.get(key, 0) + 1
        return {"deleted_user_volumes": len(vols), "by_consent": kinds,
                "violations": len([v for v in vols if "violation" in v])}

    # -- the rules ---------------------------------------------------------------------------
    def _consent(self, rec: dict, cls: str, requests: list[dict]) -> str:
        origin = rec["requested_by"]
        if by_user(origin, self.agents):
            return "ok: deleted by the user"
        if origin.get("via") == "controller" and origin.get("controller") == "namespace":
            return self._namespace_consent(rec["namespace"], requests)
        if origin.get("via") == "controller" and origin.get("controller") == "garbagecollector":
            return self._owner_consent(rec, cls, requests)
        if cls == "artifacts":
            return self._expired(rec, requests)
        return "nobody asked for it"

    def _namespace_consent(self, namespace: str, requests: list[dict]) -> str:
        ns = last_request(requests, "namespaces", "", namespace)
        if ns is None:
            return "its namespace went, but no deletion of the namespace was asked for"
        if by_user(ns["requested_by"], self.agents):
            return "ok: its namespace was deleted by the user"
        user = ((ns["object"].get("metadata") or {}).get("labels") or {}).get(USER_LABEL)
        devuser = last_request(requests, "devusers.torchdev.io", "", user or "")
        if devuser is not None and (devuser["object"].get("spec") or {}).get("deletionPolicy") == "Delete":
            return f"ok: DevUser {user} was deleted with deletionPolicy Delete"
        return (f"its namespace was deleted by {_describe(ns['requested_by'])}, "
                f"but no DevUser with deletionPolicy Delete owned it")

    def _owner_consent(self, rec: dict, cls: str, requests: list[dict]) -> str:
        owners = {r.get("uid") for r in rec["ownerReferences"]}
        labels = rec["labels"]
        if cls == "home":
            server = last_request(requests, "devservers.torchdev.io", rec["namespace"],
                                  labels.get(DEVSERVER_LABEL, ""))
            if server is None:
                return "garbage-collected while its DevServer was not being deleted"
            policy = (server["object"].get("spec") or {}).get("homeRetentionPolicy", "Retain")
            if policy == "Delete":
                return "ok: its DevServer was deleted with homeRetentionPolicy Delete"
            return f"garbage-collected with its DevServer, whose homeRetentionPolicy was {policy}"
        if cls == "artifacts":
            job = next((r for r in requests if r["uid"] in owners
                        and r["resource"] == "ephemeralaccelerationjobs.torchdev.io"), None)
            if job is not None:
                return "ok: its EphemeralAccelerationJob was deleted"
            return self._expired(rec, requests)
        return f"garbage-collected: a {cls} volume must not be owned by anything"

    def _expired(self, rec: dict, requests: list[dict]) -> str:
        name = rec["labels"].get(EAJ_LABEL, "")
        job = self._job(rec["namespace"], name, requests)
        expires = _time(((job or {}).get("status") or {}).get("artifactsExpireAt"))
        if expires is None:
            return "deleted before its job had an expiry (status.artifactsExpireAt)"
        if rec["requested_at"] + EXPIRY_SLACK_S >= expires:
            return "ok: its TTL had passed (pvcTTLSecondsAfterFinished)"
        return f"deleted {expires - rec['requested_at']:.1f}s before its expiry"

    def _job(self, namespace: str, name: str, requests: list[dict]) -> dict | None:
        try:
            return self.sim.call(self.sim.api.get, "ephemeralaccelerationjobs.torchdev.io",
                                 namespace, name)
        except Exception:  # noqa: BLE001 - gone: its final state is in the log
            gone = last_request(requests, "ephemeralaccelerationjobs.torchdev.io", namespace, name)
            return gone["object"] if gone else None


def last_request(requests: list[dict], resource: str, namespace: str, name: str) -> dict | None:
    """The last of `requests` (deletion log entries) about this object, or None."""
    found = [r for r in requests
             if r["resource"] == resource and r["namespace"] == namespace and r["name"] == name]
    return found[-1] if found else None


def _describe(origin: dict[str, str]) -> str:
    if origin.get("via") == "controller":
        return f"the {origin.get('controller')} controller"
    if origin.get("via") == "request":
        return f"{origin.get('verb', '').upper()} {origin.get('path')} ({origin.get('user_agent')})"
    return "an in-process call"
