"""The exporter's Store, without a cluster: what a stream of DevServer changes turns into
(issue 13.1/13.2), read back through prometheus_client's own text format and parser."""
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from torchdev_exporter.__main__ import Collector
from torchdev_exporter import metrics

FLAVOR = {"metadata": {"name": "gpu-2"}, "spec": {"pricePerHour": 10.0, "gpu": {"count": 2, "type": "h100"},
                                                  "resources": {"limits": {"nvidia.com/gpu": 2}}}}


JANE = {"metadata": {"name": "jane"}, "spec": {"email": "jane@example.com"}}  # the owner's DevUser


def Store(clock):  # noqa: N802 - the exporter's Store, with jane's DevUser listed (her e-mail is a user label)
    store = metrics.Store(clock=clock)
    store.replace_devusers([JANE])
    return store


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


def reserved(name, started, end_reason=None, **status):
    obj = server(name)
    obj["status"]["reservation"] = {"startedAt": started, **({"endReason": end_reason} if end_reason else {})}
    obj["status"].update(status)
    return obj


RES = (("flavor", "gpu-2"), ("user", "jane@example.com"))


def ended_labels(reason):
    return (("flavor", "gpu-2"), ("reason", reason), ("user", "jane@example.com"))


@pytest.mark.parametrize("name,first_list,then,expected", [
    ("the first list is the baseline: nothing in it is counted",
     [reserved("a", "2026-01-01T00:00:00Z"), reserved("b", "2026-01-01T00:00:00Z", "Cancelled")], [],
     {}),
    ("what changes after it is counted once",
     [reserved("a", "2026-01-01T00:00:00Z")],
     [("apply", reserved("a", "2026-01-01T00:00:00Z", "Stopped")),
      ("apply", reserved("a", "2026-01-01T00:00:00Z", "Stopped")),
      ("apply", reserved("b", "2026-01-02T00:00:00Z"))],
     {("torchdev_reservations_ended_total", ended_labels("Stopped")): 1,
      ("torchdev_reservations_started_total", RES): 1}),
    ("a relist counts what changed while the watch was down and ends the vanished",
     [reserved("a", "2026-01-01T00:00:00Z"), reserved("gone", "2026-01-01T00:00:00Z")],
     [("replace", [reserved("a", "2026-01-01T00:00:00Z", "Expired"), reserved("new", "2026-01-03T00:00:00Z")])],
     {("torchdev_reservations_ended_total", ended_labels("Expired")): 1,
      ("torchdev_reservations_ended_total", ended_labels("Deleted")): 1,
      ("torchdev_reservations_started_total", RES): 1}),
    ("a relist of the same objects counts nothing",
     [reserved("a", "2026-01-01T00:00:00Z", startup=FIRST)],
     [("replace", [reserved("a", "2026-01-01T00:00:00Z", startup=FIRST)])],
     {}),
])
def test_counters_count_what_happens_after_the_first_list(name, first_list, then, expected):
    store = Store(clock=lambda: 0.0)
    store.replace_flavors([FLAVOR])
    store.replace(first_list)
    for verb, arg in then:
        getattr(store, verb)(arg)
    got = {k: v for k, v in samples(store).items()
           if k[0].startswith("torchdev_reservations_") or k[0].startswith("torchdev_time_to_ready_seconds_count")}
    assert got == expected, name


def test_vanished_servers_leave_the_store_and_their_marks():
    store = Store(clock=lambda: 0.0)
    store.replace([reserved("a", "2026-01-01T00:00:00Z"), reserved("b", "2026-01-01T00:00:00Z")])
    store.replace([reserved("b", "2026-01-01T00:00:00Z")])
    assert list(store.devservers) == [("dev-jane", "b")]
    assert list(store._marks) == [("dev-jane", "b")]  # memory stays bounded by the live servers
    got = samples(store)
    assert [k for k in got if k[0] == "torchdev_devservers"] == [
        ("torchdev_devservers", (("flavor", "gpu-2"), ("phase", "Running")))]


