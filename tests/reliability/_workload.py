"""A burst of objects of every kind for the reliability tests, and the checks of what they
become: their expected state, duplicates, and what is left after their deletion.

Everything here talks to kubesim in-process (``sim.call``): the faults injected into its
HTTP layer hit the operator, never the test's own reads and writes.

The simulated kubelet runs no code, so the workload plays the workers: a kubesim mutator
(``api.add_mutator``, the hook Kueue's pod webhook uses) marks every TrainingJob worker and
inference pod to succeed shortly after it starts (``kubesim.io/succeed-after``).

Duplicates and leftovers are judged against twins: before the faults, one object of each
shape (a standalone server with each home retention policy, a distributed one, a user with
each deletion policy, a training job, an inference job with each volume TTL) converges and
is deleted without faults; each object of the burst must then own exactly what its twin
owned (its census: the objects it owns, labels or annotates as its own, counted by kind),
and keep after its deletion exactly what its twin kept.
"""
from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

from _data_safety import last_request
from _e2e_helpers import GROUP, KEY, VERSION

API = f"{GROUP}/{VERSION}"
DEVSERVERS = f"devservers.{GROUP}"
DEVUSERS = f"devusers.{GROUP}"
TRAININGJOBS = f"trainingjobs.{GROUP}"
EAJS = f"ephemeralaccelerationjobs.{GROUP}"
PRIMARY_RESOURCE = "operator-sdk/primary-resource"
# Nodes for up to ~100 small servers (2 CPU, 8Gi each) and the jobs' workers.
NODES = "cpu:16x{cpu:64,memory:256Gi,ephemeral-storage:1Ti,labels:{torchdev.io/node-pool:cpu}}"
# Kinds whose objects a census counts (a primary's children); Events are counted apart.
CENSUS = ("statefulsets.apps", "services", "configmaps", "secrets", "serviceaccounts",
          "roles.rbac.authorization.k8s.io", "rolebindings.rbac.authorization.k8s.io",
          "persistentvolumeclaims", "pods", "jobs.batch", "resourcequotas", "limitranges",
          "networkpolicies.networking.k8s.io", f"usagerecords.{GROUP}", "namespaces")
SUCCEED_AFTER = "1"


@dataclass(frozen=True)
class Primary:
    resource: str
    namespace: str  # "" for a DevUser
    name: str
    shape: str  # what its twin is: e.g. "server-retain@user-delete", "user-delete", "eaj-short"

    @property
    def kind(self) -> str:
        return {DEVSERVERS: "DevServer", DEVUSERS: "DevUser", TRAININGJOBS: "TrainingJob",
                EAJS: "EphemeralAccelerationJob"}[self.resource]

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace + '/' if self.namespace else ''}{self.name}"


# -- the objects ------------------------------------------------------------------------------
def devserver(name: str, shape: str) -> dict:
    spec: dict[str, Any] = {"owner": "rel@example.com", "flavor": "cpu-small", "sshPublicKeys": [KEY],
                            "persistentHomeSize": "10Gi",
                            "homeRetentionPolicy": "Delete" if shape.split("@")[0].endswith("-delete") else "Retain"}
    if shape.startswith("distributed"):
        spec.update(mode="distributed", distributed={"worldSize": 2, "nprocsPerNode": 1, "backend": "gloo"})
    return {"apiVersion": API, "kind": "DevServer", "metadata": {"name": name}, "spec": spec}


def devuser(name: str, shape: str) -> dict:
    return {"apiVersion": API, "kind": "DevUser", "metadata": {"name": name},
            "spec": {"email": f"{name}@example.com", "sshPublicKeys": [KEY],
                     "deletionPolicy": "Delete" if shape == "user-delete" else "Retain",
                     "sharedStorage": {"size": "10Gi"}}}


def trainingjob(name: str, shape: str) -> dict:
    return {"apiVersion": API, "kind": "TrainingJob", "metadata": {"name": name},
            "spec": {"model": "mlp", "dataset": "synthetic", "numWorkers": 2, "gpusPerWorker": 0,
                     "networking": {"backend": "gloo"}, "hyperparameters": {"epochs": 2},
                     "checkpoint": {"enabled": True}}}


def eaj(name: str, shape: str) -> dict:
    return {"apiVersion": API, "kind": "EphemeralAccelerationJob", "metadata": {"name": name},
            "spec": {"model": "resnet50", "input": {"type": "image", "path": "/artifacts/input.jpg"},
                     "resources": {"gpu": 0}, "ttlSecondsAfterFinished": 1,
                     "pvcTTLSecondsAfterFinished": 3 if shape == "eaj-short" else 3600}}


