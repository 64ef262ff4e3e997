"""watches.yaml parsing, defaults, validation and env overrides (watches.go / watches_test.go)."""
from __future__ import annotations

import os
import textwrap

import pytest

from torchdev_runtime.gotime import go_atoi, parse_duration, replace_env_variables
from torchdev_runtime.watches import (GVK, WatchesError, get_ansible_verbosity,
                                      get_max_concurrent_reconciles, load_watches,
                                      max_concurrent_env_names, parse_watches,
                                      selector_matches)


@pytest.fixture
def tree(tmp_path):
    """A watches dir with roles/myrole, roles/cleanup and playbook.yml."""
    for r in ("myrole", "cleanup"):
        (tmp_path / "roles" / r / "tasks").mkdir(parents=True)
        (tmp_path / "roles" / r / "tasks" / "main.yml").write_text("[]\n")
    (tmp_path / "playbook.yml").write_text("[]\n")
    return tmp_path


def parse(tree, text, env=None, **kw):
    kw.setdefault("max_concurrent_reconciles", 3)
    return parse_watches(textwrap.dedent(text), root_dir=str(tree), watches_dir=str(tree),
                         environ=env if env is not None else {}, **kw)


def test_defaults(tree):
    [w] = parse(tree, """
        - version: v1alpha1
          group: torchdev.io
          kind: DevServer
          role: myrole
    """)
    assert w.gvk == GVK("torchdev.io", "v1alpha1", "DevServer")
    assert w.role == str(tree / "roles" / "myrole")
    assert w.playbook == ""
    assert w.manage_status is True
    assert w.watch_dependent_resources is True
    assert w.watch_cluster_scoped_resources is False
    assert w.snake_case_parameters is True
    assert w.watch_annotations_changes is False
    assert w.mark_unsafe is False
    assert w.reconcile_period == 0
    assert w.max_runner_artifacts == 20
    assert w.max_concurrent_reconciles == 3
    assert w.ansible_verbosity == 2
    assert w.finalizer is None and w.vars is None
    assert w.selector == {} and w.blacklist == []


def test_all_fields(tree):
    [w] = parse(tree, """
        - version: v1
          group: torchdev.io
          kind: TrainJob
          playbook: playbook.yml
          vars: {a: 1}
          reconcilePeriod: 1m30s
          manageStatus: false
          watchDependentResources: false
          watchClusterScopedResources: true
          snakeCaseParameters: false
          watchAnnotationsChanges: true
          markUnsafe: true
          maxRunnerArtifacts: 5
          blacklist:
            - {group: apps, version: v1, kind: ReplicaSet}
          selector:
            matchLabels: {team: ml}
            matchExpressions:
              - {key: tier, operator: In, values: [gpu]}
          finalizer:
            name: torchdev.io/finalizer
            role: cleanup
            vars: {state: absent}
    """)
    assert w.playbook == str(tree / "playbook.yml")
    assert w.vars == {"a": 1}
    assert w.reconcile_period == 90
    assert (w.manage_status, w.watch_dependent_resources, w.watch_cluster_scoped_resources,
            w.snake_case_parameters, w.watch_annotations_changes, w.mark_unsafe) == \
        (False, False, True, False, True, True)
    assert w.max_runner_artifacts == 5
    assert w.blacklist == [GVK("apps", "v1", "ReplicaSet")]
    assert w.finalizer.name == "torchdev.io/finalizer"
    assert w.finalizer.role == str(tree / "roles" / "cleanup")
    assert w.finalizer.vars == {"state": "absent"}


def test_keys_are_case_insensitive_and_unknown_keys_warn(tree):
    warnings: list[str] = []
    [w] = parse(tree, """
        - Version: v1
          GROUP: torchdev.io
          kind: X
          role: myrole
          ManageStatus: false
          reconcilPeriod: 5s
    """, warnings=warnings)
    assert w.manage_status is False
    assert w.reconcile_period == 0
    assert any("reconcilPeriod" in m for m in warnings)


