"""plugins/module_utils/lifecycle.py: reservations, idleness, warnings, stops, deadlines."""
from __future__ import annotations

import json

import pytest

from ansible_collections.torchdev.operator.plugins.module_utils import lifecycle
from ansible_collections.torchdev.operator.plugins.module_utils.devserver_status import (
    devserver_lifecycle, devserver_status, requeue_period)

T0 = "2026-11-24T10:00:00Z"


def at(seconds: int) -> str:
    return lifecycle._time(lifecycle._seconds(T0) + seconds)


def server(status=None, annotations=None, **lc):
    spec = {"owner": "a@b.c", "flavor": "f", "lifecycle": lc}
    return {"metadata": {"name": "s", "namespace": "n", "generation": 3, "annotations": annotations or {}},
            "spec": spec, "status": status or {}}


POD = {"metadata": {"name": "s-0", "creationTimestamp": at(0)}, "status": {"startTime": at(0)}}


def activity(state, since):
    return {"data": {"s-0": json.dumps({"state": state, "since": since})}}


# (parse_duration, format_duration: tests/module_utils/test_durations.py)


@pytest.mark.parametrize("duration, settings, devuser, fragment", [
    ("4h", None, None, None),
    ("25h", None, None, "exceeds the cluster maximum of 24h"),
    ("3h", {"max_reservation": "2h"}, None, "exceeds the cluster maximum of 2h"),
    ("9h", None, {"metadata": {"name": "jane"}, "spec": {"quota": {"maxReservation": "8h"}}},
     "the maximum of DevUser jane (spec.quota.maxReservation) of 8h"),
    ("8h", None, {"metadata": {"name": "jane"}, "spec": {"quota": {"maxReservation": "8h"}}}, None),
    ("30h", {"max_reservation": ""}, None, None),
])
def test_reservation_problem(duration, settings, devuser, fragment):
    problem = lifecycle.reservation_problem({"lifecycle": {"duration": duration}}, settings, devuser)
    if fragment is None:
        assert problem is None
    else:
        assert problem["reason"] == "InvalidSpec" and fragment in problem["message"]
        assert "spec.lifecycle.duration" in problem["message"]


def test_reservation_starts_at_first_ready_and_requeues_at_first_warning():
    out = lifecycle.lifecycle_status(server(duration="4h"), True, T0)
    res = out["reservation"]
    assert res["startedAt"] == T0 and res["expiresAt"] == at(4 * 3600) and res["extensions"] == 0
    assert out["requeue"] == "%ds" % (4 * 3600 - 1800)
    assert out["stop"] is None and out["events"] == []
    assert out["config"]["expiresAt"] == res["expiresAt"]


def test_not_running_yet_starts_nothing():
    out = lifecycle.lifecycle_status(server(duration="4h"), False, T0)
    assert out["reservation"] is None and out["requeue"] == ""


@pytest.mark.parametrize("elapsed, due, sent_before, requeue", [
    (4 * 3600 - 1800, [1800], [], "900s"),          # first warning
    (4 * 3600 - 900, [900], [1800], "600s"),         # second
    (4 * 3600 - 300, [300], [1800, 900], "300s"),    # third; then the expiry itself
    (4 * 3600 - 200, [1800, 900, 300], [], "200s"),  # late: one Event for all that are due
])
def test_warnings_in_order_once_each(elapsed, due, sent_before, requeue):
    status = {"reservation": {"startedAt": T0, "expiresAt": at(4 * 3600), "duration": "4h",
                              "extensions": 0, "warningsSent": sent_before}}
    out = lifecycle.lifecycle_status(server(status, duration="4h"), True, at(elapsed))
    assert out["reservation"]["warningsSent"] == sorted(set(sent_before) | set(due), reverse=True)
    assert [e["reason"] for e in out["events"]] == ["ReservationExpiring"]
    assert out["condition"]["status"] == "True" and out["condition"]["reason"] == "ReservationExpiring"
    assert out["requeue"] == requeue
    again = lifecycle.lifecycle_status(server({"reservation": out["reservation"]}, duration="4h"), True, at(elapsed))
    assert again["events"] == []  # recorded: not announced twice


