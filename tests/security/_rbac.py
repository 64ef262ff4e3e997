"""Least-privilege RBAC, derived statically.

Three parts:

* `allows` / `grants`: Kubernetes RBAC rule semantics (apiGroups, resources with
  subresources, ``*`` and ``*/<sub>``, resourceNames, verbs), as the apiserver's RBAC
  authorizer evaluates them (k8s.io/component-helpers/auth/rbac/validation).
* `scan_role`: what one Ansible role does to the API, read from its task files: every task's
  module and arguments, and for a ``definition`` expression the objects it carries, traced
  through the role's facts (set_fact, task vars, defaults) down to the templates they are
  rendered from (template origin: may be created) or the module reads they come from
  (observed origin: exist already).  Verbs per module:

    kubernetes.core.k8s  state present (apply or not): get + create + patch
                         (observed objects: get + patch; force: + update);
                         patched: get + patch; absent: get + delete; wait: + list, watch
    kubernetes.core.k8s_info  get by name, else list; wait: + watch
    torchdev.operator.k8s_apply    server-side apply: patch (template origin: + create, an
                                   apply that creates checks the create verb)
    torchdev.operator.k8s_observe  per query: get by name, list by label selector
    torchdev.operator.k8s_status   get <resource>, patch <resource>/status

  The tasks of the shared role torchdev.operator.common (its task files, its templates)
  count for every role that uses it; expressions naming the object being reconciled
  (``_torchdev_io_<kind>``, ``common_object``) resolve to the role's watched kind, and
  ``torchdev`` to the constants (plugins/module_utils/constants.py).

  A module the scan does not know is reported, never ignored.
* `operator_needs`: what ansible-operator itself needs per watches.yaml: an informer (list,
  watch) for each primary kind, for the dependents a role creates, and for every kind a role
  reads through the proxy (the proxy serves GETs from its informer cache, see
  ansible-operator-plugins internal/ansible/proxy/cache_response.go; blacklisted kinds go
  to the apiserver); update of the primary when a finalizer is configured, of its status
  with manageStatus; update of ``<owner>/finalizers`` for children whose ownerReference
  blocks owner deletion (OwnerReferencesPermissionEnforcement); ``bind`` on the role a
  rendered (Cluster)RoleBinding grants, or, when the role renders that (Cluster)Role too,
  every permission of it (the escalation check); leases and events for leader election.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import jinja2
import yaml
from jinja2 import nodes

from ansible_collections.torchdev.operator.plugins.module_utils import constants
from kubesim import kueue as kueue_crds
from kubesim.registry import Registry

ROOT = Path(__file__).resolve().parents[2]
ROLES = ROOT / "roles"
RBAC = ROOT / "config" / "rbac"
COLLECTION = "torchdev.operator."
# The role every kind's role shares (its task files and templates are scanned with each).
COMMON = "common"

# Verbs for which resourceNames are part of the need (everything else is name-insensitive).
NAMED_VERBS = frozenset({"bind", "escalate", "impersonate"})
# Modules that never talk to the API.
NO_API = frozenset({
    "set_fact", "fail", "assert", "debug", "include_tasks", "import_tasks", "include_role",
    "import_role", "meta", "set_stats", "requeue_after", "include_vars",
})
try:
    from ansible.playbook.task import Task

    TASK_KEYWORDS = frozenset(Task.fattributes) | {"block", "rescue", "always"}
except ImportError:  # pragma: no cover
    raise


@dataclass(frozen=True, order=True)
class Access:
    """One (apiGroup, resource[/subresource], verb[, resourceName]) request shape."""

    group: str
    resource: str
    verb: str
    name: str = ""

    def key(self) -> tuple[str, str, str, str]:
        return (self.group, self.resource, self.verb, self.name if self.verb in NAMED_VERBS else "")

    def __str__(self) -> str:
        res, _, sub = self.resource.partition("/")
        res = "%s.%s" % (res, self.group) if self.group else res
        return "%s %s%s%s" % (self.verb, res, "/" + sub if sub else "", " (%s)" % self.name if self.name else "")


# --- RBAC rule evaluation -------------------------------------------------------------------

def _resource_matches(rule_resources: Iterable[str], resource: str) -> bool:
    sub = resource.split("/", 1)[1] if "/" in resource else ""
    for r in rule_resources:
        if r == "*" or r == resource or (sub and r == "*/" + sub):
            return True
    return False


def rule_allows(rule: dict[str, Any], access: Access) -> bool:
    if rule.get("nonResourceURLs"):
        return False
    groups, verbs = rule.get("apiGroups") or [], rule.get("verbs") or []
    names = rule.get("resourceNames") or []
    return (("*" in groups or access.group in groups)
            and _resource_matches(rule.get("resources") or [], access.resource)
            and ("*" in verbs or access.verb in verbs)
            and (not names or access.name in names))


def allows(rules: Iterable[dict[str, Any]], access: Access) -> bool:
    return any(rule_allows(rule, access) for rule in rules)


def grants(rules: Iterable[dict[str, Any]]) -> set[Access]:
    """Every (group, resource, verb[, name]) a list of rules spells out; wildcards stay '*'."""
    out = set()
    for rule in rules:
        for group in rule.get("apiGroups") or []:
            for resource in rule.get("resources") or []:
                for verb in rule.get("verbs") or []:
                    for name in rule.get("resourceNames") or [""]:
                        out.add(Access(group, resource, verb, name))
    return out


# --- manifests ------------------------------------------------------------------------------

def load_yaml_dir(directory: Path) -> list[dict[str, Any]]:
    docs = []
    for path in sorted(directory.glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def registry() -> Registry:
    """Built-in kinds (kubesim's table), our CRDs and Kueue's (kubesim.kueue.load_crds)."""
    reg = Registry()
    crds = load_yaml_dir(ROOT / "config" / "crd" / "bases") + kueue_crds.load_crds()
    for crd in crds:
        reg.add_crd(crd)
    return reg


def resource_of(reg: Registry, api_version: str, kind: str) -> tuple[str, str]:
    rt = reg.by_kind(api_version, kind)
    if rt is None:
        raise LookupError("unknown kind %s %s (not built in, not in a known CRD)" % (api_version, kind))
    return rt.group, rt.plural


# --- role scan ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Source:
    """Objects a task may carry: where they come from and their resource."""

    origin: str  # "template" (rendered: may not exist yet) or "observed" (read from the API)
    group: str
    resource: str
    kind: str = ""


@dataclass
class RoleScan:
    role: str
    accesses: dict[Access, set[str]] = field(default_factory=dict)
    created: set[tuple[str, str]] = field(default_factory=set)  # (group, resource) of rendered objects applied
    problems: list[str] = field(default_factory=list)

    def add(self, access: Access, why: str) -> None:
        self.accesses.setdefault(access, set()).add(why)

    @property
    def reads(self) -> set[tuple[str, str]]:
        return {(a.group, a.resource) for a in self.accesses if a.verb in ("get", "list") and "/" not in a.resource}


def _walk_tasks(tasks: list[dict[str, Any]] | None, where: str):
    for task in tasks or []:
        if not isinstance(task, dict):
            continue
        if "block" in task:
            for part in ("block", "rescue", "always"):
                yield from _walk_tasks(task.get(part), where)
            if task.get("vars"):
                yield {"vars": task["vars"], "name": task.get("name", "")}, where
            continue
        yield task, where


def _action(task: dict[str, Any]) -> tuple[str, Any]:
    actions = [k for k in task if k not in TASK_KEYWORDS and not k.startswith("with_")]
    if not actions:
        return "", {}
    if len(actions) > 1:
        raise ValueError("task %r has several actions: %s" % (task.get("name"), actions))
    name = actions[0]
    for prefix in ("ansible.builtin.", "ansible.legacy.", "kubernetes.core.", COLLECTION):
        if name.startswith(prefix):
            name = name[len(prefix):]
    return name, task[actions[0]]


def primary_stub(role: str) -> dict[str, Any]:
    """The object a watch's role reconciles, as far as a scan can know it (apiVersion, kind)."""
    for watch in load_watches():
        if watch["role"].rpartition(".")[2] == role:
            api = "%s/%s" % (watch["group"], watch["version"]) if watch.get("group") else watch["version"]
            return {"apiVersion": api, "kind": watch["kind"], "metadata": {}}
    return {}


class _Role:
    """A role's task files, facts and registered results, for tracing expressions."""

    def __init__(self, role: str, reg: Registry, roles_dir: Path = ROLES):
        self.name, self.reg, self.dir = role, reg, roles_dir / role
        self.env = jinja2.Environment()
        self.dirs = [self.dir] + ([roles_dir / COMMON] if (roles_dir / COMMON).is_dir() and role != COMMON else [])
        self.tasks: list[tuple[dict[str, Any], str]] = []
        for base in self.dirs:
            for path in sorted((base / "tasks").glob("*.yml")):
                self.tasks += list(_walk_tasks(yaml.safe_load(path.read_text()), "%s/%s" % (base.name, path.name)))
        self.defaults: dict[str, Any] = {}
        for sub in ("defaults", "vars"):
            path = self.dir / sub / "main.yml"
            if path.exists():
                self.defaults.update(yaml.safe_load(path.read_text()) or {})
        primary = primary_stub(role)
        self.context = dict(self.defaults, torchdev=constants.as_dict(), common_object=primary,
                            **{"_torchdev_io_%s" % primary.get("kind", "").lower(): primary})
        self.facts: dict[str, list[Any]] = {k: [v] for k, v in self.defaults.items()}
        self.registered: dict[str, list[tuple[str, Any]]] = {}
        for task, _ in self.tasks:
            module, args = _action(task)
            for k, v in (task.get("vars") or {}).items():
                self.facts.setdefault(k, []).append(v)
            if module == "set_fact" and isinstance(args, dict):
                for k, v in args.items():
                    self.facts.setdefault(k, []).append(v)
            if task.get("register"):
                self.registered.setdefault(task["register"], []).append((module, args))

    # -- constants (api versions, plurals) ------------------------------------------------
    def const(self, value: Any) -> Any:
        if not isinstance(value, str) or "{" not in value:
            return value
        try:
            return self.env.from_string(value, globals={}).render(self.context) if value else value
        except jinja2.UndefinedError:  # pragma: no cover - reported by the caller
            return None

    # -- sources ----------------------------------------------------------------------------
    def sources(self, value: Any, seen: frozenset[str] = frozenset()) -> set[Source]:
        if isinstance(value, dict):
            if "kind" in value and "apiVersion" in value:  # a definition written in the task
                return {self._source("template", self.const(value["apiVersion"]), self.const(value["kind"]))}
            return set().union(*(self.sources(v, seen) for v in value.values())) if value else set()
        if isinstance(value, list):
            return set().union(*(self.sources(v, seen) for v in value)) if value else set()
        if not isinstance(value, str) or "{{" not in value:
            return set()
        return self._node(self.env.parse(value), seen)

    def _node(self, node: nodes.Node, seen: frozenset[str]) -> set[Source]:
        if isinstance(node, nodes.Filter):
            out = self._node(node.node, seen) if node.node is not None else set()
            if node.name in ("default", "d"):  # the fallback value flows through too
                for arg in node.args:
                    out |= self._node(arg, seen)
            if node.name in FILTER_OUTPUT_KINDS:
                out = {src for src in out if src.kind in FILTER_OUTPUT_KINDS[node.name]}
            if node.name in ("selectattr", "rejectattr"):
                out = _select_kind(node, out)
            return out  # other filters select or reshape their input; their arguments do not flow
        if isinstance(node, nodes.Call):
            fn = node.node
            if isinstance(fn, nodes.Name) and fn.name in ("query", "q", "lookup"):
                consts = [a.value for a in node.args if isinstance(a, nodes.Const)]
                if consts and consts[0] in ("template", "ansible.builtin.template"):
                    return set().union(*(self._template(t) for t in consts[1:]))
                return set()
            return self._node(fn, seen)
        if isinstance(node, (nodes.Getattr, nodes.Getitem)):
            path, base = [], node
            while isinstance(base, (nodes.Getattr, nodes.Getitem)):
                if isinstance(base, nodes.Getattr):
                    path.insert(0, base.attr)
                elif isinstance(base.arg, nodes.Const):
                    path.insert(0, base.arg.value)
                base = base.node
            if isinstance(base, nodes.Name) and path and base.name not in seen:
                part = self._filter_part(base.name, path[0], seen)
                if part is not None:
                    return part
            if isinstance(base, nodes.Name) and base.name in self.registered:
                regs = self.registered[base.name]
                # a query key no registration of the name has (e.g. .objects.values()): all of it
                return (set().union(*(self._result(m, a, path) for m, a in regs))
                        or set().union(*(self._result(m, a, []) for m, a in regs)))
            return self._node(base, seen)
        if isinstance(node, nodes.Name):
            if node.name in self.registered:
                return set().union(*(self._result(m, a, []) for m, a in self.registered[node.name]))
            if node.name in seen:
                return set()
            return set().union(set(), *(self.sources(v, seen | {node.name}) for v in self.facts.get(node.name, [])))
        return set().union(set(), *(self._node(child, seen) for child in node.iter_child_nodes()))

    def _filter_part(self, name: str, attr: Any, seen: frozenset[str]) -> set[Source] | None:
        """``name.attr`` where every definition of name is ``{{ ... | F(args) }}`` with F in
        FILTER_PARTS: the part comes from the argument FILTER_PARTS names, else from the input."""
        out: set[Source] = set()
        for value in self.facts.get(name, []):
            top = self.env.parse(value).find(nodes.Filter) if isinstance(value, str) else None
            if top is None or top.name not in FILTER_PARTS:
                return None
            index = FILTER_PARTS[top.name].get(attr)
            out |= self._node(top.node if index is None else top.args[index], seen | {name})
        return out or None

    def _source(self, origin: str, api_version: str, kind: str) -> Source:
        group, plural = resource_of(self.reg, api_version, kind)
        return Source(origin, group, plural, kind)

    def _template(self, name: str) -> set[Source]:
        """The kinds a template renders: its top-level apiVersion/kind lines (one per document),
        and those of the templates it includes."""
        path = next((d / "templates" / name for d in self.dirs if (d / "templates" / name).exists()),
                    self.dir / "templates" / name)
        text = path.read_text()
        out = set()
        for included in re.findall(r"\{%-?\s*include\s+['\"]([^'\"]+)['\"]", text):
            out |= self._template(included)
        for doc in re.split(r"(?m)^---\s*$", text):
            api = re.search(r"(?m)^apiVersion:\s*(\S.*?)\s*$", doc)
            kind = re.search(r"(?m)^kind:\s*(\S.*?)\s*$", doc)
            if not (api and kind):
                continue
            api_version, kind_name = (self.const(m.group(1)) for m in (api, kind))  # literals or constants
            if not api_version or not kind_name or "{" in api_version + kind_name:
                raise ValueError("template %s/%s: apiVersion/kind must be literal or a constant" % (self.name, name))
            out.add(self._source("template", api_version.strip("'\""), kind_name.strip("'\"")))
        if not out:
            raise ValueError("template %s/%s: no top-level apiVersion/kind" % (self.name, name))
        return out

    def _result(self, module: str, args: Any, path: list[Any]) -> set[Source]:
        """What a registered module result holds (path: the attributes read from it)."""
        if module == "k8s_observe":
            queries = args.get("queries") or {}
            if len(path) > 1 and path[0] == "objects":
                keys = [path[1]] if path[1] in queries else []  # another registration of the name has it
            else:
                keys = list(queries)
            return {Source("observed", *self._query_resource(queries[k])) for k in keys if not queries[k].get("discovery")}
        if module == "k8s_info":
            return {self._source("observed", self.const(args.get("api_version", "v1")), self.const(args["kind"]))}
        if module in ("k8s", "k8s_apply"):
            return {Source("observed", s.group, s.resource, s.kind) for s in self._targets(args, "present")}
        return set()

    def _query_resource(self, query: dict[str, Any]) -> tuple[str, str, str]:
        api_version, plural = self.const(query["api_version"]), self.const(query["plural"])
        group, _, version = api_version.rpartition("/")
        rt = self.reg.lookup(group, version, plural)
        if rt is None:
            raise LookupError("unknown resource %s %s" % (api_version, plural))
        return group, plural, rt.kind

    def _targets(self, args: dict[str, Any], state: str) -> set[Source]:
        if args.get("definition") is not None:
            return self.sources(args["definition"])
        if args.get("src"):
            return self.sources(yaml.safe_load_all((self.dir / "files" / args["src"]).read_text()))
        if args.get("kind"):
            origin = "template" if state == "present" else "observed"
            return {self._source(origin, self.const(args.get("api_version", "v1")), self.const(args["kind"]))}
        raise ValueError("kubernetes.core.k8s task without definition, src or kind")


# Our filters whose output holds only some kinds of their input (the scan cannot read
# Python); test_rbac_least_privilege.py checks each entry against the filter itself.
FILTER_OUTPUT_KINDS = {
    COLLECTION + "devuser_replace": frozenset({"LocalQueue"}),
}


# Our filters that return a dict of parts: {filter: {part: the positional argument whose
# objects that part holds}}; the other parts hold objects of the filter's input.
# test_rbac_least_privilege.py checks each entry against the filter itself.
FILTER_PARTS = {
    COLLECTION + "plan": {"to_prune": 0},
}


def _select_kind(node: nodes.Filter, sources: set[Source]) -> set[Source]:
    """selectattr / rejectattr('kind', 'in' | 'equalto' | '==', X) narrow the kinds."""
    args = node.args
    if (len(args) != 3 or not isinstance(args[0], nodes.Const) or not isinstance(args[1], nodes.Const)
            or args[0].value != "kind" or not isinstance(args[2], (nodes.Const, nodes.List))):
        return sources
    op = args[1].value
    value = args[2]
    kinds = {value.value} if isinstance(value, nodes.Const) else {i.value for i in value.items if isinstance(i, nodes.Const)}
    if op not in ("in", "equalto", "==", "eq"):
        return sources
    keep = (lambda k: k in kinds) if node.name == "selectattr" else (lambda k: k not in kinds)
    return {src for src in sources if keep(src.kind)}


KUEUE_GROUP = "kueue.x-k8s.io"
VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"


def observe_kueue_accesses(options: dict[str, Any] | None, const) -> list[Access]:
    """What k8s_observe's kueue option reads (plugins/modules/k8s_observe.py
    observe_kueue): the discovery of kueue.x-k8s.io (non-resource), then per option."""
    if options is None:
        return []
    out = []
    if options.get("resource_flavor"):
        out.append(Access(KUEUE_GROUP, "resourceflavors", "get"))
    if options.get("local_queue"):
        out.append(Access(KUEUE_GROUP, "localqueues", "get"))
    if options.get("workload_owner"):
        out.append(Access(KUEUE_GROUP, "workloads", "list"))
        out.append(Access(VISIBILITY_GROUP, "localqueues/pendingworkloads", "get"))
    if options.get("cluster_queue"):
        out.append(Access(KUEUE_GROUP, "localqueues", "get"))
        out.append(Access(KUEUE_GROUP, "clusterqueues", "get"))
    if options.get("priority_class") or options.get("user_label"):
        out.append(Access(KUEUE_GROUP, "workloadpriorityclasses", "get"))
    if options.get("user_label"):
        out.append(Access("", "namespaces", "get"))
        group = (const(options.get("user_api_version")) or "torchdev.io/v1alpha1").rpartition("/")[0]
        out.append(Access(group, "devusers", "get"))
    return out


K8S_VERBS = {
    ("present", "template"): ("get", "create", "patch"),
    ("present", "observed"): ("get", "patch"),
    ("patched", "template"): ("get", "patch"),
    ("patched", "observed"): ("get", "patch"),
    ("absent", "template"): ("get", "delete"),
    ("absent", "observed"): ("get", "delete"),
}


def scan_role(role: str, reg: Registry, roles_dir: Path = ROLES) -> RoleScan:
    r = _Role(role, reg, roles_dir)
    scan = RoleScan(role)
    for task, where in r.tasks:
        module, args = _action(task)
        why = "%s: %s (%s)" % (role, task.get("name", module), where)
        if not module or module in NO_API:
            continue
        try:
            if module == "k8s":
                state = args.get("state", "present")
                for src in r._targets(args, state):
                    verbs = list(K8S_VERBS[(state, src.origin)])
                    verbs += ["update"] if args.get("force") else []  # wait: polling GETs
                    for verb in verbs:
                        scan.add(Access(src.group, src.resource, verb), why)
                    if state == "present" and src.origin == "template":
                        scan.created.add((src.group, src.resource))
            elif module == "k8s_apply":
                for src in r._targets(args, "present"):
                    for verb in ("create", "patch") if src.origin == "template" else ("patch",):
                        scan.add(Access(src.group, src.resource, verb), why)
                    if src.origin == "template":
                        scan.created.add((src.group, src.resource))
            elif module == "k8s_info":
                group, plural = resource_of(reg, r.const(args.get("api_version", "v1")), r.const(args["kind"]))
                scan.add(Access(group, plural, "get" if args.get("name") else "list"), why)
            elif module == "k8s_observe":
                for query in (args.get("queries") or {}).values():
                    if query.get("discovery"):
                        continue  # /apis/<group>/<version>: a non-resource URL (system:discovery)
                    group, plural, _ = r._query_resource(query)
                    scan.add(Access(group, plural, "get" if query.get("name") else "list"), why)
                for access in observe_kueue_accesses(args.get("kueue"), r.const):
                    scan.add(access, why)
            elif module == "k8s_status":
                group, plural = resource_of(reg, r.const(args["api_version"]), r.const(args["kind"]))
                scan.add(Access(group, plural, "get"), why)
                scan.add(Access(group, plural + "/status", "patch"), why)
            else:
                scan.problems.append("%s: module %s is not known to the RBAC scan (tests/security/rbac.py)" % (why, module))
        except (LookupError, ValueError, KeyError, TypeError) as exc:
            scan.problems.append("%s: %s" % (why, exc))
    return scan


def roles() -> list[str]:
    """The roles watches.yaml runs (the common role is scanned with each of them)."""
    return sorted(w["role"].rpartition(".")[2] for w in load_watches())


# --- what ansible-operator needs ------------------------------------------------------------

def load_watches() -> list[dict[str, Any]]:
    return yaml.safe_load((ROOT / "watches.yaml").read_text())


def operator_needs(reg: Registry, scans: dict[str, RoleScan], rendered: dict[str, list[dict[str, Any]]]
                   ) -> dict[Access, set[str]]:
    """Cluster-wide needs of ansible-operator itself (not leader election), with reasons.
    rendered: role -> every object the role rendered over its sample matrix."""
    needs: dict[Access, set[str]] = {}

    def need(access: Access, why: str) -> None:
        needs.setdefault(access, set()).add(why)

    for watch in load_watches():
        api_version = "%s/%s" % (watch["group"], watch["version"]) if watch.get("group") else watch["version"]
        group, plural = resource_of(reg, api_version, watch["kind"])
        kind = watch["kind"]
        for verb in ("list", "watch"):
            need(Access(group, plural, verb), "ansible-operator: informer of the watched kind %s" % kind)
        need(Access(group, plural, "get"), "ansible-operator: re-reads the %s after each run (APIReader)" % kind)
        # markError writes a Failure condition when a run cannot start, manageStatus or not;
        # markRunning / markDone (manageStatus) update the status as well.
        need(Access(group, plural + "/status", "update"), "ansible-operator: status of %s (markError)" % kind)
        if watch.get("finalizer"):
            need(Access(group, plural, "update"), "ansible-operator: adds/removes the %s finalizer" % kind)
        scan = scans.get(watch["role"].rpartition(".")[2])
        if scan is None:
            continue
        blacklist = set()
        for b in watch.get("blacklist") or []:
            blacklist.add(resource_of(reg, "%s/%s" % (b["group"], b["version"]) if b.get("group") else b["version"], b["kind"]))
        for res in sorted(scan.reads - blacklist):
            for verb in ("list", "watch"):
                need(Access(*res, verb), "ansible-operator proxy: cache informer for %s's reads" % kind)
        if watch.get("watchDependentResources", True):
            for res in sorted(scan.created - blacklist):
                for verb in ("list", "watch"):
                    need(Access(*res, verb), "ansible-operator: dependent watch of %s" % kind)
    # The exporter (the Deployment's second container, the same ServiceAccount) reviews each
    # scrape's bearer token: TokenReview and SubjectAccessReview (torchdev_exporter/serve.py).
    from torchdev_exporter.serve import REVIEWS
    for group, resource, verb in REVIEWS:
        need(Access(group, resource, verb), "torchdev-exporter: authenticates and authorizes each scrape")
    for role, objects in rendered.items():
        for obj in objects:
            for ref in obj.get("metadata", {}).get("ownerReferences") or []:
                if ref.get("blockOwnerDeletion"):
                    group, plural = resource_of(reg, ref["apiVersion"], ref["kind"])
                    need(Access(group, plural + "/finalizers", "update"),
                         "%s: ownerReference with blockOwnerDeletion on %s" % (role, obj["kind"]))
            if obj.get("kind") in ("RoleBinding", "ClusterRoleBinding"):
                ref = obj["roleRef"]
                res = "clusterroles" if ref["kind"] == "ClusterRole" else "roles"
                bound_role = next((o for o in objects if o.get("kind") == ref["kind"]
                                   and o["metadata"]["name"] == ref["name"]), None)
                if bound_role is None:
                    need(Access("rbac.authorization.k8s.io", res, "bind", ref["name"]),
                         "%s: renders a %s granting %s %s" % (role, obj["kind"], ref["kind"], ref["name"]))
                    continue
                # A (Cluster)Role the role renders itself: RBAC's escalation check lets whoever
                # holds every permission of it bind it (no `bind` needed).
                for rule in bound_role.get("rules") or []:
                    for group in rule.get("apiGroups") or [""]:
                        for resource in rule.get("resources") or []:
                            for verb in rule.get("verbs") or []:
                                for name in rule.get("resourceNames") or [""]:
                                    need(Access(group, resource, verb, name),
                                         "%s: renders a %s granting its own %s %s (escalation check)"
                                         % (role, obj["kind"], ref["kind"], ref["name"]))
    return needs


# controller-runtime leader election (resourcelock "leases": get, create, update) and the
# events it records (client-go record: create, patch), in the operator's namespace.
LEADER_ELECTION = {
    Access("coordination.k8s.io", "leases", "get"): "leader election: read the lease",
    Access("coordination.k8s.io", "leases", "create"): "leader election: create the lease",
    Access("coordination.k8s.io", "leases", "update"): "leader election: renew / release the lease",
    Access("", "events", "create"): "leader election: LeaderElection event",
    Access("", "events", "patch"): "leader election: aggregated event",
}


# --- config/rbac ----------------------------------------------------------------------------

def operator_rules(docs: list[dict[str, Any]], service_account: str, namespace: str
                   ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(cluster-wide rules, rules in the operator namespace) bound to the service account."""
    roles = {(d["kind"], d["metadata"]["name"]): d.get("rules") or [] for d in docs if d.get("kind") in ("Role", "ClusterRole")}
    cluster, local = [], []
    for d in docs:
        if d.get("kind") not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any(s.get("kind") == "ServiceAccount" and s.get("name") == service_account
                   and s.get("namespace") == namespace for s in d.get("subjects") or []):
            continue
        rules = roles[(d["roleRef"]["kind"], d["roleRef"]["name"])]
        (cluster if d["kind"] == "ClusterRoleBinding" else local).extend(rules)
    return cluster, local
