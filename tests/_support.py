"""Test support shared by every directory under tests/ (importable through pytest's
``pythonpath = ["tests"]``).

What ``make setup`` installs is required, never optional: a missing tool is a test failure
whose message names the fix, not a skip (the root conftest.py turns any skip without a
machine reason into a failure)."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent


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
