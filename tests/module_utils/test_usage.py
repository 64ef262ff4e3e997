"""plugins/module_utils/usage.py: the record of an ended reservation, pruning, the summary."""
from __future__ import annotations

import pytest

from ansible_collections.torchdev.operator.plugins.module_utils import lifecycle, usage

T0 = "2026-11-24T10:00:00Z"
EPOCH_T0 = lifecycle._seconds(T0)
A10G = {"gpu": {"count": 1, "type": "nvidia-a10g"}, "pricePerHour": "1.2120"}
H100_8 = {"resources": {"limits": {"nvidia.com/gpu": 8}}, "pricePerHour": "98.3200"}


def at(seconds: int) -> str:
    return lifecycle._time(EPOCH_T0 + seconds)


def server(reservation=None, name="dev", deletion=None, mode=None, created=at(-600)):
    spec = {"owner": "jane@example.com", "flavor": "gpu-a10g-1"}
    if mode == "distributed":
        spec.update(mode="distributed", distributed={"worldSize": 8, "nprocsPerNode": 4})
    meta = {"name": name, "namespace": "dev-jane", "creationTimestamp": created}
    if deletion:
        meta["deletionTimestamp"] = deletion
    return {"metadata": meta, "spec": spec, "status": {"reservation": reservation} if reservation else {}}


def reservation(ended=7200, reason="Expired", expires=7200, queued=-300, **extra):
    res = {"queuedAt": at(queued) if queued is not None else None, "startedAt": T0, "duration": "2h", "expiresAt": at(expires) if expires else None,
           "extensions": 0, "warningsSent": [300]}
    if ended is not None:
        res.update(endedAt=at(ended), endReason=reason)
    res.update(extra)
    return res


# (parse_retention: tests/module_utils/test_durations.py)


# (id, DevServer, flavor spec, expected spec fields)
RECORDS = [
    ("expired: 2h x 1 GPU at $1.212/h", server(reservation()), A10G,
     {"endReason": "Expired", "gpus": 1, "replicas": 1, "gpuHours": "2.0000", "cost": "2.4240",
      "idleSavedGPUHours": "0.0000", "queuedAt": at(-300), "startedAt": T0, "endedAt": at(7200),
      "expiresAt": at(7200), "gpuType": "nvidia-a10g", "pricePerHour": "1.2120"}),
    ("idle after 30 min of a 2 h reservation: 1.5 GPU-hours saved", server(reservation(1800, "Idle")), A10G,
     {"endReason": "Idle", "gpuHours": "0.5000", "cost": "0.6060", "idleSavedGPUHours": "1.5000"}),
    ("idle without a duration: nothing bounded to save", server(reservation(1800, "Idle", expires=None)), A10G,
     {"endReason": "Idle", "gpuHours": "0.5000", "idleSavedGPUHours": "0.0000"}),
    ("cancelled early", server(reservation(900, "Cancelled")), A10G,
     {"endReason": "Cancelled", "gpuHours": "0.2500", "cost": "0.3030", "idleSavedGPUHours": "0.0000"}),
    ("distributed: 2 replicas x 8 GPUs, price per replica", server(reservation(3600, "Stopped"), mode="distributed"),
     H100_8, {"replicas": 2, "gpus": 16, "gpuHours": "16.0000", "cost": "196.6400"}),
    ("the flavor is gone: no GPUs, no price", server(reservation(3600, "Stopped")), None,
     {"gpus": 0, "gpuHours": "0.0000", "cost": "0.0000", "pricePerHour": "0.0000"}),
    ("deleted while running: ended at the deletion", server(reservation(None), deletion=at(600)), A10G,
     {"endReason": "Deleted", "endedAt": at(600), "gpuHours": "0.1667", "cost": "0.2020"}),
    ("a reservation from before queuedAt: the wait counts from creation",
     server(reservation(queued=None), created=at(-900)), A10G, {"queuedAt": at(-900)}),
    ("queued after it started (clock skew): no negative wait", server(reservation(queued=60)), A10G,
     {"queuedAt": T0}),
]


