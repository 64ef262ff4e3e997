"""Repository-wide pytest configuration.

* The kubesim fixtures (`kubesim`, `kubesim_module`, `kubeconfig_env`) are available to
  every test directory.
* No silent skips: a test may skip only for what a machine can genuinely lack (a GPU), with
  a reason that starts with ``machine:`` (e.g. ``pytest.skip("machine: no NVIDIA GPU")``).
  Any other skip -- a missing tool, package or file that ``make setup`` or the repository
  provides, an empty parameter list -- is reported as a failure.
* ``--on-real-tier FILES``: test files that run on the real tier too (make test passes its
  REAL_E2E, which `make test-real` runs there); here only their ``kubesim_only`` tests run, and
  the others are counted as deselected, so each end-to-end test runs once in make test, on the
  real control plane and ansible-operator where it can.
"""
import pytest
from _support import on_real_tier  # tests/, on pytest's pythonpath

pytest_plugins = ["kubesim.pytest_plugin"]

MACHINE_SKIP_PREFIX = "machine:"


def pytest_addoption(parser):
    parser.addoption("--on-real-tier", default="", metavar="FILES",
                     help="test files (space-separated) that make test runs on the real tier: run only their "
                          "kubesim_only tests here")


def pytest_collection_modifyitems(config, items):
    files = set(config.getoption("on_real_tier").split())
    if not files:
        return
    moved = [i for i in items if on_real_tier(i.nodeid, files, i.get_closest_marker("kubesim_only") is not None)]
    if moved:
        config.hook.pytest_deselected(items=moved)
        gone = set(moved)
        items[:] = [i for i in items if i not in gone]


def pytest_report_header(config):
    files = config.getoption("on_real_tier").split()
    if files:
        return [f"on the real tier instead (make test-real), their kubesim_only tests here: {' '.join(files)}"]
    return []


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def _fail_unjustified_skip(report) -> None:
    if not report.skipped or hasattr(report, "wasxfail"):
        return
    reason = _skip_reason(report)
    if reason.startswith(MACHINE_SKIP_PREFIX):
        return
    report.outcome = "failed"
    report.longrepr = (f"skipped without a machine reason: {reason!r}. A skip is allowed only "
                       f"for what a machine can lack (reason starting with "
                       f"{MACHINE_SKIP_PREFIX!r}); anything `make setup` installs is required.")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _fail_unjustified_skip(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    _fail_unjustified_skip(outcome.get_result())
