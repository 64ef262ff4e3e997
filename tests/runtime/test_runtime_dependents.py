"""The dependents each watch watches from the start (torchdev_runtime/dependents.py, issue 27.2):
what ansible-operator's proxy learns from the role's creates and reads, read from the role's
templates, less the watch's blacklist; the CLI (`make run`, `make demo`) gets them too."""
from __future__ import annotations

import pytest

from torchdev_runtime.__main__ import build_parser
from torchdev_runtime.dependents import derived_dependents, role_kinds, template_kinds, watch_dependents
from torchdev_runtime.runtime import Runtime, collections_environ
from torchdev_runtime.watches import GVK, Watch, load_watches

from _support import ROOT

CM = GVK("", "v1", "ConfigMap")
STS = GVK("apps", "v1", "StatefulSet")
EVENT = GVK("", "v1", "Event")
OWNER = GVK("torchdev.io", "v1alpha1", "DevServer")


@pytest.mark.parametrize("text,kinds", [
    ("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n", [CM]),
    ("kind: StatefulSet\napiVersion: apps/v1\n", [STS]),                       # any order
    ("apiVersion: 'v1'\nkind: \"ConfigMap\"  # quoted, a comment\n", [CM]),
    ("apiVersion: v1\nkind: ConfigMap\n---\napiVersion: apps/v1\nkind: StatefulSet\n", [CM, STS]),
    ("apiVersion: v1\nkind: ConfigMap\n---\napiVersion: v1\nkind: ConfigMap\n", [CM]),  # once
    ("apiVersion: {{ torchdev.api_version }}\nkind: UsageRecord\n", []),        # templated: skipped
    ("apiVersion: v1\nkind: {{ kind }}\n", []),
    ("{% if x %}\napiVersion: v1\nkind: ConfigMap\n{% endif %}\n", [CM]),
    ("spec:\n  template:\n    apiVersion: v1\n    kind: Pod\n", []),           # nested: not top level
    ("apiVersion: v1\n", []),                                                 # no kind
    ("{% include 'configmap/a.yaml.j2' %}\n", []),
    ("", []),
    (None, []),                                                               # never raises
    (b"apiVersion: v1", []),
])
def test_template_kinds(text, kinds):
    assert template_kinds(text) == kinds


@pytest.mark.parametrize("watch,kinds,deps", [
    (Watch(OWNER), [CM, STS], [CM, STS]),
    (Watch(OWNER, blacklist=[CM]), [CM, STS], [STS]),
    (Watch(OWNER, blacklist=[EVENT]), [EVENT, CM], [CM]),
    (Watch(OWNER), [OWNER, CM], [CM]),                                        # never itself
    (Watch(OWNER, watch_dependent_resources=False), [CM, STS], []),
    (Watch(OWNER), [], []),
])
def test_watch_dependents(watch, kinds, deps):
    assert watch_dependents(watch, kinds) == deps


def test_role_kinds_of_a_missing_or_templateless_role(tmp_path):
    assert role_kinds(str(tmp_path / "nope")) == []
    assert role_kinds(str(ROOT / "tests" / "runtime" / "roles" / "rt_widget")) == []
    assert role_kinds("") == []


def _watches():
    return load_watches(str(ROOT / "watches.yaml"), environ=collections_environ(str(ROOT / "ansible.cfg")))


def _refs(gvks):
    return sorted(f"{g.api_version}/{g.kind}" for g in gvks)


# What each of this operator's watches learns (docs/architecture.md "Dependent watches").
EXPECTED = {
    "DevServer": ["apps/v1/StatefulSet", "networking.k8s.io/v1/NetworkPolicy", "rbac.authorization.k8s.io/v1/Role",
                  "rbac.authorization.k8s.io/v1/RoleBinding", "v1/ConfigMap", "v1/Service", "v1/ServiceAccount"],
    "DevUser": ["kueue.x-k8s.io/v1beta2/ClusterQueue", "kueue.x-k8s.io/v1beta2/LocalQueue",
                "networking.k8s.io/v1/NetworkPolicy", "rbac.authorization.k8s.io/v1/RoleBinding", "v1/LimitRange",
                "v1/Namespace", "v1/PersistentVolumeClaim", "v1/ResourceQuota", "v1/Secret"],
    "TrainingJob": ["batch/v1/Job", "rbac.authorization.k8s.io/v1/Role", "rbac.authorization.k8s.io/v1/RoleBinding",
                    "v1/ConfigMap", "v1/PersistentVolumeClaim", "v1/Service", "v1/ServiceAccount"],
    "EphemeralAccelerationJob": ["v1/ConfigMap", "v1/PersistentVolumeClaim", "v1/Pod"],
}


def test_the_operators_watches_derive_their_dependents():
    got = {g.kind: _refs(deps) for g, deps in derived_dependents(_watches()).items()}
    assert got == EXPECTED
    # DevServerFlavor has watchDependentResources: false; Events and UsageRecords are blacklisted
    assert "DevServerFlavor" not in got
    assert not any("Event" in r or "UsageRecord" in r for refs in got.values() for r in refs)


def test_the_activity_configmap_reaches_its_devserver_through_the_cli(tmp_path):
    """`make run` and `make demo` build the Runtime from the CLI's arguments: the DevServer's
    ConfigMaps (its <name>-activity among them) are watched with no --dependent (on main the CLI
    passed {} and watched none)."""
    args = build_parser().parse_args(["--watches-file", str(ROOT / "watches.yaml")])
    assert args.dependent == []
    rt = Runtime(args.watches_file, str(tmp_path / "kubeconfig"), ansible_config=str(ROOT / "ansible.cfg"),
                 dependent_watches={}, work_dir=str(tmp_path))
    assert CM in rt.static_dependents(OWNER)
    assert _refs(rt.static_dependents(OWNER)) == EXPECTED["DevServer"]
    # --dependent adds to them, once each
    rt = Runtime(args.watches_file, str(tmp_path / "kubeconfig"), ansible_config=str(ROOT / "ansible.cfg"),
                 dependent_watches={"DevServer.torchdev.io": ["v1/ConfigMap", "v1/Pod"]}, work_dir=str(tmp_path))
    assert _refs(rt.static_dependents(OWNER)) == sorted(EXPECTED["DevServer"] + ["v1/Pod"])
    rt = Runtime(args.watches_file, str(tmp_path / "kubeconfig"), ansible_config=str(ROOT / "ansible.cfg"),
                 derive_dependents=False, work_dir=str(tmp_path))
    assert rt.static_dependents(OWNER) == []
