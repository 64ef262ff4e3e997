"""One controller per watch: event predicates, work queue, workers and the reconcile loop.

Ported from operator-framework/ansible-operator-plugins:
internal/ansible/controller/controller.go (watch + predicates),
internal/ansible/controller/reconcile.go (AnsibleOperatorReconciler.Reconcile),
internal/ansible/proxy/proxy.go (addWatchToController: dependent watches),
internal/ansible/handler/logging_enqueue_owner.go (owner mapping) and
operator-lib handler.EnqueueRequestForAnnotation / predicate.DependentPredicate,
plus controller-runtime's reconcileHandler (requeue / rate-limit rules).

Which events trigger a reconcile of the primary resource (controller.go)::

    predicates = Or(GenerationChangedPredicate, NoGenerationPredicate)
                 [Or'ed with AnnotationChangedPredicate when watchAnnotationsChanges]
                 [And'ed with LabelSelectorPredicate(selector) when a selector is set]

so: every create and delete event; an update only when metadata.generation changed (spec
changes of a CR with a status subresource), or when the object has no generation at all,
or -- with watchAnnotationsChanges -- when the annotations changed. Status-only, label-only
and finalizer-only updates do NOT trigger (the runtime's own status and finalizer writes do
not loop). One addition: an update that sets metadata.deletionTimestamp also triggers. A real
API server bumps metadata.generation when it sets deletionTimestamp on an object with
finalizers (so GenerationChangedPredicate fires there); simulators that do not bump it
would otherwise never run the finalizer.

Dependent resources (proxy.go addWatchToController) are watched with
``predicate.DependentPredicate``: creates are ignored, deletes always pass, updates pass
when anything but ``status`` and ``metadata.resourceVersion`` changed. Their events are
mapped to the owner through every ownerReference whose group and kind are the primary's
(controller=true is NOT required: the handler is built without OnlyControllerOwner), for
both the old and the new object; or, for objects in another namespace / cluster-scoped
objects, through the ``operator-sdk/primary-resource`` (``ns/name``) and
``operator-sdk/primary-resource-type`` (``Kind.group``) annotations.

ansible-operator learns the dependent kinds from its API proxy (objects the role creates
or reads through it, owned by the CR) and its proxy injects the owner references. This
runtime has no proxy: it learns the kinds from the role's results (every Kubernetes object
found in a task result -- ``kubernetes.core.k8s`` ``result``, ``k8s_info`` ``resources``,
loop ``results`` -- that carries an ownerReference to, or the primary-resource annotations
of, this watch's kind) and from a static list watched from the start: the kinds the role's
templates render, less the blacklist (dependents.py), plus ``dependent_watches``. It never
adds owner references: the roles must set them (and the annotations for cross-namespace or
cluster-scoped children) themselves.
"""
from __future__ import annotations

import copy
import hashlib
import json
import logging
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from . import status as st
from .gotime import DurationError, format_duration, parse_duration
from .informer import Informer
from .kube import ApiError, KubeClient, ResourceInfo
from .runner import AnsibleRunner, RunResult
from .watches import GVK, Watch, selector_matches
from .workqueue import RateLimitingQueue

log = logging.getLogger("torchdev_runtime")

RECONCILE_PERIOD_ANNOTATION = "ansible.sdk.operatorframework.io/reconcile-period"
PRIMARY_RESOURCE_ANNOTATION = "operator-sdk/primary-resource"
PRIMARY_RESOURCE_TYPE_ANNOTATION = "operator-sdk/primary-resource-type"


class ReconcileError(Exception):
    pass


@dataclass
class Result:
    requeue: bool = False
    requeue_after: float = 0.0
    from_role: bool = False  # requeue_after asked by the role (a deadline), not the reconcile period


# controller-runtime's buckets of controller_runtime_reconcile_time_seconds (seconds)
RECONCILE_TIME_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6,
                          0.7, 0.8, 0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9,
                          10, 15, 20, 25, 30, 40, 50, 60, float("inf"))


