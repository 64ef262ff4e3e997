"""devctl against kubesim: create, list, get, delete, --wait, flavors, errors.

No operator runs here; tests write DevServer status themselves like the operator would.
"""
from __future__ import annotations

import json
import threading
import time

import pytest

from devctl_helpers import OWNER, as_json

READY = [
    {"type": "Ready", "status": "True", "reason": "ServerReady", "message": "1/1 pods ready",
     "lastTransitionTime": "2026-01-01T00:00:00Z"},
    {"type": "Progressing", "status": "False", "reason": "Reconciled", "message": "",
     "lastTransitionTime": "2026-01-01T00:00:00Z"},
    {"type": "Degraded", "status": "False", "reason": "AsExpected", "message": "",
     "lastTransitionTime": "2026-01-01T00:00:00Z"},
]
PROVISIONING = [
    {"type": "Ready", "status": "False", "reason": "PodsNotReady", "message": "0/1 pods ready",
     "lastTransitionTime": "2026-01-01T00:00:00Z"},
    {"type": "Progressing", "status": "True", "reason": "Provisioning", "message": "creating StatefulSet",
     "lastTransitionTime": "2026-01-01T00:00:00Z"},
]


def _running(cluster, name, **extra):
    return cluster.set_status(
        name, phase="Running", conditions=READY, readyReplicas=1, replicas=1, observedGeneration=1,
        sshEndpoint=f"{name}-ssh.{cluster.ns}.svc.cluster.local:22",
        sshCommand=f"devctl ssh {name} -n {cluster.ns}", **extra)


def _one_line_error(result, code=1):
    assert result.exit_code == code, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: ")
    return lines[0]


# -- create -------------------------------------------------------------------------------------

def test_create_submits_the_object_and_crd_defaults_apply(devctl, cluster, ns, tmp_path):
    key = tmp_path / "k.pub"
    key.write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExample alice@laptop\n")
    obj = as_json(devctl("create", "box", "--flavor", "gpu-a10g-1", "--owner", OWNER,
                         "--ssh-key-file", key, "--env", "A=1", "--home-size", "200Gi", "-o", "json"))
    assert obj["metadata"]["namespace"] == ns
    assert obj["spec"]["persistentHomeSize"] == "200Gi"
    assert obj["spec"]["sshPublicKeys"] == [key.read_text().strip()]
    stored = cluster.devserver("box")
    assert stored["spec"]["owner"] == OWNER and stored["spec"]["flavor"] == "gpu-a10g-1"
    assert stored["spec"]["mode"] == "standalone"
    assert stored["spec"]["image"]  # defaulted by the CRD schema
    assert stored["spec"]["env"] == [{"name": "A", "value": "1"}]
    # /shared: left to the operator (the DevUser's shared claim), as the CRD default says
    assert "sharedVolumeClaimName" not in stored["spec"] and stored["spec"]["mountSharedVolume"] is True


@pytest.mark.parametrize("args,spec", [
    (["--shared-claim", "team-efs"], {"sharedVolumeClaimName": "team-efs", "mountSharedVolume": True}),
    (["--no-shared"], {"mountSharedVolume": False}),
])
def test_create_shared_volume_options(devctl, cluster, args, spec):
    name = "sh" + str(len(args[0]))
    assert devctl("create", name, "--flavor", "cpu-small", "--owner", OWNER, *args).exit_code == 0
    stored = cluster.devserver(name)["spec"]
    assert {k: stored.get(k) for k in spec} == spec


def test_create_shared_claim_and_no_shared_exclude_each_other(devctl):
    result = devctl("create", "x", "--flavor", "cpu-small", "--owner", OWNER, "--shared-claim", "c", "--no-shared")
    assert result.exit_code == 2 and "exclude each other" in result.stderr