def test_expiry_stops():
    status = {"reservation": {"startedAt": T0, "expiresAt": at(3600), "duration": "1h", "warningsSent": [1800, 900, 300]}}
    out = lifecycle.lifecycle_status(server(status, duration="1h"), True, at(3600))
    assert out["stop"]["reason"] == "Expired" and out["requeue"] == ""
    assert lifecycle.stop_patch("Expired", at(3600)) == {
        "metadata": {"annotations": {"torchdev.io/stopped-by": "expired", "torchdev.io/stopped-at": at(3600)}},
        "spec": {"suspend": True}}


def test_extension_moves_expiry_and_resets_warnings():
    status = {"reservation": {"startedAt": T0, "expiresAt": at(3600), "duration": "1h", "extensions": 0,
                              "warningsSent": [1800]}}
    out = lifecycle.lifecycle_status(server(status, duration="2h"), True, at(1900))
    assert out["reservation"]["expiresAt"] == at(7200) and out["reservation"]["extensions"] == 1
    assert out["reservation"]["warningsSent"] == [] and out["events"] == []


def test_over_the_cap_keeps_the_applied_reservation():
    status = {"reservation": {"startedAt": T0, "expiresAt": at(3600), "duration": "1h", "warningsSent": []}}
    sts = {"metadata": {"generation": 1}, "status": {"readyReplicas": 1, "replicas": 1, "updatedReplicas": 1,
                                                     "observedGeneration": 1}}
    out = devserver_lifecycle(server(status, duration="48h"), sts, 1, at(60))
    assert out["reservation"]["expiresAt"] == at(3600)


@pytest.mark.parametrize("by, end_reason, phase, ready_reason", [
    ("user", "Stopped", "Stopped", "UserStopped"),
    ("cancelled", "Cancelled", "Stopped", "Cancelled"),
    ("idle", "Idle", "Stopped", "IdleTimeout"),
    ("expired", "Expired", "Expired", "Expired"),
    (None, "Stopped", "Suspended", "Suspended"),
])
def test_a_stop_ends_the_reservation_with_its_reason(by, end_reason, phase, ready_reason):
    annotations = {"torchdev.io/stopped-by": by, "torchdev.io/stopped-at": at(50)} if by else {}
    cr = server({"reservation": {"startedAt": T0, "expiresAt": at(3600), "duration": "1h"}}, annotations, duration="1h")
    cr["spec"]["suspend"] = True
    out = lifecycle.lifecycle_status(cr, False, at(60))
    assert out["reservation"]["endReason"] == end_reason
    assert out["reservation"]["endedAt"] == (at(50) if by else at(60))
    status = devserver_status(cr, None, 0, "h", lifecycle=out)
    assert status["phase"] == phase
    assert [c for c in status["conditions"] if c["type"] == "Ready"][0]["reason"] == ready_reason


def test_a_start_after_a_stop_begins_a_new_reservation():
    old = {"startedAt": T0, "expiresAt": at(3600), "duration": "1h", "endedAt": at(3600), "endReason": "Expired"}
    out = lifecycle.lifecycle_status(server({"reservation": old}, duration="1h"), True, at(7200))
    assert out["reservation"]["startedAt"] == at(7200) and out["reservation"]["expiresAt"] == at(10800)
    assert out["reservation"]["endedAt"] is None and out["reservation"]["endReason"] is None


PROGRESSING = {"type": "Progressing", "status": "True", "reason": "Queued", "lastTransitionTime": at(-600)}


@pytest.mark.parametrize("status, created, expected", [
    # queued (or provisioning) since the condition turned True: the wait a UsageRecord reports
    ({"conditions": [PROGRESSING]}, at(-3600), at(-600)),
    # no Progressing=True in the status the run started from: the first reservation counts from creation
    ({}, at(-60), at(-60)),
    ({"conditions": [dict(PROGRESSING, status="False")]}, at(-60), at(-60)),
    # a later reservation without it: unknown, so no wait (never the time since creation)
    ({"reservation": {"startedAt": at(-7200), "endedAt": at(-3600), "endReason": "Stopped"}}, at(-9000), T0),
    # never in the future
    ({"conditions": [dict(PROGRESSING, lastTransitionTime=at(60))]}, None, T0),
])
def test_a_new_reservation_records_when_it_was_asked_for(status, created, expected):
    cr = server(status, duration="1h")
    cr["metadata"]["creationTimestamp"] = created
    out = lifecycle.lifecycle_status(cr, True, T0)
    assert out["reservation"]["queuedAt"] == expected and out["reservation"]["startedAt"] == T0


