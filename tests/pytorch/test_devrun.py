"""devrun: argument handling and the command it builds (no torch needed)."""

import os
import subprocess
import sys

import pytest

from _pytorch_helpers import DEVRUN, base_env, load_devrun, load_rendezvous, resolve_env

D = load_devrun()
R = load_rendezvous()

ENV = {"NNODES": "2", "NPROC_PER_NODE": "4", "NODE_RANK": "1", "MASTER_ADDR": "t-0.t.ns.svc.cluster.local",
       "MASTER_PORT": "29500"}
STATIC = ["--nnodes", "2", "--nproc-per-node", "4", "--node-rank", "1", "--master-addr", "t-0.t.ns.svc.cluster.local",
          "--master-port", "29500"]


@pytest.mark.parametrize("argv, torchrun_args, nproc, python, program", [
    (["train.py"], [], None, None, ["train.py"]),
    (["train.py", "--lr", "0.1", "--", "x"], [], None, None, ["train.py", "--lr", "0.1", "--", "x"]),
    (["--dry-run", "train.py", "--dry-run"], [], None, None, ["train.py", "--dry-run"]),
    (["-m", "pkg.train", "--epochs", "1"], [], None, None, ["-m", "pkg.train", "--epochs", "1"]),
    (["--max-restarts", "2", "--redirects", "3", "--", "train.py", "-v"], ["--max-restarts", "2", "--redirects", "3"],
     None, None, ["train.py", "-v"]),
    (["--", "--weird-name.py"], [], None, None, ["--weird-name.py"]),
    (["--nproc-per-node", "gpu", "train.py"], [], "gpu", None, ["train.py"]),
    (["--nproc-per-node=8", "train.py"], [], "8", None, ["train.py"]),
    (["--python", "/opt/py/bin/python", "train.py"], [], None, "/opt/py/bin/python", ["train.py"]),
])
def test_command(argv, torchrun_args, nproc, python, program):
    opts, cmd = D.build_command(ENV, argv)
    static = list(STATIC)
    if nproc:
        static[3] = nproc
    assert cmd == [python or sys.executable, "-m", "torch.distributed.run"] + static + torchrun_args + program
    assert opts["dry_run"] == (argv[0] == "--dry-run")


@pytest.mark.parametrize("env, argv, words", [
    ({}, ["train.py"], ["NNODES", "NPROC_PER_NODE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT"]),
    (dict(ENV, MASTER_ADDR=""), ["train.py"], ["missing", "MASTER_ADDR"]),
    (dict(ENV, NNODES="two"), ["train.py"], ["NNODES='two' is not an integer"]),
    (dict(ENV, NODE_RANK="2"), ["train.py"], ["NODE_RANK=2 must be lower than NNODES=2"]),
    (dict(ENV, MASTER_PORT="0"), ["train.py"], ["MASTER_PORT=0"]),
    (ENV, [], ["no training script"]),
    (ENV, ["--dry-run"], ["no training script"]),
    (ENV, ["--bogus", "train.py"], ["unknown devrun option --bogus"]),
    (ENV, ["--nproc-per-node", "lots", "train.py"], ["--nproc-per-node 'lots'"]),
    (ENV, ["-m"], ["-m needs a module"]),
])
def test_errors(env, argv, words, capsys):
    assert D.main(argv, env) == 2
    err = capsys.readouterr().err
    assert err.startswith("devrun: error: ")
    for word in words:
        assert word in err


def test_dry_run_executable_with_filter_env(tmp_path):
    """The real file, run through its shebang, with a pod's env resolved from the filter."""
    assert os.access(DEVRUN, os.X_OK)
    with open(DEVRUN) as fh:
        assert fh.readline().strip() == "#!/usr/bin/env python3"
    ds = {"metadata": {"name": "train", "namespace": "dev-bob"},
          "spec": {"flavor": "cpu", "mode": "distributed", "distributed": {"worldSize": 6, "nprocsPerNode": 2, "backend": "gloo"}}}
    env = base_env()
    env.update(resolve_env(R.rendezvous_env(ds, {}), 2, "train-2"))
    out = subprocess.run([DEVRUN, "--dry-run", "train.py", "--steps", "3"], env=env, capture_output=True, text=True,
                         timeout=30, cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr
    words = out.stdout.split()
    assert words[1:] == ["-m", "torch.distributed.run", "--nnodes", "3", "--nproc-per-node", "2", "--node-rank", "2",
                         "--master-addr", "train-0.train.dev-bob.svc.cluster.local", "--master-port", "29500",
                         "train.py", "--steps", "3"]


def test_help():
    out = subprocess.run([sys.executable, DEVRUN, "--help"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and "torch.distributed.run" in out.stdout