def test_env_expansion(tree):
    [w] = parse(tree, """
        - version: v1
          group: torchdev.io
          kind: X
          role: ${ROLE_NAME}
          vars:
            image: $IMAGE
            missing: ${NOT_SET}
    """, env={"ROLE_NAME": "myrole", "IMAGE": "busybox"})
    assert w.role == str(tree / "roles" / "myrole")
    assert w.vars == {"image": "busybox", "missing": "${NOT_SET}"}


def test_finalizer_with_vars_only_reuses_main_role(tree):
    [w] = parse(tree, """
        - version: v1
          group: torchdev.io
          kind: X
          role: myrole
          finalizer:
            name: torchdev.io/cleanup
            vars: {state: absent}
    """)
    assert w.finalizer.role == "" and w.finalizer.playbook == ""


def test_both_role_and_playbook_is_accepted_with_a_warning(tree):
    warnings: list[str] = []
    [w] = parse(tree, """
        - {version: v1, group: g.io, kind: X, role: myrole, playbook: playbook.yml}
    """, warnings=warnings)
    assert w.playbook and w.role
    assert any("playbook is used" in m for m in warnings)


def test_role_resolution_order(tree, tmp_path_factory):
    other = tmp_path_factory.mktemp("rolespath")
    (other / "myrole").mkdir()
    # ANSIBLE_ROLES_PATH entries come before <cwd>/roles
    [w] = parse(tree, "- {version: v1, group: g.io, kind: X, role: myrole}",
                env={"ANSIBLE_ROLES_PATH": f"/nonexistent:{other}"})
    assert w.role == str(other / "myrole")
    # absolute paths are used as is
    [w] = parse(tree, f"- {{version: v1, group: g.io, kind: X, role: {tree}/roles/cleanup}}")
    assert w.role == str(tree / "roles" / "cleanup")
    # FQCN: <collections path>/ansible_collections/ns/coll/roles/role
    coll = other / "ansible_collections" / "ns" / "coll" / "roles" / "r1"
    coll.mkdir(parents=True)
    [w] = parse(tree, "- {version: v1, group: g.io, kind: X, role: ns.coll.r1}",
                env={"ANSIBLE_COLLECTIONS_PATH": str(other)})
    assert w.role == str(coll)


def test_watches_dir_fallback(tree, tmp_path_factory):
    cwd = tmp_path_factory.mktemp("elsewhere")
    [w] = parse_watches("- {version: v1, group: g.io, kind: X, role: myrole}",
                        root_dir=str(cwd), watches_dir=str(tree), environ={},
                        max_concurrent_reconciles=1)
    assert w.role == str(tree / "roles" / "myrole")


ERRORS = [
    ("missing version", "- {group: g.io, kind: X, role: myrole}",
     "invalid GVK: g.io/, Kind=X: version must not be empty"),
    ("missing kind", "- {group: g.io, version: v1, role: myrole}",
     "kind must not be empty"),
    ("no role or playbook", "- {group: g.io, version: v1, kind: X}",
     "must specify Role or Playbook"),
    ("role not found", "- {group: g.io, version: v1, kind: X, role: nope}",
     "role: nope was not found"),
    ("playbook not found", "- {group: g.io, version: v1, kind: X, playbook: nope.yml}",
     "was not found"),
    ("duplicate GVK", "- {group: g.io, version: v1, kind: X, role: myrole}\n"
                      "- {group: g.io, version: v1, kind: X, role: cleanup}",
     "duplicate GVK: g.io/v1, Kind=X"),
    ("finalizer without name",
     "- {group: g.io, version: v1, kind: X, role: myrole, finalizer: {role: cleanup}}",
     "finalizer must have name"),
    ("finalizer without role/playbook/vars",
     "- {group: g.io, version: v1, kind: X, role: myrole, finalizer: {name: f}}",
     "Invalid ansible path on Finalizer"),
    ("finalizer role not found",
     "- {group: g.io, version: v1, kind: X, role: myrole, finalizer: {name: f, role: nope}}",
     "role: nope was not found"),
    ("invalid duration",
     "- {group: g.io, version: v1, kind: X, role: myrole, reconcilePeriod: 5x}",
     'unknown unit "x"'),
    ("duration not a string",
     "- {group: g.io, version: v1, kind: X, role: myrole, reconcilePeriod: 5}",
     "cannot unmarshal number"),
    ("invalid status (not a bool)",
     "- {group: g.io, version: v1, kind: X, role: myrole, manageStatus: sure}",
     "cannot unmarshal string into Go struct field alias.managestatus of type bool"),
    ("not a list", "group: g.io", "must be a YAML list"),
    ("invalid yaml", "- {group: [", "Failed to unmarshal config"),
    ("bad selector operator",
     "- {group: g.io, version: v1, kind: X, role: myrole, "
     "selector: {matchExpressions: [{key: a, operator: Near}]}}",
     "not a valid label selector operator"),
    ("In without values",
     "- {group: g.io, version: v1, kind: X, role: myrole, "
     "selector: {matchExpressions: [{key: a, operator: In}]}}",
     "values set can't be empty"),
]