@pytest.mark.parametrize("report, pod, expected", [
    (activity("idle", at(100)), POD, 100),
    (activity("active", at(100)), POD, None),
    (activity("idle", at(-10)), POD, None),           # a previous pod's report
    ({"data": {}}, POD, None),                         # not reported yet: active
    ({"data": {"s-0": "not json"}}, POD, None),
])
def test_idle_since(report, pod, expected):
    got = lifecycle.idle_since(report, [pod], 1)
    assert (None if got is None else got - lifecycle._seconds(T0)) == expected


def test_idle_needs_every_replica():
    pods = [POD, {"metadata": {"name": "s-1", "creationTimestamp": at(0)}, "status": {}}]
    report = {"data": {"s-0": json.dumps({"state": "idle", "since": at(100)})}}
    assert lifecycle.idle_since(report, pods, 2) is None
    report["data"]["s-1"] = json.dumps({"state": "idle", "since": at(200)})
    assert lifecycle.idle_since(report, pods, 2) == lifecycle._seconds(at(200))


def test_idle_shutdown_warns_then_stops():
    cr = server(idleTimeout=3600, autoShutdown=True)
    cr["status"] = {"reservation": {"startedAt": T0}}
    out = lifecycle.lifecycle_status(cr, True, at(100), activity=activity("idle", at(100)), pods=[POD])
    assert out["idle"]["deadline"] == at(3700) and out["requeue"] == "%ds" % 1800
    out = lifecycle.lifecycle_status(cr, True, at(1900), activity=activity("idle", at(100)), pods=[POD])
    assert [e["reason"] for e in out["events"]] == ["IdleShutdownPending"]
    assert out["condition"]["reason"] == "IdleShutdownPending"
    out = lifecycle.lifecycle_status(cr, True, at(3700), activity=activity("idle", at(100)), pods=[POD])
    assert out["stop"]["reason"] == "Idle"


@pytest.mark.parametrize("idle_deadline, reason", [
    (3000, "Idle"),      # idle first: a run that comes late (a busy operator) still says why it stopped first
    (4000, "Expired"),   # the reservation ended first
    (3600, "Expired"),   # the same second: the reservation
])
def test_a_late_run_stops_for_what_came_first(idle_deadline, reason):
    cr = server(duration="1h", idleTimeout=idle_deadline - 100, autoShutdown=True)
    cr["status"] = {"reservation": {"startedAt": T0, "expiresAt": at(3600), "duration": "1h",
                                    "warningsSent": [1800, 900, 300]}}
    out = lifecycle.lifecycle_status(cr, True, at(4100), activity=activity("idle", at(100)), pods=[POD])
    assert out["stop"]["reason"] == reason


def test_auto_shutdown_off_warns_and_keeps_running():
    cr = server(idleTimeout=600, autoShutdown=False)
    cr["status"] = {"reservation": {"startedAt": T0}}
    out = lifecycle.lifecycle_status(cr, True, at(800), activity=activity("idle", at(100)), pods=[POD])
    assert out["stop"] is None and out["condition"]["reason"] == "IdleTimeout"
    assert out["events"] and out["events"][0]["reason"] == "IdleTimeout"


@pytest.mark.parametrize("keepalive, deadline", [
    (at(7200), at(7200)),                  # postponed
    (at(10 * 86400), at(3700 + 86400)),    # capped at max_keepalive past the idle deadline
    (at(0), at(3700)),                     # in the past: no effect
])
def test_keepalive(keepalive, deadline):
    cr = server(idleTimeout=3600, autoShutdown=True, keepAliveUntil=keepalive)
    cr["status"] = {"reservation": {"startedAt": T0}}
    out = lifecycle.lifecycle_status(cr, True, at(200), activity=activity("idle", at(100)), pods=[POD])
    assert out["idle"]["deadline"] == deadline