def test_create_distributed(devctl, cluster):
    as_json(devctl("create", "train", "--flavor", "gpu-h100-8", "--owner", OWNER, "--distributed",
                   "--replicas", "2", "--nprocs-per-node", "8", "-o", "json"))
    spec = cluster.devserver("train")["spec"]
    assert spec["mode"] == "distributed"
    assert spec["distributed"]["worldSize"] == 16 and spec["distributed"]["nprocsPerNode"] == 8


@pytest.mark.parametrize("flavor, backend_flag, backend", [
    ("cpu-small", (), "gloo"),            # NCCL needs GPUs: a CPU flavor defaults to gloo (issue 28.6)
    ("gpu-h100-8", (), "nccl"),
    ("cpu-small", ("--backend", "nccl"), "nccl"),  # asked for: kept (the operator says why it cannot run)
])
def test_create_distributed_backend_follows_the_flavor(devctl, cluster, flavor, backend_flag, backend):
    result = devctl("create", "dist", "--flavor", flavor, "--owner", OWNER, "--distributed", "--replicas", "2",
                    *backend_flag, "-o", "json")
    assert result.exit_code == 0, result.stderr
    assert cluster.devserver("dist")["spec"]["distributed"]["backend"] == backend
    assert ("backend gloo: flavor cpu-small has no GPUs" in result.stderr) == (backend == "gloo")


def test_create_table_output(devctl, cluster):
    result = devctl("create", "tbl", "--flavor", "cpu-small", "--owner", OWNER)
    assert result.exit_code == 0, result.stderr
    assert "tbl" in result.stdout and "created" in result.stdout
    assert cluster.devserver_names() == ["tbl"]


def test_create_unknown_flavor(devctl, cluster):
    line = _one_line_error(devctl("create", "x", "--flavor", "nope", "--owner", OWNER))
    assert 'devserverflavor "nope" not found' in line
    assert cluster.devserver_names() == []


def test_create_twice_is_already_exists(devctl, cluster, ns):
    assert devctl("create", "dup", "--flavor", "cpu-small", "--owner", OWNER).exit_code == 0
    line = _one_line_error(devctl("create", "dup", "--flavor", "cpu-small", "--owner", OWNER))
    assert line == f'error: devserver "dup" already exists in namespace "{ns}"'


def test_create_wait_until_ready(devctl, cluster):
    def operator():
        name = "waiter"
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if "waiter" in cluster.devserver_names():
                break
            time.sleep(0.02)
        time.sleep(0.1)
        cluster.set_status(name, phase="Provisioning", conditions=PROVISIONING, replicas=1, readyReplicas=0)
        time.sleep(0.1)
        _running(cluster, name)

    thread = threading.Thread(target=operator, daemon=True)
    thread.start()
    result = devctl("create", "waiter", "--flavor", "cpu-small", "--owner", OWNER, "--wait",
                    "--timeout", "20s", "-o", "json")
    thread.join(5)
    obj = as_json(result)
    assert obj["status"]["phase"] == "Running"
    # progress on stderr: one line per change, including the Provisioning phase
    assert "Provisioning" in result.stderr and "Running" in result.stderr
    assert "\r" not in result.stderr


def test_create_wait_times_out(devctl):
    result = devctl("create", "slow", "--flavor", "cpu-small", "--owner", OWNER, "--wait", "--timeout", "0.3")
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines()[-1].startswith("error: timed out")


def test_create_wait_fails_fast_on_failed_phase(devctl, cluster):
    def operator():
        deadline = time.monotonic() + 10
        while "broken" not in cluster.devserver_names() and time.monotonic() < deadline:
            time.sleep(0.02)
        cluster.set_status("broken", phase="Failed", conditions=[
            {"type": "Degraded", "status": "True", "reason": "PodFailed", "message": "container exited 1",
             "lastTransitionTime": "2026-01-01T00:00:00Z"}])

    thread = threading.Thread(target=operator, daemon=True)
    thread.start()
    result = devctl("create", "broken", "--flavor", "cpu-small", "--owner", OWNER, "--wait", "--timeout", "20")
    thread.join(5)
    assert result.exit_code == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: devserver/broken failed") and "PodFailed" in last