@dataclass
class ReconcileRecord:
    kind: str
    namespace: str
    name: str
    started: float
    duration: float = 0.0
    ok: bool = False
    error: str | None = None
    ran: bool = False
    run_seconds: float = 0.0  # time spent in ansible-runner (the rest is API calls / queueing)
    finalizer_run: bool = False
    # Why it ran: change (the object), dependent (an owned object), deadline (the role's
    # requeue_after), resync (the reconcile period), retry (after a failure), manual.
    causes: list[str] = field(default_factory=list)
    ansible: dict[str, int] = field(default_factory=dict)
    failed_tasks: list[tuple[str, str]] = field(default_factory=list)
    # What came next: "retry in 0.01s", "deadline in 30s", "resync in 10m", "" (nothing queued)
    next: str = ""


# --- predicates ----------------------------------------------------------------------------

def _generation(obj: dict[str, Any] | None) -> int:
    return int(((obj or {}).get("metadata") or {}).get("generation") or 0)


def _md(obj: dict[str, Any] | None) -> dict[str, Any]:
    return (obj or {}).get("metadata") or {}


def primary_event_passes(watch: Watch, etype: str, old: dict[str, Any] | None,
                         new: dict[str, Any] | None) -> bool:
    obj = new if new is not None else old
    if etype in ("ADDED", "DELETED"):
        return selector_matches(watch.selector, _md(obj).get("labels"))
    # MODIFIED
    passes = _generation(old) != _generation(new)                          # GenerationChanged
    passes = passes or (_generation(old) == 0 and _generation(new) == 0)   # NoGeneration
    if watch.watch_annotations_changes:
        passes = passes or _md(old).get("annotations") != _md(new).get("annotations")
    # runtime addition (see module docstring): deletion started
    passes = passes or (not _md(old).get("deletionTimestamp") and
                        bool(_md(new).get("deletionTimestamp")))
    return passes and selector_matches(watch.selector, _md(new).get("labels"))


def _strip_for_dependent(obj: dict[str, Any]) -> dict[str, Any]:
    """What DependentPredicate compares: the object without status and resourceVersion, and
    its managedFields without their times (removeTimeFromManagedFields)."""
    o = dict(obj)
    o.pop("status", None)
    md = dict(o.get("metadata") or {})
    md.pop("resourceVersion", None)
    if isinstance(md.get("managedFields"), list):
        md["managedFields"] = [{k: v for k, v in e.items() if k != "time"} if isinstance(e, dict) else e
                               for e in md["managedFields"]]
    o["metadata"] = md
    return o


# What a dependent's cache keeps of each object (dependent_view): the metadata the mapping to
# the owner reads, and a digest of everything DependentPredicate compares.
DEPENDENT_METADATA = ("name", "namespace", "uid", "resourceVersion", "generation", "labels", "annotations",
                      "ownerReferences", "deletionTimestamp")
DEPENDENT_DIGEST = "torchdev-runtime/digest"


def dependent_view(obj: dict[str, Any]) -> dict[str, Any]:
    """What the cache of a kind watched only as a dependent keeps of an object: apiVersion,
    kind, the metadata the owner mapping reads (ownerReferences, annotations, ...) and, in
    ``metadata[DEPENDENT_DIGEST]``, a digest of all that dependent_event_passes compares (the
    object but its status and resourceVersion).  The
    predicate gives the same answer on two views as on the two objects; the rest (a
    ConfigMap's data, a StatefulSet's pod template, managedFields) is not kept: it is what
    makes a cache of every ConfigMap and StatefulSet of the cluster large, and nothing reads it."""
    md = obj.get("metadata") or {}
    digest = hashlib.sha256(json.dumps(_strip_for_dependent(obj), sort_keys=True, separators=(",", ":"),
                                       default=str).encode()).hexdigest()
    view_md = {k: md[k] for k in DEPENDENT_METADATA if k in md}
    view_md[DEPENDENT_DIGEST] = digest
    return {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "metadata": view_md}


def dependent_event_passes(etype: str, old: dict[str, Any] | None,
                           new: dict[str, Any] | None) -> bool:
    """operator-lib predicate.DependentPredicate."""
    if etype == "ADDED":
        return False
    if etype == "DELETED":
        return True
    if old is None or new is None:
        return False
    return _strip_for_dependent(old) != _strip_for_dependent(new)