@pytest.mark.parametrize("cr, flavor, expected", [pytest.param(c, f, e, id=i) for i, c, f, e in RECORDS])
def test_usage_record(cr, flavor, expected):
    record = usage.usage_record(cr, None, flavor, at(7300))
    assert record["name"] == "dev-%d" % EPOCH_T0
    spec = record["spec"]
    assert spec["user"] == "jane@example.com" and spec["server"] == "dev" and spec["flavor"] == "gpu-a10g-1"
    for key, value in expected.items():
        assert spec[key] == value, key
    assert spec["endReason"] in usage.END_REASONS


@pytest.mark.parametrize("cr, reservation_arg, now, retention", [
    pytest.param(server(), None, at(0), "90d", id="never started"),
    pytest.param(server(reservation()), None, at(7200 + 120), "120s", id="past retention: pruned, not written again"),
    pytest.param(server(reservation()), {"queuedAt": at(0)}, at(60), "90d", id="a reservation without startedAt"),
])
def test_nothing_to_record(cr, reservation_arg, now, retention):
    assert usage.usage_record(cr, reservation_arg, A10G, now, retention) is None


OPEN_FIELDS = {"user", "server", "flavor", "gpuType", "replicas", "gpus", "pricePerHour", "queuedAt", "startedAt",
               "expiresAt"}


@pytest.mark.parametrize("cr, reservation_arg", [
    pytest.param(server(reservation(None)), None, id="status.reservation under way"),
    pytest.param(server(), reservation(None), id="the reservation this run started"),
])
def test_a_reservation_under_way_has_an_open_record(cr, reservation_arg):
    """Issue 25.5: the record exists from the start of the reservation (no endedAt yet), so what a
    server uses never depends on the finalizer the user may remove."""
    record = usage.usage_record(cr, reservation_arg, A10G, at(60), user="jane@example.com")
    assert record["name"] == "dev-%d" % EPOCH_T0
    assert set(record["spec"]) == OPEN_FIELDS
    assert record["spec"]["expiresAt"] == at(7200) and record["spec"]["gpus"] == 1
    # closed as the finalizer, the lifecycle or the DevUser role would close it: the same numbers
    closed = usage.close_spec(record["spec"], at(7200), "Expired")
    assert closed == usage.usage_record(server(reservation()), None, A10G, at(7300))["spec"]


def test_the_billed_user_is_the_devusers_email_whatever_the_owner():
    cr = server(reservation())
    cr["spec"]["owner"] = "mallory@example.com"
    assert usage.usage_record(cr, None, A10G, at(7300), user="jane@example.com")["spec"]["user"] == "jane@example.com"
    assert usage.usage_record(cr, None, A10G, at(7300))["spec"]["user"] == "mallory@example.com"  # no DevUser


def test_close_spec_never_ends_before_the_start():
    spec = usage.usage_record(server(reservation(None)), None, A10G, at(60))["spec"]
    closed = usage.close_spec(spec, at(-600), "Deleted")
    assert closed["endedAt"] == T0 and closed["gpuHours"] == "0.0000" and closed["cost"] == "0.0000"


OPEN = usage.usage_record(server(reservation(None)), None, A10G, at(60))
CLOSED = usage.usage_record(server(reservation()), None, A10G, at(7300))
EXTENDED = usage.usage_record(server(reservation(None, expires=9000)), None, A10G, at(60))


def observed(record):
    return {"metadata": {"name": record["name"]}, "spec": record["spec"]}


# (id, observed record, desired record, write?)
WRITES = [
    ("nothing to record", None, None, False),
    ("a reservation starts: open it", None, OPEN, True),
    ("open and unchanged: zero writes", observed(OPEN), OPEN, False),
    ("extended: the open record learns the new expiresAt", observed(OPEN), EXTENDED, True),
    ("it ended: close it", observed(OPEN), CLOSED, True),
    ("closed: never written again", observed(CLOSED), CLOSED, False),
    ("closed, whatever is desired now", observed(CLOSED), OPEN, False),
    ("a record from before open records (closed, missing now)", None, CLOSED, True),
    ("a new reservation, the last one's record read", {"metadata": {"name": "dev-1"}, "spec": CLOSED["spec"]}, OPEN, True),
    ("junk read", "junk", OPEN, True),
]


