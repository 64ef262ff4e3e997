#!/usr/bin/env python3
"""`make playground`: the simulated cluster, the operator and the exporter kept running in the
background, a demo user onboarded, for trying devctl by hand.

    python -m hack.playground up       (make playground)         start; a second call only says so
    python -m hack.playground down     (make playground-down)    stop exactly what up started
    python -m hack.playground status [-o json]  (make playground-status)  what runs, the kubeconfig

up starts, each detached (a session of its own, its log in the state directory, default
.cache/playground): kubesim with the sample node pools (hack/sample-nodes.spec), then the CRDs and
the sample flavors, the operator (torchdev-runtime with watches.yaml: every watch, its dependent
watches as `make run` and `make demo` start it) and the exporter (plain HTTP on loopback). It
onboards the DevUser `demo` (demo@example.com, namespace dev-demo) with `devctl admin onboard
--wait`, writes a devctl config (namespace dev-demo, owner demo@example.com) and prints the
`export KUBECONFIG=... DEVCTL_CONFIG=... PATH=...` line and what to try (TRY). What it started is
recorded in state.json: each process's pid, command line and start time (/proc/PID/stat), so
that down and a later up never signal a pid that another process has taken since. $KUBECONFIG is
not used: the playground is always its own kubesim (`make cluster` starts the real control plane
alone; the playground does not run on it).

kubesim keeps its objects in memory: down (or a crash) loses them. It runs no containers (CANNOT):
a DevServer's pods reach Running and Ready, but there is nothing in them to ssh or exec into.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import fcntl
import json
import os
import pathlib
import shlex
import signal
import subprocess
import sys
import time
import urllib.request

from hack import demo

ROOT = demo.ROOT
DEFAULT_DIR = ROOT / ".cache" / "playground"
USER = "demo"
EMAIL = "demo@example.com"
NAMESPACE = f"dev-{USER}"
GPUS = 8  # the user's GPU quota per flavor: one p5 node's (gpu-h100-8)
FLAVOR = demo.DEFAULT_FLAVOR
STATE_VERSION = 1
# What up prints to try, in this order (tests/test_playground.py runs each devctl line, the
# README's quick start shows them): (command, what it shows).
TRY = (
    ("devctl whoami", "you are the DevUser demo; namespace dev-demo"),
    ("devctl flavors", "the sample flavors"),
    (f"devctl create my-dev --flavor {FLAVOR} --wait", "a DevServer, Ready through the running operator"),
    ("devctl list", "your dev servers"),
    ("devctl get my-dev", "its spec, status, conditions, pods and events"),
    ("devctl quota", "the demo user's quota (kubesim counts no usage: used stays 0)"),
    ("devctl ssh my-dev --print", "the ssh command it would run (only printed: see below)"),
    (f"kubectl get devservers,statefulsets,pods -n {NAMESPACE}", "what the operator created"),
    ("devctl delete my-dev --yes", "delete it (its home volume is kept; --purge deletes that too)"),
)
CANNOT = ("What the simulated cluster cannot do: it runs no containers. Pods reach Running and Ready, but no sshd "
          "or shell runs in them and kubesim forwards no ports, so `devctl ssh` (only its --print), ssh through "
          "`devctl ssh-config`, `devctl run` and an interactive `kubectl exec` cannot work here (kubesim's exec knows "
          "only a few file commands: tar, cat, ls, mkdir, rm, enough for `kubectl cp`). It keeps everything in "
          "memory: `make playground-down` loses it.")
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPlaygroundKeyForTorchdevDemoOnlyxxxxxxxxxxx demo@torchdev\n"
STOP_ORDER = ("exporter", "operator", "kubesim")  # the reverse of the start


class PlaygroundError(RuntimeError):
    pass


# -- processes, by pid, command line and start time -------------------------------------------

def identity(pid: int) -> dict | None:
    """The process ``pid`` as /proc shows it: cmdline (list), start time (clock ticks since
    boot), parent, process group, session; None when there is none, or only a zombie."""
    try:
        cmdline = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes()
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the fields after "(comm)": state ppid pgrp session ... starttime is field 22 (index 19 here)
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] in ("Z", "X"):
        return None
    return {"cmdline": [a.decode(errors="replace") for a in cmdline.split(b"\0")[:-1]],
            "starttime": int(fields[19]), "ppid": int(fields[1]), "pgrp": int(fields[2]),
            "session": int(fields[3])}


def ours(record: dict) -> bool:
    """``record``'s process still runs: its pid shows the recorded command line and start time
    (a pid taken by another process since shows another, and is left alone)."""
    now = identity(record["pid"])
    return now is not None and now["cmdline"] == record["cmdline"] and now["starttime"] == record["starttime"]


def record_of(name: str, proc: subprocess.Popen, log: pathlib.Path, **extra) -> dict:
    """What state.json keeps of a process just started. Popen returns while the exec is under way:
    /proc shows an empty command line until the new program's is in place."""
    deadline = time.monotonic() + 10
    while True:
        now = identity(proc.pid)
        if now is None or proc.poll() is not None:
            raise PlaygroundError(f"{name} exited at once (exit status {proc.poll()}); see {log}")
        if now["cmdline"] or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    return {"name": name, "pid": proc.pid, "cmdline": now["cmdline"], "starttime": now["starttime"],
            "log": str(log), **extra}


