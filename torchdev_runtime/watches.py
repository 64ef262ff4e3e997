"""watches.yaml loading, defaulting and validation.

Port of operator-framework/ansible-operator-plugins internal/ansible/watches/watches.go
(``Load``, ``setValuesFromAlias``, ``Validate``, ``getPossibleRolePaths``,
``getMaxConcurrentReconciles``, ``getAnsibleVerbosity``, ``replaceEnvVariables``).

Behaviour kept from Go, on purpose:

* the file is passed through ``os.Expand`` first (``${VAR}``/``$VAR``; unset variables are
  left as ``${VAR}``);
* it is decoded like ``sigs.k8s.io/yaml`` + ``encoding/json`` into a struct without json
  tags: keys match field names case-insensitively and unknown keys are ignored (we log
  them as warnings: a typo such as ``reconcilPeriod`` is silently ignored by Go too);
* defaults: manageStatus=true, watchDependentResources=true,
  watchClusterScopedResources=false, snakeCaseParameters=true,
  watchAnnotationsChanges=false, markUnsafe=false, maxRunnerArtifacts=20,
  reconcilePeriod=0 (then the ``--reconcile-period`` flag, 10h in Go, applies);
* validation: version and kind required ("invalid GVK"), duplicate GVKs rejected, a role
  or playbook must exist (``playbook`` wins when both are set: Go does not reject that, we
  log a warning), a finalizer needs a name and a role/playbook or vars;
* ``MAX_CONCURRENT_RECONCILES_<KIND>_<GROUP>`` (then the deprecated ``WORKER_<KIND>_<GROUP>``)
  overrides the ``--max-concurrent-reconciles`` default (CPU count); values <= 0 or that
  are not integers fall back to the default. ``ANSIBLE_VERBOSITY_<KIND>_<GROUP>`` overrides
  ``--ansible-verbosity`` (default 2); values outside 0..7 fall back. Names are upper-cased
  with dots replaced by underscores.

Role path resolution follows ``getPossibleRolePaths`` with Go's root (the current working
directory); as an extension we then also try the watches file's directory (``<dir>/roles/
<role>``, ``<dir>/<role>``), so a watches file works from any cwd.
"""
from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass, field
from typing import Any, Mapping

import yaml

from kubeselect import LabelSelector

from .gotime import DurationError, go_atoi, parse_duration, replace_env_variables

log = logging.getLogger("torchdev_runtime.watches")

MAX_RUNNER_ARTIFACTS_DEFAULT = 20
ANSIBLE_VERBOSITY_DEFAULT = 2


class WatchesError(ValueError):
    """The watches file cannot be loaded or fails validation."""


@dataclass(frozen=True)
class GVK:
    group: str
    version: str
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def __str__(self) -> str:  # schema.GroupVersionKind.String()
        return f"{self.group}/{self.version}, Kind={self.kind}"

    @property
    def group_kind(self) -> str:
        """Kind.group as used by the operator-sdk/primary-resource-type annotation."""
        return f"{self.kind}.{self.group}" if self.group else self.kind

    @classmethod
    def from_api_version(cls, api_version: str, kind: str) -> "GVK":
        if "/" in api_version:
            g, v = api_version.split("/", 1)
        else:
            g, v = "", api_version
        return cls(g, v, kind)


@dataclass
class Finalizer:
    name: str = ""
    playbook: str = ""
    role: str = ""
    vars: dict[str, Any] | None = None


@dataclass
class Watch:
    gvk: GVK
    playbook: str = ""
    role: str = ""
    vars: dict[str, Any] | None = None
    max_runner_artifacts: int = MAX_RUNNER_ARTIFACTS_DEFAULT
    reconcile_period: float = 0.0  # seconds; 0 = use the runtime's --reconcile-period
    finalizer: Finalizer | None = None
    manage_status: bool = True
    watch_dependent_resources: bool = True
    watch_cluster_scoped_resources: bool = False
    snake_case_parameters: bool = True
    watch_annotations_changes: bool = False
    mark_unsafe: bool = False
    selector: dict[str, Any] = field(default_factory=dict)
    blacklist: list[GVK] = field(default_factory=list)
    # not configurable in watches.yaml
    max_concurrent_reconciles: int = 1
    ansible_verbosity: int = ANSIBLE_VERBOSITY_DEFAULT

    @property
    def group(self) -> str:
        return self.gvk.group

    @property
    def version(self) -> str:
        return self.gvk.version

    @property
    def kind(self) -> str:
        return self.gvk.kind

    @property
    def finalizer_name(self) -> str:
        return self.finalizer.name if self.finalizer else ""


# --- decoding --------------------------------------------------------------------------

