"""Test support shared by every directory under tests/ (importable through pytest's
``pythonpath = ["tests"]``).

What ``make setup`` installs is required, never optional: a missing tool is a test failure
whose message names the fix, not a skip (the root conftest.py turns any skip without a
machine reason into a failure)."""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent


def on_real_tier(nodeid: str, files: set[str], kubesim_only: bool) -> bool:
    """Whether the test ``nodeid`` runs on the real tier instead of here (the root conftest's
    ``--on-real-tier``): its file is one of ``files`` and it is not kubesim_only (which the real
    tier deselects)."""
    return not kubesim_only and nodeid.split("::", 1)[0] in files


def tool(name: str) -> str:
    """The path of a command ``make setup`` installs into the virtualenv (kubectl, yamllint,
    devctl, ansible-playbook, ...); fails the test when it is missing."""
    for candidate in (VENV_BIN / name, ROOT / ".venv" / "bin" / name):
        if candidate.exists():
            return str(candidate)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} not found in {VENV_BIN} or on PATH: run `make setup` "
                    "(it installs everything the tests need into .venv/)", pytrace=False)
    return found


def system_tool(name: str) -> str:
    """The path of a command from the machine's packages (sshd, ssh, scp, ssh-keygen: Debian's
    openssh-server and -client, which ``make deps`` installs); fails the test when missing."""
    for directory in ("/usr/sbin", "/usr/bin", "/sbin", "/bin"):
        if os.access(os.path.join(directory, name), os.X_OK):
            return os.path.join(directory, name)
    found = shutil.which(name)
    if not found:
        pytest.fail(f"{name} not found: this test runs the real OpenSSH tools "
                    "(Debian: apt-get install openssh-server; make deps installs it)", pytrace=False)
    return found


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


COLLECTIONS = ROOT / "collections"
MODULES = "ansible_collections.torchdev.operator.plugins.modules"


def run_module(name: str, args: dict, env: dict | None = None, timeout: float = 60) -> dict:
    """One run of the collection's module ``name`` in its own process, as Ansible runs it
    (arguments from a file, the JSON result on stdout); returns that result."""
    import json
    import os
    import subprocess
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump({"ANSIBLE_MODULE_ARGS": args}, fh)
    try:
        run_env = dict(os.environ, **(env or {}))
        run_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(COLLECTIONS), run_env.get("PYTHONPATH")]))
        out = subprocess.run([sys.executable, "-m", f"{MODULES}.{name}", fh.name], env=run_env,
                             capture_output=True, text=True, timeout=timeout)
    finally:
        os.unlink(fh.name)
    try:
        return json.loads(out.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"module {name} printed no JSON result: {out.stdout[-2000:]}{out.stderr[-2000:]}")


def admission_model(crd_path: Path, version: str = "v1alpha1"):
    """kubesim's admission (schema, defaults, CEL) of one version of a CRD file, the CRD
    itself validated first."""
    import copy

    import yaml

    from kubesim import validation

    crd = yaml.safe_load(Path(crd_path).read_text())
    validation.validate_crd(copy.deepcopy(crd))
    return validation.CRDModel(crd).version(version)


def rejected(model, obj: dict, old: dict | None = None) -> str:
    """The message of a 422 that ``model`` answers ``obj`` with (fails when it is admitted)."""
    from kubesim.errors import ApiError

    with pytest.raises(ApiError) as ei:
        model.admit(obj, old=old)
    assert ei.value.code == 422
    return ei.value.message



def open_crd(group: str, kind: str, plural: str, version: str = "v1") -> dict:
    """A namespaced CustomResourceDefinition of one version whose schema keeps any field, with
    the status subresource: the test kinds of the runtime's tests (tests/runtime, tests/real)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {"group": group, "scope": "Namespaced",
                 "names": {"plural": plural, "singular": kind.lower(), "kind": kind, "listKind": f"{kind}List"},
                 "versions": [{"name": version, "served": True, "storage": True, "subresources": {"status": {}},
                               "schema": {"openAPIV3Schema": {"type": "object",
                                                              "x-kubernetes-preserve-unknown-fields": True}}}]}}
