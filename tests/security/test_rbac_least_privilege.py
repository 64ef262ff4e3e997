"""The operator's RBAC (config/rbac, as `make deploy` renders it) is least privilege.

What the operator uses is derived statically (_rbac.py): every role's tasks and the objects
they carry, traced to the templates they render and the reads they come from, plus what
ansible-operator itself needs per watches.yaml.  Then, with the RBAC rules actually bound to
the Deployment's service account:
  * everything used must be granted, and
  * everything granted must be used (ALLOWED_UNUSED: what the scan cannot see, documented).
test_rbac_requests.py checks the same ClusterRole against the requests of a real reconcile.
"""
from __future__ import annotations

import copy
import importlib
import textwrap

import pytest
import yaml

import _rbac
from _rbac import Access, allows, grants

REG = _rbac.registry()
SCANS = {role: _rbac.scan_role(role, REG) for role in _rbac.roles()}

# Granted although no task or watch in this repository makes the request.  Keep it short,
# one reason per entry (docs/security.md).
ALLOWED_UNUSED: dict[Access, str] = {}


def _flat(rendered):
    return {role: [obj for objs in cases.values() for obj in objs] for role, cases in rendered.items()}


@pytest.fixture(scope="module")
def needed(rendered) -> dict[Access, set[str]]:
    out: dict[Access, set[str]] = {}
    for scan in SCANS.values():
        for access, why in scan.accesses.items():
            out.setdefault(access, set()).update(why)
    for access, why in _rbac.operator_needs(REG, SCANS, _flat(rendered)).items():
        out.setdefault(access, set()).update(why)
    return out


@pytest.fixture(scope="module")
def bound(deployed):
    """(cluster-wide rules, operator-namespace rules) bound to the Deployment's service account."""
    (deployment,) = [d for d in deployed if d["kind"] == "Deployment"]
    sa = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    namespace = deployment["metadata"]["namespace"]
    assert any(d["kind"] == "ServiceAccount" and d["metadata"]["name"] == sa and d["metadata"]["namespace"] == namespace
               for d in deployed), "the Deployment's service account %s/%s is not deployed" % (namespace, sa)
    cluster, local = _rbac.operator_rules(deployed, sa, namespace)
    assert cluster and local, "no ClusterRole / leader-election Role bound to %s/%s" % (namespace, sa)
    return cluster, local


def _report(accesses, reasons=None) -> str:
    lines = []
    for a in sorted(accesses):
        why = sorted((reasons or {}).get(a, []))
        lines.append("  %s%s" % (a, "  <- " + "; ".join(why[:3]) if why else ""))
    return "\n".join(lines)


@pytest.mark.parametrize("role", sorted(SCANS))
def test_every_task_of_the_role_is_understood(role):
    assert not SCANS[role].problems, "\n".join(SCANS[role].problems)


def test_rendered_kinds_are_written_by_a_scanned_task(rendered):
    """The scan's view of what a role writes covers every kind the role really renders."""
    for role, cases in rendered.items():
        written = {(a.group, a.resource) for a in SCANS[role].accesses if a.verb in ("create", "patch")}
        for case, objects in cases.items():
            for obj in objects:
                res = _rbac.resource_of(REG, obj["apiVersion"], obj["kind"])
                assert res in written, "%s/%s renders %s %s, which no scanned task writes" % (
                    role, case, obj["kind"], obj["metadata"]["name"])


def test_everything_used_is_granted(needed, bound):
    cluster, _ = bound
    missing = [a for a in needed if not allows(cluster, a)]
    assert not missing, "used but not granted by the manager ClusterRole:\n" + _report(missing, needed)


def test_everything_granted_is_used(needed, bound):
    cluster, _ = bound
    used = {a.key() for a in needed}
    over = [g for g in grants(cluster) if g.key() not in used and g not in ALLOWED_UNUSED]
    assert not over, "granted but never used (remove from config/rbac or document in ALLOWED_UNUSED):\n" + _report(over)


def test_allowed_unused_entries_are_still_granted(bound):
    cluster, _ = bound
    stale = [a for a in ALLOWED_UNUSED if not allows(cluster, a)]
    assert not stale, "ALLOWED_UNUSED lists what is no longer granted:\n" + _report(stale)


def test_leader_election_role_is_exact(bound):
    _, local = bound
    missing = [a for a in _rbac.LEADER_ELECTION if not allows(local, a)]
    over = [g for g in grants(local) if g not in _rbac.LEADER_ELECTION]
    assert not missing, "leader election needs:\n" + _report(missing)
    assert not over, "leader-election Role grants more than leader election uses:\n" + _report(over)


# --- the evaluator and the scan themselves -------------------------------------------------

RULES = [
    {"apiGroups": ["apps"], "resources": ["statefulsets"], "verbs": ["get", "patch"]},
    {"apiGroups": ["torchdev.io"], "resources": ["*/status"], "verbs": ["patch"]},
    {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["only-me"], "verbs": ["*"]},
    {"apiGroups": ["*"], "resources": ["leases"], "verbs": ["get"]},
    {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "resourceNames": ["devserver-user"],
     "verbs": ["bind"]},
    {"nonResourceURLs": ["/healthz"], "verbs": ["get"]},
]


