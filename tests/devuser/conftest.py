"""Fixtures of the DevUser end-to-end tests: tests/_cluster.py (kubesim per module, with
Kueue when the module sets ``KUEUE = True``; the CRDs and sample flavors; one local operator
runtime running the real roles of watches.yaml). The helpers live in _devuser_helpers.py."""
from _cluster import kube, real_tier, runtime, sim  # noqa: F401 (fixtures)