def _api_group(api_version: str) -> str:
    return api_version.split("/", 1)[0] if "/" in api_version else ""


def owner_requests(obj: dict[str, Any] | None, owner: GVK,
                   owner_namespaced: bool) -> set[tuple[str, str]]:
    out: set[tuple[str, str]] = set()
    if not obj:
        return out
    md = _md(obj)
    for ref in md.get("ownerReferences") or []:
        if ref.get("kind") == owner.kind and _api_group(ref.get("apiVersion") or "") == \
                owner.group:
            out.add(((md.get("namespace") or "") if owner_namespaced else "", ref.get("name")))
    return out


def annotation_requests(obj: dict[str, Any] | None, owner: GVK) -> set[tuple[str, str]]:
    out: set[tuple[str, str]] = set()
    if not obj:
        return out
    ann = _md(obj).get("annotations") or {}
    typ = ann.get(PRIMARY_RESOURCE_TYPE_ANNOTATION)
    nn = ann.get(PRIMARY_RESOURCE_ANNOTATION)
    if not typ or not nn:
        return out
    kind, _, group = typ.partition(".")
    if kind != owner.kind or group != owner.group:
        return out
    parts = nn.split("/")
    if len(parts) == 1:
        out.add(("", parts[0]))
    elif len(parts) == 2:
        out.add((parts[0], parts[1]))
    return out


def find_k8s_objects(value: Any, depth: int = 0, out: list | None = None) -> list[dict]:
    """Kubernetes objects (dicts with apiVersion, kind, metadata.name) inside a task result."""
    if out is None:
        out = []
    if depth > 6:
        return out
    if isinstance(value, dict):
        md = value.get("metadata")
        if isinstance(value.get("apiVersion"), str) and isinstance(value.get("kind"), str) \
                and isinstance(md, dict) and md.get("name"):
            out.append(value)
            return out
        for k, v in value.items():
            if k in ("invocation", "diff", "_ansible_no_log"):
                continue
            if isinstance(v, (dict, list)):
                find_k8s_objects(v, depth + 1, out)
    elif isinstance(value, list):
        for v in value:
            if isinstance(v, (dict, list)):
                find_k8s_objects(v, depth + 1, out)
    return out


# --- the controller ------------------------------------------------------------------------

class ControllerHost(Protocol):
    """What a controller needs from the runtime that hosts it (torchdev_runtime.runtime.Runtime):
    the API client, the informers it shares with the other controllers, discovery, the
    static dependents of its kind, the log settings and a way to signal activity."""

    client: KubeClient
    verbose: bool
    debug_logs: bool

    def resource_for(self, gvk: GVK) -> ResourceInfo: ...

    def informers_for(self, gvk: GVK, namespaced: bool) -> list[Informer]: ...

    def static_dependents(self, gvk: GVK) -> list[GVK]: ...

    def notify_activity(self) -> None: ...


