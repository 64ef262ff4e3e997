"""The users' ClusterRole (config/rbac/devserver_user_role.yaml) and what the operator needs to
bind it, as `make deploy` renders them (kubectl kustomize config/default)."""
from __future__ import annotations

import subprocess

import pytest

from _support import tool
import yaml

from _devuser_helpers import ROOT

DEFAULTS = yaml.safe_load((ROOT / "roles" / "devuser" / "defaults" / "main.yml").read_text())


@pytest.fixture(scope="module")
def deployed():
    out = subprocess.run([tool("kubectl"), "kustomize", str(ROOT / "config" / "default")], check=True, capture_output=True,
                         text=True, timeout=120).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def _one(docs, kind, name):
    (obj,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return obj


def _allows(rules, group, resource, verb, name=None):
    return any(group in r.get("apiGroups", []) and resource in r.get("resources", []) and verb in r["verbs"]
               and (not r.get("resourceNames") or name in r["resourceNames"]) for r in rules)


def test_the_role_binds_the_deployed_cluster_role(deployed):
    name = DEFAULTS["devuser_clusterrole"]
    _one(deployed, "ClusterRole", name)  # exists under the name the role binds
    manager = _one(deployed, "ClusterRole", "torchdev-manager-role")["rules"]
    assert _allows(manager, "rbac.authorization.k8s.io", "clusterroles", "bind", name)
    assert not _allows(manager, "rbac.authorization.k8s.io", "clusterroles", "bind", "cluster-admin")
    # the operator binds the users' role without holding what it grants
    assert not _allows(manager, "", "pods/exec", "create")
    assert not _allows(manager, "", "pods/portforward", "create")


def test_user_role(deployed):
    rules = _one(deployed, "ClusterRole", DEFAULTS["devuser_clusterrole"])["rules"]
    for kind in ("devservers", "trainingjobs", "ephemeralaccelerationjobs"):
        for verb in ("get", "list", "watch", "create", "update", "patch", "delete"):
            assert _allows(rules, "torchdev.io", kind, verb), (kind, verb)
    for res in ("pods", "pods/log", "events"):
        assert _allows(rules, "", res, "get") and _allows(rules, "", res, "list")
    for res in ("pods/log", "events"):
        assert not _allows(rules, "", res, "create") and not _allows(rules, "", res, "delete")
    # devctl infer's helper pods (upload, download, copy-file, debug) and the job's volume
    assert _allows(rules, "", "pods", "create") and _allows(rules, "", "pods", "delete")
    assert not _allows(rules, "", "pods", "patch") and not _allows(rules, "", "pods", "update")
    assert _allows(rules, "", "persistentvolumeclaims", "create") and _allows(rules, "", "persistentvolumeclaims", "patch")
    for res in ("pods/exec", "pods/portforward"):
        assert _allows(rules, "", res, "create") and _allows(rules, "", res, "get")
    assert _allows(rules, "kueue.x-k8s.io", "localqueues", "list") and _allows(rules, "kueue.x-k8s.io", "workloads", "get")
    assert not _allows(rules, "kueue.x-k8s.io", "localqueues", "create")
    # usage records: read, never changed or deleted by their user
    for verb in ("get", "list", "watch"):
        assert _allows(rules, "torchdev.io", "usagerecords", verb)
    for verb in ("create", "update", "patch", "delete", "deletecollection"):
        assert not _allows(rules, "torchdev.io", "usagerecords", verb), verb
    # nothing that writes outside a namespace, nothing on RBAC or Secrets, no wildcards
    for rule in rules:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"] and "*" not in rule.get("apiGroups", [])
        assert "rbac.authorization.k8s.io" not in rule["apiGroups"]
        assert "secrets" not in rule["resources"]
        if "namespaces" in rule["resources"]:
            assert rule["verbs"] == ["get"]  # through the RoleBinding: their own namespace only


def test_flavors_are_readable_by_every_authenticated_user(deployed):
    reader = _one(deployed, "ClusterRole", "torchdev-devserver-flavor-reader")
    assert reader["rules"] == [{"apiGroups": ["torchdev.io"], "resources": ["devserverflavors"],
                                "verbs": ["get", "list", "watch"]}]
    binding = _one(deployed, "ClusterRoleBinding", "torchdev-devserver-flavor-reader")
    assert binding["roleRef"]["name"] == "torchdev-devserver-flavor-reader"
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                                    "name": "system:authenticated"}]
