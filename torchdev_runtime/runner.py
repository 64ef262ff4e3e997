"""Runs a watch's role or playbook for one custom resource through ansible-runner.

Mirrors internal/ansible/runner/runner.go of operator-framework/ansible-operator-plugins:

* extra vars (``makeParameters``): the spec converted with paramconv.MapToSnake (unless
  ``snakeCaseParameters: false``), ``ansible_operator_meta: {name, namespace}``,
  ``_<group>_<kind>`` (the whole object) and ``_<group>_<kind>_spec`` (the raw spec) where
  dots and dashes are replaced by underscores (``escapeAnsibleKey``; e.g.
  ``_torchdev_io_devserver``), then the watch's ``vars``, then on a finalizer run the
  finalizer's ``vars``; ``markUnsafe`` wraps strings as ``{"__ansible_unsafe": ...}``;
* a role is run the way ``ansible-runner run --role NAME --roles-path DIR --hosts localhost``
  does: the play ``[{"hosts": "localhost", "roles": [{"name": NAME}]}]`` with
  ``ANSIBLE_ROLES_PATH=DIR:<private_data_dir>/roles``; a playbook is run as is;
* the finalizer run uses the finalizer's role/playbook, or the watch's own when the
  finalizer only has vars;
* ``K8S_AUTH_KUBECONFIG`` and ``KUBECONFIG`` point at the runtime's kubeconfig (the real
  operator points them at its owner-reference-injecting proxy);
* ``ANSIBLE_ROLES_PATH`` is the role's directory only (ansible-runner would append the
  run's empty ``<private_data_dir>/roles``), so every run has the same configuration and the
  fork server (torchdev_runtime/forkserver.py) can preload ansible;
* verbosity: the watch's (``ANSIBLE_VERBOSITY_<KIND>_<GROUP>``, default 2), overridden by
  the ``ansible.sdk.operatorframework.io/verbosity`` annotation.

Deviations, for speed: facts are not gathered (``gather_facts: false``; the real operator
gathers them unless ``ANSIBLE_GATHERING=explicit``; pass ``gather_facts=True`` to get that),
the inventory is ``localhost ansible_connection=local ansible_python_interpreter=<this
python>`` (the operator image's /etc/ansible/hosts minus the interpreter), and
ansible-runner runs ``ansible-playbook`` with ``subprocess`` instead of ``pexpect`` (about
0.1 s less per run: pexpect sleeps on close). Runs happen in the calling thread; artifacts
go to a per-run temporary directory that is removed afterwards.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ansible_runner.interface import init_runner

from .gotime import go_atoi
from .paramconv import map_to_snake
from .watches import Watch

log = logging.getLogger("torchdev_runtime.runner")

MAX_RUNNER_ARTIFACTS_ANNOTATION = "ansible.sdk.operatorframework.io/max-runner-artifacts"
VERBOSITY_ANNOTATION = "ansible.sdk.operatorframework.io/verbosity"

EVENT_PLAYBOOK_ON_STATS = "playbook_on_stats"
EVENT_RUNNER_ON_FAILED = "runner_on_failed"
EVENT_RUNNER_ON_OK = "runner_on_ok"
DEFAULT_FAILED_MESSAGE = "unknown playbook failure"


def escape_ansible_key(key: str) -> str:
    return key.replace(".", "_").replace("-", "_")


def object_var_name(group: str, kind: str) -> str:
    """``_<group>_<kind lower>`` with dots/dashes -> underscores (the ``_spec`` var adds a suffix)."""
    return escape_ansible_key(f"_{group}_{kind.lower()}")


def mark_unsafe(value: Any) -> Any:
    if isinstance(value, list):
        return [mark_unsafe(v) for v in value]
    if isinstance(value, dict):
        return {k: mark_unsafe(v) for k, v in value.items()}
    if isinstance(value, str):
        return {"__ansible_unsafe": value}
    return value


def is_finalizer_run(watch: Watch, obj: dict[str, Any]) -> bool:
    md = obj.get("metadata") or {}
    if watch.finalizer is None or md.get("finalizers") is None:
        return False
    if not md.get("deletionTimestamp"):
        return False
    return watch.finalizer.name in md["finalizers"]


def make_parameters(watch: Watch, obj: dict[str, Any]) -> dict[str, Any]:
    """runner.makeParameters."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        spec = {}
    if watch.snake_case_parameters:
        params = map_to_snake(spec)
    else:
        params = dict(spec)
    if watch.mark_unsafe:
        params = {k: mark_unsafe(v) for k, v in params.items()}
    md = obj.get("metadata") or {}
    params["ansible_operator_meta"] = {"namespace": md.get("namespace") or "",
                                       "name": md.get("name") or ""}
    obj_key = object_var_name(watch.gvk.group, watch.gvk.kind)
    params[obj_key] = obj
    params[f"{obj_key}_spec"] = spec
    if watch.mark_unsafe:
        params[obj_key] = mark_unsafe(obj)
        params[f"{obj_key}_spec"] = mark_unsafe(spec)
    for k, v in (watch.vars or {}).items():
        params[k] = v
    if is_finalizer_run(watch, obj):
        for k, v in (watch.finalizer.vars or {}).items():  # type: ignore[union-attr]
            params[k] = v
    return params