@pytest.mark.parametrize("status, deadline, previous, expected", [
    ({"phase": "Running", "reservation": {"startedAt": "2026-11-24T09:00:00Z"}}, "", None, ""),
    ({"phase": "Running", "reservation": {"startedAt": "2026-11-24T09:00:00Z"}}, "120s", None, "120s"),
    ({"phase": "Running"}, "120s", None, "2s"),  # no reservation under way yet: the next run starts it
    ({"phase": "Provisioning", "conditions": [{"type": "Progressing", "status": "True"}]}, "120s",
     {"conditions": [{"type": "Progressing", "status": "True", "lastTransitionTime": "2026-11-24T09:50:00Z"}]}, "60s"),
    ({"phase": "Provisioning", "conditions": [{"type": "Progressing", "status": "True"}]}, "1s", None, "1s"),
])
def test_requeue_period(status, deadline, previous, expected):
    assert requeue_period(status, now=T0, deadline=deadline, previous=previous) == expected


# --- the queue ETA (module_utils/kueue.py queue_eta) ------------------------------------------

from ansible_collections.torchdev.operator.plugins.module_utils.kueue import queue_eta  # noqa: E402

GPU1 = {"gpu": {"count": 1, "type": "A10G"}, "resources": {"limits": {"nvidia.com/gpu": 1}}}