@pytest.mark.parametrize("observed_record, desired, write", [c[1:] for c in WRITES], ids=[c[0] for c in WRITES])
def test_usage_write_needed(observed_record, desired, write):
    assert usage.usage_write_needed(observed_record, desired) is write


def test_the_reservation_this_run_ended_wins_over_the_status():
    """lifecycle.yml ends the reservation during the run: its result is what is recorded."""
    running = server(reservation(None))
    ended = reservation(1200, "Cancelled")
    record = usage.usage_record(running, ended, A10G, at(1300))
    assert record["spec"]["endReason"] == "Cancelled" and record["spec"]["endedAt"] == at(1200)


def test_names_are_deterministic_per_reservation():
    first = usage.usage_record(server(reservation()), None, A10G, at(7300))
    again = usage.usage_record(server(reservation()), None, A10G, at(9000))
    assert first == again  # a repeated reconcile writes the same record (and finds it)
    assert usage.usage_record_name(server(reservation())) == first["name"]
    assert usage.usage_record_name(server()) == ""
    later = usage.usage_record(server(dict(reservation(), startedAt=at(86400), endedAt=at(90000))), None, A10G, at(90001))
    assert later["name"] != first["name"]
    # a DevServer name is at most 52 characters: the record name is a DNS label
    assert len(usage.record_name("x" * 52, T0)) <= 63


def record(name, ended=None, created=None, deleting=False):
    meta = {"name": name}
    if created is not None:
        meta["creationTimestamp"] = at(created)
    if deleting:
        meta["deletionTimestamp"] = at(0)
    return {"metadata": meta, "spec": {"endedAt": at(ended)} if ended is not None else {}}


# (id, records, now, retention, period, expected)
PRUNES = [
    ("none", [], at(0), "120s", "10m", {"delete": [], "oldestEndedAt": None, "requeue": ""}),
    ("one kept, due within the period", [record("a", 0)], at(10), "120s", "10m",
     {"delete": [], "oldestEndedAt": at(0), "requeue": "110s"}),
    ("due exactly now is deleted", [record("a", 0)], at(120), "120s", "10m",
     {"delete": ["a"], "oldestEndedAt": None, "requeue": ""}),
    ("the oldest kept decides", [record("c", 50), record("b", 30), record("a", -500)], at(10), "120s", "10m",
     {"delete": ["a"], "oldestEndedAt": at(30), "requeue": "140s"}),
    ("due beyond the period: the period brings the role back", [record("a", 0)], at(0), "90d", "10m",
     {"delete": [], "oldestEndedAt": at(0), "requeue": ""}),
    ("without a period, always the due time", [record("a", 0)], at(0), "90d", None,
     {"delete": [], "oldestEndedAt": at(0), "requeue": "%ds" % (90 * 86400)}),
    ("an open record is never deleted, and the records are read at every run while one is",
     [record("a", created=-10**6), record("b", 0)], at(30), "60s", "10m",
     {"delete": [], "oldestEndedAt": None, "requeue": "30s"}),
    ("a record being deleted is left out", [record("a", -500, deleting=True)], at(0), "120s", "10m",
     {"delete": [], "oldestEndedAt": None, "requeue": ""}),
]


@pytest.mark.parametrize("records, now, retention, period, expected", [c[1:] for c in PRUNES], ids=[c[0] for c in PRUNES])
def test_usage_prune(records, now, retention, period, expected):
    assert usage.usage_prune(records, now, retention, period) == dict(expected, close=[])


