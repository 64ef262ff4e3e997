"""The torchdev_train library (roles/trainingjob/files/torchdev_train, shipped to the workers):
checkpoint atomicity and rotation, the success policy, rate-limited status writes, and for
real: two local gloo processes with the env the operator renders train, checkpoint and rotate,
are killed mid-run, resume from the newest complete checkpoint and end with exactly the
weights of an uninterrupted run."""
from __future__ import annotations

import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import torchdev_train as tt
from ansible_collections.torchdev.operator.plugins.module_utils import trainingjob
from torchdev_train.checkpoint import DirStore

HERE = Path(__file__).resolve().parent
EPOCHS = 8


# -- checkpoints -------------------------------------------------------------------------------
def test_dir_store_is_atomic_and_rotates(tmp_path):
    ckpt = tt.Checkpoints(str(tmp_path / "c"), retention=2)
    for epoch in (1, 2, 3):
        ckpt.save(epoch, {"w": epoch})
    assert ckpt.store.complete() == [2, 3] and ckpt.newest() == 3
    assert ckpt.load() == {"w": 3} and ckpt.load(2) == {"w": 2}
    # a save killed half-way: a temporary directory, a checkpoint directory without its marker
    (tmp_path / "c" / ".epoch-00009.tmp-123").mkdir()
    (tmp_path / "c" / ".epoch-00009.tmp-123" / "state.pt").write_bytes(b"partial")
    (tmp_path / "c" / "epoch-00010").mkdir()
    (tmp_path / "c" / "epoch-00010" / "state.pt").write_bytes(b"partial")
    assert ckpt.newest() == 3  # never the half-written one
    ckpt.save(4, {"w": 4})  # rotation also removes the leftovers
    assert sorted(os.listdir(tmp_path / "c")) == ["epoch-00003", "epoch-00004"]


def test_store_rejects_unsupported_uris():
    with pytest.raises(ValueError, match="GCS and Azure"):
        tt.Checkpoints("gs://bucket/x")


def test_same_epoch_saved_again_replaces_it(tmp_path):
    store = DirStore(str(tmp_path))
    store.save(1, b"a")
    store.save(1, b"b")
    assert store.load(1) == b"b" and store.complete() == [1]


# -- success policy ----------------------------------------------------------------------------------
@pytest.mark.parametrize("target,patience,history,stop_at,reason", [
    (0.9, None, [0.5, 0.8, 0.91, 0.95], 3, "TargetAccuracyReached"),
    (None, 2, [1.0, 0.9, 0.95, 0.92, 0.8], 4, "EarlyStopped"),
    (None, 2, [1.0, 0.9, 0.8, 0.7], None, None),
    (None, None, [1.0, 1.0, 1.0], None, None),
])
def test_success_policy(target, patience, history, stop_at, reason):
    policy = tt.SuccessPolicy(target, patience)
    for epoch, value in enumerate(history, 1):
        metrics = {"accuracy": value} if target is not None else {"loss": value}
        hit = policy.update(epoch, metrics)
        if hit:
            assert (epoch, hit[0]) == (stop_at, reason)
            return
    assert stop_at is None


# -- status writes -------------------------------------------------------------------------------------
class _Recorder(http.server.BaseHTTPRequestHandler):
    requests: list = []

    def do_PATCH(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append((self.path, self.headers["Content-Type"], body))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


def test_status_writes_are_rate_limited_and_server_side_applied():
    _Recorder.requests = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        writer = tt.StatusWriter("bert", "ml", server="http://127.0.0.1:%d" % server.server_port, min_interval=0.5)
        job = tt.Job("bert", "ml", epochs=10, writer=writer, rank=0)
        for epoch in range(1, 6):  # five reports in a burst: one write now, the rest coalesced
            job.report(epoch, {"loss": 1.0 / epoch})
        assert len(_Recorder.requests) == 1
        deadline = time.monotonic() + 30
        while len(_Recorder.requests) < 2 and time.monotonic() < deadline:  # the timer flushes the rest
            time.sleep(0.05)
        path, ctype, body = _Recorder.requests[1]
        assert path == "/apis/torchdev.io/v1alpha1/namespaces/ml/trainingjobs/bert/status?fieldManager=torchdev-train"
        assert ctype == "application/apply-patch+yaml"
        assert body["status"]["currentEpoch"] == 5 and body["status"]["progress"] == "50%"
        assert set(body["status"]) <= {"currentEpoch", "metrics", "lastReportTime", "progress", "result",
                                       "latestCheckpoint", "checkpoints"}
    finally:
        server.shutdown()


# -- two gloo workers, killed and resumed --------------------------------------------------------------
def _free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker_envs(ckpt_dir, port, attempt):
    """The env the operator renders for each worker (trainingjob.env), resolved as the kubelet
    would: NODE_RANK from the completion index, worker 0's DNS name -> 127.0.0.1."""
    spec = {"model": "linear", "dataset": "synthetic", "numWorkers": 2, "gpusPerWorker": 0,
            "networking": {"backend": "gloo", "masterPort": port}, "hyperparameters": {"epochs": EPOCHS},
            "checkpoint": {"enabled": True, "retention": 2, "storage": {"claimName": "c", "mountPath": str(ckpt_dir)}}}
    rendered = trainingjob.env(spec, "tiny", "ml", attempt=attempt)
    envs = []
    for index in range(2):
        env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                                                                "KUBERNETES_SERVICE_HOST")}
        for item in rendered:
            env[item["name"]] = item["value"] if "value" in item else str(index)  # NODE_RANK: the completion index
        env.update(MASTER_ADDR="127.0.0.1", PYTHONPATH=str(trainingjob_lib()), OMP_NUM_THREADS="1",
                   PYTHONWARNINGS="ignore", TRAIN_EPOCH_SLEEP="0.3")
        envs.append(env)
    return envs