def processes() -> dict[int, dict]:
    """Every process but zombies: pid -> identity."""
    out = {}
    for entry in pathlib.Path("/proc").iterdir():
        if entry.name.isdigit():
            now = identity(int(entry.name))
            if now is not None:
                out[int(entry.name)] = now
    return out


def session_members(sid: int) -> list[int]:
    return [pid for pid, now in processes().items() if now["session"] == sid]


def descendants(pid: int) -> list[dict]:
    """The children of ``pid``, theirs and so on, as {pid, starttime}: those in sessions of their
    own too (the operator's fork servers), which a signal to its session does not reach."""
    table = processes()
    out, todo = [], [pid]
    while todo:
        parent = todo.pop()
        for child, now in table.items():
            if now["ppid"] == parent:
                out.append({"pid": child, "starttime": now["starttime"]})
                todo.append(child)
    return out


def running(tree: list[dict]) -> list[dict]:
    """Those of ``tree`` that still run (a pid with another start time is another process)."""
    return [d for d in tree if (identity(d["pid"]) or {}).get("starttime") == d["starttime"]]


def stop_record(record: dict, timeout: float = 45) -> str:
    """Stop ``record``'s process and what it started: SIGTERM to its session (each process here
    is started in one of its own, so its pid is the session's and its group's id, and no other
    process can take that pid while any of them runs), then wait for the session and for every
    descendant found before the signal (the operator's fork servers, in sessions of their own,
    exit when it does); SIGKILL to what is left after ``timeout``. Returns what was done, in
    words; a process that is not ours (gone, or its pid taken) is not signalled."""
    pid = record["pid"]
    if not ours(record):
        if identity(pid) is None:
            return "already gone"
        return "already gone (its pid is another process now: left alone)"
    leader = identity(pid)["session"] == pid
    tree = [{"pid": pid, "starttime": record["starttime"]}, *descendants(pid)]

    def left() -> set[int]:
        return set(session_members(pid) if leader else []) | {d["pid"] for d in running(tree)}

    with contextlib.suppress(ProcessLookupError):
        (os.killpg if leader else os.kill)(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while left() and time.monotonic() < deadline:
        time.sleep(0.1)
    if not left():
        return "stopped"
    for member in left():
        with contextlib.suppress(ProcessLookupError):
            os.kill(member, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while left() and time.monotonic() < deadline:
        time.sleep(0.1)
    return f"killed (still running {timeout:.0f}s after SIGTERM)"


def say(text: str) -> None:
    print(text, flush=True)


# -- the state directory ------------------------------------------------------------------------

class Playground:
    def __init__(self, directory: pathlib.Path | str = DEFAULT_DIR):
        self.dir = pathlib.Path(directory).resolve()
        self.state_path = self.dir / "state.json"
        self.kubeconfig = self.dir / "kubeconfig"
        self.devctl_config = self.dir / "devctl.yaml"
        self.lock_path = self.dir.parent / f"{self.dir.name}.lock"

    @contextlib.contextmanager
    def locked(self):
        """One up or down at a time on a state directory."""
        self.lock_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.lock_path, "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            yield

    def state(self) -> dict | None:
        try:
            state = json.loads(self.state_path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise PlaygroundError(f"{self.state_path} cannot be read ({exc}): remove it by hand after checking "
                                  "that nothing it names runs") from None
        if not isinstance(state, dict) or not isinstance(state.get("processes"), list):
            raise PlaygroundError(f"{self.state_path} is not a playground state file")
        return state

    def save(self, state: dict) -> None:
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=1) + "\n")
        os.replace(tmp, self.state_path)

    def env(self) -> dict[str, str]:
        """What the printed export line sets (and it puts this virtualenv's bin first on PATH)."""
        return {"KUBECONFIG": str(self.kubeconfig), "DEVCTL_CONFIG": str(self.devctl_config)}

    def export_line(self) -> str:
        return ("export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env().items())
                + f' PATH={shlex.quote(str(demo.BIN))}:"$PATH"')

    def report(self) -> dict:
        """status's data: state is running (every recorded process runs), partial (some do),
        stopped (none, or no state)."""
        state = self.state()
        if state is None:
            return {"state": "stopped", "stateDir": str(self.dir), "processes": []}
        processes = [{"name": r["name"], "pid": r["pid"], "running": ours(r), "log": r["log"],
                      **({"metrics": r["metrics"]} if r.get("metrics") else {})} for r in state["processes"]]
        running = [p["running"] for p in processes]
        return {"state": "running" if running and all(running) else "partial" if any(running) else "stopped",
                "stateDir": str(self.dir), "cluster": state["cluster"], "startedAt": state["startedAt"],
                "kubeconfig": str(self.kubeconfig), "devctlConfig": str(self.devctl_config),
                "export": self.export_line(), "env": self.env(), "bin": str(demo.BIN),
                "user": {"name": USER, "email": EMAIL, "namespace": NAMESPACE},
                "processes": processes}

    # -- up ------------------------------------------------------------------------------------
    def up(self, out=say) -> dict:
        with self.locked():
            state = self.state()
            if state is not None:
                report = self.report()
                if report["state"] == "running":
                    out(f"The playground is already running (since {state['startedAt']}; "
                        f"pids {', '.join(str(p['pid']) for p in report['processes'])}).")
                    self.print_next(state, out)
                    return state
                out("The playground's state names processes that are gone: stopping what is left of it first.")
                self._stop(state, out)
            return self._start(out)

    def _start(self, out) -> dict:
        started = time.monotonic()
        self.dir.mkdir(parents=True, exist_ok=True)
        self.kubeconfig.unlink(missing_ok=True)  # kubesim writes it when it is ready
        for log in self.dir.glob("*.log"):  # the last run's, kept once
            log.replace(log.with_suffix(".log.previous"))
        state = {"version": STATE_VERSION, "cluster": "kubesim", "root": str(ROOT), "startedAt":
                 datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "processes": []}
        env = demo.tool_env({k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "DEVCTL_CONFIG")})
        env["DEVCTL_CONFIG"] = str(self.devctl_config)
        procs: list[subprocess.Popen] = []

        def started_proc(name: str, proc: subprocess.Popen, log: pathlib.Path, **extra) -> None:
            procs.append(proc)
            state["processes"].append(record_of(name, proc, log, **extra))
            self.save(state)

        try:
            out(f"Starting kubesim (the simulated cluster) with the sample node pools; logs in {self.dir}")
            try:
                sim, kubeconfig = demo.start_kubesim(self.dir)
            except SystemExit as exc:  # it printed kubesim's log
                raise PlaygroundError(str(exc.code)) from None
            started_proc("kubesim", sim, self.dir / "kubesim.log")
            env["KUBECONFIG"] = kubeconfig
            out("Installing the CRDs and the sample flavors")
            demo.install_crds(env, quiet=True)
            demo.apply_sample_flavors(env, quiet=True)
            operator_port, exporter_port = demo.free_port(), demo.free_port()
            out("Starting the operator (torchdev-runtime, watches.yaml) and the exporter")
            started_proc("operator", demo.start_operator(self.dir, None, operator_port, env),
                         self.dir / "operator.log", metrics=f"http://127.0.0.1:{operator_port}/metrics")
            started_proc("exporter", demo.start_exporter(self.dir, exporter_port, env), self.dir / "exporter.log",
                         metrics=f"http://127.0.0.1:{exporter_port}/metrics")
            for record in state["processes"][1:]:
                wait_serving(record)
            out(f"Onboarding the DevUser {USER} ({EMAIL}, namespace {NAMESPACE}) and waiting for it to be Ready")
            key = self.dir / "demo_ed25519.pub"
            key.write_text(KEY)
            onboard = demo.run(str(demo.BIN / "devctl"), "admin", "onboard", USER, "--email", EMAIL,
                               "--ssh-key-file", str(key), "--gpus", str(GPUS), "--wait", "--timeout", "5m",
                               env=env, check=False, quiet=True)
            if onboard.returncode != 0:
                raise PlaygroundError(f"devctl admin onboard failed:\n{onboard.stdout}\n(operator log: "
                                      f"{self.dir / 'operator.log'})")
            from devctl.config import save_config

            save_config({"namespace": NAMESPACE, "owner": EMAIL}, self.devctl_config)
        except BaseException as exc:
            if isinstance(exc, subprocess.CalledProcessError):
                out(exc.output or "")
            out("The playground did not start: stopping what it started.")
            # our children (their pids are not reused before we reap them): those recorded, newest
            # first, and any other, such as one a signal interrupted Popen for
            children = [p.pid for p in reversed(procs)]
            children += [pid for pid, now in processes().items() if now["ppid"] == os.getpid() and pid not in children]
            for pid in children:
                now = identity(pid)
                if now is not None:
                    stop_record({"pid": pid, **now})
            for proc in procs:
                proc.poll()
            self.state_path.unlink(missing_ok=True)
            self.kubeconfig.unlink(missing_ok=True)
            if isinstance(exc, subprocess.CalledProcessError):
                raise PlaygroundError(f"{shlex.join(exc.cmd)} failed (exit status {exc.returncode})") from None
            raise
        out(f"The playground is up in {time.monotonic() - started:.1f}s.")
        self.print_next(state, out)
        return state

    def print_next(self, state: dict, out) -> None:
        metrics = {r["name"]: r.get("metrics") for r in state["processes"]}
        out("\nUse it from this shell:\n")
        out(f"  {self.export_line()}\n")
        out("Then try:\n")
        lines = [*TRY, (f"curl -s {metrics['exporter']} | grep ^torchdev_", "the exporter's series")]
        width = max(len(cmd) for cmd, _ in lines)
        for cmd, what in lines:
            out(f"  {cmd:<{width}}  # {what}")
        out(f"\n{CANNOT}")
        out(f"Logs: {self.dir}/{{kubesim,operator,exporter}}.log. `make playground-status` says what runs; "
            "`make playground-down` stops it.")

    # -- down ----------------------------------------------------------------------------------
    def down(self, out=say) -> list[dict]:
        with self.locked():
            state = self.state()
            if state is None:
                out(f"The playground is not running (no state in {self.dir}): nothing to stop.")
                return []
            return self._stop(state, out)

    def _stop(self, state: dict, out) -> list[dict]:
        done = []
        records = sorted(state["processes"], key=lambda r: STOP_ORDER.index(r["name"])
                         if r["name"] in STOP_ORDER else -1)
        for record in records:
            what = stop_record(record)
            done.append({"name": record["name"], "pid": record["pid"], "result": what})
            out(f"{record['name']} (pid {record['pid']}): {what}")
        self.state_path.unlink(missing_ok=True)
        self.kubeconfig.unlink(missing_ok=True)
        out(f"The playground is down (its logs stay in {self.dir}).")
        return done

    # -- status --------------------------------------------------------------------------------
    def status_text(self) -> str:
        report = self.report()
        if not report["processes"]:
            return f"The playground is not running (no state in {self.dir}); `make playground` starts it."
        lines = [f"The playground is {report['state']} ({report['cluster']}, started {report['startedAt']}):"]
        for p in report["processes"]:
            lines.append("  ".join([f"  {p['name']:<8}", f"pid {p['pid']:<7}", "running" if p["running"] else "gone   ",
                                    f"log {p['log']}"] + ([f"metrics {p['metrics']}"] if p.get("metrics") else [])))
        lines.append(f"kubeconfig: {report['kubeconfig']}")
        lines.append(f"devctl config: {report['devctlConfig']} (namespace {NAMESPACE}, owner {EMAIL})")
        if report["state"] == "running":
            lines.append(report["export"])
        else:
            lines.append("Not all of it runs: `make playground-down`, then `make playground`.")
        return "\n".join(lines)


