"""``devctl run``: run a training script on every replica of a dev server with ``devrun``.

For each replica (pod ``<name>-<i>``, node rank ``i``) devctl starts one

    kubectl exec -i -n NS POD -c CONTAINER -- sh -c WRAPPER devrun [--nproc-per-node N] SCRIPT ARGS...

``devrun`` (mounted at /opt/torchdev/bin in every pod, on PATH) reads NNODES,
NPROC_PER_NODE, NODE_RANK, MASTER_ADDR and MASTER_PORT from the pod's env and execs
torchrun.  ``WRAPPER`` is a few lines of POSIX sh that start devrun in the background and
stop it (SIGTERM, which torchrun forwards to its workers) when the exec session's stdin
closes or the shell is signalled: killing ``kubectl exec`` alone does not stop the remote
process when there is no TTY, so Ctrl-C would otherwise leave the ranks running.

Each replica's output is printed line by line with a ``[rank I]`` prefix (stdout to
stdout, stderr to stderr); devctl exits with the worst rank's exit code.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import posixpath
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

import click
from ansible_collections.torchdev.operator.plugins.module_utils.constants import DEVSERVER_LABEL

from . import complete
from .settings import Settings
from .context import kube_options, pass_settings
from .errors import ApiError, DevctlError
from .output import DURATION, dump_json, human_duration, info, warn
from .servers import container_of, desired_replicas, pod_index

LAUNCHER = "devrun"
REMOTE_DIR = "/tmp/devctl-run"
STOP_TIMEOUT = 15.0   # seconds between SIGTERM and SIGKILL of the kubectl processes
POLL = 0.05           # seconds between checks of the rank processes
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143
EXIT_TIMEOUT = 124

# Runs "$@" (devrun ...) in the background and stops it -- SIGTERM, then SIGKILL after
# KILL_AFTER seconds (torchrun blocked in its exit barrier ignores SIGTERM) -- when stdin
# reaches EOF (the kubectl exec ended: devctl stopped it, or devctl died) or when this
# shell gets HUP/INT/TERM. The helpers' stdout/stderr go to /dev/null so they never hold
# the exec session's streams open. Exit status: the job's.
KILL_AFTER = 5
WRAPPER = (
    f"k={KILL_AFTER}; "
    'stop() { s=1; [ -n "$p" ] || return 0; kill -TERM $p 2>/dev/null; '
    '(sleep $k; kill -KILL $p 2>/dev/null) >/dev/null 2>&1 & }; '
    "trap stop HUP INT TERM; "
    'exec 3<&0; "$@" </dev/null & p=$!; '
    '(cat <&3 >/dev/null 2>&1; kill -TERM $p 2>/dev/null; sleep $k; kill -KILL $p 2>/dev/null) '
    '>/dev/null 2>&1 & w=$!; '
    'exec 3<&-; [ -z "$s" ] || stop; '
    'while :; do wait $p; rc=$?; kill -0 $p 2>/dev/null || break; done; '
    'kill $w 2>/dev/null; exit $rc'
)


# -- argument parsing ------------------------------------------------------------------

class RunCommand(click.Command):
    """Everything after SCRIPT belongs to the script, even words that look like devctl
    options (``devctl run train x.py --timeout 5 -n 3`` passes ``--timeout 5 -n 3`` on)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        takes_value: set[str] = set()
        for param in self.params:
            if isinstance(param, click.Option) and not param.is_flag and not param.count:
                takes_value.update(param.opts)
                takes_value.update(param.secondary_opts)
        positionals, i = 0, 0
        while i < len(args):
            word = args[i]
            if word == "--":
                break
            if word.startswith("-") and word != "-":
                if word in takes_value:
                    i += 2
                    continue
                i += 1
                continue
            positionals += 1
            if positionals == 2:  # SCRIPT: the rest is the script's
                args = args[:i] + ["--"] + args[i:]
                break
            i += 1
        return super().parse_args(ctx, args)


# -- planning ---------------------------------------------------------------------------

@dataclass
class Rank:
    rank: int
    pod: str
    container: str
    exec_argv: list[str]
    copy_argv: list[str] | None = None

    def as_dict(self) -> dict:
        return {"rank": self.rank, "pod": self.pod, "container": self.container,
                "copy": self.copy_argv, "exec": self.exec_argv}


