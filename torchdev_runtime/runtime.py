"""The Runtime: loads watches.yaml, starts informers and controllers, stops them.

Python API (used by the CLI, the end-to-end tests and the demo)::

    rt = Runtime("watches.yaml", kubeconfig).start()   # background threads
    rt.wait_idle(timeout=30)       # True once nothing is queued or running (and stays so)
    rt.counters()                  # {"DevServer": {"started": 3, "succeeded": 3, ...}}
    rt.stop()
"""
from __future__ import annotations

import configparser
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Iterable, Mapping

from .controller import Controller, ReconcileRecord, dependent_view
from .dependents import derived_dependents
from .gotime import format_duration
from .forkserver import PLAYBOOK_PRELOAD, ForkServer
from .informer import Informer
from .kube import ApiError, KubeClient, ResourceInfo, default_kubeconfig
from .runner import AnsibleRunner
from .watches import GVK, Watch, load_watches

log = logging.getLogger("torchdev_runtime")

DEFAULT_RECONCILE_PERIOD = 10 * 3600.0  # ansible-operator --reconcile-period default (10h)


def _parse_gvk_ref(ref: str) -> GVK:
    """'apps/v1/StatefulSet', 'v1/ConfigMap' or 'v1:ConfigMap' -> GVK."""
    ref = ref.strip()
    if ":" in ref:
        av, kind = ref.rsplit(":", 1)
    else:
        av, _, kind = ref.rpartition("/")
    if not av or not kind:
        raise ValueError(f"invalid dependent resource reference {ref!r} "
                         "(want apiVersion/Kind, e.g. apps/v1/StatefulSet)")
    return GVK.from_api_version(av, kind)