BUILDERS: dict[str, Callable[[str, str], dict]] = {
    DEVSERVERS: devserver, DEVUSERS: devuser, TRAININGJOBS: trainingjob, EAJS: eaj}


def succeed_workers(rt, obj: dict) -> None:
    """A kubesim mutator: TrainingJob workers and inference pods succeed soon after they start."""
    if rt.key != "pods":
        return
    meta = obj.setdefault("metadata", {})
    labels = meta.get("labels") or {}
    if "job-name" in labels or f"{GROUP}/ephemeralaccelerationjob" in labels:
        meta.setdefault("annotations", {}).setdefault("kubesim.io/succeed-after", SUCCEED_AFTER)


def install(sim) -> None:
    """The workload's mutator (once per simulator)."""
    sim.call(sim.api.add_mutator, succeed_workers)


def get(sim, resource: str, namespace: str, name: str) -> dict | None:
    try:
        return sim.call(sim.api.get, resource, namespace or None, name)
    except Exception:  # noqa: BLE001 - not found
        return None


def items(sim, resource: str, namespace: str | None = None) -> list[dict]:
    return sim.call(sim.api.list, resource, namespace)["items"]


def condition(obj: dict, ctype: str) -> dict:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == ctype), {})


def ensure_namespace(sim, name: str) -> None:
    if get(sim, "namespaces", "", name) is None:
        sim.call(sim.api.create, "namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})


# -- expected states --------------------------------------------------------------------------
def converged(sim, p: Primary) -> str | None:
    """None when the object is in its expected state, else what it is waiting for."""
    obj = get(sim, p.resource, p.namespace, p.name)
    if obj is None:
        return "missing"
    status = obj.get("status") or {}
    if status.get("observedGeneration") != obj["metadata"].get("generation"):
        return f"observedGeneration {status.get('observedGeneration')}"
    if p.resource == DEVSERVERS:
        ready = condition(obj, "Ready")
        return None if ready.get("status") == "True" else f"Ready {ready.get('reason')}"
    if p.resource == DEVUSERS:
        ok = status.get("phase") == "Active" and condition(obj, "Ready").get("status") == "True"
        return None if ok else f"phase {status.get('phase')}"
    if p.resource == TRAININGJOBS:
        return None if status.get("state") == "Completed" else f"state {status.get('state')}"
    # an inference job: finished, its pod gone at its TTL, its volume as its TTL says
    artifacts = condition(obj, "ArtifactsAvailable").get("reason")
    want = "Expired" if p.shape == "eaj-short" else "Bound"
    pod = get(sim, "pods", p.namespace, f"ephemeralaccelerationjob-{p.name}")
    if status.get("phase") != "Succeeded" or artifacts != want or pod is not None:
        return f"phase {status.get('phase')}, artifacts {artifacts}, pod {'there' if pod else 'gone'}"
    return None


def gone(sim, p: Primary) -> bool:
    return get(sim, p.resource, p.namespace, p.name) is None


# -- census: what a primary owns --------------------------------------------------------------
def census(sim, p: Primary, uid: str | None) -> Counter:
    """The objects of ``p`` by kind: owned by its uid, labelled with its name, or annotated as its
    primary resource (a DevUser's namespace objects); a DevUser's count its namespace too."""
    label = {DEVSERVERS: f"{GROUP}/devserver", DEVUSERS: f"{GROUP}/user",
             TRAININGJOBS: f"{GROUP}/trainingjob", EAJS: f"{GROUP}/ephemeralaccelerationjob"}[p.resource]
    annotated = f"{p.namespace}/{p.name}" if p.namespace else f"/{p.name}"
    found: Counter = Counter()
    for resource in CENSUS:
        for o in items(sim, resource, p.namespace or None):
            meta = o["metadata"]
            if meta.get("deletionTimestamp"):
                continue
            if p.resource == DEVUSERS and f"{GROUP}/devserver" in (meta.get("labels") or {}):
                continue  # a server's objects in the user's namespace are the server's
            owned = uid is not None and any(r.get("uid") == uid for r in meta.get("ownerReferences") or [])
            mine = (meta.get("labels") or {}).get(label) == p.name or \
                (meta.get("annotations") or {}).get(PRIMARY_RESOURCE) == annotated
            if owned or mine:
                found[resource] += 1
    return found


def object_duplicates(sim, namespaces: set[str]) -> list[str]:
    """Repeated entries inside objects: a finalizer twice, two ownerReferences to one owner,
    two conditions of one type."""
    bad = []
    for resource in CENSUS + (DEVSERVERS, DEVUSERS, TRAININGJOBS, EAJS):
        for o in items(sim, resource):
            meta = o["metadata"]
            if meta.get("namespace", "") not in namespaces | {""}:
                continue
            where = f"{resource} {meta.get('namespace', '')}/{meta['name']}"
            fins = meta.get("finalizers") or []
            owners = [r.get("uid") for r in meta.get("ownerReferences") or []]
            types = [c.get("type") for c in (o.get("status") or {}).get("conditions") or []
                     if isinstance(o.get("status"), dict)]
            for what, values in (("finalizer", fins), ("ownerReference", owners), ("condition", types)):
                dup = [v for v, n in Counter(values).items() if n > 1]
                if dup:
                    bad.append(f"{where}: {what} {dup} repeated")
    return bad


# -- the burst --------------------------------------------------------------------------------
@dataclass
class Burst:
    """Objects of every kind. ``counts``: servers, distributed, users, trainingjobs, eajs."""
    sim: Any
    prefix: str
    servers: int = 0
    distributed: int = 0
    users: int = 0
    trainingjobs: int = 0
    eajs: int = 0
    primaries: list[Primary] = field(default_factory=list)
    uids: dict[Primary, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        p = self.prefix
        self.namespace = f"{p}-jobs"
        # every other object deletes its data with it (the shape a small burst has first)
        users = [Primary(DEVUSERS, "", f"{p}u{i}", "user-retain" if i % 2 else "user-delete")
                 for i in range(self.users)]
        server_namespaces = [f"dev-{u.name}" for u in users] + [f"{p}-servers"]
        # what becomes of a server's namespace is part of its shape (a user deleted with
        # deletionPolicy Delete takes the server's retained home and usage record with it)
        fate = [u.shape for u in users] + ["plain"]

        def server(i: int, kind: str, offset: int) -> Primary:
            at = (i + offset) % len(server_namespaces)
            return Primary(DEVSERVERS, server_namespaces[at], f"{p}{kind[0]}{i}",
                           f"{kind}-{'retain' if i % 2 else 'delete'}@{fate[at]}")
        servers = [server(i, "server", 0) for i in range(self.servers)]
        servers += [server(i, "distributed", 1) for i in range(self.distributed)]
        jobs = [Primary(TRAININGJOBS, self.namespace, f"{p}t{i}", "trainingjob") for i in range(self.trainingjobs)]
        eajs = [Primary(EAJS, self.namespace, f"{p}e{i}", "eaj-long" if i % 2 else "eaj-short")
                for i in range(self.eajs)]
        self.primaries = users + servers + jobs + eajs
        self.server_namespaces = server_namespaces

    @property
    def namespaces(self) -> set[str]:
        return set(self.server_namespaces) | {self.namespace}

    def create(self) -> None:
        for ns in (self.namespace, self.server_namespaces[-1]):
            ensure_namespace(self.sim, ns)
        for p in self.primaries:
            if p.resource == DEVUSERS:
                self._create(p)
        for p in self.primaries:
            if p.resource == DEVSERVERS and p.namespace.startswith("dev-"):
                # the user's namespace is the operator's to make: wait for it, as a user would
                self.sim.wait_for(lambda ns=p.namespace: get(self.sim, "namespaces", "", ns), 600,
                                  interval=0.1, message=f"namespace {p.namespace}")
            if p.resource != DEVUSERS:
                self._create(p)

    def _create(self, p: Primary) -> None:
        obj = BUILDERS[p.resource](p.name, p.shape)
        if p.resource == DEVSERVERS and p.namespace.startswith("dev-"):
            # a server in a DevUser's namespace dev-<user> is owned by that user (devuser():
            # <user>@example.com); any other owner is OwnerMismatch (docs/api.md)
            obj["spec"]["owner"] = p.namespace[len("dev-"):] + "@example.com"
        created = self.sim.call(self.sim.api.create, p.resource, obj, p.namespace or None)
        self.uids[p] = created["metadata"]["uid"]

    def pending(self) -> dict[str, str]:
        out = {}
        for p in self.primaries:
            why = converged(self.sim, p)
            if why:
                out[str(p)] = why
        return out

    def wait_converged(self, timeout: float, runtime=None) -> float:
        """Seconds until every object is in its expected state (TimeoutError naming those that
        are not, and with ``runtime``, the operator in this process, its last reconciles of
        each: what caused them, how they ended and what they queued next)."""
        start = time.monotonic()
        last: dict[str, str] = {}

        def done():
            last.clear()
            last.update(self.pending())
            return not last
        try:
            self.sim.wait_for(done, timeout, interval=0.5, message="every object converged")
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}; not converged: {dict(list(last.items())[:10])} "
                               f"({len(last)} in all){self._reconciles(runtime, last)}") from None
        return time.monotonic() - start

    def explain(self, runtime, bad: list[str]) -> str:
        """For the objects named in ``bad`` (compare's lines): the operator's last reconciles of
        each, the object as it was when its DELETE was served, and what kubesim deleted in its
        namespace that carries its label."""
        names = {line.split(":", 1)[0] for line in bad}
        lines = [self._reconciles(runtime, names)]
        deletes = self.sim.deletion_requests()
        for p in self.primaries:
            if str(p) not in names:
                continue
            at_delete = last_request(deletes, p.resource, p.namespace, p.name)
            if at_delete:
                obj = at_delete["object"]
                lines.append(f"{p} at its DELETE: finalizers={obj['metadata'].get('finalizers')} "
                             f"status={json.dumps(obj.get('status'), sort_keys=True)[:1500]}")
            label = {DEVSERVERS: f"{GROUP}/devserver"}.get(p.resource)
            for r in deletes:
                labels = (r["object"].get("metadata") or {}).get("labels") or {}
                if label and r["namespace"] == p.namespace and labels.get(label) == p.name:
                    lines.append(f"  deleted: {r['resource']} {r['name']} by {r.get('requested_by')}")
        return "\n".join(lines)

    def _reconciles(self, runtime, names) -> str:
        if runtime is None:
            return ""
        lines = []
        for p in self.primaries:
            if str(p) not in names:
                continue
            recs = [r for r in runtime.history(p.kind) if (r.namespace, r.name) == (p.namespace, p.name)]
            lines.append(f"{p}: {len(recs)} reconciles on record; queued or running now: "
                         f"{runtime.reconciling(p.kind, p.namespace, p.name)}; requeue due in: "
                         f"{runtime.requeue_due_in(p.kind, p.namespace, p.name)}")
            for r in recs[-6:]:
                lines.append(f"  {time.strftime('%H:%M:%S', time.gmtime(r.started))} causes={r.causes} "
                             f"ok={r.ok} ran={r.ran} ansible={r.ansible} failed={r.failed_tasks} "
                             f"error={r.error} next={r.next!r}")
        return "\n" + "\n".join(lines[:80])

    def censuses(self) -> dict[Primary, Counter]:
        return {p: census(self.sim, p, self.uids.get(p)) for p in self.primaries}

    def delete(self) -> None:
        # servers and jobs first, then the users (a user's deletion suspends its servers)
        for p in sorted(self.primaries, key=lambda p: p.resource == DEVUSERS):
            try:
                self.sim.call(self.sim.api.delete, p.resource, p.namespace or None, p.name)
            except Exception:  # noqa: BLE001 - already gone
                pass

    def wait_gone(self, timeout: float) -> float:
        start = time.monotonic()
        self.sim.wait_for(lambda: all(gone(self.sim, p) for p in self.primaries), timeout, interval=0.5,
                          message="every object deleted")
        return time.monotonic() - start


