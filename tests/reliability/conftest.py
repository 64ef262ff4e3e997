"""Fixtures of the reliability suite (issue 17): a simulator per test module with the torchdev
CRDs and sample flavors installed in-process (the faults a test injects into kubesim's HTTP
layer reach the operator, never the test's own setup), and the data-safety invariant
(tests/_data_safety.py) checked when the module's simulator stops: no claim holding user data
was deleted without the user asking, whatever the module did.

The full-size runs are marked ``soak`` (``make soak``); ``make test`` deselects them and runs
the smaller versions."""
from __future__ import annotations

import json
import os

import pytest

from _reliability import check_data_safety, start_sim


@pytest.fixture(scope="module")
def sim():
    s = start_sim()
    try:
        yield s
        check_data_safety(s)
    finally:
        s.stop()


# -- figures ------------------------------------------------------------------------------------
FIGURES: list[tuple[str, dict]] = []


@pytest.fixture
def figures(request):
    """``figures(title, data)``: a test's figures, printed at the end of the run (and appended as
    a JSON line to $RELIABILITY_FIGURES when set: ``make soak`` prints that file)."""
    def record(title: str, data: dict) -> None:
        FIGURES.append((title, data))
        request.node.user_properties.append((title, json.dumps(data, sort_keys=True)))
        path = os.environ.get("RELIABILITY_FIGURES")
        if path:
            with open(path, "a") as fh:
                fh.write(json.dumps({"test": request.node.nodeid, "title": title, **data}, sort_keys=True) + "\n")
    return record


def pytest_terminal_summary(terminalreporter):
    if FIGURES:
        terminalreporter.section("reliability figures")
        for title, data in FIGURES:
            terminalreporter.write_line(f"{title}: {json.dumps(data, sort_keys=True)}")
