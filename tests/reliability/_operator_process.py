"""The local operator as a process of its own (``python -m torchdev_runtime``), to be killed.

Its reconcile metrics (``--metrics-bind-address``: controller_runtime_active_workers,
workqueue_depth, torchdev_runtime_reconciles_total) say whether it is busy and how many
reconciles it has done; its log is kept for the failure message. Every process it starts
carries the environment variable ``TORCHDEV_TEST_INSTANCE`` (ansible-runner and the fork
servers pass the environment on), so the processes of a killed instance can be found and
waited for: a run that was in flight finishes its request, or dies, before the next instance's
writes are counted.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid

from prometheus_client.parser import text_string_to_metric_families

from _e2e_helpers import ROOT


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class OperatorProcess:
    def __init__(self, kubeconfig: str, workers: int = 2):
        self.kubeconfig = kubeconfig
        self.workers = workers
        self.proc: subprocess.Popen | None = None
        self.instance = ""
        self.port = 0
        self.log: list[str] = []
        self.started_at = 0.0
        self.work_dirs: set[bytes] = set()

    def start(self) -> "OperatorProcess":
        self.instance = uuid.uuid4().hex
        self.port = free_port()
        env = dict(os.environ, TORCHDEV_TEST_INSTANCE=self.instance)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "torchdev_runtime", "--watches-file", str(ROOT / "watches.yaml"),
             "--kubeconfig", self.kubeconfig, "--ansible-config", str(ROOT / "ansible.cfg"),
             "--health-interval", "0", "--max-concurrent-reconciles", str(self.workers),
             "--metrics-bind-address", f"127.0.0.1:{self.port}"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT, env=env,
            start_new_session=True)
        self.started_at = time.time()
        lines = self.log
        threading.Thread(target=lambda p=self.proc: lines.extend(iter(p.stdout.readline, "")), daemon=True).start()
        return self

    # -- state ----------------------------------------------------------------------------------
    def metrics(self) -> dict[str, float]:
        """{'name{label=value,...}': value} of the metrics endpoint (empty while it is not up)."""
        try:
            text = urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5).read().decode()
        except OSError:
            return {}
        out = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
                out[f"{s.name}{{{labels}}}"] = s.value
        return out

    def total(self, name: str, **labels: str) -> float:
        want = [f"{k}={v}" for k, v in labels.items()]
        return sum(v for k, v in self.metrics().items()
                   if k.startswith(name + "{") and all(w in k for w in want))

    def busy(self) -> bool | None:
        """Whether a reconcile runs or waits; None while the metrics are not served yet."""
        m = self.metrics()
        if not m:
            return None
        return any(v > 0 for k, v in m.items()
                   if k.startswith(("controller_runtime_active_workers{", "workqueue_depth{")))

    def reconciles(self) -> float:
        return self.total("controller_runtime_reconcile_total")

    # -- killing --------------------------------------------------------------------------------
    def kill(self) -> None:
        """SIGKILL the operator (not its children: they are what a kill leaves behind)."""
        assert self.proc is not None
        self.leftovers()  # learn the fork servers' work directory while they run
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def leftovers(self) -> list[int]:
        """Processes of this instance still alive: those with its environment marker, and the
        fork servers' children (their command line names the instance's work directory; a forked
        worker takes its client's environment, which /proc does not show)."""
        marker = f"TORCHDEV_TEST_INSTANCE={self.instance}".encode()
        found = []
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) == os.getpid():
                continue
            try:
                with open(f"/proc/{pid}/environ", "rb") as fh:
                    environ = fh.read().split(b"\0")
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    cmdline = fh.read()
            except OSError:
                continue
            if marker in environ:
                found.append(int(pid))
                if b"--socket" in cmdline:  # a fork server: its work directory
                    sock = cmdline.split(b"\0")[cmdline.split(b"\0").index(b"--socket") + 1]
                    self.work_dirs.add(os.path.dirname(sock))
            elif any(d in cmdline for d in self.work_dirs):
                found.append(int(pid))
        return found

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)

    def tail(self, n: int = 60) -> str:
        return "".join(self.log[-n:])