def compare(burst: dict[Primary, Counter], twins: dict[str, Counter], what: str) -> list[str]:
    """Each object's census against its twin's (same shape)."""
    bad = []
    for p, got in burst.items():
        assert p.shape in twins, f"{p}: no twin of shape {p.shape} ({sorted(twins)})"
        want = twins[p.shape]
        if got != want:
            extra = got - want
            missing = want - got
            bad.append(f"{p}: {what} differs from its twin's: extra {dict(extra)}, missing {dict(missing)}")
    return bad


def gc_pending(sim, namespaces: set[str]) -> list[str]:
    """What the garbage collector and the namespace controller still have to do: objects being
    deleted, objects whose owner is gone, namespaces terminating (empty once they are done)."""
    uids = set()
    objects = []
    for resource in CENSUS + (DEVSERVERS, DEVUSERS, TRAININGJOBS, EAJS):
        for o in items(sim, resource):
            uids.add(o["metadata"]["uid"])
            if o["metadata"].get("namespace", "") in namespaces | {""}:
                objects.append((resource, o))
    pending = []
    for resource, o in objects:
        meta = o["metadata"]
        where = f"{resource} {meta.get('namespace', '')}/{meta['name']}"
        if meta.get("deletionTimestamp"):
            pending.append(f"{where} being deleted")
        dangling = [r.get("name") for r in meta.get("ownerReferences") or [] if r.get("uid") not in uids]
        if dangling and len(dangling) == len(meta.get("ownerReferences") or []):
            pending.append(f"{where} owned by {dangling} (gone)")
    return pending


def wait_settled(sim, namespaces: set[str], timeout: float) -> None:
    """Until the garbage collector and the namespace controller are done with ``namespaces``."""
    last: list[str] = []

    def done():
        last[:] = gc_pending(sim, namespaces)
        return not last
    try:
        sim.wait_for(done, timeout, interval=0.2, message="deletions settled")
    except TimeoutError as exc:
        raise TimeoutError(f"{exc}: {last[:10]}") from None