# Go field name -> (python attribute, kind). Matching is case-insensitive like encoding/json.
_WATCH_FIELDS = {
    "group": "str", "version": "str", "kind": "str", "playbook": "str", "role": "str",
    "vars": "map", "maxrunnerartifacts": "int", "reconcileperiod": "duration",
    "managestatus": "bool", "watchdependentresources": "bool",
    "watchclusterscopedresources": "bool", "snakecaseparameters": "bool",
    "watchannotationschanges": "bool", "markunsafe": "bool", "blacklist": "gvklist",
    "finalizer": "finalizer", "selector": "selector",
}
_FINALIZER_FIELDS = {"name": "str", "playbook": "str", "role": "str", "vars": "map"}
_GO_TYPES = {"str": "string", "int": "int", "bool": "bool", "map": "map[string]interface {}",
             "duration": "v1.Duration", "gvklist": "[]schema.GroupVersionKind",
             "finalizer": "watches.Finalizer", "selector": "v1.LabelSelector"}


def _json_type(v: Any) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    return type(v).__name__


def _fold(entry: Mapping[str, Any], fields: Mapping[str, str], where: str,
          warnings: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    exact = {k: k for k in fields}
    for key, value in entry.items():
        if not isinstance(key, str):
            key = str(key)
        lk = key.lower()
        if lk not in exact:
            warnings.append(f"{where}: unknown field {key!r} ignored")
            continue
        out[lk] = value
    return out


def _check(value: Any, kind: str, where: str) -> Any:
    if value is None:
        return None
    ok = {
        "str": lambda v: isinstance(v, str),
        "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "bool": lambda v: isinstance(v, bool),
        "map": lambda v: isinstance(v, dict),
        "duration": lambda v: isinstance(v, str),
        "gvklist": lambda v: isinstance(v, list),
        "finalizer": lambda v: isinstance(v, dict),
        "selector": lambda v: isinstance(v, dict),
    }[kind](value)
    if not ok:
        raise WatchesError(f"json: cannot unmarshal {_json_type(value)} into Go struct field "
                           f"{where} of type {_GO_TYPES[kind]}")
    return value


def validate_selector(sel: Mapping[str, Any], where: str = "selector") -> None:
    """metav1.LabelSelectorAsSelector's validation (operator/values rules)."""
    ml = sel.get("matchLabels")
    if ml is not None:
        if not isinstance(ml, dict) or not all(isinstance(v, str) for v in ml.values()):
            raise WatchesError(f"{where}.matchLabels must be a map of strings")
    for i, expr in enumerate(sel.get("matchExpressions") or []):
        if not isinstance(expr, dict) or not isinstance(expr.get("key"), str):
            raise WatchesError(f"{where}.matchExpressions[{i}] needs a key")
        op = expr.get("operator")
        values = expr.get("values") or []
        if op in ("In", "NotIn"):
            if not values:
                raise WatchesError(f"{where}.matchExpressions[{i}]: for 'in', 'notin' operators, "
                                   "values set can't be empty")
        elif op in ("Exists", "DoesNotExist"):
            if values:
                raise WatchesError(f"{where}.matchExpressions[{i}]: values set must be empty for "
                                   "exists and does not exist")
        else:
            raise WatchesError(f"{where}.matchExpressions[{i}]: {op!r} is not a valid label "
                               "selector operator")


def selector_matches(sel: Mapping[str, Any] | None, labels: Mapping[str, str] | None) -> bool:
    """A watch's metav1.LabelSelector (validated above) against an object's labels; an empty
    or missing selector matches everything. kubeselect's matcher (shared with kubesim)."""
    if not sel:
        return True
    return LabelSelector.from_dict(sel).matches(labels)


# --- env overrides ---------------------------------------------------------------------

def _env_name(prefix: str, gvk: GVK) -> str:
    return f"{prefix}_{gvk.kind}_{gvk.group}".replace(".", "_").upper()


def max_concurrent_env_names(gvk: GVK) -> tuple[str, str]:
    """(MAX_CONCURRENT_RECONCILES_<KIND>_<GROUP>, deprecated WORKER_<KIND>_<GROUP>)."""
    return _env_name("MAX_CONCURRENT_RECONCILES", gvk), _env_name("WORKER", gvk)


def get_max_concurrent_reconciles(gvk: GVK, default: int,
                                  environ: Mapping[str, str] | None = None) -> int:
    env = os.environ if environ is None else environ
    recon_var, worker_var = max_concurrent_env_names(gvk)
    val = default
    if recon_var in env:
        try:
            val = go_atoi(env[recon_var])
        except ValueError:
            log.info("Could not parse environment variable %s as an integer; using default %d",
                     recon_var, default)
    elif worker_var in env:
        log.info("Environment variable %s is deprecated, use %s instead", worker_var, recon_var)
        try:
            val = go_atoi(env[worker_var])
        except ValueError:
            log.info("Could not parse environment variable %s as an integer; using default %d",
                     worker_var, default)
    if val <= 0:
        log.info("Value %d not valid. Using default %d", val, default)
        return default
    return val


def ansible_verbosity_env_name(gvk: GVK) -> str:
    return _env_name("ANSIBLE_VERBOSITY", gvk)


def get_ansible_verbosity(gvk: GVK, default: int,
                          environ: Mapping[str, str] | None = None) -> int:
    env = os.environ if environ is None else environ
    name = ansible_verbosity_env_name(gvk)
    val = default
    if name in env:
        try:
            val = go_atoi(env[name])
        except ValueError:
            log.info("Could not parse environment variable %s as an integer; using default %d",
                     name, default)
    if val < 0 or val > 7:
        log.info("Value %d not valid. Using default %d", val, default)
        return default
    return val


# --- role / playbook paths -------------------------------------------------------------

def possible_role_paths(root_dir: str, path: str,
                        environ: Mapping[str, str] | None = None) -> list[str]:
    """watches.getPossibleRolePaths."""
    env = os.environ if environ is None else environ
    if os.path.isabs(path) or not path:
        return [path]
    out: list[str] = []
    fqcn = path.split(".")
    if len(fqcn) == 3:
        cpath = env.get("ANSIBLE_COLLECTIONS_PATH", "")
        if not cpath:
            cpath = "/usr/share/ansible/collections"
            home = os.path.expanduser("~")
            if home and home != "~":
                cpath += ":" + os.path.join(home, ".ansible/collections")
        for parent in cpath.split(":"):
            out.append(os.path.join(parent, "ansible_collections", fqcn[0], fqcn[1], "roles",
                                    fqcn[2]))
    rpath = env.get("ANSIBLE_ROLES_PATH", "")
    if rpath:
        for parent in rpath.split(":"):
            out.append(os.path.join(parent, path))
            out.append(os.path.join(parent, "roles", path))
    out.append(os.path.join(root_dir, "roles", path))
    return out


def _resolve_role(role: str, root_dir: str, watches_dir: str,
                  environ: Mapping[str, str] | None) -> str:
    if not role:
        return role
    candidates = possible_role_paths(root_dir, role, environ)
    if not os.path.isabs(role):
        candidates += [role,  # Go stats the unresolved value relative to the cwd
                       os.path.join(watches_dir, "roles", role), os.path.join(watches_dir, role)]
    for c in candidates:
        if c and os.path.exists(c):
            return os.path.abspath(c)
    return role


def _resolve_playbook(pb: str, root_dir: str, watches_dir: str) -> str:
    if not pb or os.path.isabs(pb):
        return pb
    for base in (root_dir, watches_dir):
        c = os.path.join(base, pb)
        if os.path.exists(c):
            return os.path.abspath(c)
    return os.path.join(root_dir, pb)


def _verify_ansible_path(playbook: str, role: str) -> None:
    if playbook:
        if not os.path.exists(playbook):
            raise WatchesError(f"playbook: {playbook} was not found")
    elif role:
        if not os.path.exists(role):
            raise WatchesError(f"role: {role} was not found")
    else:
        raise WatchesError("must specify Role or Playbook")


def validate_watch(w: Watch) -> None:
    """Watch.Validate."""
    try:
        _verify_ansible_path(w.playbook, w.role)
    except WatchesError as exc:
        raise WatchesError(f"Invalid ansible path for GVK: {w.gvk}: {exc}") from None
    if w.finalizer is not None:
        if not w.finalizer.name:
            raise WatchesError(f"Invalid finalizer for GVK: {w.gvk}: finalizer must have name")
        try:
            _verify_ansible_path(w.finalizer.playbook, w.finalizer.role)
        except WatchesError as exc:
            if not w.finalizer.vars:
                raise WatchesError(f"Invalid ansible path on Finalizer for GVK: {w.gvk}: {exc}") \
                    from None


# --- loading ---------------------------------------------------------------------------

def parse_watches(text: str, *, max_concurrent_reconciles: int | None = None,
                  ansible_verbosity: int = ANSIBLE_VERBOSITY_DEFAULT,
                  root_dir: str | None = None, watches_dir: str | None = None,
                  environ: Mapping[str, str] | None = None,
                  warnings: list[str] | None = None) -> list[Watch]:
    """Decode, default and validate the text of a watches file (watches.Load)."""
    env = os.environ if environ is None else environ
    root_dir = root_dir or os.getcwd()
    watches_dir = watches_dir or root_dir
    if max_concurrent_reconciles is None:
        max_concurrent_reconciles = os.cpu_count() or 1
    warns: list[str] = [] if warnings is None else warnings
    try:
        data = yaml.safe_load(replace_env_variables(text, env))
    except yaml.YAMLError as exc:
        raise WatchesError(f"Failed to unmarshal config: {exc}") from None
    if data is None:
        data = []
    if not isinstance(data, list):
        raise WatchesError("json: cannot unmarshal object into Go value of type []watches.alias "
                           "(the watches file must be a YAML list)")
    watches: list[Watch] = []
    for idx, entry in enumerate(data):
        where = f"watches[{idx}]"
        if not isinstance(entry, dict):
            raise WatchesError(f"json: cannot unmarshal {_json_type(entry)} into Go value of "
                               f"type watches.alias ({where})")
        e = _fold(entry, _WATCH_FIELDS, where, warns)
        for k, kind in _WATCH_FIELDS.items():
            if k in e:
                e[k] = _check(e[k], kind, f"alias.{k}")
        gvk = GVK(e.get("group") or "", e.get("version") or "", e.get("kind") or "")
        if not gvk.version:
            raise WatchesError(f"invalid GVK: {gvk}: version must not be empty")
        if not gvk.kind:
            raise WatchesError(f"invalid GVK: {gvk}: kind must not be empty")
        w = Watch(gvk=gvk)
        w.playbook = e.get("playbook") or ""
        w.role = e.get("role") or ""
        w.vars = e.get("vars")
        mra = e.get("maxrunnerartifacts") or 0
        w.max_runner_artifacts = mra if mra != 0 else MAX_RUNNER_ARTIFACTS_DEFAULT
        if e.get("reconcileperiod") is not None:
            try:
                w.reconcile_period = parse_duration(e["reconcileperiod"])
            except DurationError as exc:
                raise WatchesError(f"{where} ({gvk}): reconcilePeriod: {exc}") from None
        for key, attr in (("managestatus", "manage_status"),
                          ("watchdependentresources", "watch_dependent_resources"),
                          ("watchclusterscopedresources", "watch_cluster_scoped_resources"),
                          ("snakecaseparameters", "snake_case_parameters"),
                          ("watchannotationschanges", "watch_annotations_changes"),
                          ("markunsafe", "mark_unsafe")):
            if e.get(key) is not None:
                setattr(w, attr, e[key])
        for j, b in enumerate(e.get("blacklist") or []):
            if not isinstance(b, dict):
                raise WatchesError(f"{where}.blacklist[{j}] must be an object with group, "
                                   "version, kind")
            bf = _fold(b, {"group": "str", "version": "str", "kind": "str"},
                       f"{where}.blacklist[{j}]", warns)
            w.blacklist.append(GVK(bf.get("group") or "", bf.get("version") or "",
                                   bf.get("kind") or ""))
        fin = e.get("finalizer")
        if fin is not None:
            ff = _fold(fin, _FINALIZER_FIELDS, f"{where}.finalizer", warns)
            for k, kind in _FINALIZER_FIELDS.items():
                if k in ff:
                    ff[k] = _check(ff[k], kind, f"Finalizer.{k}")
            w.finalizer = Finalizer(name=ff.get("name") or "", playbook=ff.get("playbook") or "",
                                    role=ff.get("role") or "", vars=ff.get("vars"))
        sel = e.get("selector") or {}
        validate_selector(sel, f"{where}.selector")
        w.selector = sel
        w.max_concurrent_reconciles = get_max_concurrent_reconciles(
            gvk, max_concurrent_reconciles, env)
        w.ansible_verbosity = get_ansible_verbosity(gvk, ansible_verbosity, env)
        # addRolePlaybookPaths
        w.playbook = _resolve_playbook(w.playbook, root_dir, watches_dir)
        w.role = _resolve_role(w.role, root_dir, watches_dir, env)
        if w.finalizer is not None:
            w.finalizer.role = _resolve_role(w.finalizer.role, root_dir, watches_dir, env)
            w.finalizer.playbook = _resolve_playbook(w.finalizer.playbook, root_dir, watches_dir)
        if w.playbook and w.role:
            warns.append(f"{where} ({gvk}): both playbook and role are set; the playbook is "
                         "used (as ansible-operator does)")
        watches.append(w)

    seen: set[GVK] = set()
    for w in watches:
        if w.gvk in seen:
            raise WatchesError(f"duplicate GVK: {w.gvk}")
        seen.add(w.gvk)
        validate_watch(w)
    return watches


def load_watches(path: str, **kwargs: Any) -> list[Watch]:
    """Load a watches file. Keyword arguments as for :func:`parse_watches`."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise WatchesError(f"Failed to get config file {path}: {exc}") from None
    kwargs.setdefault("watches_dir", os.path.dirname(os.path.abspath(path)))
    warnings: list[str] = kwargs.setdefault("warnings", [])
    watches = parse_watches(text, **kwargs)
    for w in warnings:
        log.warning("%s: %s", path, w)
    return watches


def watch_replace(w: Watch, **changes: Any) -> Watch:
    return dataclasses.replace(w, **changes)
