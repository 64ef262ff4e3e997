"""devctl autostop (issue 28.6): change when servers stop by themselves when idle, on a running
server: a merge patch of spec.lifecycle's idleTimeout and autoShutdown (docs/api.md), nothing
else of the spec touched; several names or -l; the setting shown without --idle/--off."""
from __future__ import annotations

import json

from devctl_helpers import GROUP, VERSION, as_json


def _lifecycle(cluster, name):
    return cluster.devserver(name)["spec"]["lifecycle"]


def test_autostop_on_a_running_server(devctl, cluster):
    cluster.create_devserver("run", lifecycle={"duration": "4h", "idleTimeout": 7200})
    cluster.set_status("run", phase="Running")
    shown = devctl("autostop", "run")
    assert shown.exit_code == 0 and shown.stdout.strip() == (
        "devserver/run: no automatic stop (idle after 2h is warned about)")
    patched = as_json(devctl("autostop", "run", "--idle", "30m", "-o", "json"))
    assert patched["spec"]["lifecycle"] == {"duration": "4h", "idleTimeout": 1800, "autoShutdown": True}
    assert patched["status"]["phase"] == "Running"  # a change of settings, not a restart
    assert devctl("autostop", "run").stdout.strip() == (
        "devserver/run: stops after 30m idle (home kept; 'devctl start' resumes it)")
    off = devctl("autostop", "run", "--off")
    assert off.exit_code == 0 and "no automatic stop (idle after 30m is warned about)" in off.stdout
    assert _lifecycle(cluster, "run") == {"duration": "4h", "idleTimeout": 1800, "autoShutdown": False}


def test_autostop_several_and_by_selector(devctl, cluster):
    for name, team in (("a", "ml"), ("b", "ml"), ("c", "infra")):
        cluster.custom.create_namespaced_custom_object(GROUP, VERSION, cluster.ns, "devservers", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "DevServer",
            "metadata": {"name": name, "labels": {"team": team}},
            "spec": {"owner": "alice@example.com", "flavor": "cpu-small"}})
    result = devctl("autostop", "-l", "team=ml", "--idle", "1h30m", "-o", "json")
    assert [o["metadata"]["name"] for o in as_json(result)["items"]] == ["a", "b"]
    assert [_lifecycle(cluster, n).get("autoShutdown") for n in "abc"] == [True, True, False]
    assert _lifecycle(cluster, "a")["idleTimeout"] == 5400
    partial = devctl("autostop", "c", "nope", "--idle", "2h")
    assert partial.exit_code == 1 and "devserver/c: stops after 2h idle" in partial.stdout
    assert "nope" in partial.stderr.strip().splitlines()[-1]


def test_autostop_refuses_bad_values(devctl, cluster):
    cluster.create_devserver("x")
    for args, fragment in ((["--idle", "30s"], "'30s' is out of range: must be between 60s and 7d"),
                           (["--idle", "8d"], "out of range"), (["--idle", "soon"], "invalid duration 'soon'"),
                           (["--idle", "1h", "--off"], "give --idle DURATION or --off, not both")):
        result = devctl("autostop", "x", *args)
        assert result.exit_code == 2 and fragment in result.stderr, (args, result.stderr)
    unchanged = cluster.devserver("x")["spec"].get("lifecycle") or {}
    assert (unchanged.get("idleTimeout", 3600), unchanged.get("autoShutdown", False)) == (3600, False)


def test_the_operator_moves_the_idle_deadline_of_the_patched_server(devctl, cluster):
    """What devctl writes is what the operator's lifecycle decision reads: the idle deadline of a
    running, idle server follows the new idleTimeout, with autoShutdown (the settings live in the
    lifecycle ConfigMap the agent reads, not in the pod template: no restart)."""
    from ansible_collections.torchdev.operator.plugins.module_utils import lifecycle

    t0 = "2026-11-24T10:00:00Z"

    def at(seconds):
        return lifecycle._time(lifecycle._seconds(t0) + seconds)

    cluster.create_devserver("idle")
    assert devctl("autostop", "idle", "--idle", "30m").exit_code == 0
    obj = cluster.devserver("idle")
    obj["status"] = {"reservation": {"startedAt": t0}}
    pod = {"metadata": {"name": "idle-0", "creationTimestamp": t0}, "status": {"startTime": t0}}
    report = {"data": {"idle-0": json.dumps({"state": "idle", "since": at(100)})}}
    out = lifecycle.lifecycle_status(obj, True, at(200), activity=report, pods=[pod])
    assert out["idle"]["deadline"] == at(1900) and out["idle"]["autoShutdown"] is True
    assert out["config"]["idleTimeoutSeconds"] == 1800 and out["config"]["autoShutdown"] is True
