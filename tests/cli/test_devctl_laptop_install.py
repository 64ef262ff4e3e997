"""devctl alone, for a laptop (issue 28 item 8): clients/devctl is a package of devctl and the
collection's module_utils it shares with the operator, with loose version ranges and no torch,
Ansible or molecule.

The slow test builds a fresh venv (no system site-packages) and ``pip install``s clients/devctl
from the checkout as README "Install devctl" says, twice: with the newest versions the ranges
allow, and with their lower bounds (a constraints file of ``name==low``).  Each venv's
``devctl`` and ``kubectl-devctl`` then run against a kubesim (``devctl flavors``, ``create``,
``list``, ``delete`` over the API).  pip reaches the index through its configuration; when it
cannot, the test fails saying so (no skip).  Wheels are cached under .cache/pip-laptop.
"""
from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from devctl_helpers import REPO

CLIENT = REPO / "clients" / "devctl"
PIP_CACHE = REPO / ".cache" / "pip-laptop"
MODULE_UTILS = "ansible_collections.torchdev.operator.plugins.module_utils"
# import name -> distribution, where they differ
DISTRIBUTION = {"yaml": "pyyaml", "websocket": "websocket-client"}


def _project(path: Path) -> dict:
    return tomllib.loads(path.read_text())["project"]


def _requirements() -> list[Requirement]:
    return [Requirement(r) for r in _project(CLIENT / "pyproject.toml")["dependencies"]]


def _lower_bounds() -> list[str]:
    lows = []
    for req in _requirements():
        low = [s.version for s in req.specifier if s.operator == ">="]
        assert len(low) == 1 and any(s.operator == "<" for s in req.specifier), (
            f"{req}: a range is '>=low,<high' (the low one is installed by the test)")
        lows.append(f"{req.name}=={low[0]}")
    return lows


def _third_party_imports() -> set[str]:
    """The top-level modules outside the standard library that devctl and the module_utils
    it imports (transitively) import, lazily or not."""
    found, todo, seen = set(), sorted((REPO / "devctl").glob("*.py")), set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and not node.level:
                names = ([f"{node.module}.{a.name}" for a in node.names] if node.module == MODULE_UTILS
                         else [node.module])
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                if name.startswith(MODULE_UTILS + "."):
                    todo.append(REPO / "plugins" / "module_utils" / (name.split(".")[5] + ".py"))
                elif name.split(".")[0] not in sys.stdlib_module_names | {"devctl", "ansible"}:
                    found.add(name.split(".")[0])
    return found


def test_the_ranges_cover_what_devctl_imports():
    declared = {r.name.lower() for r in _requirements()}
    assert {DISTRIBUTION.get(m, m) for m in _third_party_imports()} == declared
    assert not declared & {"torch", "ansible", "ansible-core", "molecule", "ansible-runner"}