def cq(name, gpus, cohort=None):
    spec = {"resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
        {"name": "a10g", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": gpus}]}]}]}
    if cohort:
        spec["cohortName"] = cohort
    return {"metadata": {"name": name}, "spec": spec}


def holder(name, cluster_queue, expires=None, phase="Running", replicas=1, position=None, ns="u"):
    status = {"phase": phase, "replicas": replicas, "queue": {"clusterQueue": cluster_queue}}
    if expires is not None:
        status["reservation"] = {"startedAt": T0, "expiresAt": at(expires)}
    if position is not None:
        status["queue"]["position"] = position
    return {"metadata": {"name": name, "namespace": ns}, "spec": {"flavor": "a10g"}, "status": status}


def kueue_obs(queues, servers, position=0):
    return {"local_queue": {"spec": {"clusterQueue": "mine"}}, "pending": {"positionInClusterQueue": position},
            "eta": {"cluster_queues": queues, "devservers": servers}}


ME = {"metadata": {"name": "me", "namespace": "u"}, "spec": {"flavor": "a10g"},
      "status": {"phase": "Queued", "queue": {"clusterQueue": "mine"}}}


@pytest.mark.parametrize("queues, servers, position, replicas, eta", [
    ([cq("mine", 2)], [holder("a", "mine", 3600), holder("b", "mine", 1800)], 0, 1, at(1800)),   # first to end
    ([cq("mine", 2)], [holder("a", "mine", 3600), holder("b", "mine", 1800)], 0, 2, at(3600)),   # a gang of 2
    ([cq("mine", 2)], [holder("a", "mine", 3600), holder("b", "mine", 1800),
                       holder("c", "mine", phase="Queued", position=1)], 1, 1, at(3600)),       # one ahead
    ([cq("mine", 2)], [holder("a", "mine", None), holder("b", "mine", 1800)], 0, 2, None),       # no expiry
    ([cq("mine", 1)], [], 0, 1, at(0)),                                                           # free now
    ([cq("mine", 0, "team"), cq("other", 1, "team")], [holder("x", "other", 600, ns="v")], 0, 1, at(600)),  # cohort
    ([cq("mine", 1)], [holder("a", "mine", 600)], 0, 2, None),                                   # never fits
])
def test_queue_eta(queues, servers, position, replicas, eta):
    out = queue_eta(kueue_obs(queues, servers, position), ME, GPU1, replicas, T0)
    assert out["estimatedStartTime"] == eta, out
    assert out["reason"]


def test_queue_eta_without_inputs_is_none():
    assert queue_eta({"local_queue": None}, ME, GPU1, 1, T0) is None


# --- hostile activity reports (issue 25 item 2) ---------------------------------------------
# The agent's token is readable from a shell in the user's pod, so <name>-activity may hold
# anything.  Every entry below is ignored for idleness with one InvalidActivityReport Event,
# and the reservation expires on time regardless.  ("since" 9999-12-31 overflowed the idle
# deadline's arithmetic: the whole lifecycle step failed and the server ran past its expiry.)

def _report(**fields) -> str:
    return json.dumps(fields)


HOSTILE_REPORTS = [
    # (id, the pod's entry, a fragment of the problem)
    ("future", _report(state="idle", since=at(3600)), "in the future"),
    ("year-9999", _report(state="idle", since="9999-12-31T23:59:59Z"), "in the future"),
    ("year-9999-west", _report(state="idle", since="9999-12-31T23:59:59-05:00"), "not an RFC 3339 time"),
    ("year-1", _report(state="idle", since="0001-01-01T00:00:00Z"), "before 1970"),
    ("year-1-east", _report(state="idle", since="0001-01-01T00:00:00+05:00"), "not an RFC 3339 time"),
    ("before-epoch", _report(state="idle", since="1969-12-31T23:59:59Z"), "before 1970"),
    ("no-zone", _report(state="idle", since="2026-11-24T10:00:00"), "not an RFC 3339 time"),
    ("malformed-time", _report(state="idle", since="yesterday"), "not an RFC 3339 time"),
    ("not-json", "{\"state\": \"idle\", \"since\"", "not JSON"),
    ("one-megabyte", "x" * (1 << 20), "more than 4096"),
    ("one-megabyte-since", _report(state="idle", since="9" * (1 << 20)), "more than 4096"),
    ("deep-nesting", "[" * 4000 + "]" * 4000, "more than 4096"),
    ("a-list", "[\"idle\"]", "not a JSON object"),
    ("a-number", "12", "not a JSON object"),
    ("nan", "NaN", "not a JSON object"),
    ("since-int", _report(state="idle", since=1764000000), "not an RFC 3339 time"),
    ("since-negative", _report(state="idle", since=-1), "not an RFC 3339 time"),
    ("since-huge-int", _report(state="idle", since=10 ** 300), "not an RFC 3339 time"),
    ("since-nan", "{\"state\": \"idle\", \"since\": NaN}", "not an RFC 3339 time"),
    ("since-infinity", "{\"state\": \"idle\", \"since\": Infinity}", "not an RFC 3339 time"),
    ("since-bool", _report(state="idle", since=True), "not an RFC 3339 time"),
    ("since-object", _report(state="idle", since={"$date": at(0)}), "not an RFC 3339 time"),
    ("since-null", _report(state="idle", since=None), "not an RFC 3339 time"),
    ("state-int", _report(state=1, since=at(100)), "neither idle nor active"),
    ("state-unknown", _report(state="asleep", since=at(100)), "neither idle nor active"),
]


def hostile_server(problem=None):
    cr = server(duration="1h", idleTimeout=600, autoShutdown=True)
    cr["status"] = {"reservation": {"startedAt": T0, "expiresAt": at(3600), "duration": "1h",
                                    "warningsSent": [1800, 900, 300]}}
    if problem:
        cr["status"]["activityReportProblem"] = problem
    return cr


@pytest.mark.parametrize("entry, fragment", [case[1:] for case in HOSTILE_REPORTS],
                         ids=[case[0] for case in HOSTILE_REPORTS])
def test_a_hostile_report_is_ignored_with_one_event_and_the_reservation_expires(entry, fragment):
    bad = {"data": {"s-0": entry}}
    # Before the expiry: no idleness, no stop, one Event naming the pod and the problem.
    out = lifecycle.lifecycle_status(hostile_server(), True, at(1200), activity=bad, pods=[POD])
    assert out["stop"] is None and out["idle"] is None
    assert out["activityProblem"].startswith("pod s-0: ") and fragment in out["activityProblem"]
    assert len(out["activityProblem"]) <= lifecycle.ACTIVITY_PROBLEM_MAX_CHARS
    assert [e["reason"] for e in out["events"]] == ["InvalidActivityReport"]
    assert out["activityProblem"] in out["events"][0]["message"]
    # The next reconcile (the status holds the problem): no second Event for the same report.
    again = lifecycle.lifecycle_status(hostile_server(out["activityProblem"]), True, at(1300), activity=bad,
                                       pods=[POD])
    assert again["events"] == [] and again["activityProblem"] == out["activityProblem"]
    # At the expiry: stopped, whatever the report says.
    out = lifecycle.lifecycle_status(hostile_server(out["activityProblem"]), True, at(3600), activity=bad,
                                     pods=[POD])
    assert out["stop"]["reason"] == "Expired" and out["reservation"]["expiresAt"] == at(3600)
    # Through devserver_lifecycle and into the status the role writes.
    status = devserver_status(hostile_server(), None, 1, "h", lifecycle=out)
    assert status["activityReportProblem"] == out["activityProblem"]


@pytest.mark.parametrize("since, idle", [
    (at(1200 + 300), True),        # within the clock skew allowed (REPORT_CLOCK_SKEW)
    (at(1200 + 301), False),
])
def test_a_report_slightly_ahead_is_clock_skew(since, idle):
    assert lifecycle.REPORT_CLOCK_SKEW == 300
    out = lifecycle.lifecycle_status(hostile_server(), True, at(1200), activity=activity("idle", since), pods=[POD])
    assert (out["idle"] is not None) is idle and (out["activityProblem"] is None) is idle


def test_a_valid_report_clears_the_problem_and_a_new_bad_one_warns_again():
    out = lifecycle.lifecycle_status(hostile_server("pod s-0: old"), True, at(1200),
                                     activity=activity("idle", at(1000)), pods=[POD])
    assert out["activityProblem"] is None and out["idle"]["since"] == at(1000)
    assert "InvalidActivityReport" not in [e["reason"] for e in out["events"]]
    bad = {"data": {"s-0": _report(state="idle", since="9999-12-31T23:59:59Z")}}
    out = lifecycle.lifecycle_status(hostile_server("pod s-0: old"), True, at(1200), activity=bad, pods=[POD])
    assert [e["reason"] for e in out["events"]] == ["InvalidActivityReport"]


@pytest.mark.parametrize("duration", ["99999999999h", "9999999999999s"])
def test_a_huge_duration_is_clamped_not_an_overflow(duration):
    # (possible where the operator's max_reservation is "": no cluster maximum)
    cr = server(duration=duration)
    cr["status"] = {"reservation": {"startedAt": T0}}
    out = lifecycle.lifecycle_status(cr, True, at(10), settings={"max_reservation": ""})
    assert out["reservation"]["expiresAt"] == "9999-12-31T23:59:59Z" and out["stop"] is None
    # and it stays put: the next run neither counts an extension nor resets the warnings
    cr["status"]["reservation"] = out["reservation"]
    again = lifecycle.lifecycle_status(cr, True, at(20), settings={"max_reservation": ""})
    assert again["reservation"].get("extensions") == out["reservation"].get("extensions")
    assert again["reservation"]["expiresAt"] == out["reservation"]["expiresAt"]


@pytest.mark.parametrize("keepalive", ["9999-12-31T23:59:59-05:00", "0001-01-01T00:00:00+05:00", "soon", 42])
def test_an_unreadable_keepalive_is_ignored(keepalive):
    cr = server(idleTimeout=3600, autoShutdown=True, keepAliveUntil=keepalive)
    cr["status"] = {"reservation": {"startedAt": T0}}
    out = lifecycle.lifecycle_status(cr, True, at(200), activity=activity("idle", at(100)), pods=[POD])
    assert out["idle"]["deadline"] == at(3700)


# -- time_or_none: the one RFC 3339 parser for a time anyone may write (devctl, Events) --------

@pytest.mark.parametrize("value, expected", [
    ("2026-11-24T10:00:00Z", "2026-11-24T10:00:00+00:00"),
    ("2026-11-24T10:00:00.123456Z", "2026-11-24T10:00:00.123456+00:00"),    # an Event's MicroTime
    ("2026-11-24T11:00:00+01:00", "2026-11-24T10:00:00+00:00"),             # an offset: the same instant in UTC
    (" 2026-11-24T10:00:00Z ", "2026-11-24T10:00:00+00:00"),
])
def test_time_or_none_reads_rfc3339(value, expected):
    assert lifecycle.time_or_none(value).isoformat() == expected


@pytest.mark.parametrize("value", [None, "", "soon", "2026-11-24T10:00:00", "0001-01-01T00:00:00+01:00",
                                   "9999-12-31T23:59:59-01:00", "x" * 100000, 17, 1.5, [], {}, b"2026-11-24T10:00:00Z"])
def test_time_or_none_never_raises(value):
    assert lifecycle.time_or_none(value) is None
