"""Benchmarks (run as modules, e.g. `python -m bench.kubesim_bench`); not part of the tests."""