@dataclass
class RunPlan:
    name: str
    namespace: str
    mode: str
    script: str                     # the path devrun gets (inside the pod)
    local_script: str | None        # the local file copied to the pods, if any
    ranks: list[Rank] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"devserver": self.name, "namespace": self.namespace, "mode": self.mode,
                "script": self.script, "localScript": self.local_script,
                "ranks": [r.as_dict() for r in self.ranks]}


def find_kubectl() -> str | None:
    from .tunnel import find_kubectl as find

    return find()


def server_ready(obj: dict) -> bool:
    """Ready condition True when the operator reports conditions; else phase Running
    with every replica ready."""
    from .wait import condition, is_ready

    status = obj.get("status") or {}
    if condition(obj, "Ready") is not None:
        return is_ready(obj)
    replicas = status.get("replicas")
    return status.get("phase") == "Running" and bool(replicas) and \
        int(status.get("readyReplicas") or 0) >= int(replicas)


def _pod_ready(pod: dict) -> bool:
    status = pod.get("status") or {}
    if status.get("phase") != "Running" or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    statuses = status.get("containerStatuses") or []
    return bool(statuses) and all(c.get("ready") for c in statuses)


def remote_path(local: str) -> str:
    """Where a local script lands in the pods: /tmp/devctl-run/<sha256[:12]>/<basename>."""
    with open(local, "rb") as fh:
        digest = hashlib.sha256(fh.read()).hexdigest()[:12]
    return posixpath.join(REMOTE_DIR, digest, os.path.basename(local))


def plan_run(settings: Settings, name: str, script: str, args: tuple[str, ...], *,
             nprocs: str | None, copy: str, dry_run: bool) -> RunPlan:
    if copy == "always" and not os.path.isfile(script):
        raise click.BadParameter(f"{script} is not a local file", param_hint="'--copy'")
    namespace = settings.namespace()
    api = settings.api
    obj = api.get_devserver(namespace, name)
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    mode = spec.get("mode") or "standalone"
    if spec.get("suspend"):
        raise DevctlError(f'devserver "{name}" is suspended (spec.suspend is true); nothing to run on')
    replicas = desired_replicas(obj)
    if mode == "distributed" and status.get("replicas"):
        replicas = int(status["replicas"])
    if not server_ready(obj):
        from .wait import describe_state

        message = (f'devserver "{name}" is not Ready ({describe_state(obj)}); '
                   f"wait for it (devctl get {name}) and retry")
        if not dry_run:
            raise DevctlError(message)
        warn(message)

    # The script: copy a local file, else a path inside the pods.
    local = None
    if copy != "never" and os.path.isfile(script):
        local = os.path.abspath(script)
        target = remote_path(local)
    else:
        target = script

    try:
        pods = api.list_pods(namespace, f"{DEVSERVER_LABEL}={name}")
    except ApiError:
        if not dry_run:
            raise
        pods = []
    by_index: dict[int, dict] = {}
    for pod in pods:
        idx = pod_index(pod, name)
        if idx is not None and not (pod.get("metadata") or {}).get("deletionTimestamp"):
            by_index[idx] = pod
    wanted = range(replicas if mode == "distributed" else 1)
    missing = [f"{name}-{i}" for i in wanted if i not in by_index]
    not_ready = [f"{name}-{i}" for i in wanted if i in by_index and not _pod_ready(by_index[i])]
    problem = None
    if missing:
        problem = (f"pod(s) {', '.join(missing)} of devserver \"{name}\" not found in namespace "
                   f"\"{namespace}\" (see devctl get {name})")
    elif not_ready:
        problem = f"pod(s) {', '.join(not_ready)} of devserver \"{name}\" not Running and Ready (see devctl get {name})"
    if problem:
        if not dry_run:
            raise DevctlError(problem)
        warn(problem)

    kubectl = find_kubectl() or "kubectl"
    base = [kubectl, *api.kubectl_args()]
    launcher = [LAUNCHER] + (["--nproc-per-node", nprocs] if nprocs else [])
    plan = RunPlan(name, namespace, mode, target, local)
    for i in wanted:
        pod_name = f"{name}-{i}"
        container = container_of(by_index.get(i))
        exec_argv = base + ["exec", "-i", "-n", namespace, pod_name, "-c", container, "--",
                            "sh", "-c", WRAPPER, LAUNCHER, *launcher, target, *args]
        copy_argv = None
        if local:
            directory = posixpath.dirname(target)
            tmp = posixpath.join(directory, f".{posixpath.basename(target)}.$$")
            copy_argv = base + ["exec", "-i", "-n", namespace, pod_name, "-c", container, "--",
                                "sh", "-c", f"mkdir -p {shlex.quote(directory)} && cat > {tmp} && "
                                            f"mv -f {tmp} {shlex.quote(target)}"]
        plan.ranks.append(Rank(i, pod_name, container, exec_argv, copy_argv))
    return plan