class Controller:
    def __init__(self, runtime: ControllerHost, watch: Watch, runner: AnsibleRunner,
                 reconcile_period: float):
        self.runtime = runtime
        self.watch = watch
        self.gvk = watch.gvk
        self.runner = runner
        self.reconcile_period = reconcile_period
        self.queue = RateLimitingQueue(name=f"{watch.gvk.kind}")
        self.primary_informers: list[Informer] = []
        self.primary_namespaced = True
        self._workers: list[threading.Thread] = []
        self._dep_lock = threading.Lock()
        self.dependent_modes: dict[GVK, set[str]] = {}  # gvk -> {"owner", "annotation"}
        self._stats_lock = threading.Lock()
        self.stats = {"started": 0, "succeeded": 0, "failed": 0, "runs": 0,
                      "finalizer_runs": 0, "in_flight": 0}
        self.history: list[ReconcileRecord] = []
        self.history_limit = 1000
        # Causes of the reconciles (ReconcileRecord.causes), counted per cause.
        self.causes: dict[str, int] = {}
        # Reconcile durations (seconds), as controller-runtime's histogram: counts per bucket.
        self.duration_buckets = [0] * len(RECONCILE_TIME_BUCKETS)
        self.duration_sum = 0.0
        self._pending_causes: dict[tuple[str, str], set[str]] = {}
        self._delayed_causes: dict[tuple[str, str], tuple[float, str]] = {}

    # -- setup --------------------------------------------------------------------------
    def start(self) -> None:
        info = self.runtime.resource_for(self.gvk)
        self.primary_namespaced = info.namespaced
        for inf in self.runtime.informers_for(self.gvk, info.namespaced):
            inf.add_handler(self._on_primary_event)
            self.primary_informers.append(inf)
        for i in range(max(1, self.watch.max_concurrent_reconciles)):
            t = threading.Thread(target=self._worker, name=f"{self.gvk.kind}-worker-{i}",
                                 daemon=True)
            t.start()
            self._workers.append(t)
        for dep in self.runtime.static_dependents(self.gvk):
            self.add_dependent_watch(dep, modes={"owner", "annotation"})

    def shutdown(self) -> None:
        self.queue.shutdown()

    def join(self, timeout: float) -> bool:
        end = time.monotonic() + timeout
        for t in self._workers:
            t.join(max(0.0, end - time.monotonic()))
        return not any(t.is_alive() for t in self._workers)

    # -- event handlers -----------------------------------------------------------------
    def add(self, key: tuple[str, str], cause: str) -> None:
        """Queue a reconcile of ``key`` now, recording why."""
        with self._stats_lock:
            self._pending_causes.setdefault(key, set()).add(cause)
        self.queue.add(key)

    def _add_after(self, key: tuple[str, str], delay: float, cause: str) -> None:
        with self._stats_lock:
            at = time.monotonic() + delay
            current = self._delayed_causes.get(key)
            if current is None or at < current[0]:  # as the queue: the earliest of several stays
                self._delayed_causes[key] = (at, cause)
        self.queue.add_after(key, delay)

    def _take_causes(self, key: tuple[str, str]) -> list[str]:
        """The causes of the reconcile of ``key`` starting now: the events queued since the last
        one, and the delayed requeue if it has come due (the queue keeps the earliest of several
        add_after calls, and so does this record)."""
        with self._stats_lock:
            causes = self._pending_causes.pop(key, set())
            delayed = self._delayed_causes.get(key)
            if delayed and time.monotonic() >= delayed[0] - 0.05:
                causes.add(delayed[1])
                del self._delayed_causes[key]
            for cause in causes:
                self.causes[cause] = self.causes.get(cause, 0) + 1
            return sorted(causes)

    def _on_primary_event(self, etype: str, old, new) -> None:
        if primary_event_passes(self.watch, etype, old, new):
            md = _md(new if new is not None else old)
            self.add((md.get("namespace") or "", md.get("name")), "change")

    def _make_dependent_handler(self, dep: GVK):
        def handler(etype: str, old, new) -> None:
            if not dependent_event_passes(etype, old, new):
                return
            modes = self.dependent_modes.get(dep, set())
            reqs: set[tuple[str, str]] = set()
            if "owner" in modes:
                reqs |= owner_requests(old, self.gvk, self.primary_namespaced)
                reqs |= owner_requests(new, self.gvk, self.primary_namespaced)
            if "annotation" in modes:
                reqs |= annotation_requests(old, self.gvk)
                reqs |= annotation_requests(new, self.gvk)
            for r in reqs:
                if self.runtime.verbose:
                    md = _md(new if new is not None else old)
                    log.info("%s %s/%s %s -> reconcile %s %s/%s", dep.kind,
                             md.get("namespace") or "", md.get("name"), etype.lower(),
                             self.gvk.kind, r[0], r[1])
                self.add(r, "dependent")
        return handler

    def add_dependent_watch(self, dep: GVK, modes: set[str]) -> None:
        if not self.watch.watch_dependent_resources:
            return
        if dep in self.watch.blacklist:
            return
        if dep == self.gvk:
            return
        with self._dep_lock:
            cur = self.dependent_modes.get(dep)
            if cur is not None and modes <= cur:
                return
            new_modes = set(cur or ()) | modes
            self.dependent_modes[dep] = new_modes
            first = cur is None
        if not first:
            return
        try:
            info = self.runtime.resource_for(dep)
        except ApiError as exc:
            log.warning("%s: cannot watch dependent %s: %s", self.gvk.kind, dep, exc)
            with self._dep_lock:
                self.dependent_modes.pop(dep, None)
            return
        log.info("%s: watching dependent resource %s (%s)", self.gvk.kind,
                 f"{dep.api_version}/{dep.kind}", ", ".join(sorted(new_modes)))
        handler = self._make_dependent_handler(dep)
        for inf in self.runtime.informers_for(dep, info.namespaced):
            inf.add_handler(handler)

    def _learn_dependents(self, run: RunResult) -> None:
        if not self.watch.watch_dependent_resources:
            return
        for ev in run.events:
            if ev.get("event") not in ("runner_on_ok", "runner_item_on_ok"):
                continue
            res = (ev.get("event_data") or {}).get("res")
            if not isinstance(res, dict):
                continue
            for obj in find_k8s_objects(res):
                try:
                    dep = GVK.from_api_version(obj["apiVersion"], obj["kind"])
                except (KeyError, AttributeError):
                    continue
                if dep == self.gvk or dep in self.dependent_modes and \
                        self.dependent_modes[dep] >= {"owner", "annotation"}:
                    continue
                modes: set[str] = set()
                if owner_requests(obj, self.gvk, self.primary_namespaced):
                    modes.add("owner")
                if annotation_requests(obj, self.gvk):
                    ns = _md(obj).get("namespace")
                    if ns or self.watch.watch_cluster_scoped_resources:
                        modes.add("annotation")
                if modes:
                    self.add_dependent_watch(dep, modes)

    # -- workers ------------------------------------------------------------------------
    def _worker(self) -> None:
        while True:
            key, shutdown = self.queue.get()
            if shutdown:
                return
            try:
                self._process(key)
            finally:
                self.queue.done(key)

    def _process(self, key: tuple[str, str]) -> None:
        rec = ReconcileRecord(self.gvk.kind, key[0], key[1], time.time())
        rec.causes = self._take_causes(key) or ["unknown"]
        with self._stats_lock:
            self.stats["started"] += 1
            self.stats["in_flight"] += 1
        t0 = time.monotonic()
        err: BaseException | None = None
        res = Result()
        try:
            res = self.reconcile(key, rec)
        except Exception as exc:  # noqa: BLE001
            err = exc
        rec.duration = time.monotonic() - t0
        rec.ok = err is None
        rec.error = None if err is None else str(err)
        with self._stats_lock:
            self.stats["in_flight"] -= 1
            self.stats["succeeded" if err is None else "failed"] += 1
            for i, bound in enumerate(RECONCILE_TIME_BUCKETS):
                if rec.duration <= bound:
                    self.duration_buckets[i] += 1
            self.duration_sum += rec.duration
            self.history.append(rec)
            if len(self.history) > self.history_limit:
                del self.history[: len(self.history) - self.history_limit]
        # controller-runtime reconcileHandler
        if err is not None:
            with self._stats_lock:
                self._pending_causes.setdefault(key, set()).add("retry")
            delay = self.queue.add_rate_limited(key)
            rec.next = f"retry in {format_duration(delay)}"
            log.error("%s %s: reconcile failed: %s; retry in %s (attempt %d)", self.gvk.kind,
                      _keystr(key), err, format_duration(delay), self.queue.num_requeues(key))
        elif res.requeue_after > 0:
            self.queue.forget(key)
            cause = "deadline" if res.from_role else "resync"
            rec.next = f"{cause} in {format_duration(res.requeue_after)}"
            self._add_after(key, res.requeue_after, cause)
        elif res.requeue:
            with self._stats_lock:
                self._pending_causes.setdefault(key, set()).add("retry")
            rec.next = f"retry in {format_duration(self.queue.add_rate_limited(key))}"
        else:
            self.queue.forget(key)
        self.runtime.notify_activity()

    # -- reconcile ----------------------------------------------------------------------
    def _cached(self, ns: str, name: str) -> dict[str, Any] | None:
        for inf in self.primary_informers:
            obj = inf.get(ns, name)
            if obj is not None:
                return obj
        return None

    def _api_get(self, ns: str, name: str) -> dict[str, Any] | None:
        try:
            return self.runtime.client.get(self.gvk, ns or None, name)
        except ApiError as exc:
            if exc.not_found:
                return None
            raise

    def _mark_running(self, ns: str, name: str) -> dict[str, Any]:
        obj = self._api_get(ns, name)
        if obj is None:
            raise ApiError(404, f"{self.gvk.kind} {ns}/{name} not found")
        obj["status"] = st.mark_running(obj)
        return self.runtime.client.update_status(obj)

    def _mark_error(self, ns: str, name: str, message: str) -> None:
        try:
            obj = self._api_get(ns, name)
            if obj is None:
                return
            obj["status"] = st.mark_error(obj, message)
            self.runtime.client.update_status(obj)
        except Exception as exc:  # noqa: BLE001
            log.error("%s %s/%s: unable to mark error: %s", self.gvk.kind, ns, name, exc)

    def _mark_done(self, ns: str, name: str, run: RunResult) -> None:
        obj = self._api_get(ns, name)
        if obj is None:
            return
        obj["status"] = st.mark_done(obj, run.stats_event, run.failure_messages)
        self.runtime.client.update_status(obj)

    def reconcile(self, key: tuple[str, str], rec: ReconcileRecord | None = None) -> Result:
        """AnsibleOperatorReconciler.Reconcile."""
        ns, name = key
        kname = _keystr(key)
        rec = rec or ReconcileRecord(self.gvk.kind, ns, name, time.time())
        cached = self._cached(ns, name)
        if cached is None:
            return Result()
        u = copy.deepcopy(cached)
        ident = str(random.getrandbits(62))
        result = Result(requeue_after=self.reconcile_period)
        annotations = _md(u).get("annotations") or {}
        if RECONCILE_PERIOD_ANNOTATION in annotations:
            try:
                result.requeue_after = parse_duration(annotations[RECONCILE_PERIOD_ANNOTATION])
            except DurationError as exc:
                self._mark_error(ns, name, f"Unable to parse reconcile period annotation: {exc}")
                raise ReconcileError(f"Unable to parse reconcile period annotation: {exc}") \
                    from None

        deleted = bool(_md(u).get("deletionTimestamp"))
        finalizer = self.watch.finalizer_name
        finalizer_exists = self.watch.finalizer is not None
        if finalizer not in (_md(u).get("finalizers") or []):
            if deleted:
                log.debug("%s %s: resource is terminated, skipping reconciliation",
                          self.gvk.kind, kname)
                return Result()
            if finalizer_exists:
                log.debug("%s %s: adding finalizer %s", self.gvk.kind, kname, finalizer)
                u["metadata"].setdefault("finalizers", [])
                u["metadata"]["finalizers"] = list(u["metadata"]["finalizers"]) + [finalizer]
                u = self.runtime.client.update(u)

        if not isinstance(u.get("spec"), dict):
            u["spec"] = {}

        if self.watch.manage_status:
            try:
                u = self._mark_running(ns, name)
            except ApiError as exc:
                # Go returns the NotFound error here (and retries once more to find nothing in
                # the cache); the object is gone, so we just stop without a noisy failure.
                if exc.not_found:
                    log.debug("%s %s: gone before the run", self.gvk.kind, kname)
                    return Result()
                raise

        try:
            run = self.runner.run(u, ident,
                                  verbose=self.runtime.verbose or self.runtime.debug_logs)
        except Exception as exc:  # noqa: BLE001
            self._mark_error(ns, name, "Unable to run reconciliation")
            raise ReconcileError(f"Unable to run ansible runner: {exc}") from exc
        rec.ran = True
        rec.run_seconds = run.duration
        rec.finalizer_run = run.finalizer_run
        rec.ansible = {"ok": run.ok, "changed": run.changed, "failed": run.failures,
                       "skipped": run.skipped}
        rec.failed_tasks = list(run.failed_tasks)
        with self._stats_lock:
            self.stats["runs"] += 1
            if run.finalizer_run:
                self.stats["finalizer_runs"] += 1
        self._learn_dependents(run)
        self._log_run(kname, run)

        if run.requeue_after_error:
            raise ReconcileError(f"Unable to parse time input: {run.requeue_after_error}")
        if run.tasks_after_requeue:
            raise ReconcileError(
                "task(s) ran after requeue_after: " + ", ".join(run.tasks_after_requeue)
                + " (ansible-operator ends the reconcile at requeue_after and removes the run's "
                "kubeconfig: make requeue_after the run's last task)")
        if run.requeue_after is not None:
            result.requeue_after = run.requeue_after
            result.from_role = True
            log.info("%s %s: set the reconciliation to occur after %s", self.gvk.kind, kname,
                     format_duration(run.requeue_after))
            return result

        if run.stats_event is None:
            tail = "\n".join(run.stdout.splitlines()[-40:])
            log.error("%s %s: did not receive playbook_on_stats event (ansible-runner %s, "
                      "rc=%s)\n%s", self.gvk.kind, kname, run.status, run.rc, tail)
            raise ReconcileError("did not receive playbook_on_stats event")

        fresh = self._api_get(ns, name)
        if fresh is None:
            return Result()
        run_successful = not run.failure_messages
        recently_deleted = bool(_md(fresh).get("deletionTimestamp"))
        if deleted and finalizer_exists and run_successful:
            fins = [f for f in (_md(fresh).get("finalizers") or []) if f != finalizer]
            fresh["metadata"]["finalizers"] = fins
            self.runtime.client.update(fresh)
            log.info("%s %s: finalizer %s done, removed", self.gvk.kind, kname, finalizer)
        elif recently_deleted and finalizer_exists:
            result.requeue = True

        if self.watch.manage_status:
            errmark: Exception | None = None
            try:
                self._mark_done(ns, name, run)
            except Exception as exc:  # noqa: BLE001
                log.error("%s %s: failed to mark status done: %s", self.gvk.kind, kname, exc)
                errmark = exc
            if not run_successful:
                raise ReconcileError("event runner on failed")
            if errmark is not None:
                raise errmark
            return result
        if not run_successful:
            raise ReconcileError("received failed task event")
        return result

    def _log_run(self, kname: str, run: RunResult) -> None:
        what = "finalizer" if run.finalizer_run else "reconcile"
        if run.requeue_after is not None:
            log.info("%s %s: %s %s, requeue after %s", self.gvk.kind, kname, what,
                     run.summary(), format_duration(run.requeue_after))
        elif run.successful:
            log.info("%s %s: %s %s", self.gvk.kind, kname, what, run.summary())
        else:
            log.warning("%s %s: %s FAILED %s", self.gvk.kind, kname, what, run.summary())
            for task, msg in run.failed_tasks:
                log.warning("%s %s:   failed task %r: %s", self.gvk.kind, kname, task, msg)
        if self.runtime.verbose:
            for ev in run.events:
                ed = ev.get("event_data") or {}
                if ev.get("event") in ("runner_on_ok", "runner_on_failed", "runner_on_skipped"):
                    changed = (ed.get("res") or {}).get("changed") if \
                        isinstance(ed.get("res"), dict) else None
                    log.info("%s %s:   [%s] %s%s", self.gvk.kind, kname,
                             ev["event"].replace("runner_on_", ""), ed.get("task"),
                             " (changed)" if changed else "")
        if run.events_lost:
            log.error("%s %s: %s: events received: %s\n%s", self.gvk.kind, kname, run.failure_messages[-1],
                      [((ev.get("event_data") or {}).get("task"), ev.get("event"), ev.get("counter"))
                       for ev in run.events], run.stdout[-6000:])
        if run.stdout and (self.runtime.debug_logs or (self.runtime.verbose and
                                                      not run.successful)):
            log.info("%s %s: ansible output:\n%s", self.gvk.kind, kname, run.stdout)


def _keystr(key: tuple[str, str]) -> str:
    return f"{key[0]}/{key[1]}" if key[0] else key[1]