# --- results -----------------------------------------------------------------------------

def event_ignore_error(ev: dict[str, Any]) -> bool:
    return (ev.get("event_data") or {}).get("ignore_errors") is True


def event_rescued(ev: dict[str, Any]) -> bool:
    """eventapi.JobEvent.Rescued: event_data.rescued is a map with a value of 1."""
    r = (ev.get("event_data") or {}).get("rescued")
    if isinstance(r, dict):
        return any(v == 1 for v in r.values())
    return False


def failed_playbook_message(ev: dict[str, Any]) -> str:
    res = (ev.get("event_data") or {}).get("res")
    if isinstance(res, dict) and isinstance(res.get("msg"), str):
        return res["msg"]
    return DEFAULT_FAILED_MESSAGE


@dataclass
class RunResult:
    ident: str
    status: str = ""            # ansible-runner status: successful / failed / ...
    rc: int | None = None
    duration: float = 0.0
    events: list[dict[str, Any]] = field(default_factory=list)
    stats_event: dict[str, Any] | None = None
    failure_messages: list[str] = field(default_factory=list)
    failed_tasks: list[tuple[str, str]] = field(default_factory=list)  # (task, message)
    requeue_after: float | None = None  # from operator_sdk.util.requeue_after
    requeue_after_error: str | None = None
    # Tasks that ran after the requeue_after task: ansible-operator returns from Reconcile at
    # that event and removes the run's kubeconfig while the playbook goes on, so under it they
    # run without one (their API calls fail, unseen).  The runtime makes it a failed reconcile.
    tasks_after_requeue: list[str] = field(default_factory=list)
    stdout: str = ""
    finalizer_run: bool = False
    events_lost: bool = False  # the stats count a failure whose event was not received

    def count(self, key: str) -> int:
        ed = (self.stats_event or {}).get("event_data") or {}
        v = ed.get(key)
        return int(v.get("localhost", 0)) if isinstance(v, dict) else 0

    @property
    def ok(self) -> int:
        return self.count("ok")

    @property
    def changed(self) -> int:
        return self.count("changed")

    @property
    def failures(self) -> int:
        return self.count("failures")

    @property
    def skipped(self) -> int:
        return self.count("skipped")

    @property
    def successful(self) -> bool:
        return self.stats_event is not None and not self.failure_messages

    def summary(self) -> str:
        return (f"ok={self.ok} changed={self.changed} failed={self.failures} "
                f"skipped={self.skipped} ({self.duration:.2f}s)")