# -- running ----------------------------------------------------------------------------

class Printer:
    """Prefixes and prints lines from several threads, one whole line at a time."""

    def __init__(self) -> None:
        self.lock = threading.Lock()

    def line(self, prefix: str, data: bytes, err: bool) -> None:
        text = data.decode("utf-8", errors="replace").rstrip("\r\n")
        with self.lock:
            try:
                click.echo(f"{prefix}{text}", err=err)
            except (BrokenPipeError, ValueError, OSError):
                pass


# torchrun's failure report: "exitcode  : 3 (pid: 123)" / "failed (exitcode: 3) local_rank: 0".
WORKER_EXIT_RE = re.compile(rb"exitcode\s*:\s*(-?\d+)")


def _pump(stream, prefix: str, printer: Printer, err: bool, worker_codes: list[int] | None = None) -> None:
    try:
        for raw in iter(stream.readline, b""):
            printer.line(prefix, raw, err)
            if worker_codes is not None and b"exitcode" in raw:
                match = WORKER_EXIT_RE.search(raw)
                if match:
                    worker_codes.append(exit_code_of(int(match.group(1))))
    except (OSError, ValueError):
        pass
    finally:
        try:
            stream.close()
        except OSError:
            pass


def exit_code_of(returncode: int) -> int:
    """A Popen return code as a shell exit status (killed by signal N -> 128+N)."""
    return 128 - returncode if returncode < 0 else returncode


def _seconds(value: float) -> str:
    return f"{value:g}s" if value < 120 else human_duration(value)


def worst(codes: list[int]) -> int:
    """The worst exit code: any non-zero beats zero, the largest non-zero wins."""
    return max((c for c in codes if c), default=0)


def copy_script(plan: RunPlan) -> None:
    """Copy the local script into every pod (sequentially: a shared /tmp stays consistent)."""
    if not plan.local_script:
        return
    with open(plan.local_script, "rb") as fh:
        data = fh.read()
    for rank in plan.ranks:
        if not rank.copy_argv:
            continue
        try:
            proc = subprocess.run(rank.copy_argv, input=data, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, timeout=120)
        except subprocess.TimeoutExpired:
            raise DevctlError(f"copying {plan.local_script} to pod {rank.pod} timed out") from None
        if proc.returncode != 0:
            err = (proc.stderr or proc.stdout or b"").decode(errors="replace").strip()
            raise DevctlError(f"copying {plan.local_script} to pod {rank.pod} failed "
                              f"(kubectl exit {proc.returncode}): {err or 'no output'}")


