"""The layout rules of docs/architecture.md, checked on the files themselves.

* The repository root is the collection torchdev.operator: plugins import shared code as
  ``ansible_collections.torchdev.operator.plugins.module_utils``; nothing loads code by file
  path or edits sys.path, and no configuration points Ansible at plugin directories.
* Dependencies point one way: torchdev_runtime (the local ansible-operator) and kubesim (the
  API simulator) know nothing of each other or of the operator's plugins; devctl shares only
  the collection's module_utils; module_utils import nothing from Ansible's controller side.
  torchdev_exporter (in the operator's pod) imports only the collection's module_utils; the code
  the roles ship into pods (roles/*/files: torchdev_train, torchdev-agent, devrun, the checks)
  runs without the collection and imports none of the repository's packages.
"""
from __future__ import annotations

import ast
import subprocess

import pytest

from _support import ROOT

# The repository's own top-level packages (what code shipped into a pod must not import).
OURS = ("ansible", "ansible_collections", "devctl", "hack", "kubesim", "kubeselect", "plugins", "torchdev_exporter",
        "torchdev_runtime", "tests", "bench")
POD_FILES = "roles/*/files"
FORBIDDEN_IMPORTS = {
    # package: module prefixes it must not import
    "torchdev_runtime": ("kubesim", "devctl", "ansible_collections", "plugins"),
    "kubesim": ("torchdev_runtime", "devctl", "ansible_collections", "plugins"),
    "kubeselect": ("kubesim", "torchdev_runtime", "devctl", "ansible_collections"),
    "devctl": ("kubesim", "torchdev_runtime", "ansible_collections.torchdev.operator.plugins.filter",
               "ansible_collections.torchdev.operator.plugins.modules", "ansible"),
    "plugins/module_utils": ("ansible.errors", "ansible.plugins", "ansible.template", "devctl", "kubesim",
                             "torchdev_runtime", "torchdev_exporter"),
    "torchdev_exporter": ("kubesim", "kubeselect", "torchdev_runtime", "devctl", "plugins", "ansible.",
                          "ansible_collections.torchdev.operator.plugins.filter",
                          "ansible_collections.torchdev.operator.plugins.modules"),
    # runs in the DevServer / TrainingJob pods, where neither the collection nor Ansible is
    POD_FILES: OURS,
}
# Settings that point Ansible at plugin directories (the collection makes them unneeded).
PLUGIN_SETTINGS = ("ANSIBLE_FILTER_PLUGINS", "ANSIBLE_LIBRARY", "ANSIBLE_MODULE_UTILS", "ANSIBLE_ACTION_PLUGINS",
                   "filter_plugins", "module_utils =", "library =", "action_plugins")


def _tracked(*patterns: str) -> list[str]:
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", *patterns], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if (ROOT / line).is_file()]


def _python_files(package: str | None = None) -> list[str]:
    """The package's (or the repository's) Python files: *.py, and the scripts with a python
    shebang (torchdev-agent, devrun)."""
    files = _tracked(f"{package}/*", f"{package}/**/*") if package else _tracked()
    return [f for f in files if f.endswith(".py") or _is_python_script(ROOT / f)]


def _is_python_script(path) -> bool:
    with open(path, "rb") as fh:
        first = fh.readline(128)
    return first.startswith(b"#!") and b"python" in first


def _imports(path: str) -> list[str]:
    tree = ast.parse((ROOT / path).read_text(), path)
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN_IMPORTS))
def test_dependencies_point_one_way(package):
    files = [f for f in _python_files(package) if "/tests/" not in f]
    assert files, package
    bad = [f"{f}: {name}" for f in files for name in _imports(f)
           if any(name == p or name.startswith(p + ".") for p in FORBIDDEN_IMPORTS[package])]
    assert not bad, "imports across the layout (docs/architecture.md):\n" + "\n".join(bad)


def test_pod_code_is_scanned():
    names = {f.rpartition("/")[2] for f in _python_files(POD_FILES)}
    assert {"torchdev-agent", "devrun", "status.py", "gpu_check.py"} <= names, names


def test_no_file_path_loaders_or_sys_path_edits():
    # every Python file of the repository (third_party holds none), the pods' scripts included
    files = [f for f in _python_files() if f != "tests/test_architecture.py"]
    assert {"torchdev_exporter/metrics.py", "roles/devserver/files/pytorch/torchdev-agent", "conftest.py"} <= set(files)
    bad = []
    for f in files:
        text = (ROOT / f).read_text()
        for needle in ("spec_from_file_location", "sys.path.insert", "sys.path.append"):
            if needle in text:
                bad.append(f"{f}: {needle}")
    assert not bad, "load code by its import name (the collection, hack., pytest's pythonpath):\n" + "\n".join(bad)


def test_no_plugin_directory_settings():
    # (tests/runtime exercise the runtime's own handling of a role's library directory)
    files = [f for f in _tracked() if f.endswith((".cfg", ".yml", ".yaml", ".py", ".toml", "Dockerfile", "Makefile", "run"))
             and not f.startswith(("third_party/", "tests/"))]
    bad = [f"{f}: {s}" for f in files for s in PLUGIN_SETTINGS if s in (ROOT / f).read_text()]
    assert not bad, "plugins and roles are found by FQCN in the collection:\n" + "\n".join(bad)


def test_watches_name_roles_by_fqcn():
    import yaml

    for watch in yaml.safe_load((ROOT / "watches.yaml").read_text()):
        assert watch["role"].startswith("torchdev.operator."), watch["role"]
        assert (ROOT / "roles" / watch["role"].rpartition(".")[2] / "tasks" / "main.yml").is_file()


def test_the_checkout_is_the_collection():
    import yaml

    galaxy = yaml.safe_load((ROOT / "galaxy.yml").read_text())
    link = ROOT / "collections" / "ansible_collections" / galaxy["namespace"] / galaxy["name"]
    assert link.resolve() == ROOT.resolve(), "run `make setup`: it links the checkout into collections/"


def test_roles_that_know_their_watch_period_agree_with_watches_yaml():
    """roles/devuser asks for a requeue only when it is sooner than its watch's reconcilePeriod
    (tasks/usage.yml): its default devuser_reconcile_period must be that period."""
    import yaml

    periods = {w["kind"]: w.get("reconcilePeriod") for w in yaml.safe_load((ROOT / "watches.yaml").read_text())}
    defaults = yaml.safe_load((ROOT / "roles" / "devuser" / "defaults" / "main.yml").read_text())
    assert defaults["devuser_reconcile_period"] == periods["DevUser"]
    assert "UsageRecord" not in periods  # records are pruned by their DevUser, not watched


def test_every_module_utils_module_has_its_table_driven_tests():
    """docs/architecture.md: each module has tests/module_utils/test_<module>.py."""
    modules = sorted(p.stem for p in (ROOT / "plugins" / "module_utils").glob("*.py") if p.stem != "__init__")
    missing = [m for m in modules if not (ROOT / "tests" / "module_utils" / f"test_{m}.py").is_file()]
    assert modules and not missing, missing
