"""The torchdev_train library (roles/trainingjob/files/torchdev_train, shipped to the workers):
checkpoint atomicity and rotation, the success policy, rate-limited status writes, and for
real: two local gloo processes with the env the operator renders train, checkpoint and rotate,
are killed mid-run, resume from the newest complete checkpoint and end with exactly the
weights of an uninterrupted run, with checkpoints in a directory and on S3 (moto's server)."""
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


# -- untrusted checkpoints (issue 25.4) --------------------------------------------------------------
class Planted:
    """A pickle that writes a marker file when it is unpickled (its __reduce__ calls open)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _plant(store_dir, epoch, obj):
    """What an attacker with write access to the storage leaves: a complete-looking checkpoint."""
    import torch

    DirStore(str(store_dir)).save(epoch, b"")
    torch.save(obj, store_dir / ("epoch-%05d" % epoch) / "state.pt")


@pytest.mark.parametrize("where", ["newest", "resumeFrom"])
def test_a_planted_checkpoint_is_refused_and_never_run(tmp_path, where, capsys):
    marker = tmp_path / "pwned"
    victim = tmp_path / "checkpoints" / "victim"
    if where == "newest":  # the newest checkpoint of the victim's own prefix
        tt.Checkpoints(str(victim)).save(1, {"w": 1})
        _plant(victim, 2, Planted(marker))
        job = tt.Job("victim", "dev-alice", epochs=5, checkpoint_uri=str(victim), writer=object(), rank=0)
    else:  # the checkpoint the victim's spec.checkpoint.resumeFrom names
        _plant(tmp_path / "checkpoints" / "other", 7, Planted(marker))
        job = tt.Job("victim", "dev-alice", epochs=5, checkpoint_uri=str(victim), writer=object(), rank=0,
                     resume_from=str(tmp_path / "checkpoints" / "other" / "epoch-00007"))
    with pytest.raises(SystemExit) as exit_:
        job.resume()
    assert not marker.exists()
    assert exit_.value.code == tt.EXIT_CONFIG_ERROR
    assert "refused to unpickle" in capsys.readouterr().out


# Run in a fresh interpreter, as in a worker pod: the optimizers import torch._dynamo, which
# fails in a pytest worker where an earlier test file imported ansible (ansible-core 2.19
# replaces sys.intern, which torch._dynamo wraps).
ROUND_TRIP = """
import sys
import torch
import torchdev_train as tt

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
for opt in (torch.optim.Adam(model.parameters(), lr=0.01),
            torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)):
    model(torch.randn(5, 4)).sum().backward()
    opt.step()
    state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 3, "loss": 0.25,
             "name": "mlp", "history": [1.0, 0.5], "shape": (2, 3), "extra": {"seen": None, "ok": True}}
    ckpt = tt.Checkpoints(sys.argv[1] + "/" + type(opt).__name__)
    ckpt.save(3, state)
    got = ckpt.load()
    assert got["optimizer"]["param_groups"] == state["optimizer"]["param_groups"]
    assert all(torch.equal(got["model"][k], v) for k, v in state["model"].items())
    keys = ("epoch", "loss", "name", "history", "shape", "extra")
    assert {k: got[k] for k in keys} == {k: state[k] for k in keys}, got
    fresh = type(opt)(model.parameters(), lr=1.0)
    fresh.load_state_dict(got["optimizer"])  # what resume() hands the training script loads
print("round-trip ok")
"""


def test_what_the_library_saves_loads_with_weights_only(tmp_path):
    """Model and optimizer state (tensors, numbers, strings, lists, dicts, tuples) round-trip."""
    out = subprocess.run([sys.executable, "-c", ROUND_TRIP, str(tmp_path)], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0 and "round-trip ok" in out.stdout, out.stdout + out.stderr


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


def _worker_envs(store, port, attempt):
    """The env the operator renders for each worker (trainingjob.env), resolved as the kubelet
    would: NODE_RANK from the completion index, worker 0's DNS name -> 127.0.0.1."""
    spec = {"model": "linear", "dataset": "synthetic", "numWorkers": 2, "gpusPerWorker": 0,
            "networking": {"backend": "gloo", "masterPort": port}, "hyperparameters": {"epochs": EPOCHS},
            "checkpoint": {"enabled": True, "retention": 2, "storage": store.storage}}
    rendered = trainingjob.env(spec, "tiny", "ml", attempt=attempt)
    envs = []
    for index in range(2):
        env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                                                                "KUBERNETES_SERVICE_HOST")}
        for item in rendered:
            env[item["name"]] = item["value"] if "value" in item else str(index)  # NODE_RANK: the completion index
        env.update(MASTER_ADDR="127.0.0.1", PYTHONPATH=str(trainingjob_lib()), OMP_NUM_THREADS="1",
                   PYTHONWARNINGS="ignore", TRAIN_EPOCH_SLEEP="0.3", **store.env)
        envs.append(env)
    return envs


def trainingjob_lib():
    return Path(tt.__file__).resolve().parents[1]