def devserver_obj(name="dev", created=-600, deleting=False):
    meta = {"name": name, "creationTimestamp": at(created)}
    if deleting:
        meta["deletionTimestamp"] = at(0)
    return {"metadata": meta}


def open_record(expires=7200):
    rec_ = usage.usage_record(server(reservation(None, expires=expires)), None, A10G, at(60))
    return {"metadata": {"name": rec_["name"]}, "spec": rec_["spec"]}


# (id, open record, the namespace's DevServers (None: not read), now, closed at (None: kept open))
ORPHANS = [
    ("its server runs: kept open", open_record(), [devserver_obj()], at(3600), None),
    ("its server is being deleted: its finalizer closes it", open_record(), [devserver_obj(deleting=True)], at(3600), None),
    ("the DevServers were not read: nothing closed", open_record(), None, at(3600), None),
    ("another kind's record is not a DevServer's", dict(open_record(), spec=dict(open_record()["spec"], kind="TrainingJob")),
     [], at(3600), None),
    ("its server is gone: closed now", open_record(), [devserver_obj("other")], at(3600), at(3600)),
    ("gone after its reservation's end: closed at expiresAt", open_record(), [], at(9000), at(7200)),
    ("gone, without a duration: closed now", open_record(expires=None), [], at(9000), at(9000)),
    ("a server of that name created after the reservation started is another one", open_record(),
     [devserver_obj(created=30)], at(3600), at(3600)),
]


@pytest.mark.parametrize("rec_, servers, now, closed_at", [c[1:] for c in ORPHANS], ids=[c[0] for c in ORPHANS])
def test_usage_prune_closes_the_records_of_servers_deleted_without_their_finalizer(rec_, servers, now, closed_at):
    out = usage.usage_prune([rec_], now, "90d", "10m", servers)
    assert out["delete"] == []
    if closed_at is None:
        assert out["close"] == [] and out["oldestEndedAt"] is None  # open: read again at the next run
        return
    [closed] = out["close"]
    assert closed["name"] == rec_["metadata"]["name"] and out["oldestEndedAt"] == closed_at
    assert closed["labels"] == {}
    assert closed["spec"] == usage.close_spec(rec_["spec"], closed_at, "Deleted")
    assert closed["spec"]["endReason"] == "Deleted" and closed["spec"]["gpuHours"] != "0.0000"


def test_an_orphan_past_its_retention_is_deleted_not_closed():
    out = usage.usage_prune([open_record()], at(7200 + 120), "120s", "10m", [])
    assert out == {"delete": ["dev-%d" % EPOCH_T0], "close": [], "oldestEndedAt": None, "requeue": ""}


@pytest.mark.parametrize("oldest, now, period, expected", [
    (None, at(0), "10m", {"list": True, "requeue": ""}),           # none known: read them (cheap when there are none)
    (at(0), at(119), "10m", {"list": False, "requeue": "1s"}),
    (at(0), at(120), "10m", {"list": True, "requeue": ""}),        # the oldest is due
    (at(0), at(0), "1m", {"list": False, "requeue": ""}),          # due after the period
])
def test_usage_prune_due(oldest, now, period, expected):
    assert usage.usage_prune_due(oldest, now, "120s", period) == expected


# --------------------------------------------------------------------------- the summary
def rec(user="jane@example.com", flavor="gpu-a10g-1", reason="Expired", started=0, ended=3600, queued=-60,
        expires=3600, gpu_hours="1.0000", cost="1.2120", saved="0.0000"):
    spec = {"user": user, "server": "dev", "flavor": flavor, "queuedAt": at(queued), "startedAt": at(started),
            "endedAt": at(ended), "endReason": reason, "gpuHours": gpu_hours, "cost": cost,
            "idleSavedGPUHours": saved}
    if expires is not None:
        spec["expiresAt"] = at(expires)
    return {"apiVersion": "torchdev.io/v1alpha1", "kind": "UsageRecord", "spec": spec}


def zero_reasons(**counts):
    return {reason: counts.get(reason, 0) for reason in usage.RECORD_END_REASONS}


