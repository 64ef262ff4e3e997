"""The exporter's label values are bounded (issue 25.7): never free text a user or a pod wrote.

A DevServer's ``spec.owner`` is the user's text, a TrainingJob's status can be written by its
trainer token, an EphemeralAccelerationJob's reasons come from its pod: each label takes a
value from a documented set (reasons, phases, states; else ``Other``) or from the DevUser list
(``user``; else ``unknown``), at most LABEL_MAX characters.  And what the store keeps for an
object goes with it: creating and deleting N objects, whatever their text, leaves as many series
and as much state as creating and deleting one.  Pure: the Store, read back through
prometheus_client's text format and parser.
"""
import pytest
from test_metrics import FLAVOR, JANE, samples

from torchdev_exporter.metrics import LABEL_MAX, Store, bounded

HOSTILE = ["attacker-%d@evil.example" % 0, "x" * 5000, "{{ lookup('pipe','id') }}", "", None, 7, ["a"], {"b": 1},
           "Deadline\nExceeded", "\u00e9\u00e9", 'q"uote']


def store_with_jane():
    store = Store(clock=lambda: 0.0)
    store.replace_flavors([FLAVOR])
    store.replace_devusers([JANE])
    store.replace([])
    store.replace_trainingjobs([])
    store.replace_eajs([])
    return store


def server(name, owner, uid, phase="Running", end_reason=None):
    res = {"startedAt": "2026-01-01T00:00:00Z", **({"endReason": end_reason} if end_reason else {})}
    return {"metadata": {"name": name, "namespace": "dev-jane", "uid": uid},
            "spec": {"owner": owner, "flavor": "gpu-2"},
            "status": {"phase": phase, "replicas": 1, "reservation": res}}


def job(name, uid, state, reason=None, result=None):
    st = {"state": state}
    if state == "Failed":
        st["failureReason"] = reason
    if state == "Completed":
        st["conditions"] = [{"type": "Succeeded", "status": "True", "reason": result}]
    return {"metadata": {"name": name, "namespace": "ml", "uid": uid}, "status": st}


def eaj(name, uid, phase, reason):
    return {"metadata": {"name": name, "namespace": "ml", "uid": uid},
            "status": {"phase": phase, "conditions": [{"type": phase, "status": "True", "reason": reason}]}}


def labels_of(got, prefix="torchdev_"):
    return {(name, k): v for (name, labels) in got for k, v in labels if name.startswith(prefix)}


@pytest.mark.parametrize("value,allowed,other,expected", [
    ("jane", None, "Other", "jane"),
    ("x" * 5000, None, "Other", "x" * LABEL_MAX),
    (None, None, "Other", ""),
    (7, ("7",), "Other", "7"),
    ({"a": 1}, ("Expired",), "Other", "Other"),
    ("Expired", ("Expired",), "Other", "Expired"),
    ("expired", ("Expired",), "Other", "Other"),
    ("eve@x.io", {"jane@example.com"}, "unknown", "unknown"),
])
def test_bounded(value, allowed, other, expected):
    assert bounded(value, allowed, other) == expected


@pytest.mark.parametrize("owner,user", [("jane@example.com", "jane@example.com")]
                         + [(o, "unknown") for o in HOSTILE])
def test_user_is_a_devuser_email_or_unknown(owner, user):
    store = store_with_jane()
    store.apply(server("a", owner, "u1"))
    store.apply(server("a", owner, "u1", phase="Stopped", end_reason="Stopped"))
    users = {v for (name, k), v in labels_of(samples(store)).items() if k == "user"}
    assert users == {user}


def test_a_deleted_devuser_is_no_user_label_any_more():
    store = store_with_jane()
    store.delete_devuser(JANE)
    store.apply(server("a", "jane@example.com", "u1"))
    assert {v for (_, k), v in labels_of(samples(store)).items() if k == "user"} == {"unknown"}


