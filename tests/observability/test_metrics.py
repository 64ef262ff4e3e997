"""The exporter's Store, without a cluster: what a stream of DevServer changes turns into
(issue 13.1/13.2), read back through prometheus_client's own text format and parser."""
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from torchdev_exporter.__main__ import Collector
from torchdev_exporter.metrics import Store

FLAVOR = {"metadata": {"name": "gpu-2"}, "spec": {"pricePerHour": 10.0, "gpu": {"count": 2, "type": "h100"},
                                                  "resources": {"limits": {"nvidia.com/gpu": 2}}}}


def server(name, phase="Running", startup=None, owner="jane@example.com"):
    status = {"phase": phase, "replicas": 1}
    if startup:
        status["startup"] = startup
    return {"metadata": {"name": name, "namespace": "dev-jane", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"owner": owner, "flavor": "gpu-2"}, "status": status}


def complete(ready_at, **phases):
    return {"startedAt": "2026-01-01T00:00:00Z", "readyAt": ready_at, "complete": True,
            "totalSeconds": sum(phases.values()), "phases": phases}


def samples(store):
    registry = CollectorRegistry()
    registry.register(Collector(store))
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


FIRST = complete("2026-01-01T00:00:40Z", queued=12, scheduled=1, volumes=3, containers=20, ready=4)
SECOND = complete("2026-01-02T00:00:09Z", queued=0, scheduled=1, volumes=2, containers=5, ready=1)


@pytest.mark.parametrize("name,changes,phase,count,total", [
    ("a start in progress is not observed",
     [server("a", "Provisioning", {"startedAt": "2026-01-01T00:00:00Z", "phases": {"queued": 12}, "complete": False})],
     "queued", None, None),
    ("a complete start once, however often it is seen", [server("a", startup=FIRST)] * 3, "queued", 1, 12),
    ("each start of a server", [server("a", startup=FIRST), server("a", startup=SECOND)], "containers", 2, 25),
    ("two servers", [server("a", startup=FIRST), server("b", startup=SECOND)], "ready", 2, 5),
])
def test_time_to_ready_by_phase(name, changes, phase, count, total):
    store = Store(clock=lambda: 0.0)
    store.apply_flavor(FLAVOR)
    for obj in changes:
        store.apply(obj)
    got = samples(store)
    labels = (("flavor", "gpu-2"), ("phase", phase))
    assert got.get(("torchdev_time_to_ready_phase_seconds_count", labels)) == count, name
    assert got.get(("torchdev_time_to_ready_phase_seconds_sum", labels)) == total, name
    if count:  # the whole start too, once per start
        assert got[("torchdev_time_to_ready_seconds_count", (("flavor", "gpu-2"),))] == count
        assert got[("torchdev_time_to_ready_phase_seconds_bucket", tuple(sorted(labels + (("le", "+Inf"),))))] == count


def test_phase_sums_add_up_to_the_total():
    store = Store(clock=lambda: 0.0)
    store.apply_flavor(FLAVOR)
    store.apply(server("a", startup=FIRST))
    got = samples(store)
    by_phase = sum(v for (n, labels), v in got.items() if n == "torchdev_time_to_ready_phase_seconds_sum")
    assert by_phase == got[("torchdev_time_to_ready_seconds_sum", (("flavor", "gpu-2"),))] == 40


def job(name, state, uid="u1", restarts=0, progress=None, reason=None, **status):
    st = {"state": state, "restartCount": restarts, "allocatedGPUs": 4, "workers": {"active": 2}}
    if progress is not None:
        st.update(progress=progress, currentEpoch=3, metrics={"loss": 0.25, "accuracy": 0.9})
    if state == "Completed":
        st["conditions"] = [{"type": "Succeeded", "status": "True", "reason": reason or "AllEpochsCompleted"}]
    if state == "Failed":
        st["failureReason"] = reason
    st.update(status)
    return {"metadata": {"name": name, "namespace": "ml", "uid": uid}, "status": st}


PER_JOB = (("namespace", "ml"), ("training_job", "bert"))


@pytest.mark.parametrize("name,changes,expected", [
    ("a running job: its live series",
     [job("bert", "Pending"), job("bert", "Running", progress="45%")],
     {("torchdev_trainingjob_progress_percent", PER_JOB): 45.0, ("torchdev_trainingjob_current_epoch", PER_JOB): 3,
      ("torchdev_trainingjob_loss", PER_JOB): 0.25, ("torchdev_trainingjob_accuracy", PER_JOB): 0.9,
      ("torchdev_trainingjob_allocated_gpus", PER_JOB): 4, ("torchdev_trainingjob_allocated_workers", PER_JOB): 2,
      ("torchdev_trainingjob_created_total", (("namespace", "ml"),)): 1,
      ("torchdev_trainingjobs", (("namespace", "ml"), ("state", "Running"))): 1}),
    ("restarts counted by the increase, completion once with its result",
     [job("bert", "Running", restarts=1), job("bert", "Restarting", restarts=2), job("bert", "Running", restarts=2),
      job("bert", "Completed", restarts=2, reason="EarlyStopped"),
      job("bert", "Completed", restarts=2, reason="EarlyStopped")],
     {("torchdev_trainingjob_restarts_total", (("namespace", "ml"),)): 2,
      ("torchdev_trainingjob_completed_total", (("namespace", "ml"), ("result", "EarlyStopped"))): 1,
      ("torchdev_trainingjob_progress_percent", PER_JOB): None,  # no per-job series once finished
      ("torchdev_trainingjobs", (("namespace", "ml"), ("state", "Completed"))): 1}),
    ("failures by reason; two jobs are two creations",
     [job("bert", "Failed", reason="BackoffLimitExceeded"), job("gpt", "Failed", uid="u2", reason="DeadlineExceeded")],
     {("torchdev_trainingjob_failed_total", (("namespace", "ml"), ("reason", "BackoffLimitExceeded"))): 1,
      ("torchdev_trainingjob_failed_total", (("namespace", "ml"), ("reason", "DeadlineExceeded"))): 1,
      ("torchdev_trainingjob_created_total", (("namespace", "ml"),)): 2}),
])
def test_trainingjob_series(name, changes, expected):
    store = Store(clock=lambda: 0.0)
    for obj in changes:
        store.apply_trainingjob(obj)
    got = samples(store)
    for key, value in expected.items():
        assert got.get(key) == value, (name, key, sorted(k for k in got if k[0].startswith("torchdev_trainingjob")))


def test_a_deleted_job_leaves_no_live_series():
    store = Store(clock=lambda: 0.0)
    store.apply_trainingjob(job("bert", "Running", progress="10%"))
    store.delete_trainingjob(job("bert", "Running", progress="10%"))
    got = samples(store)
    assert not [k for k in got if k[0] in ("torchdev_trainingjob_progress_percent", "torchdev_trainingjobs")]
    assert got[("torchdev_trainingjob_created_total", (("namespace", "ml"),))] == 1  # counters stay
