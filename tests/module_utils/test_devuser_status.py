"""Table-driven tests of plugins/module_utils/devuser_status.py (a DevUser's phase, Ready and
Degraded and their reasons)."""

import pytest

from ansible_collections.torchdev.operator.plugins.module_utils import devuser_status

NAMES = {"namespace": "dev-jane", "sharedClaim": "jane-shared-efs", "localQueue": "torchdev",
         "clusterQueue": "torchdev-jane"}
BAD = {"reason": "InvalidSpec", "message": "bad"}
NOT_OWNED = {"reason": "NamespaceNotOwned", "message": "dev-jane belongs to someone else"}

CASES = [
    # spec, kueue, problem, usage_records, expected fields, (Ready reason, Degraded reason), Ready message part
    ({}, False, None, None, {"phase": "Active", "kueue": False, "queueName": None, "clusterQueue": None},
     ("UserReady", "AsExpected"), "Kueue not found: the ResourceQuota caps GPUs"),
    ({}, True, None, None, {"phase": "Active", "kueue": True, "queueName": "torchdev", "clusterQueue": "torchdev-jane"},
     ("UserReady", "AsExpected"), "LocalQueue torchdev -> ClusterQueue torchdev-jane"),
    ({"queue": {"clusterQueue": "team"}}, True, None, None, {"clusterQueue": "team"},
     ("UserReady", "AsExpected"), "-> ClusterQueue team"),
    ({"queue": {"clusterQueue": "team"}}, False, None, None, {"clusterQueue": None, "queueName": None},
     ("UserReady", "AsExpected"), "namespace dev-jane is ready"),
    ({}, False, None, {"oldestEndedAt": "2026-01-01T00:00:00Z"},
     {"usageRecords": {"oldestEndedAt": "2026-01-01T00:00:00Z"}}, ("UserReady", "AsExpected"), "ready"),
    ({}, False, BAD, None, {"phase": "Failed"}, ("ReconcileFailed", "InvalidSpec"), "bad"),
    ({}, True, NOT_OWNED, None, {"phase": "Failed", "queueName": "torchdev"}, ("ReconcileFailed", "NamespaceNotOwned"),
     "belongs to someone else"),
]


@pytest.mark.parametrize("spec,kueue,problem,records,expect,reasons,message", CASES)
def test_status(spec, kueue, problem, records, expect, reasons, message):
    st = devuser_status.devuser_status("jane", spec, kueue, 4, problem, NAMES, records)
    assert {k: st[k] for k in expect} == expect
    assert st["namespace"] == "dev-jane" and st["sharedVolumeClaimName"] == "jane-shared-efs"
    assert st["observedGeneration"] == 4 and ("usageRecords" in st) == (records is not None)
    conds = {c["type"]: c for c in st["conditions"]}
    assert (conds["Ready"]["reason"], conds["Degraded"]["reason"]) == reasons
    assert conds["Ready"]["status"] == ("False" if problem else "True")
    assert conds["Degraded"]["status"] == ("True" if problem else "False")
    assert message in conds["Ready"]["message"]
    assert all(c["observedGeneration"] == 4 for c in st["conditions"])
    if not problem:
        assert conds["Degraded"]["message"] == ""


QUOTA = {"metadata": {"name": "torchdev-quota"}, "spec": {"hard": {"requests.nvidia.com/gpu": "4", "count/devservers.torchdev.io": "20"}}}


@pytest.mark.parametrize("name,observed,desired,pending", [
    ("not created yet", None, QUOTA, "torchdev-quota"),
    ("created, not counted yet (no status)", {"spec": QUOTA["spec"]}, QUOTA, "count/devservers.torchdev.io"),
    ("counted", {"status": {"hard": {"requests.nvidia.com/gpu": "4", "count/devservers.torchdev.io": "20"}}}, QUOTA, None),
    ("counted, normalised by the API server", {"status": {"hard": {"requests.nvidia.com/gpu": "4000m",
                                                                   "count/devservers.torchdev.io": "20"}}}, QUOTA, None),
    ("counted for the old spec (GPUs changed)", {"status": {"hard": {"requests.nvidia.com/gpu": "2",
                                                                     "count/devservers.torchdev.io": "20"}}},
     QUOTA, "requests.nvidia.com/gpu"),
    ("no quota rendered", None, None, None),
    ("hostile: a string status", {"status": "x"}, QUOTA, "torchdev-quota"),
    ("hostile: hard not a map", {"status": {"hard": ["x"]}}, QUOTA, "torchdev-quota"),
])
def test_quota_pending(name, observed, desired, pending):
    from ansible_collections.torchdev.operator.plugins.module_utils.devuser_status import quota_pending

    got = quota_pending(observed, desired)
    assert (got is None) == (pending is None), (name, got)
    assert pending is None or pending in got, (name, got)


def test_a_pending_quota_keeps_the_user_pending_not_ready():
    st = devuser_status.devuser_status("alice", {}, False, 1, names={"namespace": "dev-alice"}, pending="waiting for the quota")
    ready = [c for c in st["conditions"] if c["type"] == "Ready"][0]
    assert st["phase"] == "Pending" and ready["status"] == "False" and ready["reason"] == "QuotaPending"
    assert ready["message"] == "waiting for the quota"
    assert devuser_status.devuser_status("alice", {}, False, 1, names={"namespace": "dev-alice"})["phase"] == "Active"