@pytest.mark.parametrize("requirements", ["requirements.txt", "requirements-image.txt", "constraints.txt"])
def test_the_ranges_include_the_repository_pins(requirements):
    pins = {}
    for line in (REPO / requirements).read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.-]+)==([^\s;#]+)", line)
        if match:
            pins[match[1].lower().replace("_", "-")] = match[2]
    for req in _requirements():
        if req.name.lower() in pins:
            assert req.specifier.contains(pins[req.name.lower()]), f"{requirements}: {req.name}=={pins[req.name.lower()]} is outside {req}"


def test_the_entry_points_match_the_operator_package():
    client = _project(CLIENT / "pyproject.toml")
    root = _project(REPO / "pyproject.toml")
    assert client["scripts"] == {"devctl": "devctl.main:cli", "kubectl-devctl": "devctl.main:kubectl_plugin"}
    assert {k: root["scripts"][k] for k in client["scripts"]} == client["scripts"]
    assert client["requires-python"] == root["requires-python"]
    for link, target in (("devctl", REPO / "devctl"), ("module_utils", REPO / "plugins" / "module_utils"),
                         ("VERSION", REPO / "VERSION")):
        assert (CLIENT / link).is_symlink() and (CLIENT / link).resolve() == target.resolve(), link


def _install(tmp_path: Path, constraints: list[str]) -> Path:
    """A fresh venv with clients/devctl installed by pip (``constraints``: name==version)."""
    # pip builds in place: setuptools' build/ keeps the modules of an earlier build (a deleted
    # module would be installed again), so the test starts from none
    for leftover in (CLIENT / "build", CLIENT / "torchdev_devctl.egg-info"):
        shutil.rmtree(leftover, ignore_errors=True)
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, system_site_packages=False, clear=True).create(env_dir)
    cmd = [str(env_dir / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check",
           "--cache-dir", str(PIP_CACHE), str(CLIENT)]
    if constraints:
        (tmp_path / "lower-bounds.txt").write_text("\n".join(constraints) + "\n")
        cmd += ["--constraint", str(tmp_path / "lower-bounds.txt")]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, (
        f"pip could not install {CLIENT} ({' '.join(constraints) or 'newest versions'}); it needs the "
        f"package index its configuration names (pip config list):\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return env_dir / "bin"


def _run(bin_dir: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """``args`` run from the venv's bin, outside the checkout (python -c puts the working
    directory first on sys.path) and without PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run([str(bin_dir / args[0]), *args[1:]], capture_output=True, text=True, timeout=60,
                            cwd=bin_dir.parent, env={**env, "PATH": f"{bin_dir}{os.pathsep}{env['PATH']}"})
    if check:
        assert result.returncode == 0, f"{args}: {result.stdout}\n{result.stderr}"
    return result


@pytest.mark.slow
@pytest.mark.parametrize("versions", ["newest", "lower-bounds"])
def test_pip_install_of_devctl_alone(versions, tmp_path, sim, ns):
    bin_dir = _install(tmp_path, _lower_bounds() if versions == "lower-bounds" else [])
    installed = {d["name"].lower(): d["version"] for d in json.loads(_run(bin_dir, "pip", "list", "--format", "json").stdout)}
    if versions == "lower-bounds":
        for name, _, low in (c.partition("==") for c in _lower_bounds()):
            assert Version(installed[name.lower()]) == Version(low), (name, installed[name.lower()])
    assert not {"torch", "ansible", "ansible-core", "ansible-runner", "molecule"} & set(installed), installed
    for module in ("torch", "ansible", "kubesim"):
        probe = _run(bin_dir, "python", "-c", f"import {module}", check=False)
        assert probe.returncode == 1 and "ModuleNotFoundError" in probe.stderr, (module, probe.stderr)
    # every devctl module imports with only the declared dependencies (the lazy imports too)
    where = _run(bin_dir, "python", "-c", "import importlib, pkgutil, devctl, kubernetes.stream, websocket, tabulate, urllib3; "
                 "[importlib.import_module('devctl.' + m.name) for m in pkgutil.iter_modules(devctl.__path__)]; "
                 f"import {MODULE_UTILS}.quantity as q; print(devctl.__file__); print(q.__file__)").stdout.split()
    assert all(Path(p).is_relative_to(bin_dir.parent / "lib") for p in where), where
    assert _run(bin_dir, "devctl", "--help").stdout.startswith("Usage: devctl ")
    assert _run(bin_dir, "kubectl-devctl", "--help").stdout.startswith("Usage: kubectl devctl ")
    version = json.loads(_run(bin_dir, "devctl", "version", "--client", "-o", "json").stdout)
    assert version["clientVersion"] == (REPO / "VERSION").read_text().strip() == installed["torchdev-devctl"]
    # real commands over the API of a kubesim, by both names
    kube = ["--kubeconfig", sim.kubeconfig, "-n", ns]
    flavors = json.loads(_run(bin_dir, "devctl", *kube, "flavors", "-o", "json").stdout)
    assert "gpu-a10g-1" in json.dumps(flavors)
    _run(bin_dir, "kubectl-devctl", *kube, "create", "laptop", "--flavor", "cpu-small", "--owner", "alice@example.com")
    listed = _run(bin_dir, "devctl", *kube, "list").stdout
    assert "laptop" in listed and "cpu-small" in listed, listed
    _run(bin_dir, "kubectl-devctl", *kube, "delete", "laptop", "--yes")
    usage = _run(bin_dir, "kubectl-devctl", "no-such-command", check=False)
    assert usage.returncode == 2 and "kubectl devctl --help" in usage.stderr, usage.stderr
