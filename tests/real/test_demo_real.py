"""`make demo CLUSTER=real` (hack/demo.py --cluster real, issue 26.9): the demo on the real
control plane (hack/cluster/stack.py) with the real ansible-operator, end to end; everything it
started stops with it."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from hack import demo
from hack.cluster.control_plane import ControlPlane

ROOT = pathlib.Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_keep_is_refused_on_the_real_control_plane(capsys):
    with pytest.raises(SystemExit):
        demo.parse_args(["--cluster", "real", "--keep"])
    assert "--keep needs a cluster that outlives the demo" in capsys.readouterr().err


def test_the_demo_runs_on_the_real_control_plane_and_stops_it(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env["DEVCTL_CONFIG"] = str(tmp_path / "devctl.yaml")
    work = tmp_path / "demo"
    proc = subprocess.run([sys.executable, "-m", "hack.demo", "--cluster", "real", "--workdir", str(work)],
                          env=env, cwd=ROOT, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "Starting the real control plane" in out and "Starting the real ansible-operator" in out, out[-3000:]
    assert "Ready in" in out and "torchdev_devservers{" in out, out[-3000:]
    # the real operator reconciled the server (its controller-runtime metrics)
    assert 'controller_runtime_reconcile_total{controller="devserver-controller",result="success"}' in out, out[-3000:]
    # nothing it started is left: no process names its work directory (the control plane's and
    # Kueue's data, the operator's HOME), and the control plane recorded none still running
    assert (work / "real" / "cluster" / "logs" / "kube-apiserver.log").is_file()
    assert not ControlPlane(work / "real" / "cluster").state()["processes"]
    assert not _processes_naming(work)


def _processes_naming(path: pathlib.Path) -> list[str]:
    found = []
    for proc in pathlib.Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes() if proc.name.isdigit() else b""
        except OSError:
            continue
        if str(path).encode() in cmdline:
            found.append(cmdline.replace(b"\0", b" ").decode(errors="replace")[:200])
    return found
