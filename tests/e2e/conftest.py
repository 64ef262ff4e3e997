"""Fixtures of the end-to-end tests: tests/_cluster.py (kubesim per module, the CRDs and
sample flavors, one local operator runtime, a namespace per test)."""
from _cluster import kube, ns, real_tier, runtime, sim  # noqa: F401 (fixtures)
