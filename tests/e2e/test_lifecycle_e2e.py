"""End to end: the DevServer lifecycle (issue 12) on kubesim with the local runtime and the real
role, on a short timescale: the operator's warnings come 24, 16 and 8 seconds before a
deadline (TORCHDEV_LIFECYCLE_WARNINGS, an operator setting) and reservations last seconds.

Nothing is faked but the in-pod agent: kubesim runs no containers, so the test writes the
agent's state changes into <name>-activity exactly as the agent does (docs/lifecycle-agent.md;
the agent itself is tested for real in tests/lifecycle/).
"""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from click.testing import CliRunner

from ansible_collections.torchdev.operator.plugins.module_utils.lifecycle import parse_duration

from _e2e_helpers import GROUP, VERSION, condition, devserver, get_ds, wait_ready

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

WARNINGS = (24, 16, 8)


# The operator's environment (tests/_cluster.py's `runtime`).
OPERATOR_ENV = {"TORCHDEV_LIFECYCLE_WARNINGS": ",".join("%ds" % w for w in WARNINGS), "TORCHDEV_MAX_RESERVATION": "2h"}


def ts(value: str) -> datetime:
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)


def now() -> datetime:
    return datetime.now(timezone.utc).replace(microsecond=0)


def events(kube, ns, name, *reasons) -> list:
    items = kube["core"].list_namespaced_event(ns, field_selector=f"involvedObject.name={name}").items
    return sorted((e for e in items if e.reason in reasons), key=lambda e: (e.metadata.creation_timestamp, e.metadata.name))


def wait_phase(sim, kube, ns, name, phase, timeout=120):
    def check():
        obj = get_ds(kube, ns, name)
        status = obj.get("status") or {}
        return obj if status.get("phase") == phase and status.get("observedGeneration") == obj["metadata"]["generation"] else None
    return sim.wait_for(check, timeout, interval=0.2, message=f"{ns}/{name} phase {phase}")


def devctl(sim, ns, *args):
    from devctl.main import cli

    result = CliRunner().invoke(cli, [*args, "--kubeconfig", sim.kubeconfig, "-n", ns, "-o", "json"],
                                catch_exceptions=False)
    return result


def report(kube, ns, name, state, since):
    """What the agent of pod <name>-0 sends on a state change (a merge patch of its key)."""
    body = {"data": {f"{name}-0": json.dumps({"state": state, "since": since.strftime("%Y-%m-%dT%H:%M:%SZ"),
                                              "reasons": [] if state == "idle" else ["ssh"]})}}
    kube["core"].patch_namespaced_config_map(f"{name}-activity", ns, body)


def test_reservation_warns_on_every_channel_then_expires_keeping_home(sim, kube, runtime, ns):
    kube["custom"].create_namespaced_custom_object(
        GROUP, VERSION, ns, "devservers", devserver("booked", lifecycle={"duration": "40s"}))
    obj = wait_ready(sim, kube, ns, "booked")
    res = obj["status"]["reservation"]
    assert ts(res["expiresAt"]) - ts(res["startedAt"]) == timedelta(seconds=40)
    assert res["duration"] == "40s" and res["extensions"] == 0
    home_uid = kube["core"].read_namespaced_persistent_volume_claim("home-booked-0", ns).metadata.uid
    # The in-pod side learns the deadline from <name>-lifecycle (mounted at /etc/torchdev/lifecycle).
    deadlines = json.loads(kube["core"].read_namespaced_config_map("booked-lifecycle", ns).data["deadlines.json"])
    assert deadlines["expiresAt"] == res["expiresAt"] and deadlines["warnings"] == list(WARNINGS)
    # devctl list's TIME-LEFT and get's countdown.
    from devctl.devserver import lifecycle_lines, time_left
    assert time_left(obj) not in ("-", "") and "expires at " + res["expiresAt"] in lifecycle_lines(obj)[0][1]

    # A warning condition while the first warning period runs.
    expiring = sim.wait_for(lambda: (lambda o: o if condition(o, "Expiring").get("status") == "True" else None)(
        get_ds(kube, ns, "booked")), 60, interval=0.2, message="Expiring condition")
    assert condition(expiring, "Expiring")["reason"] == "ReservationExpiring"

    obj = wait_phase(sim, kube, ns, "booked", "Expired", timeout=120)
    stopped_at = now()
    expires = ts(obj["status"]["reservation"]["expiresAt"])
    # Stopped within 30 s of expiresAt (the requeue comes due at that second).
    assert timedelta(0) <= ts(obj["metadata"]["annotations"]["torchdev.io/stopped-at"]) - expires <= timedelta(seconds=30)
    assert stopped_at - expires <= timedelta(seconds=60)
    assert obj["spec"]["suspend"] is True
    assert obj["status"]["reservation"]["endReason"] == "Expired"
    assert condition(obj, "Ready")["reason"] == "Expired"
    # The warnings, in order, each once and as an Event.  A warning is only sent by a reconcile
    # that starts before the expiry: on a busy machine the run due 8 s before it may decide after
    # it, and then the expiry itself is what the user gets (so only the first is required).
    sent = obj["status"]["reservation"]["warningsSent"]
    assert sent == sorted(sent, reverse=True) and sent[0] == WARNINGS[0] and set(sent) <= set(WARNINGS)
    warnings = events(kube, ns, "booked", "ReservationExpiring")
    assert 1 <= len(warnings) <= len(sent), [e.message for e in warnings]  # several due at once: one Event
    lefts = [parse_duration(e.message.split("(in ")[1].split(")")[0]) for e in warnings]
    assert lefts == sorted(lefts, reverse=True), [e.message for e in warnings]   # in order
    assert all(0 < left <= WARNINGS[0] for left in lefts), lefts
    assert len(events(kube, ns, "booked", "ReservationExpired")) == 1
    assert kube["apps"].read_namespaced_stateful_set("booked", ns).spec.replicas == 0
    assert kube["core"].read_namespaced_persistent_volume_claim("home-booked-0", ns).metadata.uid == home_uid

    # devctl start: a new reservation, the same home.
    assert devctl(sim, ns, "start", "booked").exit_code == 0
    obj = wait_ready(sim, kube, ns, "booked")
    assert ts(obj["status"]["reservation"]["startedAt"]) >= expires
    assert "endedAt" not in obj["status"]["reservation"]
    assert kube["core"].read_namespaced_persistent_volume_claim("home-booked-0", ns).metadata.uid == home_uid