def trainingjob_lib():
    return Path(tt.__file__).resolve().parents[1]


def _start(outdir, ckpt_dir, attempt):
    outdir.mkdir(exist_ok=True)
    port = _free_port()
    procs = []
    for i, env in enumerate(_worker_envs(ckpt_dir, port, attempt)):
        log = open(outdir / ("worker-%d-attempt-%d.log" % (i, attempt)), "w")
        procs.append(subprocess.Popen([sys.executable, str(HERE / "train_resume.py"), str(outdir)], env=env,
                                      stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
    return procs


def _wait(procs, outdir, timeout=180):
    for p in procs:
        try:
            assert p.wait(timeout=timeout) == 0, _logs(outdir)
        except subprocess.TimeoutExpired:
            _kill(procs)
            pytest.fail("workers did not finish\n" + _logs(outdir))


def _kill(procs):
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()


def _logs(outdir):
    return "\n".join("--- %s\n%s" % (p.name, p.read_text()[-3000:]) for p in sorted(outdir.glob("*.log")))


@pytest.mark.slow
def test_killed_workers_resume_and_match_an_uninterrupted_run(tmp_path):
    import torch

    straight = tmp_path / "straight"
    procs = _start(straight, tmp_path / "ckpt-straight", 0)
    _wait(procs, straight)
    expected = torch.load(straight / "final.pt")

    out, ckpt = tmp_path / "killed", tmp_path / "ckpt"
    procs = _start(out, ckpt, 0)
    try:
        deadline = time.monotonic() + 120
        while DirStore(str(ckpt / "tiny")).complete()[-1:] < [3]:  # mid-run: past epoch 3
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs), _logs(out)
            time.sleep(0.05)
    finally:
        _kill(procs)  # SIGKILL, wherever they are (possibly mid-save)
    assert not (out / "final.pt").exists()
    killed_at = DirStore(str(ckpt / "tiny")).complete()
    assert killed_at and killed_at[-1] < EPOCHS and len(killed_at) <= 2  # rotation: retention 2
    # what a kill during a save leaves behind is never taken for the newest checkpoint
    (ckpt / "tiny" / ".epoch-00007.tmp-1").mkdir()
    (ckpt / "tiny" / "epoch-00007").mkdir()
    (ckpt / "tiny" / "epoch-00007" / "state.pt").write_bytes(b"half")

    procs = _start(out, ckpt, 1)  # the group restart: every worker again, attempt 1
    _wait(procs, out)
    assert json.loads((out / "resumed-1.json").read_text())["start"] == killed_at[-1] + 1
    got = torch.load(out / "final.pt")
    assert got.keys() == expected.keys()
    for key in expected:
        assert torch.equal(got[key], expected[key]), key  # bit-identical weights
    assert DirStore(str(ckpt / "tiny")).complete() == [EPOCHS - 1, EPOCHS]
    trained = [int(x) for x in (out / "epochs-0.log").read_text().split()]
    resumed = list(range(killed_at[-1] + 1, EPOCHS + 1))
    assert trained[-len(resumed):] == resumed  # the second attempt trained only what was lost
    first = trained[:-len(resumed)]
    assert first == list(range(1, len(first) + 1)) and len(first) >= killed_at[-1]
