"""Fixtures for tests/pytorch; the helpers live in _pytorch_helpers.py."""

import pytest

from _pytorch_helpers import Pods, load_devrun, load_rendezvous


@pytest.fixture(scope="session")
def rdzv():
    return load_rendezvous()


@pytest.fixture(scope="session")
def devrun_mod():
    return load_devrun()


@pytest.fixture
def pods(tmp_path):
    logdir = tmp_path / "pod-logs"
    logdir.mkdir()
    group = Pods(str(logdir))
    try:
        yield group
    finally:
        group.kill()
