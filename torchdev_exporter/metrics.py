"""torchdev's Prometheus series, computed from the objects the exporter watches (docs/metrics.md).

Pure: ``Store`` holds the DevServers and DevServerFlavors it was given and turns them into
metric families at scrape time (``collect``); it also counts, from the changes it is shown,
the reservations started and ended by reason, the seconds of GPU time and the dollars spent,
and observes the time to Ready.  Labels are bounded sets, never free text a user or a pod
wrote: ``user`` is the DevServer's owner only when it is a DevUser's e-mail (else
``unknown``), reasons, phases and states are those of the documented sets (else ``Other``),
every value is at most LABEL_MAX characters; never a pod name or a time.  What the store
keeps per object goes with the object (a deletion or a relist), so its size follows the live
objects, not their history.

The counters count what happened while the exporter watched.  The first list of a kind
(``replace_*`` on an empty store) is the baseline: a reservation that had started or ended,
a start that had completed, a TrainingJob that existed before it are remembered, not
counted, so a restarted exporter does not count them again (its counters restart at zero,
as any Prometheus counter does on a restart; ``increase()`` and ``rate()`` handle that).  A
later list (a relist after 410 Gone or an error) replaces the store: what changed while the
watch was down is counted once, and an object that disappeared is deleted.
"""
from __future__ import annotations

import threading
from datetime import datetime, timezone
from typing import Any, Iterable

from ansible_collections.torchdev.operator.plugins.module_utils.constants import (
    EAJ_PHASES, EAJ_REASONS, TRAININGJOB_REASONS, TRAININGJOB_STATES)
from ansible_collections.torchdev.operator.plugins.module_utils.flavor import flavor_gpu_count
from ansible_collections.torchdev.operator.plugins.module_utils.lifecycle import parse_time

PHASES = ("Pending", "Queued", "Provisioning", "Running", "Suspended", "Stopped", "Expired", "Failed")
END_REASONS = ("Expired", "Cancelled", "Idle", "Stopped", "Deleted")
STARTUP_PHASES = ("queued", "scheduled", "volumes", "containers", "ready")  # status.startup.phases
TIME_TO_READY_BUCKETS = (5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600, 7200, float("inf"))
LABEL_MAX = 253          # a DNS subdomain (flavor, namespace, names); an e-mail is at most 254
UNKNOWN_USER = "unknown"  # an owner that is no DevUser's e-mail
OTHER = "Other"           # a reason, phase or state outside the documented set


def bounded(value: Any, allowed: Iterable[str] | None = None, other: str = OTHER) -> str:
    """``value`` as a label value: one of ``allowed`` (when given) else ``other``; at most
    LABEL_MAX characters.  Never raises."""
    text = value if isinstance(value, str) else ("" if value is None else str(value))
    if allowed is not None and text not in allowed:
        return other
    return text[:LABEL_MAX]


def _key(obj: dict) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return meta.get("namespace") or "", meta.get("name") or ""


def _uid(obj: dict) -> str:
    return str((obj.get("metadata") or {}).get("uid"))


def _price(flavor: dict | None) -> float:
    try:
        return float(((flavor or {}).get("spec") or {}).get("pricePerHour") or 0)
    except (TypeError, ValueError):
        return 0.0


def _gpus(flavor: dict | None) -> int:
    try:
        return flavor_gpu_count((flavor or {}).get("spec") or {})
    except ValueError:
        return 0


def _seconds(value: Any) -> float | None:
    try:
        return parse_time(value).timestamp() if value else None
    except ValueError:
        return None


def _condition(obj: dict, ctype: str) -> dict | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == ctype), None)


def _number(value: Any) -> float | None:
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _email(devuser: dict) -> str:
    email = ((devuser or {}).get("spec") or {}).get("email")
    return email if isinstance(email, str) else ""


def _percent(value: Any) -> float | None:
    """status.progress ("45%") as 45.0."""
    return _number(str(value).rstrip("%")) if value not in (None, "") else None