def test_extend_moves_expiry_within_caps_and_cancel_keeps_home(sim, kube, runtime, ns):
    kube["custom"].create_namespaced_custom_object(
        GROUP, VERSION, ns, "devservers", devserver("ext", lifecycle={"duration": "30m"}))
    obj = wait_ready(sim, kube, ns, "ext")
    first = ts(obj["status"]["reservation"]["expiresAt"])

    result = devctl(sim, ns, "extend", "ext", "--hours", "0.5")
    assert result.exit_code == 0, result.output
    obj = json.loads(result.stdout)
    assert obj["spec"]["lifecycle"]["duration"] == "1h"
    assert ts(obj["status"]["reservation"]["expiresAt"]) - first == timedelta(minutes=30)
    assert obj["status"]["reservation"]["extensions"] == 1

    # Beyond the cluster maximum (2h here): a clear error, and the reservation as it was.
    result = devctl(sim, ns, "extend", "ext", "--hours", "5")
    assert result.exit_code == 1
    assert "exceeds the cluster maximum of 2h" in result.stderr and "kept 1h" in result.stderr
    obj = get_ds(kube, ns, "ext")
    assert obj["spec"]["lifecycle"]["duration"] == "1h"
    assert obj["status"]["phase"] == "Running"

    home_uid = kube["core"].read_namespaced_persistent_volume_claim("home-ext-0", ns).metadata.uid
    assert devctl(sim, ns, "cancel", "ext").exit_code == 0
    obj = wait_phase(sim, kube, ns, "ext", "Stopped")
    assert obj["status"]["reservation"]["endReason"] == "Cancelled"
    assert condition(obj, "Ready")["reason"] == "Cancelled"
    assert kube["core"].read_namespaced_persistent_volume_claim("home-ext-0", ns).metadata.uid == home_uid