@pytest.mark.parametrize("name,text,msg", ERRORS, ids=[e[0] for e in ERRORS])
def test_validation_errors(tree, name, text, msg):
    with pytest.raises(WatchesError) as ei:
        parse(tree, text)
    assert msg in str(ei.value)


def test_load_watches_file_and_missing_file(tree):
    p = tree / "watches.yaml"
    p.write_text("- {version: v1, group: g.io, kind: X, role: myrole}\n")
    old = os.getcwd()
    try:
        os.chdir("/")
        [w] = load_watches(str(p), max_concurrent_reconciles=1)
    finally:
        os.chdir(old)
    assert w.role == str(tree / "roles" / "myrole")
    with pytest.raises(WatchesError, match="Failed to get config file"):
        load_watches(str(tree / "nope.yaml"))


def test_empty_file_means_no_watches(tree):
    assert parse(tree, "") == []


# --- MAX_CONCURRENT_RECONCILES_<KIND>_<GROUP> / ANSIBLE_VERBOSITY_<KIND>_<GROUP> ---------

GVK_DS = GVK("torchdev.io", "v1alpha1", "DevServer")

MAX_CONCURRENT = [
    ("unset -> default", {}, 4),
    ("set", {"MAX_CONCURRENT_RECONCILES_DEVSERVER_TORCHDEV_IO": "7"}, 7),
    ("deprecated WORKER_", {"WORKER_DEVSERVER_TORCHDEV_IO": "5"}, 5),
    ("new name wins", {"MAX_CONCURRENT_RECONCILES_DEVSERVER_TORCHDEV_IO": "2",
                       "WORKER_DEVSERVER_TORCHDEV_IO": "5"}, 2),
    ("zero -> default", {"MAX_CONCURRENT_RECONCILES_DEVSERVER_TORCHDEV_IO": "0"}, 4),
    ("negative -> default", {"MAX_CONCURRENT_RECONCILES_DEVSERVER_TORCHDEV_IO": "-3"}, 4),
    ("not an int -> default", {"MAX_CONCURRENT_RECONCILES_DEVSERVER_TORCHDEV_IO": "two"}, 4),
    ("Atoi rejects spaces", {"MAX_CONCURRENT_RECONCILES_DEVSERVER_TORCHDEV_IO": " 3"}, 4),
    ("Atoi accepts a sign", {"MAX_CONCURRENT_RECONCILES_DEVSERVER_TORCHDEV_IO": "+3"}, 3),
    ("case matters in env names", {"max_concurrent_reconciles_devserver_torchdev_io": "9"}, 4),
]


@pytest.mark.parametrize("name,env,want", MAX_CONCURRENT, ids=[c[0] for c in MAX_CONCURRENT])
def test_max_concurrent_reconciles_env(name, env, want):
    assert get_max_concurrent_reconciles(GVK_DS, 4, env) == want