# (id, records, since, user, expected total (subset), expected byUser keys, expected byFlavor keys)
SUMMARIES = [
    ("nothing", [], None, None, {"launched": 0, "gpuHours": "0.0000", "meanWaitSeconds": 0}, [], []),
    ("one of each reason",
     [rec(reason=r) for r in usage.END_REASONS], None, None,
     {"launched": 5, "ended": zero_reasons(Expired=1, Cancelled=1, Idle=1, Stopped=1, Deleted=1),
      "gpuHours": "5.0000", "cost": "6.0600", "meanWaitSeconds": 60}, ["jane@example.com"], ["gpu-a10g-1"]),
    ("early cancellation only before expiresAt",
     [rec(reason="Cancelled", ended=600), rec(reason="Cancelled", ended=3600), rec(reason="Cancelled", expires=None),
      rec(reason="Stopped", ended=600)], None, None,
     {"launched": 4, "earlyCancellations": 1, "ended": zero_reasons(Cancelled=3, Stopped=1)},
     ["jane@example.com"], ["gpu-a10g-1"]),
    ("mean wait, rounded", [rec(queued=-10), rec(queued=-25), rec(queued=-100)], None, None,
     {"meanWaitSeconds": 45}, ["jane@example.com"], ["gpu-a10g-1"]),
    ("idle savings and exact money",
     [rec(reason="Idle", saved="1.5000", cost="0.1001"), rec(reason="Idle", saved="0.2500", cost="0.2002")],
     None, None, {"idleSavedGPUHours": "1.7500", "cost": "0.3003"}, ["jane@example.com"], ["gpu-a10g-1"]),
    ("two users, two flavors",
     [rec(), rec(user="ada@example.com", flavor="gpu-h100-8", gpu_hours="8.0000", cost="98.3200")], None, None,
     {"launched": 2, "gpuHours": "9.0000", "cost": "99.5320"},
     ["ada@example.com", "jane@example.com"], ["gpu-a10g-1", "gpu-h100-8"]),
    ("since: only records that ended since then",
     [rec(ended=100), rec(ended=5000), rec(ended=9000)], at(5000), None, {"launched": 2},
     ["jane@example.com"], ["gpu-a10g-1"]),
    ("user filter", [rec(), rec(user="ada@example.com")], None, "ada@example.com", {"launched": 1},
     ["ada@example.com"], ["gpu-a10g-1"]),
]


@pytest.mark.parametrize("records, since, user, total, users, flavors",
                         [pytest.param(*case[1:], id=case[0]) for case in SUMMARIES])
def test_usage_summary(records, since, user, total, users, flavors):
    out = usage.usage_summary(records, since=since, user=user)
    assert out["records"] == out["total"]["launched"]
    for key, value in total.items():
        assert out["total"][key] == value, key
    assert [row["key"] for row in out["byUser"]] == users
    assert [row["key"] for row in out["byFlavor"]] == flavors
    # every group adds up to the total
    for group in ("byUser", "byFlavor"):
        assert sum(row["launched"] for row in out[group]) == out["total"]["launched"]
        assert sum(usage.decimal(row["cost"]) for row in out[group]) == usage.decimal(out["total"]["cost"])


def test_usage_summary_per_group_values():
    out = usage.usage_summary([rec(), rec(user="ada@example.com", flavor="gpu-h100-8", reason="Cancelled", ended=600,
                                          gpu_hours="1.3333", cost="16.3867", queued=-600)])
    ada = out["byUser"][0]
    assert ada == {"key": "ada@example.com", "launched": 1, "ended": zero_reasons(Cancelled=1),
                   "earlyCancellations": 1, "meanWaitSeconds": 600, "gpuHours": "1.3333", "cost": "16.3867",
                   "idleSavedGPUHours": "0.0000"}
    assert out["byFlavor"][1]["key"] == "gpu-h100-8" and out["byFlavor"][1]["cost"] == "16.3867"
    assert out["total"]["meanWaitSeconds"] == 330