def wait_serving(record: dict, timeout: float = 120) -> None:
    """Until ``record``'s metrics endpoint answers; PlaygroundError (with its log's tail) if it
    exits first or does not answer in time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not ours(record):
            break
        try:
            with urllib.request.urlopen(record["metrics"], timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    tail = "".join(pathlib.Path(record["log"]).read_text(errors="replace").splitlines(True)[-40:])
    raise PlaygroundError(f"{record['name']} is not serving {record['metrics']} "
                          f"({'it exited' if not ours(record) else f'after {timeout:.0f}s'}):\n{tail}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hack.playground", description=__doc__.splitlines()[0])
    ap.add_argument("command", choices=("up", "down", "status"))
    ap.add_argument("--dir", type=pathlib.Path, default=DEFAULT_DIR,
                    help="the state directory: state.json, kubeconfig, devctl.yaml, logs (default .cache/playground)")
    ap.add_argument("--cluster", choices=("kubesim", "real"), default="kubesim",
                    help="kubesim (the only one: see real's message)")
    ap.add_argument("-o", "--output", choices=("text", "json"), default="text", help="status: text or json")
    args = ap.parse_args(argv)
    if args.output != "text" and args.command != "status":
        ap.error("-o/--output is status's")
    if args.cluster == "real":
        print("error: the playground runs on kubesim only. For the real control plane: `make cluster` (prints its "
              "export KUBECONFIG= line), then `make install` and `make run` against it; `make demo CLUSTER=real` "
              "shows the operator on it end to end.", file=sys.stderr)
        return 2
    playground = Playground(args.dir)
    try:
        if args.command == "up":
            # a SIGTERM while starting stops what started, as ^C does
            signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
            playground.up()
        elif args.command == "down":
            playground.down()
        elif args.output == "json":
            print(json.dumps(playground.report(), indent=1))
        else:
            print(playground.status_text())
    except PlaygroundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