@pytest.mark.parametrize("reason,fails_fast", [("FlavorNotFound", True), ("InvalidSpec", True),
                                               ("ReconcileError", False)])
def test_create_wait_on_degraded(devctl, cluster, reason, fails_fast):
    name = f"degraded-{reason.lower()}"

    def operator():
        deadline = time.monotonic() + 10
        while name not in cluster.devserver_names() and time.monotonic() < deadline:
            time.sleep(0.02)
        cluster.set_status(name, phase="Pending", conditions=[
            {"type": "Degraded", "status": "True", "reason": reason, "message": "flavor \"nope\" not found",
             "lastTransitionTime": "2026-01-01T00:00:00Z"}])

    thread = threading.Thread(target=operator, daemon=True)
    thread.start()
    result = devctl("create", name, "--flavor", "cpu-small", "--owner", OWNER, "--wait", "--timeout", "1.5")
    thread.join(5)
    assert result.exit_code == 1
    last = result.stderr.strip().splitlines()[-1]
    if fails_fast:
        assert last.startswith(f"error: devserver/{name} cannot become Ready") and reason in last
    else:  # a transient reason: keep waiting until the timeout
        assert last.startswith("error: timed out")


# -- list ---------------------------------------------------------------------------------------

def test_list_json_and_table(devctl, cluster, ns):
    cluster.create_devserver("alpha")
    cluster.create_devserver("beta", flavor="cpu-small", mode="distributed",
                             distributed={"worldSize": 4, "nprocsPerNode": 2})
    _running(cluster, "alpha")
    data = as_json(devctl("list", "-o", "json"))
    assert data["kind"] == "List"
    assert [i["metadata"]["name"] for i in data["items"]] == ["alpha", "beta"]
    assert data["items"][0]["status"]["phase"] == "Running"

    result = devctl("list")
    assert result.exit_code == 0
    lines = result.stdout.strip().splitlines()
    assert lines[0].split() == ["NAME", "FLAVOR", "MODE", "PHASE", "READY", "TIME-LEFT", "AGE"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert rows["alpha"][1:5] == ["gpu-a10g-1", "standalone", "Running", "1/1"]
    assert rows["beta"][1:5] == ["cpu-small", "distributed", "Pending", "0/2"]


def test_list_all_namespaces(devctl, cluster, ns, sim):
    cluster.create_devserver("everywhere")
    result = devctl("list", "-A", namespace=False)
    assert result.exit_code == 0
    lines = result.stdout.strip().splitlines()
    assert lines[0].split()[:2] == ["NAMESPACE", "NAME"]
    assert [ns, "everywhere"] in [line.split()[:2] for line in lines[1:]]
    data = as_json(devctl("list", "--all-namespaces", "-o", "json", namespace=False))
    assert ("everywhere", ns) in {(i["metadata"]["name"], i["metadata"]["namespace"]) for i in data["items"]}


def test_list_empty(devctl):
    result = devctl("list")
    assert result.exit_code == 0 and result.stdout == ""
    assert "No devservers found" in result.stderr
    assert as_json(devctl("list", "-o", "json"))["items"] == []


# -- get ----------------------------------------------------------------------------------------

def test_get_json_is_the_object(devctl, cluster):
    cluster.create_devserver("g1")
    _running(cluster, "g1")
    obj = as_json(devctl("get", "g1", "-o", "json"))
    assert obj["kind"] == "DevServer" and obj["metadata"]["name"] == "g1"
    assert {c["type"]: c["status"] for c in obj["status"]["conditions"]}["Ready"] == "True"
    import yaml

    result = devctl("get", "g1", "-o", "yaml")
    assert yaml.safe_load(result.stdout)["metadata"]["name"] == "g1"


def test_get_table_shows_conditions_ssh_and_events(devctl, cluster, ns):
    cluster.create_devserver("g2")
    cluster.set_status("g2", phase="Provisioning", conditions=PROVISIONING, replicas=1, readyReplicas=0)
    cluster.create_event("g2", "Provisioning", "created StatefulSet g2", when="2026-01-01T00:00:02Z")
    cluster.create_event("g2", "FlavorResolved", "flavor gpu-a10g-1 applied", when="2026-01-01T00:00:01Z")
    cluster.create_event("other", "Unrelated", "must not show")
    result = devctl("get", "g2")
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "Phase:" in out and "Provisioning" in out
    assert "Conditions:" in out and "PodsNotReady" in out and "0/1 pods ready" in out
    assert f"devctl ssh g2 -n {ns}" in out
    events = out[out.index("Events:"):]
    assert "FlavorResolved" in events and "created StatefulSet g2" in events
    assert events.index("FlavorResolved") < events.index("created StatefulSet g2")  # sorted by time
    assert "Unrelated" not in out


def test_get_table_shows_the_warnings(devctl, cluster):
    cluster.create_devserver("gw")
    warning = "spec.distributed is ignored: spec.mode is standalone. Remove the block."
    cluster.set_status("gw", phase="Running", warnings=[warning])
    out = devctl("get", "gw").stdout
    assert out[out.index("Warnings:"):].splitlines()[1].strip() == warning
    cluster.set_status("gw", warnings=None)
    assert "Warnings:" not in devctl("get", "gw").stdout


def test_get_table_shows_the_time_to_ready_by_phase(devctl, cluster):
    cluster.create_devserver("gt")
    cluster.set_status("gt", phase="Provisioning", startup={"startedAt": "2026-01-01T00:00:00Z", "complete": False,
                                                            "phases": {"queued": 10, "scheduled": 2}})
    assert _line(devctl("get", "gt").stdout, "Time to Ready:") == "starting (queued 10s, scheduled 2s so far)"
    cluster.set_status("gt", phase="Running", startup={
        "startedAt": "2026-01-01T00:00:00Z", "readyAt": "2026-01-01T00:00:35Z", "totalSeconds": 35, "complete": True,
        "phases": {"queued": 10, "scheduled": 2, "volumes": 4, "containers": 14, "ready": 5}})
    assert _line(devctl("get", "gt").stdout, "Time to Ready:") == \
        "35s (queued 10s, scheduled 2s, volumes 4s, containers 14s, ready 5s)"


def _line(out, label):
    return next(line[len(label):].strip() for line in out.splitlines() if line.startswith(label))


def test_get_events_last_ten(devctl, cluster):
    cluster.create_devserver("g3")
    for i in range(12):
        cluster.create_event("g3", f"Step{i:02d}", f"step {i}", when=f"2026-01-01T00:00:{i:02d}Z")
    out = devctl("get", "g3").stdout
    events = out[out.index("Events:"):]
    assert "Step00" not in events and "Step01" not in events
    assert "Step02" in events and "Step11" in events


def test_get_not_found_is_one_line_exit_1(devctl, ns):
    line = _one_line_error(devctl("get", "ghost"))
    assert line == f'error: devserver "ghost" not found in namespace "{ns}"'
    _one_line_error(devctl("get", "ghost", "-o", "json"))


def test_unreachable_api_is_one_line(tmp_path):
    from devctl_helpers import invoke
    import yaml

    kc = tmp_path / "kc"
    kc.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:9"}}],
        "users": [{"name": "u", "user": {}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    result = invoke(["--kubeconfig", kc, "-n", "x", "get", "y"])
    line = _one_line_error(result)
    assert "cannot reach the Kubernetes API" in line


# -- delete -------------------------------------------------------------------------------------

def test_delete_keeps_home_volumes(devctl, cluster, ns):
    cluster.create_devserver("d1")
    cluster.create_pvc("home-d1-0", "100Gi")
    cluster.create_pvc("scratch", "5Gi", labels={"torchdev.io/devserver": "d1"})
    cluster.create_pvc("home-d10-0", "1Gi")  # another server's volume
    result = devctl("delete", "d1")
    assert result.exit_code == 0, result.stderr
    assert cluster.devserver_names() == []
    assert cluster.pvc_names() == ["home-d1-0", "home-d10-0", "scratch"]
    assert "kept home volume home-d1-0 (100Gi); delete it with devctl delete d1" in result.stdout
    assert "scratch (5Gi)" in result.stdout and "home-d10-0" not in result.stdout


def test_delete_purge_without_yes_refuses_without_tty(devctl, cluster):
    cluster.create_devserver("d2")
    cluster.create_pvc("home-d2-0")
    result = devctl("delete", "d2", "--purge", input="y\n")
    line = _one_line_error(result)
    assert "--yes" in line and "home-d2-0" in line
    # nothing was deleted
    assert cluster.devserver_names() == ["d2"]
    assert cluster.pvc_names() == ["home-d2-0"]


def test_delete_purge_yes_deletes_volumes(devctl, cluster):
    cluster.create_devserver("d3")
    cluster.create_pvc("home-d3-0")
    cluster.create_pvc("home-other-0")
    result = devctl("delete", "d3", "--purge", "--yes", "--wait", "--timeout", "20")
    assert result.exit_code == 0, result.stderr
    assert cluster.devserver_names() == []
    assert cluster.pvc_names() == ["home-other-0"]


def test_delete_purge_after_server_is_gone(devctl, cluster):
    cluster.create_pvc("home-d4-0")
    result = devctl("delete", "d4", "--purge", "-y")
    assert result.exit_code == 0, result.stderr
    assert cluster.pvc_names() == []


def test_delete_not_found(devctl, ns):
    line = _one_line_error(devctl("delete", "ghost"))
    assert line == f'error: devserver "ghost" not found in namespace "{ns}"'


def test_delete_wait(devctl, cluster):
    cluster.create_devserver("d5")
    result = devctl("delete", "d5", "--wait", "--timeout", "20")
    assert result.exit_code == 0, result.stderr
    assert "deleted" in result.stderr


# -- flavors ------------------------------------------------------------------------------------

def test_flavors_table(devctl):
    result = devctl("flavors")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[0].split() == ["NAME", "GPU-TYPE", "GPUS", "CPU", "MEMORY", "PRICE/H", "DESCRIPTION"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert rows["gpu-a10g-1"][1:6] == ["nvidia-a10g", "1", "7", "28Gi", "$1.2120"]
    assert rows["cpu-small"][1:3] == ["-", "0"]
    assert rows["gpu-h100-8"][2] == "8"


def test_flavors_json(devctl):
    data = as_json(devctl("flavors", "-o", "json"))
    names = [i["metadata"]["name"] for i in data["items"]]
    assert names == sorted(names) and {"cpu-small", "gpu-a10g-1", "gpu-h100-8"} <= set(names)


@pytest.mark.parametrize("answer,deleted", [("y\n", True), ("n\n", False)])
def test_delete_purge_asks_on_a_terminal(devctl, cluster, monkeypatch, answer, deleted):
    from devctl import devserver as devserver_module

    monkeypatch.setattr(devserver_module, "_stdin_is_tty", lambda: True)
    cluster.create_devserver("d6")
    cluster.create_pvc("home-d6-0", "50Gi")
    result = devctl("delete", "d6", "--purge", input=answer)
    assert "home-d6-0 (50Gi)" in result.stderr  # the prompt names what is destroyed
    if deleted:
        assert result.exit_code == 0, result.stderr
        assert cluster.devserver_names() == [] and cluster.pvc_names() == []
    else:
        assert result.exit_code == 1
        assert cluster.devserver_names() == ["d6"] and cluster.pvc_names() == ["home-d6-0"]


def test_delete_retention_delete_is_reported(devctl, cluster):
    cluster.create_devserver("d7", homeRetentionPolicy="Delete")
    cluster.create_pvc("home-d7-0")
    result = devctl("delete", "d7")
    assert result.exit_code == 0
    assert "homeRetentionPolicy: Delete" in result.stdout and "kept" not in result.stdout


def test_get_distributed_summary(devctl, cluster):
    cluster.create_devserver("gd", mode="distributed",
                             distributed={"worldSize": 8, "nprocsPerNode": 4, "backend": "gloo"})
    out = devctl("get", "gd").stdout
    assert "worldSize 8" in out and "backend gloo" in out
    assert "0/2 ready" in out


def test_get_includes_events_k8s_io_v1_once(devctl, cluster, ns):
    cluster.create_devserver("g4")
    cluster.events.create_namespaced_event(ns, {
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": "g4.new-style", "namespace": ns},
        "eventTime": "2026-01-01T00:00:05.000000Z", "reportingController": "torchdev.io/operator",
        "reportingInstance": "operator-0", "action": "Reconcile", "reason": "NewStyle",
        "note": "from events.k8s.io/v1", "type": "Normal",
        "regarding": {"apiVersion": "torchdev.io/v1alpha1", "kind": "DevServer", "name": "g4", "namespace": ns},
    })
    cluster.create_event("g4", "OldStyle", "from core/v1", when="2026-01-01T00:00:01Z")
    out = devctl("get", "g4").stdout
    events = out[out.index("Events:"):]
    assert events.count("NewStyle") == 1 and events.count("OldStyle") == 1
    assert events.index("OldStyle") < events.index("NewStyle")


def test_get_reads_an_event_without_event_time(devctl, cluster, ns, sim):
    """What kube-apiserver serves through events.k8s.io/v1 for an Event written through core/v1
    (kube-controller-manager's FailedCreate, the operator's): eventTime null, the times in the
    deprecated fields. The client's EventsV1Event model refuses a null eventTime; `devctl get`
    crashed on it on a real cluster (make demo CLUSTER=real found it)."""
    cluster.create_devserver("g5")
    # kubesim keeps the two APIs' Events apart (kubesim/DESIGN.md) and, like kube-apiserver,
    # refuses an events.k8s.io/v1 create without eventTime: this one goes in past validation
    sim.api.validate = False
    try:
        sim.call(sim.api.create, "events.events.k8s.io", {
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "g5.core-written", "namespace": ns},
            "reason": "CoreWritten", "note": "written through core/v1", "type": "Warning",
            "deprecatedFirstTimestamp": "2026-01-01T00:00:02Z", "deprecatedLastTimestamp": "2026-01-01T00:00:03Z",
            "deprecatedCount": 4, "deprecatedSource": {"component": "statefulset-controller"},
            "regarding": {"apiVersion": "torchdev.io/v1alpha1", "kind": "DevServer", "name": "g5", "namespace": ns}},
            ns)
    finally:
        sim.api.validate = True
    raw = cluster.events.list_namespaced_event(ns, _preload_content=False)
    assert [e.get("eventTime") for e in json.loads(raw.data)["items"]] == [None]  # what devctl reads
    result = devctl("get", "g5")
    assert result.exit_code == 0, result.stderr
    events = result.stdout[result.stdout.index("Events:"):]
    assert "CoreWritten" in events and "written through core/v1" in events


def test_create_wait_survives_transient_api_errors(devctl, cluster, sim):
    def operator():
        deadline = time.monotonic() + 10
        while "flaky" not in cluster.devserver_names() and time.monotonic() < deadline:
            time.sleep(0.02)
        sim.faults.add(verb="get", resource="devservers.torchdev.io", count=2, code=500)
        time.sleep(0.1)
        _running(cluster, "flaky")

    thread = threading.Thread(target=operator, daemon=True)
    thread.start()
    try:
        result = devctl("create", "flaky", "--flavor", "cpu-small", "--owner", OWNER, "--wait",
                        "--timeout", "20", "-o", "json")
    finally:
        thread.join(5)
        sim.faults.clear()
    assert as_json(result)["status"]["phase"] == "Running"
    assert "retrying after" in result.stderr