def test_usage_summary_accepts_specs():
    assert usage.usage_summary([rec()["spec"]])["total"]["launched"] == 1


def test_usage_summary_counts_open_records_apart():
    """A reservation under way (an open record) is counted as running, not summed: what it used
    is known when it ends."""
    out = usage.usage_summary([rec(), open_record(), open_record()])
    assert out["records"] == 1 and out["running"] == 2
    assert out["total"]["launched"] == 1 and out["total"]["gpuHours"] == "1.0000"
    assert usage.usage_summary([open_record()], user="ada@example.com")["running"] == 0


# --------------------------------------------------------------------------- jobs' records (issue 25.3)
def eaj(gpu=1, name="infer", created=at(-120)):
    return {"metadata": {"name": name, "namespace": "dev-jane", "creationTimestamp": created},
            "spec": {"resources": {"gpu": gpu}}}


def tj(workers=4, per_worker=2, name="train", created=at(-300)):
    return {"metadata": {"name": name, "namespace": "dev-jane", "creationTimestamp": created},
            "spec": {"numWorkers": workers, "gpusPerWorker": per_worker}}


def eaj_run(phase="Succeeded", started=0, finished=1800):
    return {"phase": phase, "startedAt": at(started) if started is not None else None,
            "finishedAt": at(finished) if finished is not None else None}


def tj_run(state="Completed", started=0, completed=7200):
    return {"state": state, "startTime": at(started) if started is not None else None,
            "completionTime": at(completed) if completed is not None else None}


JANE = "jane@example.com"
# (id, kind, job, decision, user, expected spec subset (None: no record), expected name)
JOB_RECORDS = [
    ("EAJ succeeded: its pod's GPU for 30 min", "EphemeralAccelerationJob", eaj(), eaj_run(), JANE,
     {"kind": "EphemeralAccelerationJob", "server": "infer", "replicas": 1, "gpus": 1, "endReason": "Succeeded",
      "gpuHours": "0.5000", "cost": "0.0000", "pricePerHour": "0.0000", "queuedAt": at(-120), "startedAt": T0,
      "endedAt": at(1800), "user": JANE}, "eaj-infer-%d" % EPOCH_T0),
    ("EAJ failed on the CPU: 0 GPUs", "EphemeralAccelerationJob", eaj(gpu=0), eaj_run("Failed", 0, 60), JANE,
     {"gpus": 0, "gpuHours": "0.0000", "endReason": "Failed"}, "eaj-infer-%d" % EPOCH_T0),
    # Open from the start (issue 25.3): a job deleted while it runs still leaves a record,
    # which the DevUser role closes (test_usage_prune_closes_orphaned_job_records).
    ("EAJ running: its record is open", "EphemeralAccelerationJob", eaj(), dict(eaj_run("Running"), finishedAt=None),
     JANE, {"kind": "EphemeralAccelerationJob", "gpus": 1, "startedAt": T0, "queuedAt": at(-120)},
     "eaj-infer-%d" % EPOCH_T0),
    ("EAJ pending: no pod ran yet, no record", "EphemeralAccelerationJob", eaj(),
     {"phase": "Pending", "startedAt": None, "finishedAt": None}, JANE, None, ""),
    ("an end without a final phase: no record", "EphemeralAccelerationJob", eaj(), eaj_run("Running"), JANE, None, ""),
    ("EAJ failed before its pod ran (image pull): nothing used", "EphemeralAccelerationJob", eaj(),
     eaj_run("Failed", None, 60), JANE, None, ""),
    ("TrainingJob completed: 4 workers x 2 GPUs for 2 h", "TrainingJob", tj(), tj_run(), JANE,
     {"kind": "TrainingJob", "server": "train", "replicas": 4, "gpus": 8, "gpuHours": "16.0000",
      "endReason": "Succeeded", "queuedAt": at(-300)}, "tj-train-%d" % EPOCH_T0),
    ("TrainingJob failed after restarts: one record from its first start", "TrainingJob", tj(1, 1),
     tj_run("Failed", 0, 5400), JANE, {"gpus": 1, "gpuHours": "1.5000", "endReason": "Failed"}, "tj-train-%d" % EPOCH_T0),
    ("TrainingJob queued then deleted from the queue: never started", "TrainingJob", tj(), tj_run("Failed", None), JANE,
     None, ""),
    ("TrainingJob running: its record is open", "TrainingJob", tj(), tj_run("Running", 0, None), JANE,
     {"kind": "TrainingJob", "replicas": 4, "gpus": 8, "startedAt": T0}, "tj-train-%d" % EPOCH_T0),
    ("TrainingJob restarting (state Pending after a start): open", "TrainingJob", tj(), tj_run("Pending", 0, None), JANE,
     {"gpus": 8, "startedAt": T0}, "tj-train-%d" % EPOCH_T0),
    ("no DevUser in the namespace: no one to bill", "TrainingJob", tj(), tj_run(), "", None, "tj-train-%d" % EPOCH_T0),
    ("a user that is not an e-mail", "EphemeralAccelerationJob", eaj(), eaj_run(), "dev-jane", None,
     "eaj-infer-%d" % EPOCH_T0),
    ("an end before the start counts 0 h", "EphemeralAccelerationJob", eaj(), eaj_run("Succeeded", 600, 0), JANE,
     {"gpuHours": "0.0000", "endedAt": at(600)}, "eaj-infer-%d" % (EPOCH_T0 + 600)),
    ("a hostile GPU count: no record", "EphemeralAccelerationJob", eaj(gpu="{{ 9**9 }}"), eaj_run(), JANE, None, ""),
    ("not a job kind", "DevServer", eaj(), eaj_run(), JANE, None, ""),
]


