"""`kubectl get` tables: kubectl asks for meta.k8s.io Tables and prints the columns it gets."""
from __future__ import annotations

import pytest

from kubesim.registry import BUILTINS, Registry
from kubesim.tables import table_for

REG = Registry()
POD = {"metadata": {"name": "p", "creationTimestamp": "2026-01-01T00:00:00Z"},
       "spec": {"nodeName": "n1", "containers": [{"name": "a"}, {"name": "b"}]},
       "status": {"phase": "Running", "podIP": "10.0.0.1",
                  "containerStatuses": [{"name": "a", "ready": True, "restartCount": 2, "state": {"running": {}}},
                                        {"name": "b", "ready": False, "restartCount": 1,
                                         "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}}


def _cells(kind_key, obj):
    table = table_for(REG.get(kind_key), [obj], {})
    names = [c["name"] for c in table["columnDefinitions"]]
    return dict(zip(names, table["rows"][0]["cells"]))


@pytest.mark.parametrize("key,obj,expected", [
    ("pods", POD, {"Name": "p", "Ready": "1/2", "Status": "CrashLoopBackOff", "Restarts": 3,
                   "IP": "10.0.0.1", "Node": "n1"}),
    ("pods", {"metadata": {"name": "q"}, "spec": {"containers": [{"name": "a"}]},
              "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                             "reason": "SchedulingGated"}]}},
     {"Ready": "0/1", "Status": "SchedulingGated", "Restarts": 0}),
    ("statefulsets.apps", {"metadata": {"name": "s"}, "spec": {"replicas": 4}, "status": {"readyReplicas": 3}},
     {"Ready": "3/4"}),
    ("services", {"metadata": {"name": "svc"}, "spec": {"type": "NodePort", "clusterIP": "10.96.0.9",
                                                        "ports": [{"port": 22, "nodePort": 30001, "protocol": "TCP"}]}},
     {"Type": "NodePort", "Cluster-IP": "10.96.0.9", "External-IP": "<none>", "Port(s)": "22:30001/TCP"}),
    ("persistentvolumeclaims", {"metadata": {"name": "home-x-0"}, "spec": {"volumeName": "pv-1",
                                                                           "storageClassName": "gp3"},
                                "status": {"phase": "Bound", "capacity": {"storage": "100Gi"},
                                           "accessModes": ["ReadWriteOnce"]}},
     {"Status": "Bound", "Volume": "pv-1", "Capacity": "100Gi", "Access Modes": "RWO", "StorageClass": "gp3"}),
])
def test_builtin_columns(key, obj, expected):
    cells = _cells(key, obj)
    assert {k: cells[k] for k in expected} == expected
    assert "Age" in cells


def test_age_precedes_wide_columns():
    table = table_for(REG.get("pods"), [POD], {})
    names = [c["name"] for c in table["columnDefinitions"]]
    assert names.index("Age") < names.index("IP")
    assert [c["priority"] for c in table["columnDefinitions"] if c["name"] in ("IP", "Node")] == [1, 1]


def test_every_builtin_kind_gets_a_table():
    for rt in BUILTINS:
        table = table_for(rt, [{"metadata": {"name": "x"}}], {})
        assert table["rows"][0]["cells"][0] == "x"