def _start(outdir, store, attempt, gate=None):
    """The two workers; with ``gate`` (a path) they hold before their last epoch until it exists."""
    outdir.mkdir(exist_ok=True)
    port = _free_port()
    procs = []
    for i, env in enumerate(_worker_envs(store, port, attempt)):
        if gate:
            env["TRAIN_GATE"] = str(gate)
        log = open(outdir / ("worker-%d-attempt-%d.log" % (i, attempt)), "w")
        procs.append(subprocess.Popen([store.python, str(HERE / "train_resume.py"), str(outdir)], env=env,
                                      stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
    return procs


class Dir:
    """Checkpoints in a directory of the volume (the user's claim or the one the operator makes)."""
    python = sys.executable

    def __init__(self, root):
        self.root = root
        self.storage = {"claimName": "c", "mountPath": str(root)}
        self.env = {}

    def complete(self):
        return DirStore(str(self.root / "tiny")).complete()

    def plant_half_written(self, epoch):
        """What a kill during a save leaves behind (a temporary directory, a state without its marker)."""
        (self.root / "tiny" / (".epoch-%05d.tmp-1" % epoch)).mkdir()
        (self.root / "tiny" / ("epoch-%05d" % epoch)).mkdir()
        (self.root / "tiny" / ("epoch-%05d" % epoch) / "state.pt").write_bytes(b"half")


S3_VENV = Path(__file__).resolve().parents[2] / ".venv-s3"


class S3:
    """Checkpoints under s3://bucket/prefix on moto's S3 server (boto3 runs in .venv-s3: its
    python-dateutil pin conflicts with .venv's; that virtualenv sees .venv's torch after its own)."""
    python = str(S3_VENV / "bin" / "python")

    def __init__(self, endpoint, prefix):
        self.storage = {"type": "s3", "s3Bucket": "ckpt", "s3Prefix": prefix, "s3Endpoint": endpoint,
                        "s3Region": "us-east-1"}
        self.uri = "s3://ckpt/" + prefix
        self.env = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"}
        self.endpoint = endpoint

    def _run(self, code):
        env = dict(os.environ, PYTHONPATH=str(trainingjob_lib()), AWS_ENDPOINT_URL=self.endpoint,
                   AWS_DEFAULT_REGION="us-east-1", **self.env)
        out = subprocess.run([self.python, "-c", "import json, sys\nfrom torchdev_train.checkpoint import S3Store\n"
                              "store = S3Store(sys.argv[1])\n" + code, self.uri],
                             capture_output=True, text=True, env=env, timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr
        return json.loads(out.stdout) if out.stdout.strip() else None

    def complete(self):
        return self._run("print(json.dumps(store.complete()))")

    def plant_half_written(self, epoch):
        """A state written without its completion marker (a kill between the two puts)."""
        self._run("store.s3.put_object(Bucket=store.bucket, Key=store._key('epoch-%05d', 'state.pt'), Body=b'half')"
                  % epoch)


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


@pytest.fixture
def moto_server(tmp_path):
    """moto's S3 server on a loopback port, with the bucket `ckpt`; its endpoint."""
    server = S3_VENV / "bin" / "moto_server"
    if not server.exists():
        pytest.fail(".venv-s3 is missing: make test installs it (requirements-s3.txt)", pytrace=False)
    port = _free_port()
    log = open(tmp_path / "moto.log", "w")
    proc = subprocess.Popen([str(server), "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=subprocess.STDOUT)
    endpoint = "http://127.0.0.1:%d" % port
    try:
        from kubesim.testing import wait_for

        def up():
            assert proc.poll() is None, (tmp_path / "moto.log").read_text()
            import urllib.request
            urllib.request.urlopen(endpoint + "/", timeout=5).read()
            return True
        wait_for(up, 120, 0.2, "moto's server")
        S3(endpoint, "")._run("store.s3.create_bucket(Bucket='ckpt')")
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.fixture(params=["directory", "s3"])
def stores(request, tmp_path):
    """Two stores of one kind (the uninterrupted run's, the killed run's)."""
    if request.param == "directory":
        return Dir(tmp_path / "ckpt-straight"), Dir(tmp_path / "ckpt")
    endpoint = request.getfixturevalue("moto_server")
    return S3(endpoint, "ml/straight"), S3(endpoint, "ml/tiny")


@pytest.mark.slow
def test_killed_workers_resume_and_match_an_uninterrupted_run(tmp_path, stores):
    import torch

    straight_store, store = stores
    straight = tmp_path / "straight"
    procs = _start(straight, straight_store, 0)
    _wait(procs, straight)
    expected = torch.load(straight / "final.pt")

    out = tmp_path / "killed"
    procs = _start(out, store, 0, gate=tmp_path / "never")  # killed before its last epoch, always
    try:
        deadline = time.monotonic() + 120
        while store.complete()[-1:] < [3]:  # mid-run: past epoch 3
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs), _logs(out)
            time.sleep(0.05)
    finally:
        _kill(procs)  # SIGKILL, wherever they are (possibly mid-save)
    assert not (out / "final.pt").exists()
    killed_at = store.complete()
    # rotation keeps 2 (retention); it runs after each save, so a kill between a save and its
    # rotation leaves one more, which the next save's rotation removes (checked at the end)
    assert killed_at and killed_at[-1] < EPOCHS and len(killed_at) <= 3, killed_at
    # what a kill during a save leaves behind is never taken for the newest checkpoint (planted
    # one epoch past the newest complete one, wherever the kill came)
    store.plant_half_written(killed_at[-1] + 1)

    procs = _start(out, store, 1)  # the group restart: every worker again, attempt 1
    _wait(procs, out)
    assert json.loads((out / "resumed-1.json").read_text())["start"] == killed_at[-1] + 1
    got = torch.load(out / "final.pt")
    assert got.keys() == expected.keys()
    for key in expected:
        assert torch.equal(got[key], expected[key]), key  # bit-identical weights
    assert store.complete() == [EPOCHS - 1, EPOCHS]
    trained = [int(x) for x in (out / "epochs-0.log").read_text().split()]
    resumed = list(range(killed_at[-1] + 1, EPOCHS + 1))
    assert trained[-len(resumed):] == resumed  # the second attempt trained only what was lost
    first = trained[:-len(resumed)]
    assert first == list(range(1, len(first) + 1)) and len(first) >= killed_at[-1]