def test_env_names():
    assert max_concurrent_env_names(GVK("torchdev.io", "v1", "TrainJob")) == \
        ("MAX_CONCURRENT_RECONCILES_TRAINJOB_TORCHDEV_IO", "WORKER_TRAINJOB_TORCHDEV_IO")
    assert max_concurrent_env_names(GVK("", "v1", "ConfigMap"))[0] == \
        "MAX_CONCURRENT_RECONCILES_CONFIGMAP_"


VERBOSITY = [
    ("unset", {}, 2),
    ("set", {"ANSIBLE_VERBOSITY_DEVSERVER_TORCHDEV_IO": "4"}, 4),
    ("zero ok", {"ANSIBLE_VERBOSITY_DEVSERVER_TORCHDEV_IO": "0"}, 0),
    ("above 7", {"ANSIBLE_VERBOSITY_DEVSERVER_TORCHDEV_IO": "8"}, 2),
    ("negative", {"ANSIBLE_VERBOSITY_DEVSERVER_TORCHDEV_IO": "-1"}, 2),
    ("garbage", {"ANSIBLE_VERBOSITY_DEVSERVER_TORCHDEV_IO": "vv"}, 2),
]


@pytest.mark.parametrize("name,env,want", VERBOSITY, ids=[c[0] for c in VERBOSITY])
def test_ansible_verbosity_env(name, env, want):
    assert get_ansible_verbosity(GVK_DS, 2, env) == want


def test_env_overrides_applied_on_load(tree):
    [w] = parse(tree, "- {version: v1alpha1, group: torchdev.io, kind: DevServer, role: myrole}",
                env={"MAX_CONCURRENT_RECONCILES_DEVSERVER_TORCHDEV_IO": "6",
                     "ANSIBLE_VERBOSITY_DEVSERVER_TORCHDEV_IO": "1"})
    assert (w.max_concurrent_reconciles, w.ansible_verbosity) == (6, 1)


def test_default_max_concurrent_is_cpu_count(tree):
    [w] = parse_watches("- {version: v1, group: g.io, kind: X, role: myrole}",
                        root_dir=str(tree), environ={})
    assert w.max_concurrent_reconciles == (os.cpu_count() or 1)


# --- Go helpers ---------------------------------------------------------------------------

DURATIONS = [("0", 0), ("1s", 1), ("300ms", 0.3), ("1.5h", 5400), ("2h45m", 9900),
             ("-1m", -60), ("+3m", 180), (".5s", 0.5), ("1us", 1e-6), ("10h", 36000)]


@pytest.mark.parametrize("text,want", DURATIONS)
def test_parse_duration(text, want):
    assert parse_duration(text) == pytest.approx(want)


@pytest.mark.parametrize("text", ["", "1", "s", "1x", "1h1", "--1s", "1.s.2"])
def test_parse_duration_errors(text):
    with pytest.raises(ValueError):
        parse_duration(text)


def test_replace_env_variables_like_os_expand():
    env = {"A": "x", "B_1": "y"}
    assert replace_env_variables("${A}-$A-${B_1}-$B_1-${C}-$C", env) == "x-x-y-y-${C}-${C}"
    assert replace_env_variables("cost: 5$ and $ alone", env) == "cost: 5$ and $ alone"
    assert replace_env_variables("eat ${} bad", env) == "eat  bad"


def test_go_atoi():
    assert go_atoi("12") == 12 and go_atoi("-1") == -1 and go_atoi("007") == 7
    for bad in ("", " 1", "1_0", "1.0", "0x1"):
        with pytest.raises(ValueError):
            go_atoi(bad)


SELECTORS = [
    ({}, {"a": "1"}, True),
    ({"matchLabels": {"a": "1"}}, {"a": "1", "b": "2"}, True),
    ({"matchLabels": {"a": "1"}}, {"a": "2"}, False),
    ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2"]}]},
     {"a": "2"}, True),
    ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {}, True),
    ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {}, False),
    ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"b": "1"}, True),
]


@pytest.mark.parametrize("sel,labels,want", SELECTORS)
def test_selector_matches(sel, labels, want):
    assert selector_matches(sel, labels) is want