@pytest.mark.parametrize("kind,job,decision,user,expected,name",
                         [pytest.param(*row[1:], id=row[0]) for row in JOB_RECORDS])
def test_job_usage_record(kind, job, decision, user, expected, name):
    record = usage.job_usage_record(job, decision, user, kind)
    assert usage.job_usage_record_name(job, decision, kind) == name
    if expected is None:
        assert record is None
        return
    assert record["name"] == name
    assert {k: record["spec"][k] for k in expected} == expected
    assert "flavor" not in record["spec"]
    assert record["labels"]["torchdev.io/owner"] == "jane_at_example.com"
    closed = "endedAt" in record["spec"]
    assert closed == ("endReason" in expected or "endedAt" in expected)
    if closed:
        assert record["spec"]["idleSavedGPUHours"] == "0.0000"
    else:  # open: none of a closed record's fields (the CRD sets them together)
        assert not {"endedAt", "endReason", "gpuHours", "cost", "idleSavedGPUHours"} & set(record["spec"])
    # a missing record is written; the same one again is not (an open record while its run goes
    # on, a closed one ever)
    assert usage.usage_write_needed(None, record) is True
    assert usage.usage_write_needed({"metadata": {"name": name}, "spec": record["spec"]}, record) is False


@pytest.mark.parametrize("now, written", [
    (None, True), (at(1800 + 89 * 86400), True), (at(1800 + 90 * 86400), False), ("not a time", False)])
def test_a_job_record_past_its_retention_is_not_written_again(now, written):
    """The DevUser role deletes a record 90 days after its end; a finished job that still exists
    (its reconcilePeriod runs it) must not write it again."""
    record = usage.job_usage_record(eaj(), eaj_run(), JANE, "EphemeralAccelerationJob", now, "90d")
    assert (record is not None) == written
    assert (usage.job_usage_record_name(eaj(), eaj_run(), "EphemeralAccelerationJob", now, "90d") != "") == written
    running = usage.job_usage_record(eaj(), dict(eaj_run("Running"), finishedAt=None), JANE,
                                     "EphemeralAccelerationJob", at(1800 + 90 * 86400), "90d")
    assert running is not None and "endedAt" not in running["spec"]  # an open record has no retention


