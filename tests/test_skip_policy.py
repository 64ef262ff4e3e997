"""The repository's skip policy (conftest.py): only a machine reason may skip a test."""
from __future__ import annotations

from _support import ROOT

pytest_plugins = ["pytester"]


def test_only_machine_reasons_skip(pytester):
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makeconftest((ROOT / "conftest.py").read_text())
    pytester.makepyfile(test_cases='''
        import pytest

        def test_missing_tool():
            pytest.skip("kubectl is not installed")

        def test_no_gpu():
            pytest.skip("machine: no NVIDIA GPU")

        @pytest.mark.parametrize("x", [])
        def test_empty_parameters(x):
            pass

        @pytest.mark.xfail(reason="known", strict=True)
        def test_expected_failure():
            assert False
    ''')
    pytester.makepyfile(test_module_skip='''
        import pytest
        pytest.skip("CRDs not found", allow_module_level=True)
    ''')
    result = pytester.runpytest("-rs", "--continue-on-collection-errors")
    result.assert_outcomes(failed=1, skipped=1, errors=2, xfailed=1)
    result.stdout.fnmatch_lines(["*skipped without a machine reason: 'kubectl is not installed'*",
                                 "*SKIPPED*machine: no NVIDIA GPU*"])
