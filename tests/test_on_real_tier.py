"""make test's --on-real-tier (conftest.py): the tests of REAL_E2E's modules run once, on the
real tier, except the kubesim_only ones, which only kubesim can run."""
import subprocess
import sys
from pathlib import Path

import pytest
from _support import on_real_tier

ROOT = Path(__file__).resolve().parents[1]
FILES = {"tests/e2e/test_usage_e2e.py", "tests/devuser/test_devuser_e2e.py"}


@pytest.mark.parametrize("nodeid, kubesim_only, moved", [
    ("tests/e2e/test_usage_e2e.py::test_records_are_pruned_when_their_retention_ends", False, True),
    ("tests/e2e/test_usage_e2e.py::test_a_settled_run_makes_no_request", True, False),
    ("tests/devuser/test_devuser_e2e.py::test_create_to_ready[x-1]", False, True),
    ("tests/e2e/test_lifecycle_e2e.py::test_idle", False, False),  # not on the real tier in make test
    ("tests/e2e/test_usage_e2e.py", False, True),
    ("tests/e2e/test_usage_e2e.pyx::test_a", False, False),
    ("", False, False),
])
def test_which_tests_run_on_the_real_tier_instead(nodeid, kubesim_only, moved):
    assert on_real_tier(nodeid, FILES, kubesim_only) is moved


def test_the_makefile_passes_real_e2e_and_real_e2e_runs_its_kubesim_only_tests_here():
    real_e2e = subprocess.run(["make", "-s", "--no-print-directory", "-f", "Makefile", "-f", "-", "print-real-e2e"],
                              input="print-real-e2e:\n\t@echo $(REAL_E2E)\n", cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.split()
    assert real_e2e and all((ROOT / f).is_file() for f in real_e2e), real_e2e

    def collect(*args):
        out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                              "--collect-only", *args, *real_e2e], cwd=ROOT, capture_output=True, text=True).stdout
        return {line for line in out.splitlines() if "::" in line}, out

    kept, out = collect("-m", "not soak", "--on-real-tier", " ".join(real_e2e))
    kubesim_only, _ = collect("-m", "not soak and kubesim_only")
    everything, _ = collect("-m", "not soak")
    assert kept and kept == kubesim_only, out[-2000:]
    assert len(everything) > len(kept) + 20, len(everything)