class Store:
    """The exporter's view of the cluster, fed by watch events (``apply`` / ``delete``)."""

    def __init__(self, clock=lambda: datetime.now(timezone.utc).timestamp()):
        self.clock = clock
        self.lock = threading.Lock()
        self.devservers: dict[tuple[str, str], dict] = {}
        self.flavors: dict[str, dict] = {}
        self.devusers: dict[str, str] = {}                    # DevUser name -> spec.email
        self.started: dict[tuple[str, str], float] = {}       # (user, flavor) -> reservations started
        self.ended: dict[tuple[str, str, str], float] = {}    # (user, flavor, reason) -> ended
        self.gpu_seconds: dict[tuple[str, str], float] = {}   # (user, flavor) -> GPU-seconds run
        self.dollars: dict[tuple[str, str], float] = {}       # (user, flavor) -> dollars spent
        self.ready_hist: dict[str, list[int]] = {}            # flavor -> bucket counts
        self.ready_sum: dict[str, float] = {}
        self.phase_hist: dict[tuple[str, str], list[int]] = {}  # (flavor, startup phase) -> bucket counts
        self.phase_sum: dict[tuple[str, str], float] = {}
        # per DevServer, the events already counted: ("ready", readyAt), ("start" | "end", startedAt)
        self._marks: dict[tuple[str, str], set[tuple[str, str]]] = {}
        self.listed: set[str] = set()                         # kinds listed once (the baseline taken)
        self._running_since: dict[tuple[str, str], float] = {}
        self.reconciles: dict[tuple[str, str], float] = {}    # (kind, result) from the runtime, if any
        # TrainingJobs: the live ones, and counters from their changes
        self.trainingjobs: dict[tuple[str, str], dict] = {}
        self.tj_created: dict[tuple[str], float] = {}           # (namespace,)
        self.tj_completed: dict[tuple[str, str], float] = {}    # (namespace, result reason)
        self.tj_failed: dict[tuple[str, str], float] = {}       # (namespace, reason)
        self.tj_restarts: dict[tuple[str], float] = {}          # (namespace,)
        self._tj_seen: dict[tuple[str, str], dict] = {}         # uid-keyed: created, final, restarts counted
        # EphemeralAccelerationJobs: the live ones, and the finished ones counted once (by uid)
        self.eajs: dict[tuple[str, str], dict] = {}
        self.eaj_finished: dict[tuple[str, str, str], float] = {}  # (namespace, phase, reason)
        self._eaj_final: dict[tuple[str, str], bool] = {}          # (namespace, uid) -> counted final

    # -- lists (the baseline, then a relist's replacement) --------------------------------------
    def replace_flavors(self, flavors: list[dict]) -> None:
        with self.lock:
            self.flavors = {(f.get("metadata") or {}).get("name"): f for f in flavors}
            self.listed.add("flavors")

    def replace_devusers(self, devusers: list[dict]) -> None:
        with self.lock:
            self.devusers = {(u.get("metadata") or {}).get("name"): _email(u) for u in devusers}
            self.listed.add("devusers")

    def replace(self, devservers: list[dict]) -> None:
        """The DevServers as listed: the baseline at first, else what changed since is counted."""
        with self.lock:
            self._replace("devservers", self.devservers, devservers,
                          gone=lambda key, old: self._account(key, None, previous=old),
                          seen=lambda key, ds, baseline: self._account(key, ds, baseline=baseline))

    def replace_trainingjobs(self, jobs: list[dict]) -> None:
        with self.lock:
            self._replace("trainingjobs", self.trainingjobs, jobs,
                          gone=lambda key, old: self._tj_seen.pop((key[0], _uid(old)), None),
                          seen=lambda key, tj, baseline: self._count_trainingjob(tj, baseline=baseline))

    def replace_eajs(self, jobs: list[dict]) -> None:
        with self.lock:
            self._replace("ephemeralaccelerationjobs", self.eajs, jobs,
                          gone=lambda key, old: self._eaj_final.pop((key[0], _uid(old)), None),
                          seen=lambda key, job, baseline: self._count_eaj(job, baseline=baseline))

    def _replace(self, kind: str, held: dict, items: list[dict], gone, seen) -> None:
        """``held`` becomes ``items``: ``gone(key, old)`` for each object no longer listed,
        ``seen(key, obj, baseline)`` for each listed one, before it is stored."""
        baseline = kind not in self.listed
        listed = {_key(obj): obj for obj in items}
        for key in [k for k in held if k not in listed]:
            gone(key, held.pop(key))
        for key, obj in listed.items():
            seen(key, obj, baseline)
            held[key] = obj
        self.listed.add(kind)

    # -- events ------------------------------------------------------------------------------
    def apply_flavor(self, flavor: dict) -> None:
        with self.lock:
            self.flavors[(flavor.get("metadata") or {}).get("name")] = flavor

    def delete_flavor(self, flavor: dict) -> None:
        with self.lock:
            self.flavors.pop((flavor.get("metadata") or {}).get("name"), None)

    def apply_devuser(self, devuser: dict) -> None:
        with self.lock:
            self.devusers[(devuser.get("metadata") or {}).get("name")] = _email(devuser)

    def delete_devuser(self, devuser: dict) -> None:
        with self.lock:
            self.devusers.pop((devuser.get("metadata") or {}).get("name"), None)

    def user(self, owner: Any) -> str:
        """The ``user`` label of an owner: itself when it is a DevUser's e-mail, else UNKNOWN_USER
        (``spec.owner`` is the user's text: never a label of its own)."""
        return bounded(owner, set(self.devusers.values()) - {""}, UNKNOWN_USER)

    def apply(self, ds: dict) -> None:
        with self.lock:
            key = _key(ds)
            self._account(key, ds)
            self.devservers[key] = ds

    def delete(self, ds: dict) -> None:
        with self.lock:
            key = _key(ds)
            old = self.devservers.pop(key, None) or ds
            self._account(key, None, previous=old)

    def apply_trainingjob(self, tj: dict) -> None:
        with self.lock:
            key = _key(tj)
            self.trainingjobs[key] = tj
            self._count_trainingjob(tj)

    def delete_trainingjob(self, tj: dict) -> None:
        with self.lock:
            key = _key(tj)
            self.trainingjobs.pop(key, None)
            self._tj_seen.pop((key[0], _uid(tj)), None)

    def apply_eaj(self, job: dict) -> None:
        with self.lock:
            self.eajs[_key(job)] = job
            self._count_eaj(job)

    def delete_eaj(self, job: dict) -> None:
        with self.lock:
            key = _key(job)
            self.eajs.pop(key, None)
            self._eaj_final.pop((key[0], _uid(job)), None)

    def _count_eaj(self, job: dict, baseline: bool = False) -> None:
        """A job is counted once, when it reaches Succeeded or Failed (its reason: the True
        condition of that type).  ``baseline``: the first list's jobs are remembered, not counted."""
        meta, status = job.get("metadata") or {}, job.get("status") or {}
        key = (meta.get("namespace") or "", _uid(job))
        phase = status.get("phase")
        final = phase in ("Succeeded", "Failed")
        if baseline or self._eaj_final.get(key):
            self._eaj_final[key] = final or bool(self._eaj_final.get(key))
            return
        self._eaj_final[key] = final
        if final:
            reason = bounded((_condition(job, phase) or {}).get("reason") or phase, EAJ_REASONS[phase] + (phase,))
            k = (key[0], phase, reason)
            self.eaj_finished[k] = self.eaj_finished.get(k, 0) + 1

    def eaj_gauges(self) -> dict[str, dict[tuple, float]]:
        out: dict[str, dict[tuple, float]] = {"jobs": {}, "volumes": {}}
        with self.lock:
            for (ns, _name), job in self.eajs.items():
                phase = bounded((job.get("status") or {}).get("phase") or "Pending", EAJ_PHASES)
                out["jobs"][(ns, phase)] = out["jobs"].get((ns, phase), 0) + 1
                if ((_condition(job, "ArtifactsAvailable") or {}).get("status")) == "True":
                    out["volumes"][(ns,)] = out["volumes"].get((ns,), 0) + 1
        return out

    def _count_trainingjob(self, tj: dict, baseline: bool = False) -> None:
        """Created once per object (uid), completed/failed once at the final state, restarts by
        the increase of status.restartCount.  ``baseline``: the job as the first list found it,
        remembered (created, its restarts, a final state) without counting."""
        meta, status = tj.get("metadata") or {}, tj.get("status") or {}
        ns = meta.get("namespace") or ""
        restarts = int(status.get("restartCount") or 0)
        state = status.get("state")
        seen = self._tj_seen.get((ns, _uid(tj)))
        if seen is None and baseline:
            self._tj_seen[(ns, _uid(tj))] = {"final": state in ("Completed", "Failed"), "restarts": restarts}
            return
        if seen is None:
            seen = self._tj_seen[(ns, _uid(tj))] = {"final": False, "restarts": 0}
            self.tj_created[(ns,)] = self.tj_created.get((ns,), 0) + 1
        if restarts > seen["restarts"]:
            self.tj_restarts[(ns,)] = self.tj_restarts.get((ns,), 0) + restarts - seen["restarts"]
            seen["restarts"] = restarts
        if state in ("Completed", "Failed") and not seen["final"]:
            seen["final"] = True
            if state == "Completed":
                reason = bounded((_condition(tj, "Succeeded") or {}).get("reason") or "JobComplete",
                                 TRAININGJOB_REASONS["Succeeded"])
                self.tj_completed[(ns, reason)] = self.tj_completed.get((ns, reason), 0) + 1
            else:
                reason = bounded(status.get("failureReason") or "Failed",
                                 TRAININGJOB_REASONS["Failed"] + ("Failed",))
                self.tj_failed[(ns, reason)] = self.tj_failed.get((ns, reason), 0) + 1
        elif state not in ("Completed", "Failed"):
            seen["final"] = False  # restarted from a final state (a new attempt is a new run)

    def trainingjob_gauges(self) -> dict[str, dict[tuple, float]]:
        out: dict[str, dict[tuple, float]] = {name: {} for name in (
            "jobs", "progress", "epoch", "loss", "accuracy", "gpus", "workers")}
        with self.lock:
            for (ns, name), tj in self.trainingjobs.items():
                status = tj.get("status") or {}
                state = bounded(status.get("state") or "Pending", TRAININGJOB_STATES)
                out["jobs"][(ns, state)] = out["jobs"].get((ns, state), 0) + 1
                if state in ("Completed", "Failed"):
                    continue  # per-job series only while a job is live
                k = (ns, name)
                progress = _percent(status.get("progress"))
                if progress is not None:
                    out["progress"][k] = progress
                if status.get("currentEpoch") is not None:
                    out["epoch"][k] = float(status["currentEpoch"])
                for metric in ("loss", "accuracy"):
                    value = _number((status.get("metrics") or {}).get(metric))
                    if value is not None:
                        out[metric][k] = value
                out["gpus"][k] = float(status.get("allocatedGPUs") or 0)
                out["workers"][k] = float((status.get("workers") or {}).get("active") or 0)
        return out

    # -- counters from changes -----------------------------------------------------------------
    def _labels(self, ds: dict) -> tuple[str, str]:
        spec = ds.get("spec") or {}
        return self.user(spec.get("owner")), bounded(spec.get("flavor") or "")

    def _first(self, key, mark: tuple[str, str], baseline: bool) -> bool:
        """Whether ``mark`` of the server ``key`` is new and to be counted (remembered either way;
        not counted when it is part of the baseline)."""
        marks = self._marks.setdefault(key, set())
        if mark in marks:
            return False
        marks.add(mark)
        return not baseline

    def _account(self, key, ds, previous=None, baseline: bool = False) -> None:
        now = self.clock()
        previous = previous if previous is not None else self.devservers.get(key)
        src = ds or previous or {}
        user, flavor_name = self._labels(src)
        self._accrue(key, previous, now)
        status = (ds or {}).get("status") or {}
        if ds is not None and status.get("phase") == "Running":
            self._running_since[key] = now
        startup = status.get("startup") or {}
        # each complete start once: its total and each phase
        if ds is not None and startup.get("complete") and self._first(key, ("ready", str(startup.get("readyAt"))),
                                                                          baseline):
            self._observe(self.ready_hist, self.ready_sum, flavor_name, float(startup.get("totalSeconds") or 0))
            for phase_name in STARTUP_PHASES:
                seconds = (startup.get("phases") or {}).get(phase_name)
                if seconds is not None:
                    self._observe(self.phase_hist, self.phase_sum, (flavor_name, phase_name), float(seconds))
        res = status.get("reservation") or {}
        if ds is not None and res.get("startedAt"):
            if self._first(key, ("start", res["startedAt"]), baseline):
                self.started[(user, flavor_name)] = self.started.get((user, flavor_name), 0) + 1
            if res.get("endReason") and self._first(key, ("end", res["startedAt"]), baseline):
                lk = (user, flavor_name, bounded(res["endReason"], END_REASONS))
                self.ended[lk] = self.ended.get(lk, 0) + 1
        if ds is None:  # deleted: a running reservation ends with it
            res = ((previous or {}).get("status") or {}).get("reservation") or {}
            if res.get("startedAt") and not res.get("endReason") and self._first(key, ("end", res["startedAt"]),
                                                                                 baseline):
                lk = (user, flavor_name, "Deleted")
                self.ended[lk] = self.ended.get(lk, 0) + 1
            self._marks.pop(key, None)

    def _accrue(self, key, previous, now) -> None:
        """GPU time and cost accrue while the server runs (from the last change to now)."""
        if key not in self._running_since:
            return
        since = self._running_since.pop(key)
        user, flavor_name = self._labels(previous or {})
        flavor = self.flavors.get(flavor_name)
        replicas = int(((previous or {}).get("status") or {}).get("replicas") or 0)
        hours = max(0.0, now - since) / 3600.0
        lk = (user, flavor_name)
        self.gpu_seconds[lk] = self.gpu_seconds.get(lk, 0.0) + hours * 3600.0 * replicas * _gpus(flavor)
        self.dollars[lk] = self.dollars.get(lk, 0.0) + hours * replicas * _price(flavor)

    @staticmethod
    def _observe(hist: dict, sums: dict, key, seconds: float) -> None:
        counts = hist.setdefault(key, [0] * len(TIME_TO_READY_BUCKETS))
        for i, bound in enumerate(TIME_TO_READY_BUCKETS):
            if seconds <= bound:
                counts[i] += 1
        sums[key] = sums.get(key, 0.0) + seconds

    def tick(self) -> None:
        """Bring GPU time and cost of the running servers up to now (before each scrape)."""
        with self.lock:
            now = self.clock()
            for key in list(self._running_since):
                ds = self.devservers.get(key)
                if ds is None:
                    continue
                self._accrue(key, ds, now)
                self._running_since[key] = now

    # -- gauges at scrape time -------------------------------------------------------------------
    def gauges(self) -> dict[str, dict[tuple, float]]:
        out: dict[str, dict[tuple, float]] = {name: {} for name in (
            "servers", "gpus_requested", "gpus_running", "idle_gpus", "idle_servers", "queue_length",
            "queue_wait", "cost_rate")}
        now = self.clock()
        with self.lock:
            for ds in self.devservers.values():
                spec, status = ds.get("spec") or {}, ds.get("status") or {}
                user, flavor_name = self._labels(ds)
                phase = bounded(status.get("phase") or "Pending", PHASES)
                flavor = self.flavors.get(flavor_name)
                k = (flavor_name, phase)
                out["servers"][k] = out["servers"].get(k, 0) + 1
                replicas = int(status.get("replicas") or 0)
                gpus = _gpus(flavor)
                uk = (user, flavor_name)
                if not spec.get("suspend") and gpus:
                    wanted = replicas or 1
                    out["gpus_requested"][uk] = out["gpus_requested"].get(uk, 0) + wanted * gpus
                if phase == "Running":
                    if gpus:
                        out["gpus_running"][uk] = out["gpus_running"].get(uk, 0) + replicas * gpus
                    out["cost_rate"][uk] = out["cost_rate"].get(uk, 0.0) + replicas * _price(flavor)
                    if status.get("idle") and gpus:
                        out["idle_gpus"][uk] = out["idle_gpus"].get(uk, 0) + replicas * gpus
                        out["idle_servers"][uk] = out["idle_servers"].get(uk, 0) + 1
                if phase == "Queued":
                    fk = (flavor_name,)
                    out["queue_length"][fk] = out["queue_length"].get(fk, 0) + 1
                    since = _seconds(status.get("lastTransitionTime")) or _seconds(
                        (ds.get("metadata") or {}).get("creationTimestamp"))
                    if since is not None:
                        out["queue_wait"][fk] = max(out["queue_wait"].get(fk, 0.0), now - since)
        return out