def _stop(procs: dict[int, subprocess.Popen], timeout: float = STOP_TIMEOUT) -> None:
    """SIGTERM every running kubectl exec (and close its stdin: the remote wrapper stops
    devrun on EOF), then SIGKILL what is left after ``timeout``."""
    for proc in procs.values():
        if proc.poll() is None:
            try:
                proc.terminate()
            except OSError:
                pass
        try:
            if proc.stdin:
                proc.stdin.close()
        except OSError:
            pass
    deadline = time.monotonic() + timeout
    for proc in procs.values():
        try:
            proc.wait(timeout=max(deadline - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            proc.kill()
        except KeyboardInterrupt:  # a second Ctrl-C: no more waiting
            for other in procs.values():
                if other.poll() is None:
                    other.kill()
            break
    for proc in procs.values():
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL did not work
            pass


@contextlib.contextmanager
def _signals_deferred(in_main: bool):
    """Hold SIGINT and SIGTERM back until the block ends, then raise KeyboardInterrupt:
    starting a rank and recording it is one step, so a Ctrl-C never leaves a rank that
    nobody stops. (Not a blocked signal mask: the rank's process would inherit it.)"""
    if not in_main:
        yield
        return
    caught: list[int] = []
    previous = {signum: signal.signal(signum, lambda signum, _frame: caught.append(signum))
                for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if caught:
        raise KeyboardInterrupt


def execute(plan: RunPlan, *, timeout: float | None, fail_grace: float | None) -> int:
    """Run every rank; returns devctl's exit code."""
    kubectl = plan.ranks[0].exec_argv[0] if plan.ranks else "kubectl"
    if not (os.path.exists(kubectl) or shutil.which(kubectl)):
        raise DevctlError("kubectl not found on PATH (devctl run uses kubectl exec)")
    copy_script(plan)
    n = len(plan.ranks)
    where = f"{n} replica(s)" if plan.mode == "distributed" else "its single pod (standalone)"
    info(f"running {LAUNCHER} {plan.script} on {where} of devserver {plan.name}; Ctrl-C stops all ranks")

    printer = Printer()
    procs: dict[int, subprocess.Popen] = {}
    worker_codes: dict[int, list[int]] = {rank.rank: [] for rank in plan.ranks}
    threads: list[threading.Thread] = []
    codes: dict[int, int] = {}
    stopped: set[int] = set()
    reason = None
    previous_term = None
    in_main = threading.current_thread() is threading.main_thread()

    def on_term(_signum, _frame):
        raise KeyboardInterrupt

    if in_main:
        previous_term = signal.signal(signal.SIGTERM, on_term)
    start = time.monotonic()
    failed_at: float | None = None
    try:
        for rank in plan.ranks:
            # Own session: a terminal's Ctrl-C reaches devctl only, which stops the
            # ranks in order (and says so) instead of every kubectl dying at once.
            with _signals_deferred(in_main):  # a Ctrl-C now must not leave it unrecorded
                proc = subprocess.Popen(rank.exec_argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, start_new_session=True)
                procs[rank.rank] = proc
            for stream, err in ((proc.stdout, False), (proc.stderr, True)):
                t = threading.Thread(target=_pump, daemon=True,
                                     args=(stream, f"[rank {rank.rank}] ", printer, err,
                                           worker_codes[rank.rank] if err else None))
                t.start()
                threads.append(t)
        while len(codes) < n:
            for idx, proc in procs.items():
                if idx in codes:
                    continue
                rc = proc.poll()
                if rc is None:
                    continue
                codes[idx] = exit_code_of(rc)
                if codes[idx] and failed_at is None:
                    failed_at = time.monotonic()
                    if len(codes) < n and fail_grace is not None:
                        info(f"rank {idx} failed (exit {codes[idx]}); stopping the other ranks "
                             f"in {_seconds(fail_grace)} unless they finish")
            if len(codes) == n:
                break
            now = time.monotonic()
            if timeout is not None and now - start >= timeout:
                reason = "timeout"
                break
            if failed_at is not None and fail_grace is not None and now - failed_at >= fail_grace:
                reason = "failed"
                break
            time.sleep(POLL)
    except KeyboardInterrupt:
        reason = "interrupted"
        running = [i for i, p in procs.items() if p.poll() is None]
        click.echo("", err=True)
        info(f"interrupted: stopping {len(running)} rank(s) "
             f"({', '.join(f'{plan.name}-{i}' for i in running) or 'none running'})")
    finally:
        if in_main and previous_term is not None:
            signal.signal(signal.SIGTERM, previous_term)
        if reason is not None or len(codes) < n:
            stopped = {i for i, p in procs.items() if p.poll() is None}
            if reason == "timeout":
                info(f"timed out after {_seconds(timeout or 0)}: stopping {len(stopped)} rank(s)")
            elif reason == "failed":
                info(f"stopping {len(stopped)} rank(s) still running after rank failure")
            _stop(procs)
        for t in threads:
            t.join(timeout=2)
    for idx, proc in procs.items():
        if idx not in codes and proc.returncode is not None:
            codes[idx] = exit_code_of(proc.returncode)

    if reason == "interrupted":
        return EXIT_INTERRUPTED
    if reason == "timeout":
        return EXIT_TIMEOUT
    for idx, code in codes.items():
        # torchrun exits 1 whatever its worker's exit code: report the worker's.
        if code == 1 and worst(worker_codes[idx]) > 1:
            codes[idx] = worst(worker_codes[idx])
    own = [codes[i] for i in codes if i not in stopped]
    code = worst(own)
    if code:
        summary = ", ".join(f"rank {i}: {'stopped' if i in stopped else codes[i]}" for i in sorted(codes))
        info(f"devctl run: exit {code} ({summary})")
    return code


# -- command ----------------------------------------------------------------------------

def _check_nprocs(_ctx, _param, value: str | None) -> str | None:
    if value is None or value in ("gpu", "cpu", "auto") or (value.isdigit() and 1 <= int(value) <= 1024):
        return value
    raise click.BadParameter(f"{value!r} is not a positive integer or one of gpu, cpu, auto")


@click.command("run", cls=RunCommand)
@click.argument("name", shell_complete=complete.servers)
@click.option("--nprocs-per-node", "nprocs", metavar="N|gpu|cpu|auto", callback=_check_nprocs,
              help="Processes per replica (devrun --nproc-per-node); default: the server's "
                   "spec.distributed.nprocsPerNode (NPROC_PER_NODE in the pods).")
@click.option("--timeout", type=DURATION, metavar="DURATION",
              help="Stop all ranks after this long (90s, 30m, 2h); exit 124. Default: no limit.")
@click.option("--fail-grace", type=DURATION, default="30s", show_default=True, metavar="DURATION",
              help="When a rank fails, stop the ranks still running after this long (0 = at once).")
@click.option("--copy", type=click.Choice(["auto", "always", "never"]), default="auto", show_default=True,
              help="auto: copy SCRIPT to the pods when it is a local file, else use it as a path "
                   "in the pods; always: it must be a local file; never: always a path in the pods.")
@click.option("--dry-run", is_flag=True, help="Print the per-rank kubectl commands; run nothing.")
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="With --dry-run: shell commands or a JSON plan.")
@kube_options()
@click.argument("script", metavar="SCRIPT")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED, metavar="[ARGS...]")
@pass_settings
def run(settings: Settings, name: str, nprocs: str | None, timeout: float | None, fail_grace: float,
        copy: str, dry_run: bool, output: str, script: str, script_args: tuple[str, ...]) -> None:
    """Run SCRIPT with torchrun (devrun) on every replica of dev server NAME.

    Each replica (pod NAME-I, node rank I) runs 'devrun SCRIPT ARGS...' through
    'kubectl exec'; devrun reads the rendezvous env of the pod (NNODES, NPROC_PER_NODE,
    NODE_RANK, MASTER_ADDR, MASTER_PORT) and execs torchrun. A standalone server runs it
    on its single pod. Output lines are prefixed with '[rank I]'; devctl exits with the
    worst rank's exit code (the largest non-zero one; a worker's own exit code when
    torchrun reports it), 124 on --timeout, 130 on Ctrl-C (which stops every rank).

    SCRIPT: a local file is copied to /tmp/devctl-run/<sha>/ in every pod first; a path
    that is not a local file is used as is inside the pods (relative to the home
    directory, e.g. proj/train.py, or absolute, e.g. /shared/train.py). A script that imports other
    local files must live in the pods (home or /shared): only SCRIPT itself is copied.
    devctl options go before SCRIPT; every word after SCRIPT is passed to the script.

    \b
    Examples:
      devctl run train train.py --epochs 3
      devctl run train /shared/proj/train.py --lr 0.1
      devctl run train --nprocs-per-node 8 --timeout 2h train.py
      devctl run train --dry-run train.py
    """
    plan = plan_run(settings, name, script, script_args, nprocs=nprocs, copy=copy, dry_run=dry_run)
    if dry_run:
        if output == "json":
            click.echo(dump_json(plan.as_dict()))
            return
        for rank in plan.ranks:
            click.echo(f"# rank {rank.rank} (pod {rank.pod})")
            if rank.copy_argv:
                click.echo(f"{shlex.join(rank.copy_argv)} < {shlex.quote(plan.local_script or '')}")
            click.echo(shlex.join(rank.exec_argv))
        return
    sys.exit(execute(plan, timeout=timeout, fail_grace=fail_grace))