@pytest.mark.parametrize("hostile", HOSTILE)
def test_reasons_phases_and_states_come_from_the_documented_sets(hostile):
    store = store_with_jane()
    store.apply(server("a", "jane@example.com", "u1", phase=hostile))
    store.apply(server("a", "jane@example.com", "u1", phase=hostile, end_reason=hostile))
    store.apply_trainingjob(job("f", "t1", "Running"))
    store.apply_trainingjob(job("f", "t1", "Failed", reason=hostile))
    store.apply_trainingjob(job("c", "t2", "Running"))
    store.apply_trainingjob(job("c", "t2", "Completed", result=hostile))
    store.apply_trainingjob(job("s", "t3", hostile))
    store.apply_eaj(eaj("e", "e1", "Failed", hostile))
    store.apply_eaj(eaj("p", "e2", hostile, "InferenceSucceeded"))
    got = labels_of(samples(store))
    by_label = {}
    for (name, k), v in got.items():
        by_label.setdefault(k, set()).add(v)
    empty = hostile in ("", None)  # no value: the documented default (Failed, JobComplete, Pending)
    assert by_label["reason"] <= ({"Failed"} if empty else {"Other"}) | {"Other"}
    assert by_label["result"] == ({"JobComplete"} if empty else {"Other"})
    assert ("Pending" if empty else "Other") in by_label["phase"] & by_label["state"]
    texts = [h for h in HOSTILE if isinstance(h, str) and h not in ("", "Other")]
    assert not [v for values in by_label.values() for v in values if v in texts]


def test_documented_values_pass_through():
    store = store_with_jane()
    store.apply(server("a", "jane@example.com", "u1"))
    store.apply(server("a", "jane@example.com", "u1", end_reason="Expired"))
    store.apply_trainingjob(job("f", "t1", "Running"))
    store.apply_trainingjob(job("f", "t1", "Failed", reason="DeadlineExceeded"))
    store.apply_eaj(eaj("e", "e1", "Failed", "UnknownModel"))
    got = samples(store)
    assert got[("torchdev_reservations_ended_total",
                (("flavor", "gpu-2"), ("reason", "Expired"), ("user", "jane@example.com")))] == 1
    assert got[("torchdev_trainingjob_failed_total", (("namespace", "ml"), ("reason", "DeadlineExceeded")))] == 1
    assert got[("torchdev_ephemeralaccelerationjob_finished_total",
                (("namespace", "ml"), ("phase", "Failed"), ("reason", "UnknownModel")))] == 1


def _churn(store, n):
    """n objects of each kind, each with text of its own, created, run, ended and deleted."""
    for i in range(n):
        owner, reason = "attacker-%d@evil.example" % i, "Reason%d" % i
        ds = server("s%d" % i, owner, "u%d" % i)
        store.apply(ds)
        store.apply(server("s%d" % i, owner, "u%d" % i, phase="Stopped", end_reason=reason))
        store.delete(ds)
        store.apply_trainingjob(job("t%d" % i, "t%d" % i, "Running"))
        store.apply_trainingjob(job("t%d" % i, "t%d" % i, "Failed", reason=reason))
        store.delete_trainingjob(job("t%d" % i, "t%d" % i, "Failed", reason=reason))
        store.apply_eaj(eaj("e%d" % i, "e%d" % i, "Failed", reason))
        store.delete_eaj(eaj("e%d" % i, "e%d" % i, "Failed", reason))


def _state(store):
    return {name: len(getattr(store, name)) for name in (
        "devservers", "trainingjobs", "eajs", "_marks", "_running_since", "_tj_seen", "_eaj_final")}


def test_series_and_state_do_not_grow_with_the_objects_created_and_deleted():
    one, many = store_with_jane(), store_with_jane()
    _churn(one, 1)
    _churn(many, 300)
    series = {k for k in samples(one)}
    assert {k for k in samples(many)} == series, "series of 300 deleted objects stay"
    assert _state(many) == _state(one) == dict.fromkeys(_state(one), 0)
    assert len(series) < 40