def test_idle_shutdown_warns_stops_and_start_keeps_home(sim, kube, runtime, ns):
    kube["custom"].create_namespaced_custom_object(
        GROUP, VERSION, ns, "devservers", devserver("sleepy", lifecycle={"idleTimeout": 40, "autoShutdown": True}))
    wait_ready(sim, kube, ns, "sleepy")
    home_uid = kube["core"].read_namespaced_persistent_volume_claim("home-sleepy-0", ns).metadata.uid
    # The agent's identity may touch only this record.
    role = kube["rbac"].read_namespaced_role("sleepy-agent", ns)
    assert [(r.resources, r.resource_names, sorted(r.verbs)) for r in role.rules] == \
        [(["configmaps"], ["sleepy-activity"], ["get", "patch"])]

    since = now()
    report(kube, ns, "sleepy", "idle", since)
    obj = sim.wait_for(lambda: (lambda o: o if (o["status"].get("idle") or {}).get("since") else None)(
        get_ds(kube, ns, "sleepy")), 60, interval=0.2, message="status.idle")
    assert ts(obj["status"]["idle"]["deadline"]) == since + timedelta(seconds=40)
    deadlines = json.loads(kube["core"].read_namespaced_config_map("sleepy-lifecycle", ns).data["deadlines.json"])
    assert deadlines["idleDeadline"] == obj["status"]["idle"]["deadline"]

    # Active again: the idle record goes away (no shutdown).
    report(kube, ns, "sleepy", "active", now())
    sim.wait_for(lambda: not get_ds(kube, ns, "sleepy")["status"].get("idle"), 60, interval=0.2,
                 message="status.idle removed")

    since = now()
    report(kube, ns, "sleepy", "idle", since)
    obj = wait_phase(sim, kube, ns, "sleepy", "Stopped", timeout=120)
    assert condition(obj, "Ready")["reason"] == "IdleTimeout"
    assert ts(obj["metadata"]["annotations"]["torchdev.io/stopped-at"]) - (since + timedelta(seconds=40)) \
        <= timedelta(seconds=30)
    assert obj["status"]["reservation"]["endReason"] == "Idle"
    assert events(kube, ns, "sleepy", "IdleShutdownPending")
    assert len(events(kube, ns, "sleepy", "IdleShutdown")) == 1
    assert kube["apps"].read_namespaced_stateful_set("sleepy", ns).spec.replicas == 0

    assert devctl(sim, ns, "start", "sleepy").exit_code == 0
    wait_ready(sim, kube, ns, "sleepy")
    assert kube["core"].read_namespaced_persistent_volume_claim("home-sleepy-0", ns).metadata.uid == home_uid
    # The previous pod's idle report does not count for the new pod... but kubesim reuses the
    # pod name: a report older than the pod is ignored, so the server runs on.
    obj = get_ds(kube, ns, "sleepy")
    assert obj["status"]["phase"] == "Running" and not obj["status"].get("idle")


def test_keepalive_postpones_and_auto_shutdown_off_only_warns(sim, kube, runtime, ns):
    kube["custom"].create_namespaced_custom_object(
        GROUP, VERSION, ns, "devservers", devserver("kept", lifecycle={"idleTimeout": 30, "autoShutdown": False}))
    wait_ready(sim, kube, ns, "kept")
    since = now()
    report(kube, ns, "kept", "idle", since)
    obj = sim.wait_for(lambda: (lambda o: o if condition(o, "Expiring").get("reason") == "IdleTimeout"
                                and (o["status"].get("idle") or {}).get("since")
                                and ts(o["status"]["idle"]["deadline"]) <= now() else None)(
        get_ds(kube, ns, "kept")), 120, interval=0.2, message="idle past the timeout")
    assert obj["status"]["phase"] == "Running" and not obj["spec"].get("suspend")
    assert condition(obj, "Expiring")["status"] == "True"
    assert events(kube, ns, "kept", "IdleTimeout")

    result = devctl(sim, ns, "keepalive", "kept", "--hours", "2")
    assert result.exit_code == 0, result.output
    obj = sim.wait_for(lambda: (lambda o: o if ts(o["status"]["idle"]["deadline"]) > now() + timedelta(hours=1)
                                else None)(get_ds(kube, ns, "kept")), 60, interval=0.2, message="postponed")
    assert condition(obj, "Expiring")["status"] == "False"


def test_reserve_books_the_cheapest_flavor_and_waits_for_the_ssh_command(sim, kube, runtime, ns):
    result = devctl(sim, ns, "reserve", "--gpus", "0", "--hours", "1.5", "--name", "booking",
                    "--owner", "e2e@example.com", "--wait", "--timeout", "5m")
    assert result.exit_code == 0, result.output
    obj = json.loads(result.stdout)
    assert obj["spec"]["flavor"] == "cpu-small" and obj["spec"]["lifecycle"]["duration"] == "1h30m"
    assert "connect with: devctl ssh booking" in result.stderr
    assert obj["status"]["reservation"]["duration"] == "1h30m"
    # Each reconcile of the module had a cause; the deadlines were per-object requeues.
    causes = runtime.counters("DevServer").get("causes")
    if causes is None:  # the real ansible-operator keeps no causes: its log names each requeue set
        assert runtime.requeues(ns, "booking"), "no requeue_after for the booking"
    else:
        assert causes.get("deadline", 0) >= 1 and "unknown" not in causes, causes
