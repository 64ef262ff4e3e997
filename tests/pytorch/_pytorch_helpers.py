"""Helpers for tests/pytorch (imported by name: conftest.py is not unique in tests/): load the rendezvous filter by path, play "pods" locally.

A distributed DevServer is simulated by N local process trees ("pods"), each started in
its own session with exactly the env ``rendezvous_env`` renders, resolved the
way the kubelet would for pod index i (value -> as is; the downward-API fieldRef of
``metadata.labels['apps.kubernetes.io/pod-index']`` -> "i"), with pod 0's DNS name
mapped to 127.0.0.1 and a free MASTER_PORT per test.  Every pod is killed (whole
process group) when the test ends, passed or not.
"""

import importlib.util
import os
import re
import signal
import socket
import subprocess
import sys
import time
from importlib.machinery import SourceFileLoader

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPTS = os.path.join(ROOT, "roles", "devserver", "files", "pytorch")
DEVRUN = os.path.join(SCRIPTS, "devrun")
ALLREDUCE_CHECK = os.path.join(SCRIPTS, "allreduce_check.py")
GPU_CHECK = os.path.join(SCRIPTS, "gpu_check.py")
TRAIN_TINY = os.path.join(os.path.dirname(__file__), "train_tiny.py")
POD_TIMEOUT = 75  # seconds a whole simulated job may take before it is killed

# Variables of the test runner's own environment that would leak into the "pods".
_DIST_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK", "MASTER_ADDR",
              "MASTER_PORT", "NNODES", "NPROC_PER_NODE", "NODE_RANK", "TORCHDEV_BACKEND", "TORCHDEV_RDZV_ENDPOINT",
              "TORCHELASTIC_RUN_ID", "CUDA_VISIBLE_DEVICES", "PYTEST_CURRENT_TEST")


def load_rendezvous():
    """plugins/module_utils/rendezvous.py (the env every pod of a DevServer gets)."""
    from ansible_collections.torchdev.operator.plugins.module_utils import rendezvous

    return rendezvous


def load_devrun():
    loader = SourceFileLoader("torchdev_devrun", DEVRUN)
    spec = importlib.util.spec_from_loader("torchdev_devrun", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


_FIELD_RE = re.compile(r"^metadata\.labels\['([^']+)'\]$")


def resolve_env(env_list, pod_index, pod_name, dns=None, port=None):
    """What the container of pod ``pod_index`` would see (downward API + test DNS/port mapping)."""
    labels = {"apps.kubernetes.io/pod-index": str(pod_index), "statefulset.kubernetes.io/pod-name": pod_name}
    dns = dns or {}
    out = {}
    for item in env_list:
        if "value" in item:
            out[item["name"]] = item["value"]
            continue
        field = item["valueFrom"]["fieldRef"]["fieldPath"]
        if field == "metadata.name":
            out[item["name"]] = pod_name
            continue
        match = _FIELD_RE.match(field)
        assert match, "unsupported fieldRef %s" % field
        assert match.group(1) in labels, "pods carry no label %s" % match.group(1)
        out[item["name"]] = labels[match.group(1)]
    host = out.get("MASTER_ADDR")
    if host in dns:
        out["MASTER_ADDR"] = dns[host]
    if port is not None:
        out["MASTER_PORT"] = str(port)
    if "TORCHDEV_RDZV_ENDPOINT" in out:
        out["TORCHDEV_RDZV_ENDPOINT"] = "%s:%s" % (out["MASTER_ADDR"], out["MASTER_PORT"])
    return out


def base_env():
    env = {k: v for k, v in os.environ.items() if k not in _DIST_VARS and not k.startswith(("NCCL_", "FI_", "TORCHELASTIC_"))}
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1",
               PYTHONWARNINGS="ignore", CUDA_VISIBLE_DEVICES="")
    # devrun's shebang is /usr/bin/env python3: make that this interpreter.
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


class Pods:
    """N pod process trees, each in its own session (killpg on cleanup); output to log files."""

    def __init__(self, logdir):
        self.logdir = logdir
        self.procs = []
        self.logs = []

    def start(self, argv, env, cwd):
        path = os.path.join(self.logdir, "pod-%d.log" % len(self.procs))
        with open(path, "w") as log:
            proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        self.procs.append(proc)
        self.logs.append(path)
        return proc

    def output(self, i):
        with open(self.logs[i], errors="replace") as fh:
            return fh.read()

    def outputs(self):
        return "\n".join("--- pod %d (rc %s)\n%s" % (i, p.returncode, self.output(i)[-4000:])
                         for i, p in enumerate(self.procs))

    def wait(self, timeout=POD_TIMEOUT):
        """[(rc, output)] of every pod; kills them all and fails the test on timeout."""
        deadline = time.monotonic() + timeout
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.kill()
                pytest.fail("pods did not finish within %ss; killed\n%s" % (timeout, self.outputs()))
        return [(p.returncode, self.output(i)) for i, p in enumerate(self.procs)]

    def kill(self):
        for proc in self.procs:
            # The pod's whole session: torchrun's workers included, even after torchrun exited.
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:  # pragma: no cover
                pass