@pytest.mark.parametrize("access, allowed", [
    (Access("apps", "statefulsets", "get"), True),
    (Access("apps", "statefulsets", "delete"), False),
    (Access("apps", "statefulsets/status", "patch"), False),          # subresources are separate
    (Access("", "statefulsets", "get"), False),                       # wrong group
    (Access("torchdev.io", "devservers/status", "patch"), True),      # */status
    (Access("torchdev.io", "devservers", "patch"), False),
    (Access("", "configmaps", "delete", "only-me"), True),            # resourceNames + '*' verbs
    (Access("", "configmaps", "delete", "other"), False),
    (Access("", "configmaps", "list"), False),                        # list has no name
    (Access("coordination.k8s.io", "leases", "get"), True),           # '*' groups
    (Access("rbac.authorization.k8s.io", "clusterroles", "bind", "devserver-user"), True),
    (Access("rbac.authorization.k8s.io", "clusterroles", "bind", "cluster-admin"), False),
])
def test_rule_evaluator(access, allowed):
    assert allows(RULES, access) is allowed


def test_grants_keeps_wildcards():
    assert Access("*", "leases", "get") in grants(RULES)
    assert Access("", "configmaps", "*", "only-me") in grants(RULES)


def test_scan_sees_a_new_read_and_an_unknown_module(tmp_path):
    """A role that starts reading CronJobs is seen (and would fail the grant check above); a
    module the scan does not know is reported instead of being ignored; selectattr on the
    kind narrows what a task carries."""
    tasks = tmp_path / "sneaky" / "tasks"
    tasks.mkdir(parents=True)
    (tmp_path / "sneaky" / "templates").mkdir()
    (tmp_path / "sneaky" / "templates" / "job.yaml.j2").write_text(
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: {{ x }}\n")
    (tasks / "main.yml").write_text(textwrap.dedent("""\
        - name: Read
          torchdev.operator.k8s_observe:
            queries:
              crons: {api_version: batch/v1, plural: cronjobs, label_selector: a=b}
              pods: {api_version: v1, plural: pods, name: x}
          register: sneaky_read
        - name: Render
          ansible.builtin.set_fact:
            sneaky_objects: "{{ [lookup('ansible.builtin.template', 'job.yaml.j2') | from_yaml] }}"
        - name: Apply
          kubernetes.core.k8s:
            definition: "{{ sneaky_objects | select | list }}"
        - name: Delete the CronJobs that were read
          kubernetes.core.k8s:
            state: absent
            definition: "{{ sneaky_read.objects.values() | selectattr('kind', 'equalto', 'CronJob') | list }}"
        - name: Something else
          community.general.thing: {}
        """))
    scan = _rbac.scan_role("sneaky", REG, roles_dir=tmp_path)
    assert {str(a) for a in scan.accesses} == {
        "list cronjobs.batch", "get pods", "get jobs.batch", "create jobs.batch", "patch jobs.batch",
        "get cronjobs.batch", "delete cronjobs.batch"}
    assert scan.created == {("batch", "jobs")}
    assert len(scan.problems) == 1 and "community.general.thing" in scan.problems[0]
    manager = [d for d in yaml.safe_load_all((_rbac.RBAC / "role.yaml").read_text()) if d and d["kind"] == "ClusterRole"]
    assert not allows(manager[0]["rules"], Access("batch", "cronjobs", "list"))


def _filter(name):
    """A filter by its FQCN, from the collection's filter plugins."""
    short = name.removeprefix(_rbac.COLLECTION)
    for path in sorted((_rbac.ROOT / "plugins" / "filter").glob("*.py")):
        module = importlib.import_module("ansible_collections.torchdev.operator.plugins.filter." + path.stem)
        filters = module.FilterModule().filters()
        if short in filters:
            return filters[short]
    raise LookupError(name)


@pytest.mark.parametrize("name", sorted(_rbac.FILTER_OUTPUT_KINDS))
def test_filter_output_kinds_hold(rendered, name):
    """FILTER_OUTPUT_KINDS: fed every rendered object as live (changed) and desired, the
    filter returns only the kinds the scan assumes."""
    objects = [obj for cases in rendered.values() for objs in cases.values() for obj in objs]
    live = copy.deepcopy(objects)
    for obj in live:
        obj.setdefault("spec", {})["clusterQueue"] = "changed"
        obj["spec"]["changed"] = True
    out = _filter(name)(live, objects)
    assert out, "the probe is vacuous: %s returned nothing" % name
    assert {o["kind"] for o in out} <= _rbac.FILTER_OUTPUT_KINDS[name]


@pytest.mark.parametrize("name", sorted(_rbac.FILTER_PARTS))
def test_filter_parts_hold(rendered, name):
    """FILTER_PARTS: a part said to come from an argument holds only objects of that
    argument (kind and name), never one of the input, whatever the input holds."""
    objects = [obj for cases in rendered.values() for objs in cases.values() for obj in objs]
    live = copy.deepcopy(objects)
    for obj in live:  # owned by the probe, so that a prune keeps them
        obj.setdefault("metadata", {})["ownerReferences"] = [{"uid": "probe", "controller": True}]
        obj["metadata"]["name"] = "live-" + str(obj["metadata"].get("name"))
    for part, index in _rbac.FILTER_PARTS[name].items():
        args = [None, "probe"]  # the filters' arguments: (observed, owner uid)
        args[index] = live
        out = _filter(name)(objects, *args)[part]
        assert out, "the probe is vacuous: %s returned no %s" % (name, part)
        from_arg = {(o["kind"], o["metadata"]["name"]) for o in live}
        assert {(o["kind"], o["metadata"]["name"]) for o in out} <= from_arg
