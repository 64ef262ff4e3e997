"""Extra vars (runner.makeParameters), event digestion and status conditions."""
from __future__ import annotations

import copy
import json

import pytest

from torchdev_runtime import status as st
from torchdev_runtime.runner import (AnsibleRunner, RunResult, is_finalizer_run,
                                     make_parameters, object_var_name)
from torchdev_runtime.watches import GVK, Finalizer, Watch

CR = {
    "apiVersion": "torchdev.io/v1alpha1",
    "kind": "DevServer",
    "metadata": {"name": "alice", "namespace": "team-a", "uid": "u-1", "generation": 1},
    "spec": {"gpuCount": 2, "sshPublicKeys": ["k1"], "resources": {"memoryGiB": 16}},
}
DELETED = copy.deepcopy(CR)
DELETED["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
DELETED["metadata"]["finalizers"] = ["torchdev.io/finalizer"]


def watch(**kw) -> Watch:
    w = Watch(gvk=GVK("torchdev.io", "v1alpha1", "DevServer"), role="/roles/devserver")
    for k, v in kw.items():
        setattr(w, k, v)
    return w


FIN = Finalizer(name="torchdev.io/finalizer", vars={"state": "absent", "gpu_count": 0})

CASES = [
    ("create, snake case", watch(vars={"image": "x"}), CR, {
        "gpu_count": 2, "ssh_public_keys": ["k1"], "resources": {"memory_gi_b": 16},
        "ansible_operator_meta": {"name": "alice", "namespace": "team-a"},
        "_torchdev_io_devserver": CR, "_torchdev_io_devserver_spec": CR["spec"], "image": "x"}),
    ("snakeCaseParameters false", watch(snake_case_parameters=False), CR, {
        "gpuCount": 2, "sshPublicKeys": ["k1"], "resources": {"memoryGiB": 16},
        "ansible_operator_meta": {"name": "alice", "namespace": "team-a"},
        "_torchdev_io_devserver": CR, "_torchdev_io_devserver_spec": CR["spec"]}),
    ("finalizer run merges finalizer vars last", watch(vars={"state": "present"}, finalizer=FIN),
     DELETED, {
        "gpu_count": 0, "ssh_public_keys": ["k1"], "resources": {"memory_gi_b": 16},
        "ansible_operator_meta": {"name": "alice", "namespace": "team-a"},
        "_torchdev_io_devserver": DELETED, "_torchdev_io_devserver_spec": DELETED["spec"],
        "state": "absent"}),
    ("finalizer vars not used on a normal run", watch(vars={"state": "present"}, finalizer=FIN),
     CR, {
        "gpu_count": 2, "ssh_public_keys": ["k1"], "resources": {"memory_gi_b": 16},
        "ansible_operator_meta": {"name": "alice", "namespace": "team-a"},
        "_torchdev_io_devserver": CR, "_torchdev_io_devserver_spec": CR["spec"],
        "state": "present"}),
    ("watch vars override spec fields", watch(vars={"gpu_count": 9}), CR, {
        "gpu_count": 9, "ssh_public_keys": ["k1"], "resources": {"memory_gi_b": 16},
        "ansible_operator_meta": {"name": "alice", "namespace": "team-a"},
        "_torchdev_io_devserver": CR, "_torchdev_io_devserver_spec": CR["spec"]}),
]


@pytest.mark.parametrize("name,w,obj,want", CASES, ids=[c[0] for c in CASES])
def test_make_parameters(name, w, obj, want):
    assert make_parameters(w, obj) == want


def test_no_spec_and_cluster_scoped():
    w = Watch(gvk=GVK("cert-manager.k8s.io", "v1", "ClusterThing"), role="/r")
    obj = {"apiVersion": "cert-manager.k8s.io/v1", "kind": "ClusterThing",
           "metadata": {"name": "c"}}
    p = make_parameters(w, obj)
    assert p["ansible_operator_meta"] == {"name": "c", "namespace": ""}
    # escapeAnsibleKey: dots and dashes -> underscores
    assert p["_cert_manager_k8s_io_clusterthing"] == obj
    assert p["_cert_manager_k8s_io_clusterthing_spec"] == {}
    assert object_var_name("", "ConfigMap") == "__configmap"


def test_mark_unsafe():
    w = watch(mark_unsafe=True)
    p = make_parameters(w, CR)
    assert p["ssh_public_keys"] == [{"__ansible_unsafe": "k1"}]
    assert p["gpu_count"] == 2
    assert p["_torchdev_io_devserver"]["metadata"]["name"] == {"__ansible_unsafe": "alice"}
    assert p["ansible_operator_meta"] == {"name": "alice", "namespace": "team-a"}


def _u(s):
    return {"__ansible_unsafe": s}


HOSTILE = {
    "apiVersion": "torchdev.io/v1alpha1", "kind": "DevServer",
    "metadata": {"name": "bob", "namespace": "team-b", "generation": 3, "deletionTimestamp": "2026-01-01T00:00:00Z",
                 "finalizers": ["torchdev.io/finalizer"], "annotations": {"a": "{{ x }}"}},
    "spec": {"image": "{{ lookup('pipe', 'id') }}", "gpuCount": 1, "debug": True, "ratio": 0.5, "none": None,
             "env": [{"name": "A", "value": "{% if 1 %}x{% endif %}"}], "args": ["{# c #}", 7],
             "ncclSettings": {"NCCL_DEBUG": "{{ y }}"}, "empty": [], "emptyMap": {}},
}


def test_mark_unsafe_wraps_what_ansible_operator_wraps():
    """runner.go makeParameters with markUnsafe: every string of the (snake-cased) spec
    parameters, of _<group>_<kind> and of _<group>_<kind>_spec becomes {"__ansible_unsafe": s}
    (lists and maps recursed, map keys and other scalars as they are); ansible_operator_meta,
    the watch's vars and the finalizer's vars (operator-controlled) are not wrapped."""
    w = watch(mark_unsafe=True, vars={"state": "{{ trusted }}", "n": 1},
              finalizer=Finalizer(name="torchdev.io/finalizer", vars={"fin": "{{ trusted }}"}))
    spec_u = {"image": _u("{{ lookup('pipe', 'id') }}"), "gpuCount": 1, "debug": True, "ratio": 0.5, "none": None,
              "env": [{"name": _u("A"), "value": _u("{% if 1 %}x{% endif %}")}], "args": [_u("{# c #}"), 7],
              "ncclSettings": {"NCCL_DEBUG": _u("{{ y }}")}, "empty": [], "emptyMap": {}}
    md = HOSTILE["metadata"]
    assert make_parameters(w, HOSTILE) == {
        "image": spec_u["image"], "gpu_count": 1, "debug": True, "ratio": 0.5, "none": None,
        "env": spec_u["env"], "args": spec_u["args"], "nccl_settings": {"_nccl_debug": _u("{{ y }}")},
        "empty": [], "empty_map": {},
        "ansible_operator_meta": {"name": "bob", "namespace": "team-b"},
        "_torchdev_io_devserver": {
            "apiVersion": _u("torchdev.io/v1alpha1"), "kind": _u("DevServer"),
            "metadata": {"name": _u("bob"), "namespace": _u("team-b"), "generation": 3,
                         "deletionTimestamp": _u(md["deletionTimestamp"]), "finalizers": [_u("torchdev.io/finalizer")],
                         "annotations": {"a": _u("{{ x }}")}},
            "spec": spec_u},
        "_torchdev_io_devserver_spec": spec_u,
        "state": "{{ trusted }}", "n": 1, "fin": "{{ trusted }}"}


def test_mark_unsafe_is_off_by_default_as_in_ansible_operator():
    """A watch without markUnsafe (ansible-operator's default, false) passes strings as they are:
    why every watch of watches.yaml sets it (tests/security/test_template_injection.py)."""
    p = make_parameters(watch(), HOSTILE)
    assert p["image"] == HOSTILE["spec"]["image"]
    assert p["_torchdev_io_devserver"] == HOSTILE


def test_is_finalizer_run():
    w = watch(finalizer=FIN)
    assert is_finalizer_run(w, DELETED)
    assert not is_finalizer_run(w, CR)
    other = copy.deepcopy(DELETED)
    other["metadata"]["finalizers"] = ["someone.else/f"]
    assert not is_finalizer_run(w, other)
    assert not is_finalizer_run(watch(), DELETED)


def _ev(event, **data):
    return {"event": event, "counter": 0, "event_data": data,
            "created": "2026-01-02T03:04:05.123400+00:00"}


STATS = _ev("playbook_on_stats", ok={"localhost": 3}, changed={"localhost": 1},
            failures={}, skipped={"localhost": 2})

DIGEST = [
    ("success", [_ev("runner_on_ok", task="a"), STATS], [], None),
    ("failure message from res.msg",
     [_ev("runner_on_failed", task="boom", res={"msg": "it broke"}), STATS], ["it broke"], None),
    ("default failure message", [_ev("runner_on_failed", task="x", res={}), STATS],
     ["unknown playbook failure"], None),
    ("ignore_errors is not a failure",
     [_ev("runner_on_failed", task="x", ignore_errors=True, res={"msg": "m"}), STATS], [], None),
    # like ansible-operator (eventapi.JobEvent.Rescued looks for event_data.rescued, which
    # ansible-runner only puts on the stats event): a failure rescued by a block still counts
    ("rescued failure still counts (as in Go)",
     [_ev("runner_on_failed", task="x", res={"msg": "boom"}),
      _ev("playbook_on_stats", ok={"localhost": 1}, rescued={"localhost": 1})], ["boom"], None),
    # the stats count a failure whose event never arrived: a failed run (retried), not a
    # success that would skip the role's requeue_after (found by the fault soak, issue 17)
    ("a failure counted by the stats without its event",
     [_ev("runner_on_ok", task="a"), _ev("playbook_on_stats", ok={"localhost": 1}, failures={"localhost": 1})],
     ["1 task(s) failed but no runner_on_failed event was received (2 events)"], None),
    ("an ignored failure is counted apart, not as lost",
     [_ev("runner_on_failed", task="x", ignore_errors=True, res={"msg": "m"}),
      _ev("playbook_on_stats", ok={"localhost": 1}, ignored={"localhost": 1})], [], None),
    ("requeue_after stops the digest",
     [_ev("runner_on_ok", task_action="operator_sdk.util.requeue_after",
          res={"period": "30s"}), _ev("runner_on_failed", res={"msg": "later"}), STATS],
     [], 30.0),
]


@pytest.mark.parametrize("name,events,failures,requeue", DIGEST, ids=[d[0] for d in DIGEST])
def test_digest_events(name, events, failures, requeue):
    r = RunResult(ident="1")
    AnsibleRunner._digest(r, events)
    assert r.failure_messages == failures
    assert r.requeue_after == requeue
    if requeue is None:
        assert r.stats_event is events[-1]
        if events[-1] is STATS:
            assert (r.ok, r.changed, r.failures, r.skipped) == (3, 1, 0, 2)
    else:
        # Go returns before reading the stats event: nothing after the requeue counts as a
        # failure; the stats are kept only for the log line and the reconcile history
        assert r.stats_event is next((e for e in events if e.get("event") == "playbook_on_stats"), None)


AFTER_REQUEUE = [
    ("requeue last", [_ev("runner_on_ok", task="write"), _ev("runner_on_ok", task="again", task_action="requeue_after",
                                                             res={"period": "5s"}), STATS], []),
    ("skipped tasks after it are fine",
     [_ev("runner_on_ok", task="again", task_action="requeue_after", res={"period": "5s"}),
      _ev("runner_on_start", task="event"), _ev("runner_on_skipped", task="event"), STATS], []),
    # ansible-operator removes the run's kubeconfig at the requeue_after event: these ran without one
    ("tasks that ran after it, each named once",
     [_ev("runner_on_ok", task="again", task_action="requeue_after", res={"period": "5s"}),
      _ev("runner_on_ok", task="Write the status"), _ev("runner_item_on_ok", task="Emit an Event"),
      _ev("runner_item_on_ok", task="Emit an Event"), _ev("runner_on_failed", task="Delete", res={}), STATS],
     ["Write the status", "Emit an Event", "Delete"]),
]


@pytest.mark.parametrize("name,events,after", AFTER_REQUEUE, ids=[a[0] for a in AFTER_REQUEUE])
def test_tasks_after_requeue_after_are_named(name, events, after):
    r = RunResult(ident="1")
    AnsibleRunner._digest(r, events)
    assert r.requeue_after == 5.0 and r.tasks_after_requeue == after


# --- status conditions ------------------------------------------------------------------

def conds(status_map):
    return {c["type"]: c for c in status_map["conditions"]}


def test_mark_running_then_done_success():
    obj = {"status": {"phase": "Pending"}}
    s1 = st.mark_running(obj)
    assert s1["phase"] == "Pending"
    c = conds(s1)
    assert c["Running"]["status"] == "True" and c["Running"]["reason"] == "Running"
    assert c["Running"]["message"] == "Running reconciliation"
    s2 = st.mark_done({"status": s1}, STATS, [])
    c = conds(s2)
    assert [x["type"] for x in s2["conditions"]] == ["Running", "Successful", "Failure"]
    assert c["Running"]["reason"] == "Successful"
    assert c["Running"]["message"] == "Awaiting next reconciliation"
    assert c["Running"]["ansibleResult"] == {"ok": 3, "changed": 1, "skipped": 2, "failures": 0,
                                             "completion": "2026-01-02T03:04:05.1234+00:00"}
    assert c["Successful"] == {**c["Successful"], "status": "True", "reason": "Successful",
                               "message": "Last reconciliation succeeded"}
    assert c["Failure"]["status"] == "False" and c["Failure"]["reason"] == ""


def test_mark_done_failure_and_recovery():
    s = st.mark_done({"status": st.mark_running({})}, STATS, ["a failed", "b failed"])
    c = conds(s)
    assert c["Failure"]["status"] == "True" and c["Failure"]["reason"] == "Failed"
    assert c["Failure"]["message"] == "a failed\nb failed"
    assert c["Failure"]["ansibleResult"]["ok"] == 3
    assert c["Running"]["status"] == "False"
    assert c["Successful"]["status"] == "False"
    s = st.mark_done({"status": st.mark_running({"status": s})}, STATS, [])
    c = conds(s)
    assert c["Successful"]["status"] == "True" and c["Failure"]["status"] == "False"


def test_set_condition_keeps_identical_condition_and_transition_time():
    old = {"type": "Successful", "status": "True", "lastTransitionTime": "2020-01-01T00:00:00Z",
           "reason": "Successful", "message": "old message", "extra": "dropped"}
    s = st.Status({"conditions": [old]})
    s.set(st.new_condition("Successful", "True", None, "Successful", "new message"))
    [c] = s.to_map()["conditions"]
    assert c["message"] == "old message"  # same status+reason: untouched (not Failure)
    assert "extra" not in c               # re-serialised with the Go struct's fields
    s.set(st.new_condition("Successful", "True", None, "Other", "m2"))
    [c] = s.to_map()["conditions"]
    assert c["message"] == "m2" and c["lastTransitionTime"] == "2020-01-01T00:00:00Z"


def test_mark_error():
    s = st.mark_error({"status": st.mark_running({})}, "Unable to run reconciliation")
    c = conds(s)
    assert c["Failure"]["message"] == "Unable to run reconciliation"
    assert c["Running"]["status"] == "False"


def test_unread_events_come_from_the_partial_files_left_behind(tmp_path):
    """An event whose stdout marker ansible-runner could not decode never reached the handler,
    but its partial file stayed (the runner removes the file of each event it hands over)."""
    from torchdev_runtime.runner import unread_events

    lost = {"event": "runner_on_failed", "uuid": "u-2", "counter": 7, "event_data": {"task": "Write the status"}}
    (tmp_path / "u-2-partial.json").write_text(json.dumps(lost))
    received = {"event": "runner_on_ok", "uuid": "u-1", "counter": 6, "event_data": {}}
    (tmp_path / "u-1-partial.json").write_text(json.dumps(received))  # handed over, file still there
    (tmp_path / "u-3-partial.json.tmp").write_text("{")  # being written: not an event file
    (tmp_path / "u-4-partial.json").write_text("{not json")
    assert unread_events(str(tmp_path), [received]) == [lost]
    assert unread_events(str(tmp_path / "missing"), []) == []
    r = RunResult(ident="1")
    AnsibleRunner._digest(r, [received, lost, _ev("playbook_on_stats", failures={"localhost": 1})])
    assert r.failed_tasks == [("Write the status", "unknown playbook failure")]