def collect(store: Store) -> Iterable:
    """The metric families of one scrape (prometheus_client's Collector protocol)."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

    store.tick()
    g = store.gauges()

    def gauge(name, doc, labels, values):
        fam = GaugeMetricFamily(name, doc, labels=labels)
        for key, value in sorted(values.items()):
            fam.add_metric(list(key), value)
        return fam

    yield gauge("torchdev_devservers", "DevServers by flavor and phase.", ["flavor", "phase"], g["servers"])
    yield gauge("torchdev_gpus_requested", "GPUs wanted by the DevServers not stopped, per user and flavor.",
                ["user", "flavor"], g["gpus_requested"])
    yield gauge("torchdev_gpus_running", "GPUs of Running DevServers, per user and flavor.",
                ["user", "flavor"], g["gpus_running"])
    yield gauge("torchdev_gpus_idle", "GPUs of Running DevServers whose lifecycle agents report idle.",
                ["user", "flavor"], g["idle_gpus"])
    yield gauge("torchdev_devservers_idle_with_gpus", "Running DevServers of a GPU flavor whose lifecycle agents "
                "report idle.", ["user", "flavor"], g["idle_servers"])
    yield gauge("torchdev_queue_length", "DevServers waiting for Kueue admission, per flavor.", ["flavor"],
                g["queue_length"])
    yield gauge("torchdev_queue_wait_seconds", "The longest wait of a queued DevServer, per flavor.", ["flavor"],
                g["queue_wait"])
    yield gauge("torchdev_cost_per_hour_dollars", "Cost rate of Running DevServers (pricePerHour x replicas).",
                ["user", "flavor"], g["cost_rate"])
    with store.lock:
        started, ended = dict(store.started), dict(store.ended)
        gpu_seconds, dollars = dict(store.gpu_seconds), dict(store.dollars)
        hist, hsum = {k: list(v) for k, v in store.ready_hist.items()}, dict(store.ready_sum)
        phase_hist, phase_sum = {k: list(v) for k, v in store.phase_hist.items()}, dict(store.phase_sum)
    fam = CounterMetricFamily("torchdev_reservations_started", "Reservations started (a first Ready after a start).",
                              labels=["user", "flavor"])
    for key, value in sorted(started.items()):
        fam.add_metric(list(key), value)
    yield fam
    fam = CounterMetricFamily("torchdev_reservations_ended", "Reservations ended, by reason "
                              "(Expired, Cancelled, Idle, Stopped, Deleted).", labels=["user", "flavor", "reason"])
    for key, value in sorted(ended.items()):
        fam.add_metric(list(key), value)
    yield fam
    fam = CounterMetricFamily("torchdev_gpu_seconds", "GPU-seconds run by Running DevServers.",
                              labels=["user", "flavor"])
    for key, value in sorted(gpu_seconds.items()):
        fam.add_metric(list(key), value)
    yield fam
    fam = CounterMetricFamily("torchdev_cost_dollars", "Dollars spent by Running DevServers (pricePerHour x hours).",
                              labels=["user", "flavor"])
    for key, value in sorted(dollars.items()):
        fam.add_metric(list(key), value)
    yield fam
    t = store.trainingjob_gauges()
    with store.lock:
        tj_counters = [dict(store.tj_created), dict(store.tj_completed), dict(store.tj_failed), dict(store.tj_restarts)]
    yield gauge("torchdev_trainingjobs", "TrainingJobs by namespace and state.", ["namespace", "state"], t["jobs"])
    per_job = ["namespace", "training_job"]
    yield gauge("torchdev_trainingjob_progress_percent", "Progress of a live TrainingJob (status.progress).",
                per_job, t["progress"])
    yield gauge("torchdev_trainingjob_current_epoch", "Current epoch of a live TrainingJob.", per_job, t["epoch"])
    yield gauge("torchdev_trainingjob_loss", "Latest loss a live TrainingJob reported.", per_job, t["loss"])
    yield gauge("torchdev_trainingjob_accuracy", "Latest accuracy a live TrainingJob reported.", per_job,
                t["accuracy"])
    yield gauge("torchdev_trainingjob_allocated_gpus", "GPUs allocated to a live TrainingJob.", per_job, t["gpus"])
    yield gauge("torchdev_trainingjob_allocated_workers", "Active workers of a live TrainingJob.", per_job,
                t["workers"])
    for (name, doc, labels), values in zip((
            ("torchdev_trainingjob_created", "TrainingJobs created.", ["namespace"]),
            ("torchdev_trainingjob_completed", "TrainingJobs completed, by result (the Succeeded reason).",
             ["namespace", "result"]),
            ("torchdev_trainingjob_failed", "TrainingJobs failed, by reason.", ["namespace", "reason"]),
            ("torchdev_trainingjob_restarts", "Whole-group restarts of TrainingJobs.", ["namespace"])), tj_counters):
        fam = CounterMetricFamily(name, doc, labels=labels)
        for key, value in sorted(values.items()):
            fam.add_metric(list(key), value)
        yield fam
    e = store.eaj_gauges()
    with store.lock:
        eaj_finished = dict(store.eaj_finished)
    yield gauge("torchdev_ephemeralaccelerationjobs", "EphemeralAccelerationJobs by namespace and phase.",
                ["namespace", "phase"], e["jobs"])
    yield gauge("torchdev_ephemeralaccelerationjob_artifact_volumes",
                "Artifacts volumes still held by EphemeralAccelerationJobs (ArtifactsAvailable True).", ["namespace"],
                e["volumes"])
    fam = CounterMetricFamily("torchdev_ephemeralaccelerationjob_finished",
                              "EphemeralAccelerationJobs finished, by phase and reason (the True condition's).",
                              labels=["namespace", "phase", "reason"])
    for key, value in sorted(eaj_finished.items()):
        fam.add_metric(list(key), value)
    yield fam
    fam = HistogramMetricFamily("torchdev_time_to_ready_seconds",
                                "Time to Ready of each start of a DevServer (status.startup.totalSeconds), per flavor.",
                                labels=["flavor"])
    for flavor, counts in sorted(hist.items()):
        fam.add_metric([flavor], _buckets(counts), hsum.get(flavor, 0.0))
    yield fam
    fam = HistogramMetricFamily("torchdev_time_to_ready_phase_seconds",
                                "Each phase of the time to Ready of a start (status.startup.phases): queued, "
                                "scheduled, volumes, containers, ready; per flavor.", labels=["flavor", "phase"])
    for key, counts in sorted(phase_hist.items()):
        fam.add_metric(list(key), _buckets(counts), phase_sum.get(key, 0.0))
    yield fam


def _buckets(counts: list[int]) -> list[tuple[str, int]]:
    return [("+Inf" if b == float("inf") else str(b), c) for b, c in zip(TIME_TO_READY_BUCKETS, counts)]
