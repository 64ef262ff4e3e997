"""Pytest fixtures: `kubesim`, `kubesim_module`, `kubeconfig_env`."""
from __future__ import annotations

import pytest

from kubesim.testing import KubeSim


@pytest.fixture
def kubesim():
    sim = KubeSim().start()
    try:
        yield sim
    finally:
        sim.stop()


@pytest.fixture(scope="module")
def kubesim_module():
    sim = KubeSim().start()
    try:
        yield sim
    finally:
        sim.stop()


@pytest.fixture
def kubeconfig_env(kubesim, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", kubesim.kubeconfig)
    return kubesim.kubeconfig