def _job(name, created=-300, deleting=False):
    meta = {"name": name, "creationTimestamp": at(created)}
    if deleting:
        meta["deletionTimestamp"] = at(0)
    return {"metadata": meta}


def open_job_record(kind="TrainingJob"):
    job, run = (tj(), tj_run("Running", 0, None)) if kind == "TrainingJob" else (eaj(), eaj_run("Running", 0, None))
    rec_ = usage.job_usage_record(job, run, JANE, kind)
    return {"metadata": {"name": rec_["name"], "labels": rec_["labels"]}, "spec": rec_["spec"]}


# (id, open job record, the jobs as read ({kind: [jobs]}; None: not read), closed at (None: kept open))
JOB_ORPHANS = [
    ("its TrainingJob runs: kept open", open_job_record(), {"TrainingJob": [_job("train")]}, None),
    ("its TrainingJob is being deleted: still there, kept open", open_job_record(),
     {"TrainingJob": [_job("train", deleting=True)]}, None),
    ("the jobs were not read: nothing closed", open_job_record(), None, None),
    ("only the other kind was read: nothing closed", open_job_record(), {"EphemeralAccelerationJob": []}, None),
    ("its TrainingJob is gone: closed now", open_job_record(), {"TrainingJob": [_job("other")]}, at(3600)),
    ("an EAJ of its name in the list of TrainingJobs does not count", open_job_record("EphemeralAccelerationJob"),
     {"TrainingJob": [_job("infer")], "EphemeralAccelerationJob": []}, at(3600)),
    ("its EAJ is gone: closed now", open_job_record("EphemeralAccelerationJob"),
     {"EphemeralAccelerationJob": [], "TrainingJob": []}, at(3600)),
    ("a TrainingJob of that name created after the run started is another one", open_job_record(),
     {"TrainingJob": [_job("train", created=30)]}, at(3600)),
]


@pytest.mark.parametrize("rec_, jobs, closed_at", [c[1:] for c in JOB_ORPHANS], ids=[c[0] for c in JOB_ORPHANS])
def test_usage_prune_closes_orphaned_job_records(rec_, jobs, closed_at):
    """A job deleted while it ran (jobs have no finalizer) leaves its open record, which the
    DevUser role closes with endReason Deleted (issue 25.3); the DevServers' check is apart."""
    out = usage.usage_prune([rec_], at(3600), "90d", "10m", [], jobs)
    assert out["delete"] == []
    if closed_at is None:
        assert out["close"] == [] and out["oldestEndedAt"] is None
        return
    [closed] = out["close"]
    assert closed["name"] == rec_["metadata"]["name"] and closed["labels"] == rec_["metadata"]["labels"]
    assert closed["spec"] == usage.close_spec(rec_["spec"], closed_at, "Deleted")
    assert closed["spec"]["endReason"] == "Deleted" and closed["spec"]["gpuHours"] != "0.0000"


def test_summary_by_kind():
    """devctl usage by kind: a job's records are summed apart from the DevServers' (issue 25.3)."""
    job = usage.job_usage_record(tj(), tj_run(), JANE, "TrainingJob")["spec"]
    infer = usage.job_usage_record(eaj(), eaj_run(), JANE)["spec"]
    summary = usage.usage_summary([rec(), {"spec": job}, {"spec": infer}])
    assert [(row["key"], row["launched"], row["gpuHours"]) for row in summary["byKind"]] == [
        ("DevServer", 1, "1.0000"), ("EphemeralAccelerationJob", 1, "0.5000"), ("TrainingJob", 1, "16.0000")]
    assert summary["total"]["ended"]["Succeeded"] == 2 and summary["total"]["gpuHours"] == "17.5000"
    only = usage.usage_summary([rec(), {"spec": job}], kind="TrainingJob")
    assert only["records"] == 1 and [row["key"] for row in only["byKind"]] == ["TrainingJob"]
    assert usage.usage_summary([rec()], kind="DevServer")["records"] == 1