def test_trainingjobs_of_the_first_list_are_the_baseline():
    store = Store(clock=lambda: 0.0)
    store.replace_trainingjobs([job("bert", "Failed", reason="BackoffLimitExceeded", restarts=2),
                                job("gpt", "Running", uid="u2", restarts=1)])
    assert not [k for k in samples(store) if k[0].endswith("_total") and "trainingjob" in k[0]]
    store.apply_trainingjob(job("gpt", "Completed", uid="u2", restarts=2, reason="TargetAccuracyReached"))
    store.apply_trainingjob(job("t5", "Pending", uid="u3"))
    got = {k: v for k, v in samples(store).items() if k[0].endswith("_total") and "trainingjob" in k[0]}
    assert got == {("torchdev_trainingjob_created_total", (("namespace", "ml"),)): 1,
                   ("torchdev_trainingjob_restarts_total", (("namespace", "ml"),)): 1,
                   ("torchdev_trainingjob_completed_total", (("namespace", "ml"), ("result", "TargetAccuracyReached"))): 1}
    store.replace_trainingjobs([job("t5", "Pending", uid="u3")])  # a relist: bert and gpt went
    assert sorted(store.trainingjobs) == [("ml", "t5")] and sorted(store._tj_seen) == [("ml", "u3")]


def test_idle_servers_with_gpus_are_counted_by_user_and_flavor():
    cpu = {"metadata": {"name": "cpu"}, "spec": {"pricePerHour": 1.0}}
    store = Store(clock=lambda: 0.0)
    store.replace_flavors([FLAVOR, cpu])
    idle = {"since": "2026-01-01T00:00:00Z"}
    servers = [server("a"), server("b"), server("c"), server("d", phase="Stopped"), server("e")]
    for obj in servers[1:4]:
        obj["status"]["idle"] = idle
    servers[4]["spec"]["flavor"] = "cpu"
    servers[4]["status"]["idle"] = idle
    store.replace(servers)
    got = samples(store)
    assert {k: v for k, v in got.items() if k[0] == "torchdev_devservers_idle_with_gpus"} == {
        ("torchdev_devservers_idle_with_gpus", RES): 2}
    assert got[("torchdev_gpus_idle", RES)] == 4


def eaj(name, phase, uid="e1", reason=None, volume=True):
    conds = [{"type": "ArtifactsAvailable", "status": "True" if volume else "False",
              "reason": "Bound" if volume else "Expired"}]
    if phase in ("Succeeded", "Failed"):
        conds.append({"type": phase, "status": "True", "reason": reason or "InferenceSucceeded"})
    return {"metadata": {"name": name, "namespace": "ml", "uid": uid}, "status": {"phase": phase, "conditions": conds}}


def test_ephemeralaccelerationjob_series():
    store = Store(clock=lambda: 0.0)
    store.replace_eajs([eaj("old", "Failed", uid="e0", reason="InputNotFound"), eaj("run", "Running", uid="e1")])
    got = samples(store)
    assert not [k for k in got if k[0] == "torchdev_ephemeralaccelerationjob_finished_total"]  # the baseline
    assert got[("torchdev_ephemeralaccelerationjob_artifact_volumes", (("namespace", "ml"),))] == 2
    for change in (eaj("run", "Succeeded", uid="e1"), eaj("run", "Succeeded", uid="e1"),  # counted once
                   eaj("bad", "Failed", uid="e2", reason="UnknownModel"), eaj("run", "Succeeded", uid="e1", volume=False),
                   eaj("new", "Pending", uid="e3")):
        store.apply_eaj(change)
    store.delete_eaj(eaj("old", "Failed", uid="e0"))
    got = {k: v for k, v in samples(store).items() if "ephemeralaccelerationjob" in k[0]}
    ml = ("namespace", "ml")
    assert got == {
        ("torchdev_ephemeralaccelerationjobs", (ml, ("phase", "Succeeded"))): 1,
        ("torchdev_ephemeralaccelerationjobs", (ml, ("phase", "Failed"))): 1,
        ("torchdev_ephemeralaccelerationjobs", (ml, ("phase", "Pending"))): 1,
        ("torchdev_ephemeralaccelerationjob_artifact_volumes", (ml,)): 2,  # bad and new; run's volume expired
        ("torchdev_ephemeralaccelerationjob_finished_total", (ml, ("phase", "Succeeded"), ("reason", "InferenceSucceeded"))): 1,
        ("torchdev_ephemeralaccelerationjob_finished_total", (ml, ("phase", "Failed"), ("reason", "UnknownModel"))): 1,
    }, got