def unread_events(job_events_dir: str, received: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events of a run that its handler never got, from their partial files.

    ansible-runner's display callback writes each event to ``job_events/<uuid>-partial.json``
    and only its uuid to stdout, between escape sequences; the runner decodes that marker,
    reads the file, hands the event to the handler and removes the file.  A marker it cannot
    decode turns into plain ``verbose`` lines and the event never reaches the handler; its
    partial file is still there.  (A defence: the lost events the fault soak found were results
    the callback could not serialize, which leave no file at all; those were fixed at their
    source, controller_module.json_result, and _digest's stats check catches any other.)"""
    seen = {ev.get("uuid") for ev in received}
    out = []
    try:
        names = sorted(os.listdir(job_events_dir))
    except OSError:
        return out
    for fname in names:
        if not fname.endswith("-partial.json"):
            continue
        try:
            with open(os.path.join(job_events_dir, fname), encoding="utf-8") as fh:
                ev = json.load(fh)
        except (OSError, ValueError):
            continue
        if isinstance(ev, dict) and ev.get("event") and ev.get("uuid") not in seen:
            out.append(ev)
    return out


# The events of a task that ran (not skipped) on the host.
RAN_EVENTS = frozenset({"runner_on_ok", "runner_on_failed", "runner_on_unreachable",
                        "runner_item_on_ok", "runner_item_on_failed", "runner_on_async_ok",
                        "runner_on_async_failed"})


def _requeue_after(ev: dict[str, Any]) -> Any:
    """The ``requeue_after`` test of reconcile.go, operator precedence included:
    ``action == "operator_sdk.util.requeue_after" || (action == "requeue_after" && !failed)``.
    """
    ed = ev.get("event_data") or {}
    action = ed.get("task_action")
    if action is None:
        return None
    if action == "operator_sdk.util.requeue_after" or (
            action == "requeue_after" and ev.get("event") != EVENT_RUNNER_ON_FAILED):
        res = ed.get("res")
        if isinstance(res, dict):
            return res.get("period")
    return None


class AnsibleRunner:
    """Prepared once per watch; ``run()`` is safe to call from several threads."""

    def __init__(self, watch: Watch, kubeconfig: str, *, ansible_config: str | None = None,
                 work_dir: str | None = None, gather_facts: bool = False,
                 keep_artifacts: bool = False, extra_env: dict[str, str] | None = None,
                 cmdline: str | None = None, python: str | None = None,
                 playbook_command: list[str] | None = None):
        self.watch = watch
        self.kubeconfig = os.path.abspath(kubeconfig)
        self.ansible_config = os.path.abspath(ansible_config) if ansible_config else None
        self.gather_facts = gather_facts
        self.keep_artifacts = keep_artifacts
        self.extra_env = dict(extra_env or {})
        self.cmdline = cmdline
        # replaces ansible-runner's "ansible-playbook" (the fork server's client + the script)
        self.playbook_command = playbook_command
        self._own_work_dir = work_dir is None
        self.work_dir = work_dir or tempfile.mkdtemp(prefix="torchdev-runtime-")
        self._lock = threading.Lock()
        gk = f"{watch.gvk.kind}.{watch.gvk.group or 'core'}".lower()
        self.prep_dir = os.path.join(self.work_dir, gk)
        os.makedirs(self.prep_dir, exist_ok=True)
        self.inventory = os.path.join(self.prep_dir, "hosts")
        # the Python of Ansible: its bin/ (ansible-playbook) goes first on the runs' PATH
        self.ansible_bin = os.path.dirname(python or sys.executable)
        self.set_python(python or sys.executable)
        self.main = self._prepare(watch.playbook, watch.role, "main")
        fin = watch.finalizer
        if fin is None:
            self.finalizer = None
        elif fin.playbook or fin.role:
            self.finalizer = self._prepare(fin.playbook, fin.role, "finalizer")
        else:
            self.finalizer = self.main

    def set_python(self, python: str) -> None:
        """The interpreter of module runs (the inventory's ansible_python_interpreter)."""
        with open(self.inventory, "w", encoding="utf-8") as fh:
            fh.write(f"localhost ansible_connection=local ansible_python_interpreter={python}\n")

    def _prepare(self, playbook: str, role: str, name: str) -> dict[str, Any]:
        """Returns {"playbook": path, "roles_path": str|None} (playbook wins, like Go)."""
        if playbook:
            return {"playbook": os.path.abspath(playbook), "roles_path": None}
        role_dir, role_name = os.path.split(os.path.abspath(role.rstrip("/")))
        play: dict[str, Any] = {"hosts": "localhost", "roles": [{"name": role_name}]}
        if not self.gather_facts:
            play["gather_facts"] = False
        path = os.path.join(self.prep_dir, f"{name}.json")
        with open(path, "w", encoding="utf-8") as fh:
            json.dump([play], fh)
        return {"playbook": path, "roles_path": role_dir}

    def static_env(self, target: dict[str, Any] | None = None) -> dict[str, str]:
        """The environment variables of a run that do not depend on the object."""
        env = {
            "K8S_AUTH_KUBECONFIG": self.kubeconfig,
            "KUBECONFIG": self.kubeconfig,
            "PATH": self.ansible_bin + os.pathsep + os.environ.get("PATH", ""),
            "ANSIBLE_NOCOLOR": "1",
        }
        if self.ansible_config:
            env["ANSIBLE_CONFIG"] = self.ansible_config
        target = target or self.main
        if target["roles_path"]:
            env["ANSIBLE_ROLES_PATH"] = target["roles_path"]
        env.update(self.extra_env)
        return env

    def server_env(self) -> dict[str, str]:
        """The environment ansible-runner gives ``ansible-playbook``, minus per-run paths.

        The fork server for playbook runs is started with it, so what it imports sees the
        same configuration as the runs (which re-read it anyway, see forkserver.py).
        """
        pdd = tempfile.mkdtemp(prefix="env.", dir=self.prep_dir)
        try:
            os.mkdir(os.path.join(pdd, "env"))
            r = init_runner(private_data_dir=pdd, playbook=self.main["playbook"],
                            inventory=self.inventory, envvars=self.static_env(), ident="env",
                            quiet=True, cancel_callback=lambda: False)
            env = dict(r.config.env)
        finally:
            shutil.rmtree(pdd, ignore_errors=True)
        for key in ("AWX_ISOLATED_DATA_DIR", "ANSIBLE_CACHE_PLUGIN_CONNECTION"):
            env.pop(key, None)
        return env

    def close(self) -> None:
        if self._own_work_dir and not self.keep_artifacts:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def verbosity_for(self, obj: dict[str, Any]) -> int:
        v = self.watch.ansible_verbosity
        ann = ((obj.get("metadata") or {}).get("annotations") or {}).get(VERBOSITY_ANNOTATION)
        if ann is not None:
            try:
                v = go_atoi(ann)
            except ValueError:
                log.info("Invalid ansible verbosity annotation %r", ann)
        return v

    def run(self, obj: dict[str, Any], ident: str, *, verbose: bool = False) -> RunResult:
        md = obj.get("metadata") or {}
        fin_run = is_finalizer_run(self.watch, obj)
        if md.get("deletionTimestamp") and not fin_run:
            raise RuntimeError("resource has been deleted, but no finalizer was matched, "
                               "skipping reconciliation")
        target = self.finalizer if fin_run else self.main
        assert target is not None
        result = RunResult(ident=ident, finalizer_run=fin_run)
        pdd = tempfile.mkdtemp(prefix=f"{md.get('namespace') or '_'}.{md.get('name')}.",
                               dir=self.prep_dir)
        t0 = time.monotonic()
        try:
            env_dir = os.path.join(pdd, "env")
            os.mkdir(env_dir)
            with open(os.path.join(env_dir, "extravars"), "w", encoding="utf-8") as fh:
                json.dump(make_parameters(self.watch, obj), fh, default=str)
            envvars = self.static_env(target)
            events: list[dict[str, Any]] = []

            def on_event(ev: dict[str, Any]) -> bool:
                events.append(ev)
                return False  # no need for ansible-runner to keep job_events files

            kwargs: dict[str, Any] = dict(
                private_data_dir=pdd, playbook=target["playbook"], inventory=self.inventory,
                envvars=envvars, ident=ident, quiet=True, event_handler=on_event,
                cancel_callback=lambda: False,  # never let ansible-runner install signal handlers
                verbosity=self.verbosity_for(obj) or None,
            )
            if self.cmdline:
                kwargs["cmdline"] = self.cmdline
            r = init_runner(**kwargs)
            r.runner_mode = "subprocess"
            if self.playbook_command and r.config.command[:1] == ["ansible-playbook"]:
                r.config.command = self.playbook_command + r.config.command[1:]
            status, rc = r.run()
            result.status, result.rc = status, rc
            unread = unread_events(os.path.join(pdd, "artifacts", ident, "job_events"), events)
            if unread:
                log.warning("%s/%s: %d event(s) read from their partial files (their stdout markers were "
                            "not decoded): %s", md.get("namespace"), md.get("name"), len(unread),
                            [(ev.get("event_data") or {}).get("task") or ev.get("event") for ev in unread])
                events.extend(unread)
            events.sort(key=lambda e: e.get("counter", 0))
            result.events = events
            self._digest(result, events)
            if verbose or result.stats_event is None or result.failure_messages:
                try:
                    with open(os.path.join(pdd, "artifacts", ident, "stdout"),
                              encoding="utf-8", errors="replace") as fh:
                        result.stdout = fh.read()
                except OSError:
                    pass
        finally:
            result.duration = time.monotonic() - t0
            if not self.keep_artifacts:
                shutil.rmtree(pdd, ignore_errors=True)
        return result

    @staticmethod
    def _digest(result: RunResult, events: list[dict[str, Any]]) -> None:
        """The event loop of reconcile.go (stats event, requeue_after, failure messages)."""
        for i, ev in enumerate(events):
            if ev.get("event") == EVENT_PLAYBOOK_ON_STATS:
                result.stats_event = ev
            period = _requeue_after(ev)
            if period is not None:
                from .gotime import DurationError, parse_duration
                try:
                    result.requeue_after = parse_duration(period)
                except DurationError as exc:
                    result.requeue_after_error = str(exc)
                # Go returns from Reconcile here: later events are not looked at (only the
                # stats are kept, for the log and the reconcile history)
                result.stats_event = next((e for e in events
                                           if e.get("event") == EVENT_PLAYBOOK_ON_STATS), None)
                result.tasks_after_requeue = list(dict.fromkeys(
                    (e.get("event_data") or {}).get("task") or "?" for e in events[i + 1:]
                    if e.get("event") in RAN_EVENTS))
                return
            if ev.get("event") == EVENT_RUNNER_ON_FAILED and not event_ignore_error(ev) \
                    and not event_rescued(ev):
                msg = failed_playbook_message(ev)
                result.failure_messages.append(msg)
                ed = ev.get("event_data") or {}
                result.failed_tasks.append((ed.get("task") or "?", msg))
        if result.stats_event is not None and result.failures and not result.failure_messages:
            # The stats count a failed task (neither ignored nor rescued: those have their own
            # counts) whose runner_on_failed event never reached the handler.  Go would call the
            # run a success, and a role whose requeue_after came after the failed task would
            # never be looked at again; failing the run retries it with backoff instead.
            result.events_lost = True
            msg = (f"{result.failures} task(s) failed but no runner_on_failed event was received "
                   f"({len(events)} events)")
            result.failure_messages.append(msg)
            result.failed_tasks.append(("?", msg))