def collections_environ(ansible_config: str | None,
                        environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a watch's FQCN role is resolved with: as is when it sets
    ANSIBLE_COLLECTIONS_PATH (what ansible-operator reads); otherwise with the
    ``collections_path`` of the ansible.cfg the runs use (relative to that file), so the
    role found is the one ansible-playbook will load."""
    env = dict(os.environ if environ is None else environ)
    if env.get("ANSIBLE_COLLECTIONS_PATH") or not ansible_config or not os.path.isfile(ansible_config):
        return env
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(ansible_config)
    value = parser.get("defaults", "collections_path", fallback="") or \
        parser.get("defaults", "collections_paths", fallback="")
    if value:
        base = os.path.dirname(os.path.abspath(ansible_config))
        env["ANSIBLE_COLLECTIONS_PATH"] = ":".join(
            os.path.normpath(os.path.join(base, os.path.expanduser(p))) for p in value.split(":") if p)
    return env


def default_ansible_config(watches_file: str | None) -> str | None:
    if os.environ.get("ANSIBLE_CONFIG"):
        return os.environ["ANSIBLE_CONFIG"]
    cands = []
    if watches_file:
        cands.append(os.path.join(os.path.dirname(os.path.abspath(watches_file)), "ansible.cfg"))
    cands.append(os.path.join(os.getcwd(), "ansible.cfg"))
    for c in cands:
        if os.path.isfile(c):
            return c
    return None


class Runtime:
    """Local stand-in for the ansible-operator binary.

    Arguments:
        watches_file: path of watches.yaml (or pass ``watches=`` already loaded).
        kubeconfig: kubeconfig path (default $KUBECONFIG, then ~/.kube/config).
        namespaces: namespaces to watch (default: all; the CLI also reads WATCH_NAMESPACE).
            They narrow namespaced kinds only: cluster-scoped kinds (DevUser,
            DevServerFlavor, Namespaces as dependents) are watched cluster-wide, as by
            ansible-operator; a watch's ``selector`` narrows those (hack/demo.py).
        ansible_config: ANSIBLE_CONFIG for the runs (default $ANSIBLE_CONFIG, then the
            ansible.cfg next to the watches file, then ./ansible.cfg).
        max_concurrent_reconciles: default per kind (CPU count); the
            MAX_CONCURRENT_RECONCILES_<KIND>_<GROUP> environment variables override it.
        ansible_verbosity: default -v level (2, like ansible-operator); overridden by
            ANSIBLE_VERBOSITY_<KIND>_<GROUP> and the verbosity annotation.
        reconcile_period: requeue period after a successful run when the watch has no
            reconcilePeriod (ansible-operator's --reconcile-period, default 10h).
        dependent_watches: {"Kind.group" or "group/version/Kind": ["apps/v1/StatefulSet",...]}
            more dependent kinds watched from the start (the CLI's --dependent).
        derive_dependents: watch from the start, for each watch with watchDependentResources,
            every kind its role's templates render, less its blacklist (dependents.py: what
            ansible-operator's proxy learns from the role's creates and reads). Default True;
            False leaves only the learned kinds and ``dependent_watches``.
        verbose: log every task and the ansible output of failed runs.
        gather_facts: gather facts like ansible-operator does (off: faster).
        keep_artifacts: keep ansible-runner's private data dirs (in ``work_dir``).
        graceful_shutdown_timeout: how long stop() waits for running reconciles (30s).
        extra_env: extra environment variables for ansible-playbook.
        ansible_python: the Python of Ansible (ansible-playbook and module runs; default
            $TORCHDEV_ANSIBLE_PYTHON, else this one): `make test-image` runs the roles with the
            operator image's Python and ansible-core (hack/image.py) under this runtime.
    """

    def __init__(self, watches_file: str | None = None, kubeconfig: str | None = None, *,
                 watches: list[Watch] | None = None,
                 namespaces: Iterable[str] | str | None = None,
                 ansible_config: str | None = None,
                 max_concurrent_reconciles: int | None = None,
                 ansible_verbosity: int = 2,
                 reconcile_period: float = DEFAULT_RECONCILE_PERIOD,
                 dependent_watches: Mapping[str, Iterable[str]] | None = None,
                 derive_dependents: bool = True,
                 verbose: bool = False, gather_facts: bool = False,
                 keep_artifacts: bool = False, work_dir: str | None = None,
                 graceful_shutdown_timeout: float = 30.0,
                 extra_env: Mapping[str, str] | None = None,
                 health_interval: float = 60.0,
                 forkserver: bool | None = None,
                 ansible_python: str | None = None):
        self.ansible_config = ansible_config or default_ansible_config(watches_file)
        if watches is None:
            if watches_file is None:
                raise ValueError("watches_file or watches is required")
            watches = load_watches(watches_file,
                                   max_concurrent_reconciles=max_concurrent_reconciles,
                                   ansible_verbosity=ansible_verbosity,
                                   environ=collections_environ(self.ansible_config))
        self.watches = watches
        self.watches_file = watches_file
        self.kubeconfig = os.path.abspath(kubeconfig or default_kubeconfig())
        if isinstance(namespaces, str):
            namespaces = [n.strip() for n in namespaces.split(",") if n.strip()]
        self.namespaces: list[str] = list(namespaces or [])
        self.reconcile_period = reconcile_period
        self.verbose = verbose
        # ansible-operator's ANSIBLE_DEBUG_LOGS: print the full ansible output of every run
        self.debug_logs = os.environ.get("ANSIBLE_DEBUG_LOGS", "").lower() in (
            "1", "t", "true")
        self.gather_facts = gather_facts
        self.keep_artifacts = keep_artifacts
        self.graceful_shutdown_timeout = graceful_shutdown_timeout
        self.extra_env = dict(extra_env or {})
        self.health_interval = health_interval
        self._own_work_dir = work_dir is None
        self.work_dir = work_dir or tempfile.mkdtemp(prefix="torchdev-runtime-")
        # Python processes of the runs (modules) fork from a server with the libraries
        # imported (torchdev_runtime/forkserver.py); TORCHDEV_FORKSERVER=0 turns it off.
        if forkserver is None:
            forkserver = os.environ.get("TORCHDEV_FORKSERVER", "1").lower() not in (
                "0", "false", "no")
        self.use_forkserver = forkserver
        self.ansible_python = ansible_python or os.environ.get("TORCHDEV_ANSIBLE_PYTHON") or sys.executable
        self._forkservers: list[ForkServer] = []
        self._static_deps: dict[GVK, list[GVK]] = {}
        if derive_dependents:
            for og, derived in derived_dependents(self.watches).items():
                self._static_deps[og] = list(derived)
        for owner, deps in (dependent_watches or {}).items():
            og = self._resolve_owner(owner)
            known = self._static_deps.setdefault(og, [])
            known.extend(g for g in (_parse_gvk_ref(d) for d in deps) if g not in known)
        self.client: KubeClient | None = None
        self.controllers: dict[GVK, Controller] = {}
        self._informers: dict[tuple[GVK, str | None], Informer] = {}
        self._inf_lock = threading.Lock()
        self._stop = threading.Event()
        self._started = False
        self._stopped = False
        self._activity = threading.Condition()
        self._health_thread: threading.Thread | None = None

    # -- helpers used by controllers ------------------------------------------------------
    def _resolve_owner(self, ref: str) -> GVK:
        for w in self.watches:
            if ref in (w.gvk.group_kind, f"{w.gvk.api_version}/{w.gvk.kind}", w.gvk.kind):
                return w.gvk
        raise ValueError(f"dependent_watches: {ref!r} is not a watched kind")

    def static_dependents(self, gvk: GVK) -> list[GVK]:
        return list(self._static_deps.get(gvk, []))

    def resource_for(self, gvk: GVK) -> ResourceInfo:
        assert self.client is not None
        return self.client.resource_for(gvk)

    def informers_for(self, gvk: GVK, namespaced: bool) -> list[Informer]:
        """The shared informers of a kind (one per watched namespace).  A kind no watch
        reconciles is watched only as a dependent: its cache keeps dependent_view of each
        object (the owner mapping's metadata and a digest), not the object."""
        nss: list[str | None] = list(self.namespaces) if (namespaced and self.namespaces) \
            else [None]
        primary = any(w.gvk == gvk for w in self.watches)
        out = []
        with self._inf_lock:
            for ns in nss:
                key = (gvk, ns)
                inf = self._informers.get(key)
                if inf is None:
                    assert self.client is not None
                    inf = Informer(self.client, gvk, ns, self._stop,
                                   transform=None if primary else dependent_view)
                    self._informers[key] = inf
                    inf.start()
                out.append(inf)
        return out

    def notify_activity(self) -> None:
        with self._activity:
            self._activity.notify_all()

    # -- lifecycle ----------------------------------------------------------------------
    def start(self, wait_synced: float | None = 30.0) -> "Runtime":
        if self._started:
            return self
        self._started = True
        self.client = KubeClient(self.kubeconfig)
        log.info("torchdev-runtime: %d watch(es), kubeconfig %s, namespaces %s, "
                 "ansible.cfg %s", len(self.watches), self.kubeconfig,
                 (",".join(self.namespaces) + " (cluster-scoped kinds: all)") if self.namespaces
                 else "(all)", self.ansible_config or "(default)")
        runners = [AnsibleRunner(w, self.kubeconfig, ansible_config=self.ansible_config,
                                 work_dir=self.work_dir, gather_facts=self.gather_facts,
                                 keep_artifacts=self.keep_artifacts, extra_env=self.extra_env,
                                 python=self.ansible_python)
                   for w in self.watches]
        if self.use_forkserver and runners:
            self._start_forkservers(runners)
        for w, runner in zip(self.watches, runners):
            period = w.reconcile_period if w.reconcile_period != 0 else self.reconcile_period
            ctrl = Controller(self, w, runner, period)
            self.controllers[w.gvk] = ctrl
            target = w.playbook or w.role
            log.info("watching %s/%s -> %s (workers=%d, reconcilePeriod=%s, manageStatus=%s, "
                     "finalizer=%s, watchDependentResources=%s, selector=%s)", w.gvk.api_version,
                     w.gvk.kind, target, w.max_concurrent_reconciles,
                     format_duration(period), w.manage_status, w.finalizer_name or "-",
                     w.watch_dependent_resources, w.selector or "-")
            self._start_controller(ctrl)
        if wait_synced:
            self.wait_synced(wait_synced)
        if self.health_interval and self.health_interval > 0:
            self._health_thread = threading.Thread(target=self._health_loop,
                                                   name="runtime-health", daemon=True)
            self._health_thread.start()
        return self

    def _start_forkservers(self, runners: list[AnsibleRunner]) -> None:
        """Module runs and ansible-playbook start from fork servers (forkserver.py)."""
        modules = ForkServer(self.work_dir, "python", ansiballz=True, python=self.ansible_python).start()
        playbooks = ForkServer(self.work_dir, "ansible-playbook", preload=PLAYBOOK_PRELOAD,
                               env=runners[0].server_env(), ansible_cache=True, python=self.ansible_python).start()
        self._forkservers = [modules, playbooks]
        script = os.path.join(os.path.dirname(self.ansible_python), "ansible-playbook")
        for runner in runners:
            runner.set_python(modules.shim)
            if os.path.exists(script):
                runner.playbook_command = [playbooks.shim, script]

    def _start_controller(self, ctrl: Controller) -> None:
        try:
            ctrl.start()
        except ApiError as exc:
            # the CRD may not be installed yet: retry in the background
            log.warning("%s: %s; retrying until the resource exists", ctrl.gvk.kind, exc)

            def retry() -> None:
                delay = 0.5
                while not self._stop.is_set():
                    self._stop.wait(delay)
                    try:
                        ctrl.start()
                        log.info("%s: resource found, controller started", ctrl.gvk.kind)
                        return
                    except ApiError:
                        delay = min(delay * 2, 10.0)
            threading.Thread(target=retry, name=f"{ctrl.gvk.kind}-start", daemon=True).start()

    def wait_synced(self, timeout: float = 30.0) -> bool:
        end = time.monotonic() + timeout
        with self._inf_lock:
            infs = list(self._informers.values())
        for inf in infs:
            if not inf.wait_synced(max(0.0, end - time.monotonic())):
                return False
        return True

    def stop(self, timeout: float | None = None) -> bool:
        """Stop informers, let running reconciles finish (up to the timeout); True if they did."""
        if self._stopped:
            return True
        self._stopped = True
        timeout = self.graceful_shutdown_timeout if timeout is None else timeout
        log.info("torchdev-runtime: stopping (waiting up to %s for running reconciles)",
                 format_duration(timeout))
        self._stop.set()
        for c in self.controllers.values():
            c.shutdown()
        with self._inf_lock:
            infs = list(self._informers.values())
        for inf in infs:
            inf.stop()
        end = time.monotonic() + timeout
        clean = True
        for c in self.controllers.values():
            clean = c.join(max(0.0, end - time.monotonic())) and clean
        for inf in infs:
            inf.join(0.5)
        if not clean:
            log.warning("torchdev-runtime: reconciles still running after %s; leaving them",
                        format_duration(timeout))
        if self.client is not None:
            self.client.close()
        for server in self._forkservers:
            server.stop()
        if self._own_work_dir and not self.keep_artifacts and clean:
            shutil.rmtree(self.work_dir, ignore_errors=True)
        self.notify_activity()
        log.info("torchdev-runtime: stopped")
        return clean

    def __enter__(self) -> "Runtime":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- observation (for tests and logs) -------------------------------------------------
    def _controller(self, kind: str | GVK) -> Controller:
        if isinstance(kind, GVK):
            return self.controllers[kind]
        for g, c in self.controllers.items():
            if kind in (g.kind, g.group_kind):
                return c
        raise KeyError(kind)

    def counters(self, kind: str | None = None) -> dict[str, Any]:
        """Per kind: started / succeeded / failed reconciles, ansible runs, finalizer runs,
        in_flight, the reconciles by cause (``causes``: change, dependent, deadline, resync,
        retry, manual; a reconcile with several counts for each); plus queued / waiting
        (delayed requeues). With ``kind``, that kind only."""
        out = {}
        for g, c in self.controllers.items():
            with c._stats_lock:
                d = dict(c.stats)
                d["causes"] = dict(c.causes)
            d["queued"] = len(c.queue)
            d["waiting"] = c.queue.waiting()
            out[g.kind] = d
        return out[self._controller(kind).gvk.kind] if kind else out

    def enqueue(self, kind: str, namespace: str, name: str) -> None:
        """Queue a reconcile of one object now, as a watch event would (tests, tooling)."""
        self._controller(kind).add((namespace or "", name), "manual")

    def reconciling(self, kind: str, namespace: str, name: str) -> bool:
        """True while a reconcile of this object is queued or running (delayed requeues,
        e.g. reconcilePeriod or requeue_after, do not count until they are due)."""
        return self._controller(kind).queue.is_pending((namespace or "", name))

    def requeue_due_in(self, kind: str, namespace: str, name: str) -> float | None:
        """Seconds until this object's delayed requeue (requeue_after, the period, a retry) is
        due; None when none is waiting."""
        return self._controller(kind).queue.due_in((namespace or "", name))

    def history(self, kind: str | None = None) -> list[ReconcileRecord]:
        """Finished reconciles, oldest first (the last 1000 per kind)."""
        recs: list[ReconcileRecord] = []
        ctrls = [self._controller(kind)] if kind else list(self.controllers.values())
        for c in ctrls:
            with c._stats_lock:
                recs.extend(c.history)
        return sorted(recs, key=lambda r: r.started)

    def dependent_kinds(self, kind: str) -> dict[str, list[str]]:
        c = self._controller(kind)
        return {f"{g.api_version}/{g.kind}": sorted(m) for g, m in c.dependent_modes.items()}

    def is_idle(self) -> bool:
        with self._inf_lock:
            if not all(i.synced for i in self._informers.values()):
                return False
        return all(c.queue.is_idle() for c in self.controllers.values())

    def wait_idle(self, timeout: float = 60.0, settle: float = 0.3) -> bool:
        """Wait until no reconcile is queued or running, for ``settle`` seconds in a row
        (events may still be on their way from the API server right after a change).
        Delayed requeues (reconcilePeriod, backoff) do not count as queued."""
        end = time.monotonic() + timeout
        idle_since: float | None = None
        while True:
            now = time.monotonic()
            if self.is_idle():
                idle_since = idle_since or now
                if now - idle_since >= settle:
                    return True
            else:
                idle_since = None
            if now >= end:
                return False
            with self._activity:
                self._activity.wait(min(0.05, max(0.0, end - now)))

    def wait_for(self, predicate: Callable[[], Any], timeout: float = 60.0,
                 interval: float = 0.05) -> Any:
        end = time.monotonic() + timeout
        while True:
            v = predicate()
            if v:
                return v
            if time.monotonic() >= end:
                raise TimeoutError("condition not met within %.1fs" % timeout)
            time.sleep(interval)

    def _health_loop(self) -> None:
        while not self._stop.wait(self.health_interval):
            parts = []
            for kind, d in self.counters().items():
                parts.append(f"{kind}: ok={d['succeeded']} failed={d['failed']} "
                             f"running={d['in_flight']} queued={d['queued']} "
                             f"waiting={d['waiting']}")
            with self._inf_lock:
                bad = [f"{g.kind}: {i.last_error}" for (g, _), i in self._informers.items()
                       if not i.synced]
            log.info("health: %s%s", "; ".join(parts) or "no controllers",
                     (" | not synced: " + "; ".join(bad)) if bad else "")
